"""Pure: (job end state, per-node evidence, history) -> Verdict. No I/O, no logging.

The verdict says whose fault the end is (`Owner`, by DECISIONS.md) and which rule fired; the policy turns that
into an action with the run's history. The rules are listed, with a real example each, in docs/CAUSES.md.
"""

from __future__ import annotations

import re
from datetime import timedelta

from orchestrator.diagnose.cascade import from_cascade, killed_everywhere
from orchestrator.diagnose.culprits import (
    all_hosts,
    as_hosts,
    node_fail_culprits,
    origin,
    progress_culprit,
    silent,
    stack_outliers,
)
from orchestrator.diagnose.judge import (
    NodeMatch,
    earliest_root,
    hardware_hosts,
    progress_stopped_early,
)
from orchestrator.diagnose.rules import COLLECTIVE, DEVICE_FRAME, PROGRAM_WAIT, judge_root
from orchestrator.diagnose.verdicts import Context, evs, verdict
from orchestrator.evidence import NodeEvidence
from orchestrator.model import HARDWARE_CAUSES, Cause, Evidence, JobState, JobStatus, Owner, Verdict

__all__ = ["Context", "classify", "infer_job_state"]

# Root-cause precedence when several non-cascade causes appear in one segment.
PRECEDENCE: tuple[Cause, ...] = (
    Cause.GPU_ECC,
    Cause.GPU_LOST,
    Cause.NODE_FAIL,
    Cause.GPU_OOM_STARTUP,
    Cause.USER_OOM,  # refined into gpu_oom_startup / user_oom below
    Cause.HOST_OOM,
    Cause.NETWORK,  # an HCA's own error (a root); transport errors of peers are cascade
    Cause.FILESYSTEM,
    Cause.BUS_ERROR,
    Cause.SEGFAULT,
    Cause.HANG,
    Cause.USER_BUG,
)


def _hang(nodes: list[NodeEvidence], secondary: list[Evidence], stuck_only: bool = False) -> Verdict | None:
    """Who stalled the segment: a process in D state, an agent that stopped answering, a rank outside
    the collective everyone else waits in, or the node whose progress stopped first."""
    stuck = [n for n in nodes if n.stuck_detail]
    if stuck:
        fs = any(n.fs_suspect for n in stuck)
        found = [Evidence(node=n.node, file=n.file, text=n.stuck_detail, cause=Cause.HANG) for n in stuck]
        if fs:
            return verdict(Cause.FILESYSTEM, [n.node for n in stuck], False, 0.8, found + secondary,
                            "a training process is stuck in filesystem I/O: the shared filesystem, not the node",
                            "stuck_in_filesystem", Owner.SHARED)
        return verdict(Cause.HANG, [n.node for n in stuck], True, 0.9, found + secondary,
                        "a training process was stuck while the others waited", "stuck_process", Owner.NODE)
    if stuck_only:
        return None
    odd, common = stack_outliers(nodes)
    if odd:
        frames = [f for n in nodes if n.node in odd for f in n.top_frames if f and f != common]
        found = [Evidence(node=n.node, file=n.file, text=f"innermost frames {', '.join(n.top_frames)}; the others "
                       f"wait in {common}", cause=Cause.HANG) for n in nodes if n.node in odd]
        if frames and not any(DEVICE_FRAME.search(f) for f in frames) and any(PROGRAM_WAIT.search(f)
                                                                             for f in frames):
            return verdict(Cause.HANG, [], False, 0.7, found + secondary,
                            f"the rank outside {common} waits in the program's own code ({frames[0]}): a deadlock "
                            "or a stuck data loader, not a node", "hang_in_program_code", Owner.JOB)
        return verdict(Cause.HANG, odd, True, 0.8, found + secondary,
                        f"ranks on {','.join(odd)} are not in {common}, where all the others wait",
                        "outside_collective", Owner.NODE)
    shared = {f for n in nodes for f in n.top_frames if f}
    only = next(iter(shared)) if len(shared) == 1 else ""
    if only and PROGRAM_WAIT.search(only) and not COLLECTIVE.search(only) and not DEVICE_FRAME.search(only):
        return verdict(Cause.HANG, [], False, 0.6, secondary, f"every rank waits in the program's own code "
                       f"({only}), none in a collective: the program's hang", "hang_in_program_code", Owner.JOB)
    behind = progress_culprit(nodes)
    if behind:
        return verdict(Cause.HANG, behind, True, 0.6, secondary, "progress stopped first on " + ",".join(behind),
                        "progress_stopped_first", Owner.NODE)
    return None


