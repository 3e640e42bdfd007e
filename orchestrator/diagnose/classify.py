"""Pure: (job end state, per-node evidence, history) -> Verdict. No I/O, no logging.

The verdict says whose fault the end is (`Owner`, by DECISIONS.md) and which rule fired; the policy
turns that into an action with the run's history. The rules are listed, with a real example each, in
docs/CAUSES.md.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

from orchestrator.diagnose.cascade import from_cascade, killed_everywhere
from orchestrator.diagnose.culprits import node_fail_culprits, origin
from orchestrator.diagnose.endings import (
    UNKILLABLE,
    before_end,
    from_roots,
    scheduler_end,
    stuck_alive,
    who_stalled,
)
from orchestrator.diagnose.finish import FINISH
from orchestrator.diagnose.judge import NodeMatch, own_error_then_idle
from orchestrator.diagnose.supervisor import supervisor_stop
from orchestrator.diagnose.verdicts import Context, evs, verdict
from orchestrator.evidence import NodeEvidence
from orchestrator.model import (
    HARDWARE_CAUSES,
    CancelReason,
    Cause,
    Evidence,
    JobState,
    JobStatus,
    Owner,
    Role,
    Verdict,
)

__all__ = ["Context", "classify", "infer_job_state"]

def infer_job_state(nodes: list[NodeEvidence]) -> JobStatus:
    """For logs of jobs the orchestrator did not run: Slurm's end state from the lines it
    printed."""
    sigs = {m.signature for n in nodes for m in n.matches}
    for name, state in (("job_timelimit", JobState.TIMEOUT), ("job_preempted", JobState.PREEMPTED),
                        ("spot_termination", JobState.PREEMPTED),
                        ("node_failure_named", JobState.NODE_FAIL),
                        ("job_node_fail", JobState.NODE_FAIL)):
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
    """The training printed its end-of-training line and no hardware fault came before it (same
    file). An end printed after the framework stopped itself for time (fairseq prints `done
    training` after --stop-time-hours too) is that stop's, not the training's goal."""
    done = {n.file: line for n in nodes
            if (line := min((m.line for m in n.matches if m.kind == "done"), default=0))
            and not any(m.kind == "stop" and m.line < line for m in n.matches)}
    if not done:
        return False
    first_done = min(done.values())
    return not any(m.cause in HARDWARE_CAUSES and m.line < done.get(n.file, first_done) for n,
                   m in roots)


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


@dataclass(frozen=True)
class Facts:
    """What every rule reads: the job's end, the nodes' evidence and history, the matches."""
    job: JobStatus
    nodes: list[NodeEvidence]
    ctx: Context
    roots: list[NodeMatch]
    secondary: list[NodeMatch]
    kinds: list[NodeMatch]

    @cached_property
    def stops(self) -> list[NodeMatch]:
        return [(n, m) for n, m in self.kinds if m.kind == "stop"]

    @cached_property
    def state_cause(self) -> Cause | None:
        return _from_job_state(self.job)

    @cached_property
    def hardware_roots(self) -> list[NodeMatch]:
        return [(n, m) for n, m in self.roots if m.cause in HARDWARE_CAUSES]


def _all_exited_0(f: Facts) -> Verdict | None:
    all_ok = all(n.exit_code == 0 for n in f.nodes) and bool(f.nodes)
    if f.job.state == JobState.COMPLETED and (all_ok
                                              or not any(n.exit_code
                                                         for n in f.nodes)) and not f.roots \
            and not f.stops:
        return Verdict(cause=Cause.SUCCESS, confidence=0.95, summary="all nodes exited 0",
                       owner=Owner.FINISHED, rule="all_exited_0")
    return None


def _cancelled(f: Facts) -> Verdict | None:
    """An operator cancelled the job: that ended it, nobody's fault (no root error came first)."""
    if f.ctx.cancel_reason != CancelReason.OPERATOR or f.roots:
        return None
    return verdict(Cause.CANCELLED, [], False, 0.95, evs(f.secondary, Role.SECONDARY),
                   f"cancelled by {f.ctx.cancelled_by or 'an operator'}", "cancelled_by_operator",
                   Owner.NOBODY)


