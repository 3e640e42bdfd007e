"""Pure: (job end state, per-node evidence, history) -> Verdict. No I/O, no logging."""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.diagnose.culprits import (
    all_hosts,
    node_fail_culprits,
    origin,
    peer_culprits,
    progress_culprit,
    silent,
    stack_outliers,
)
from orchestrator.evidence import Match, NodeEvidence
from orchestrator.model import HARDWARE_CAUSES, Cause, Evidence, JobState, JobStatus, Verdict

# Root-cause precedence when several non-cascade causes appear in one segment.
PRECEDENCE: tuple[Cause, ...] = (
    Cause.GPU_ECC,
    Cause.GPU_LOST,
    Cause.NODE_FAIL,
    Cause.USER_OOM,  # refined into gpu_oom_startup / user_oom below
    Cause.HOST_OOM,
    Cause.FILESYSTEM,
    Cause.BUS_ERROR,
    Cause.SEGFAULT,
    Cause.HANG,
    Cause.USER_BUG,
)

@dataclass(frozen=True)
class Context:
    """History the classifier may use: nodes with a recent hardware strike, the stall, who cancelled."""

    recent_hardware: frozenset[str] = frozenset()
    start_iteration: int = 0
    stalled: bool = False
    cancelled_by_controller: str = ""


def _ev(n: NodeEvidence, m: Match, role: str) -> Evidence:
    return Evidence(node=origin(n, m) or n.node, file=m.file or n.file, line=m.line, text=m.text, role=role,
                    cause=Cause(m.cause))


def _refine_oom(nodes: list[NodeEvidence], oom_nodes: list[str], ctx: Context) -> tuple[Cause, bool, str]:
    """CUDA OOM on a node with a recent hardware strike, or at start-up on a subset of nodes: poisoned GPU."""
    by = {n.node: n for n in nodes}
    wide = next((n for n in nodes if n.job_wide), None)

    def progressed(host: str) -> int:
        ev = by.get(host) or wide
        return (ev.last_iteration or 0) if ev else 0

    at_start = [x for x in oom_nodes if progressed(x) <= ctx.start_iteration]
    if any(x in ctx.recent_hardware for x in oom_nodes):
        return Cause.GPU_OOM_STARTUP, True, "CUDA OOM on a node with a recent hardware fault"
    everyone = all_hosts(nodes)
    if at_start and 0 < len(oom_nodes) < len(everyone):
        return Cause.GPU_OOM_STARTUP, True, "CUDA OOM at start-up on some nodes only while the others were fine"
    return Cause.USER_OOM, False, "CUDA OOM on every node or after training progressed: the model does not fit"


def _hang(nodes: list[NodeEvidence], secondary: list[Evidence], stuck_only: bool = False) -> Verdict | None:
    """Who stalled the segment: a process in D state, an agent that stopped answering, a rank outside
    the collective everyone else waits in, or the node whose progress stopped first."""
    stuck = [n for n in nodes if n.stuck_detail]
    if stuck:
        fs = any(n.fs_suspect for n in stuck)
        ev = [Evidence(node=n.node, file=n.file, text=n.stuck_detail, cause=Cause.HANG) for n in stuck]
        if fs:
            return _verdict(Cause.FILESYSTEM, [n.node for n in stuck], False, 0.8, ev + secondary,
                            "a training process is stuck in filesystem I/O: the shared filesystem, not the node")
        return _verdict(Cause.HANG, [n.node for n in stuck], True, 0.9, ev + secondary,
                        "a training process was stuck while the others waited")
    if stuck_only:
        return None
    odd, common = stack_outliers(nodes)
    if odd:
        ev = [Evidence(node=n.node, file=n.file, text=f"innermost frames {', '.join(n.top_frames)}; the others "
                       f"wait in {common}", cause=Cause.HANG) for n in nodes if n.node in odd]
        return _verdict(Cause.HANG, odd, True, 0.8, ev + secondary,
                        f"ranks on {','.join(odd)} are not in {common}, where all the others wait")
    behind = progress_culprit(nodes)
    if behind:
        return _verdict(Cause.HANG, behind, True, 0.6, secondary, "progress stopped first on " + ",".join(behind))
    return None


def infer_job_state(nodes: list[NodeEvidence]) -> JobStatus:
    """For logs of jobs the orchestrator did not run: Slurm's end state from the lines it printed."""
    sigs = {m.signature for n in nodes for m in n.matches}
    for name, state in (("job_timelimit", JobState.TIMEOUT), ("job_preempted", JobState.PREEMPTED),
                        ("node_failure_named", JobState.NODE_FAIL), ("job_node_fail", JobState.NODE_FAIL)):
        if name in sigs:
            return JobStatus(state=state)
    if nodes and all(n.exit_code == 0 for n in nodes):
        return JobStatus(state=JobState.COMPLETED, exit_code=0)
    return JobStatus(state=JobState.UNKNOWN)