def infer_job_state(nodes: list[NodeEvidence]) -> JobStatus:
    """For logs of jobs the orchestrator did not run: Slurm's end state from the lines it printed."""
    sigs = {m.signature for n in nodes for m in n.matches}
    for name, state in (("job_timelimit", JobState.TIMEOUT), ("job_preempted", JobState.PREEMPTED),
                        ("spot_termination", JobState.PREEMPTED),
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


def _finished(nodes: list[NodeEvidence], roots: list[NodeMatch]) -> bool:
    """The training printed its end-of-training line and no hardware fault came before it (same file)."""
    done = {n.file: min(m.line for m in n.matches if m.kind == "done") for n in nodes
            if any(m.kind == "done" for m in n.matches)}
    if not done:
        return False
    first_done = min(done.values())
    return not any(Cause(m.cause) in HARDWARE_CAUSES and m.line < done.get(n.file, first_done) for n, m in roots)


def _split(nodes: list[NodeEvidence]) -> tuple[list[NodeMatch], list[NodeMatch], list[NodeMatch]]:
    """(roots, cascade, other kinds: node hardware reports, framework stops)."""
    roots: list[NodeMatch] = []
    secondary: list[NodeMatch] = []
    kinds: list[NodeMatch] = []
    for n in nodes:
        for m in n.matches:
            if m.kind == "done":
                continue
            (kinds if m.kind else secondary if m.cascade else roots).append((n, m))
    return roots, secondary, kinds


def classify(job: JobStatus, nodes: list[NodeEvidence], ctx: Context) -> Verdict:
    all_ok = all(n.exit_code == 0 for n in nodes) and bool(nodes)
    roots, secondary, kinds = _split(nodes)
    stops = [(n, m) for n, m in kinds if m.kind == "stop"]
    if job.state == JobState.COMPLETED and (all_ok or not any(n.exit_code for n in nodes)) and not roots \
            and not stops:
        return Verdict(cause=Cause.SUCCESS, confidence=0.95, summary="all nodes exited 0", owner=Owner.FINISHED,
                       rule="all_exited_0")
    if _finished(nodes, roots):
        failed = [n for n in nodes if n.exit_code]  # said, not hidden: an exit after the end is still an exit
        exits = [Evidence(node=n.node, file=n.file, text=f"exited {n.exit_code} after the training printed its end",
                          role="exit") for n in failed]
        said = "; ".join(f"{n.node} exited {n.exit_code}" for n in failed[:8])
        return verdict(Cause.SUCCESS, [], False, 0.8, exits + evs(roots + secondary, "secondary"),
                        "the training printed its end and then ended (teardown, or idle until the time limit)"
                        + (f"; {said} after it" if said else ""), "printed_its_end", Owner.FINISHED)
    if not roots and (ctx.stalled or any(n.stuck_detail for n in nodes)):
        hung = _hang(nodes, evs(secondary, "secondary"), stuck_only=not ctx.stalled)
        if hung is not None:
            return hung
    state_cause = _from_job_state(job)
    hardware_roots = [(n, m) for n, m in roots if Cause(m.cause) in HARDWARE_CAUSES]
    spot = [(n, m) for n, m in secondary if m.signature == "spot_termination"]
    if spot and all(Cause(m.cause) == Cause.NODE_FAIL for _, m in hardware_roots):
        return verdict(Cause.PREEMPTED, [], False, 0.75, evs(spot, "root", 10) + evs(roots, "secondary"),
                        "the cloud reclaimed the instances (spot termination / preemption notice): resubmit",
                        "preempted", Owner.NOBODY)
    if stops and not hardware_roots:
        return verdict(Cause.TIMELIMIT, [], False, 0.85, evs(stops, "root") + evs(roots + secondary, "secondary"),
                        f"the framework stopped itself ahead of the wall time: {stops[0][1].text[:160]}",
                        "stopped_before_walltime", Owner.NOBODY)
    if state_cause in (Cause.TIMELIMIT, Cause.PREEMPTED) and not hardware_roots:
        return _scheduler_end(job, state_cause, nodes, roots, secondary)
    if roots:
        return _from_roots(nodes, roots, secondary, kinds, ctx)
    cancelled = job.state == JobState.CANCELLED or bool(ctx.cancelled_by_controller)  # a cancel kills too
    killed = None if cancelled else killed_everywhere(nodes, secondary, kinds, state_cause)
    if killed is not None:
        return killed
    if state_cause is not None:
        culprits = node_fail_culprits(nodes) if state_cause == Cause.NODE_FAIL else []
        return verdict(state_cause, culprits, bool(culprits), 0.8 if culprits else 0.6,
                        evs(secondary, "secondary"), f"Slurm job state {job.state.value}", "scheduler_state")
    return from_cascade(nodes, secondary, kinds, ctx, job)


def _scheduler_end(job: JobStatus, cause: Cause, nodes: list[NodeEvidence], roots: list[NodeMatch],
                   secondary: list[NodeMatch]) -> Verdict:
    """Slurm ended the job (time limit, preemption). If progress had stopped long before, that was a hang."""
    found = evs(roots + secondary, "secondary")
    requeue = [(n, m) for n, m in secondary if m.signature == "job_requeue"]
    if requeue and cause == Cause.PREEMPTED:
        return verdict(cause, [], False, 0.8, evs(requeue, "root") + found, "the job was requeued: the same job "
                        "comes back", "requeued", Owner.SHARED)
    gap = progress_stopped_early(nodes, secondary) if cause == Cause.TIMELIMIT else None
    if gap is not None:
        stuck = sorted({h for n, m in roots if Cause(m.cause) == Cause.HANG and (h := origin(n, m))})
        behind = stuck or progress_culprit(nodes) or silent(nodes, [(n, m) for n, m in secondary
                                                          if m.signature != "job_timelimit"])
        return verdict(Cause.HANG, behind, bool(behind), 0.6, found,
                        f"progress stopped {_mins(gap)} before the time limit: a hang, not the time limit"
                        + (f"; it stopped first on {','.join(behind)}" if behind else ""),
                        "progress_stopped_before_limit", Owner.NODE if behind else Owner.NOBODY)
    return verdict(cause, [], False, 0.9, found, f"Slurm ended the job: {job.state.value}", "scheduler_ended",
                    Owner.NOBODY)


def _mins(d: timedelta) -> str:
    return f"{d.total_seconds() / 60:.0f} min"


def _best_root(roots: list[NodeMatch]) -> tuple[NodeMatch, str]:
    rank = {c: i for i, c in enumerate(PRECEDENCE)}
    best = min(roots, key=lambda nm: rank.get(Cause(nm[1].cause), len(rank)))
    first = earliest_root(roots, best)
    return (first, "earliest_error") if first is not None else (best, "")


def _from_roots(nodes: list[NodeEvidence], roots: list[NodeMatch], secondary: list[NodeMatch],
                kinds: list[NodeMatch], ctx: Context) -> Verdict:
    best, order_rule = _best_root(roots)
    cause = Cause(best[1].cause)
    culprit_matches = [(n, m) for n, m in roots if Cause(m.cause) == cause]
    if order_rule:  # time order picked a root: later errors of the same cause elsewhere are its cascade
        culprit_matches = [(n, m) for n, m in culprit_matches if origin(n, m) == origin(*best)]
    named = [(n, m) for n, m in culprit_matches if m.named_node]
    if named:  # a line that names the failed host outranks where the line was printed
        culprit_matches = named
    culprits = as_hosts(sorted({h for n, m in culprit_matches if (h := origin(n, m))}), nodes)
    everyone = all_hosts(nodes)
    symmetric = len(everyone) > 1 and set(culprits) >= everyone
    hw = hardware_hosts(kinds)
    same_text = len({re.sub(r"\d+", "N", m.text.strip()) for _, m in culprit_matches}) == 1
    judged = judge_root(cause, best[1], culprits, symmetric, hw, nodes, ctx, same_text)
    cause, culprits, owner, rule, note = judged
    if not culprits and cause in (Cause.HANG, Cause.NODE_FAIL):  # e.g. a ps listing with no host on its lines
        culprits = silent(nodes, secondary)
    evidence = evs(culprit_matches, "root")
    evidence += evs([(n, m) for n, m in kinds if m.kind == "hw" and origin(n, m) in culprits], "root", 10)
    evidence += evs([nm for nm in roots + secondary if nm not in culprit_matches], "secondary", 30)
    blame = owner in (Owner.NODE, Owner.NODE_SUSPECT) and bool(culprits)
    conf = 0.9 if blame or owner == Owner.JOB else 0.7
    rule = f"{rule}+{order_rule}" if order_rule else rule
    return verdict(cause, culprits, blame, conf, evidence, note or f"first-rank error: {best[1].text[:160]}",
                    rule, owner)