def _printed_its_end(f: Facts) -> Verdict | None:
    if not _finished(f.nodes, f.roots):
        return None
    # said, not hidden: an exit after the end is still an exit
    failed = [n for n in f.nodes if n.exit_code]
    exits = [Evidence(node=n.node, file=n.file, text=f"exited {n.exit_code} after the training "
                                                     "printed its end",
                      role=Role.EXIT) for n in failed]
    said = "; ".join(f"{n.node} exited {n.exit_code}" for n in failed[:8])
    return verdict(Cause.SUCCESS, [], False, 0.8, exits
                   + evs(f.roots + f.secondary, Role.SECONDARY),
                   "the training printed its end and then ended (teardown, or idle until the time "
                   "limit)"
                   + (f"; {said} after it" if said else ""), "printed_its_end", Owner.FINISHED)


def _slow_node(f: Facts) -> Verdict | None:
    """Cancelled to swap a slow node (or one Slurm shows drained) for a spare: the node, unless a
    hardware error says more."""
    node, drained = f.ctx.slow_node, f.ctx.cancel_reason == CancelReason.DRAINED
    swapped = drained or f.ctx.cancel_reason == CancelReason.SLOW_NODE
    if not swapped or not node or f.hardware_roots:
        return None
    cause = Cause.NODE_FAIL if drained else Cause.SLOW_NODE
    found = Evidence(node=node, text=f.ctx.slow_evidence, cause=cause)
    return verdict(cause, [node], True, 0.8, [found, *evs(f.roots + f.secondary, Role.SECONDARY)],
                   f"{node} {'was drained' if drained else 'slowed the job'}: "
                   f"{f.ctx.slow_evidence}"[:300], "drained_in_slurm" if drained else "slow_node",
                   Owner.NODE)


def _node_down(f: Facts) -> Verdict | None:
    """Cancelled because a node's agent fell silent and slurmctld could not reach the node either:
    the node failed (Slurm would have ended the job NODE_FAIL once its timeout ran out), unless a
    hardware error it printed first says more."""
    down = [n for n in f.nodes if n.stuck_detail]
    if f.ctx.cancel_reason != CancelReason.NODE_DOWN or not down or f.hardware_roots:
        return None
    found = [Evidence(node=n.node, file=n.file, text=n.stuck_detail + "; slurmctld could not "
                      "reach the node either", cause=Cause.NODE_FAIL) for n in down]
    names = ",".join(n.node for n in down)
    return verdict(Cause.NODE_FAIL, [n.node for n in down], True, 0.85,
                   found + evs(f.roots + f.secondary, Role.SECONDARY),
                   f"{names} stopped answering, to the agent and to slurmctld: the node failed",
                   "node_unreachable", Owner.NODE)


def _stalled(f: Facts) -> Verdict | None:
    # a SIGKILL with no error of its own (the hang's end: a monitor's or an operator's kill) is no
    # root that explains the stall the stacks show
    roots = [(n, m) for n, m in f.roots if m.kind != "killed"]
    if roots or not (f.ctx.stalled or any(n.stuck_detail for n in f.nodes)):
        return None
    return who_stalled(f.nodes, evs(f.secondary, Role.SECONDARY), stuck_only=not f.ctx.stalled)


def _fewer_gpus(f: Facts) -> Verdict | None:
    """The job failed before its first step and one node showed fewer GPUs than every other (its
    `nvidia-smi -L`, torchrun's local ranks): a GPU lost there, whatever the ranks then raised (a
    world size that no longer divides the batch)."""
    shown = {(h or n.node): c for n in f.nodes for h, c in n.gpus if h or not n.job_wide}
    counts = sorted(set(shown.values()))
    if (len(shown) < 3 or len(counts) != 2 or not f.roots
            or any(n.last_iteration is not None for n in f.nodes)):
        return None
    few = [h for h, c in shown.items() if c == counts[0]]
    if len(few) != 1:
        return None
    return verdict(Cause.GPU_LOST, few, True, 0.8, evs(f.roots, Role.SECONDARY),
                   f"{few[0]} shows {counts[0]} GPUs where every other node shows {counts[1]}: a "
                   "GPU lost there before the start; the ranks' errors follow from it",
                   "fewer_gpus", Owner.NODE)


def _spot(f: Facts) -> Verdict | None:
    spot = [(n, m) for n, m in f.secondary if m.signature == "spot_termination"]
    if spot and all(m.cause == Cause.NODE_FAIL for _, m in f.hardware_roots):
        return verdict(Cause.PREEMPTED, [], False, 0.75, evs(spot, Role.ROOT, 10)
                       + evs(f.roots, Role.SECONDARY),
                       "the cloud reclaimed the instances (spot termination / preemption notice): "
                       "resubmit", "preempted", Owner.NOBODY)
    return None