def _from_job_state(job: JobStatus) -> Cause | None:
    return {
        JobState.TIMEOUT: Cause.TIMELIMIT,
        JobState.PREEMPTED: Cause.PREEMPTED,
        JobState.NODE_FAIL: Cause.NODE_FAIL,
        JobState.OUT_OF_MEMORY: Cause.HOST_OOM,
    }.get(job.state)


def _finished(nodes: list[NodeEvidence], roots: list[tuple[NodeEvidence, Match]]) -> bool:
    """The training printed its end-of-training line and no hardware fault came before it (same file)."""
    done = {n.file: min(m.line for m in n.matches if m.kind == "done") for n in nodes
            if any(m.kind == "done" for m in n.matches)}
    if not done:
        return False
    first_done = min(done.values())
    return not any(Cause(m.cause) in HARDWARE_CAUSES and m.line < done.get(n.file, first_done) for n, m in roots)


SYMMETRIC = frozenset({Cause.SEGFAULT, Cause.BUS_ERROR, Cause.HOST_OOM, Cause.USER_BUG, Cause.NETWORK,
                       Cause.NCCL_TIMEOUT, Cause.HANG})


def _split(nodes: list[NodeEvidence]) -> tuple[list[tuple[NodeEvidence, Match]], list[tuple[NodeEvidence, Match]]]:
    roots: list[tuple[NodeEvidence, Match]] = []
    secondary: list[tuple[NodeEvidence, Match]] = []
    for n in nodes:
        for m in n.matches:
            if m.kind == "done":
                continue
            (secondary if m.cascade else roots).append((n, m))
    return roots, secondary


def classify(job: JobStatus, nodes: list[NodeEvidence], ctx: Context) -> Verdict:
    all_ok = all(n.exit_code == 0 for n in nodes) and bool(nodes)
    roots, secondary = _split(nodes)
    if job.state == JobState.COMPLETED and (all_ok or not any(n.exit_code for n in nodes)) and not roots:
        return Verdict(cause=Cause.SUCCESS, confidence=0.95, summary="all nodes exited 0")
    if _finished(nodes, roots):
        return _verdict(Cause.SUCCESS, [], False, 0.8, [_ev(n, m, "secondary") for n, m in (roots + secondary)[:20]],
                        "the training printed its end and then ended (teardown, or idle until the time limit)")
    if not roots and (ctx.stalled or any(n.stuck_detail for n in nodes)):
        hung = _hang(nodes, [_ev(n, m, "secondary") for n, m in secondary[:20]], stuck_only=not ctx.stalled)
        if hung is not None:
            return hung
    state_cause = _from_job_state(job)
    hardware_roots = [(n, m) for n, m in roots if Cause(m.cause) in HARDWARE_CAUSES]
    if state_cause in (Cause.TIMELIMIT, Cause.PREEMPTED) and not hardware_roots:
        return _verdict(state_cause, [], False, 0.9, [_ev(n, m, "secondary") for n, m in (roots + secondary)[:20]],
                        f"Slurm ended the job: {job.state.value}")
    if roots:
        return _from_roots(nodes, roots, secondary, ctx)
    if state_cause is not None:
        culprits = node_fail_culprits(nodes) if state_cause == Cause.NODE_FAIL else []
        return _verdict(state_cause, culprits, bool(culprits), 0.8 if culprits else 0.6,
                        [_ev(n, m, "secondary") for n, m in secondary[:20]], f"Slurm job state {job.state.value}")
    return _from_cascade(nodes, secondary, ctx, job)


def _from_roots(nodes: list[NodeEvidence], roots: list[tuple[NodeEvidence, Match]],
                secondary: list[tuple[NodeEvidence, Match]], ctx: Context) -> Verdict:
    rank = {c: i for i, c in enumerate(PRECEDENCE)}
    best = min(roots, key=lambda nm: rank.get(Cause(nm[1].cause), len(rank)))
    cause = Cause(best[1].cause)
    culprit_matches = [(n, m) for n, m in roots if Cause(m.cause) == cause]
    named = [(n, m) for n, m in culprit_matches if m.named_node]
    if named:  # a line that names the failed host outranks where the line was printed
        culprit_matches = named
    culprits = sorted({h for n, m in culprit_matches if (h := origin(n, m))})
    blame = any(m.blame for _, m in culprit_matches)
    note = ""
    everyone = all_hosts(nodes)
    symmetric = len(everyone) > 1 and set(culprits) >= everyone
    if cause == Cause.USER_OOM:
        cause, blame, note = _refine_oom(nodes, culprits, ctx)
    elif symmetric and (cause in SYMMETRIC or best[1].signature == "gpu_unavailable"):
        if best[1].signature == "gpu_unavailable":
            cause = Cause.USER_BUG
        culprits, blame, note = [], False, f"the same {cause.value} on every node: the job's, not a node's"
    if cause == Cause.USER_BUG:
        blame = False
    if not culprits and cause in (Cause.HANG, Cause.NODE_FAIL):  # e.g. a ps listing with no host on its lines
        culprits = silent(nodes, secondary)
        blame = bool(culprits)
    evidence = [_ev(n, m, "root") for n, m in culprit_matches[:20]]
    evidence += [_ev(n, m, "secondary") for n, m in (roots + secondary) if (n, m) not in culprit_matches][:30]
    conf = 0.9 if blame or cause in (Cause.USER_BUG, Cause.USER_OOM) else 0.7
    return _verdict(cause, culprits, blame, conf, evidence, note or f"first-rank error: {best[1].text[:160]}")