def _stopped_before_walltime(f: Facts) -> Verdict | None:
    if f.stops and not f.hardware_roots:
        return verdict(Cause.TIMELIMIT, [], False, 0.85,
                       evs(f.stops, Role.ROOT) + evs(f.roots + f.secondary, Role.SECONDARY),
                       "the framework stopped itself ahead of the wall time: "
                       f"{f.stops[0][1].text[:160]}", "stopped_before_walltime", Owner.NOBODY)
    return None


def _scheduler_ended(f: Facts) -> Verdict | None:
    """Slurm's time limit or preemption ended the job; a step that would not die at that end
    (`unkillable`) names its node but leaves the cause the scheduler's."""
    alive = stuck_alive(f.nodes, f.roots)
    # a node stuck before the end that then could not be killed: its failure, not the end's
    faults = [(n, m) for n, m in before_end(f.nodes, f.hardware_roots)
              if m.signature not in UNKILLABLE or origin(n, m) in alive]
    if own_error_then_idle(f.nodes, f.roots, f.secondary):  # that error ended it: the next rule
        return None
    if f.state_cause in (Cause.TIMELIMIT, Cause.PREEMPTED) and not faults:
        return scheduler_end(f.job, f.state_cause, f.nodes, f.roots, f.secondary)
    return None


def _first_rank_error(f: Facts) -> Verdict | None:
    return from_roots(f.nodes, f.roots, f.secondary, f.kinds, f.ctx) if f.roots else None


def _killed(f: Facts) -> Verdict | None:
    if f.job.state == JobState.CANCELLED or f.ctx.cancel_reason is not None:  # a cancel kills too
        return None
    return killed_everywhere(f.nodes, f.secondary, f.kinds, f.state_cause)


def _scheduler_state(f: Facts) -> Verdict | None:
    if f.state_cause is None:
        return None
    culprits = node_fail_culprits(f.nodes) if f.state_cause == Cause.NODE_FAIL else []
    return verdict(f.state_cause, culprits, bool(culprits), 0.8 if culprits else 0.6,
                   evs(f.secondary, Role.SECONDARY), f"Slurm job state {f.job.state.value}",
                   "scheduler_state")


def _cascade(f: Facts) -> Verdict | None:
    return from_cascade(f.nodes, f.secondary, f.kinds, f.ctx, f.job)


Rule = tuple[str, Callable[[Facts], Verdict | None]]
# In order: the first rule that returns a verdict decides (its name, or a finer one, is the
# verdict's `rule`).
RULES: tuple[Rule, ...] = (
    ("all_exited_0", _all_exited_0),
    ("printed_its_end", _printed_its_end),
    ("cancelled_by_operator", _cancelled),  # `orchestrator cancel`, --cancel-on-exit
    ("supervisor_no_restart", lambda f: supervisor_stop(f.nodes, f.roots, f.secondary)),
    ("slow_node", _slow_node),  # cancelled to swap a slow node for a spare
    ("node_down", _node_down),  # cancelled: a silent node slurmctld cannot reach either
    # no root error and the controller saw a stall (or a rank is stuck): who stalled it
    ("stalled", _stalled), ("preempted", _spot),
    ("stopped_before_walltime", _stopped_before_walltime),
    ("scheduler_ended", _scheduler_ended),  # time limit, preemption (or a hang before the limit)
    ("fewer_gpus", _fewer_gpus),  # a start-up failure beside a node that shows fewer GPUs
    ("first_rank_error", _first_rank_error),  # the root error by precedence and time order
    ("killed_everywhere", _killed),
    ("scheduler_state", _scheduler_state),
    ("cascade", _cascade),  # peers' symptoms only: who they point at
)


def classify(job: JobStatus, nodes: list[NodeEvidence], ctx: Context) -> Verdict:
    """The verdict of the first rule of RULES that gives one, finished by FINISH (the segment's own
    files that hung, nodes Slurm took out of the job)."""
    roots, secondary, kinds = _split(nodes)
    facts = Facts(job, nodes, ctx, roots, secondary, kinds)
    found = next(v for _, rule in RULES if (v := rule(facts)) is not None)
    for _, finish in FINISH:
        found = finish(found, ctx)
    return found