def _cascade_cause(secondary: list[tuple[NodeEvidence, Match]]) -> Cause:
    """IB completion errors, or transport errors with no collective timeout, are the network's; otherwise the
    peers only saw a collective time out."""
    if any(m.signature == "nccl_ib_peer" for _, m in secondary):
        return Cause.NETWORK
    causes = {Cause(m.cause) for _, m in secondary}
    timed_out = any("timeout" in m.text.lower() or "timed out" in m.text.lower() for _, m in secondary)
    return Cause.NETWORK if Cause.NETWORK in causes and not timed_out else Cause.NCCL_TIMEOUT


def _from_cascade(nodes: list[NodeEvidence], secondary: list[tuple[NodeEvidence, Match]], ctx: Context,
                  job: JobStatus) -> Verdict:
    requeue = [(n, m) for n, m in secondary if m.signature == "job_requeue"]
    if requeue:
        return _verdict(Cause.PREEMPTED, [], False, 0.7, [_ev(n, m, "secondary") for n, m in requeue[:10]],
                        "the job was requeued: the same job comes back")
    peers = peer_culprits(nodes, secondary)
    if peers:
        ev = [_ev(n, m, "root") for n, m in secondary if m.peer_ip][:10]
        ev += [_ev(n, m, "secondary") for n, m in secondary if not m.peer_ip][:20]
        return _verdict(Cause.NETWORK, peers, True, 0.7, ev,
                        f"transport errors point at {','.join(peers)} (IB completion errors, refused connections; "
                        "addresses from NCCL INFO)")
    quiet = silent(nodes, secondary)
    if quiet:
        by = {n.node: n for n in nodes}
        dead = [h for h in quiet if h in by and by[h].abrupt_end]
        cause = Cause.NODE_FAIL if dead else Cause.HANG
        names = dead or quiet
        return _verdict(cause, names, True, 0.7, [_ev(n, m, "secondary") for n, m in secondary[:30]],
                        f"the peers timed out waiting; {','.join(names)} printed no error"
                        + (" and its output ends abruptly" if dead else " (it stopped making progress)"))
    if secondary:
        cause = _cascade_cause(secondary)
        behind = progress_culprit(nodes)
        return _verdict(cause, behind, False, 0.5, [_ev(n, m, "secondary") for n, m in secondary[:30]],
                        "only cascade errors: the initiating fault left no line"
                        + (f"; progress stopped first on {','.join(behind)}" if behind else ""))
    if ctx.stalled:
        return _verdict(Cause.HANG, [], False, 0.5, [], "no progress before the stall timeout; no node stood out")
    failing = [n for n in nodes if n.exit_code not in (0, None)]
    ev = [Evidence(node=n.node, file=n.file, line=ln, text=t, role="context") for n in failing for ln, t in n.tail[-3:]]
    return _verdict(Cause.UNKNOWN, [], False, 0.3, ev[:20],
                    f"job {job.state.value}; no known error signature"
                    + (f"; non-zero exit on {','.join(n.node for n in failing)}" if failing else ""))


NOT_A_NODE = frozenset({Cause.USER_BUG, Cause.USER_OOM, Cause.FILESYSTEM, Cause.TIMELIMIT, Cause.PREEMPTED,
                        Cause.SUCCESS})


def _verdict(cause: Cause, culprits: list[str], blame: bool, conf: float, evidence: list[Evidence],
             summary: str) -> Verdict:
    """Causes that are not a node's fault name no culprit (the evidence still says where it was printed)."""
    if cause in NOT_A_NODE:
        culprits, blame = [], False
    blame = blame and bool(culprits)
    return Verdict(cause=cause, culprit_nodes=tuple(culprits), blame=blame, confidence=conf,
                   evidence=tuple(evidence), summary=summary)
