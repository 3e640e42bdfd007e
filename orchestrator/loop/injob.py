"""Pure: segments that run as job steps inside an allocation with spare nodes.

A segment submitted with spares (`resources.spare_nodes`) holds `nodes + spares` with --no-kill; the
allocation supervisor on its batch host runs the training as a step and writes a StepRecord per
step. These functions turn what the controller sees (the job's status, the step's record, the
blacklist) into the segment's own status, the spares still free, and, after a verdict, whether to
restart inside the job (a blamed node dropped, a spare promoted) or to fall back to a new segment.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from orchestrator.contract import StepEnd, StepRecord
from orchestrator.model import Action, Decision, JobState, JobStatus, Verdict
from orchestrator.spares import Restart, restart_in_allocation
from orchestrator.state import RunState, SegmentRecord

RESTARTABLE = frozenset({Action.RESUBMIT_EXCLUDE, Action.RESUBMIT})


def in_allocation(seg: SegmentRecord) -> bool:
    """The segment runs as a step of a job with spare nodes (its first step or a restart inside
    it)."""
    return bool(seg.allocation_dir)


def step_status(job: JobStatus, rec: StepRecord | None) -> JobStatus:
    """The segment's view of its job: the step's nodes; once the step ended while the job still
    runs, the step's end is the segment's end (NODE_FAIL when Slurm took one of its nodes out of the
    job)."""
    nodes = tuple(rec.nodes) if rec is not None and rec.nodes else job.nodes
    # a step the supervisor stopped on a signal (scancel, preemption): the job is ending; wait for
    # Slurm's word
    if job.state.terminal or rec is None or not rec.ended or rec.end == StepEnd.SIGNALLED:
        return job.model_copy(update={"nodes": nodes})
    lost = [n for n in rec.lost_nodes if n in rec.nodes]
    if lost:
        return JobStatus(state=JobState.NODE_FAIL, exit_code=rec.exit_code, nodes=nodes,
                         reason=f"node failure: {','.join(lost)} left the allocation")
    state = JobState.COMPLETED if rec.exit_code == 0 else JobState.FAILED
    return JobStatus(state=state, exit_code=rec.exit_code, nodes=nodes)


def free_spares(seg: SegmentRecord, held: list[str], lost: list[str],
                banned: set[str]) -> list[str]:
    """Nodes of the allocation that are not in the segment's step, still held by the job, not lost
    and not excluded by the blacklist or blamed in this job (`banned`)."""
    return [n for n in seg.allocation if n in held and n not in seg.nodes and n not in lost
            and n not in banned]


def replace(nodes: list[str], drop: tuple[str, ...], promote: tuple[str, ...]) -> list[str]:
    """The step's nodes with each dropped node replaced by its spare (srun still numbers them in
    Slurm's order)."""
    swap = dict(zip(drop, promote, strict=True))
    return [swap.get(n, n) for n in nodes]


def job_submitted_at(state: RunState, seg: SegmentRecord) -> datetime | None:
    """When the segment's job was submitted: a restart inside a job polls it with the job's
    submission time (sacct tells a reused job id by it), not with the time of the restart."""
    first = next((x for x in state.segments if x.index == seg.in_job_of),
                 seg) if seg.in_job_of else seg
    return first.submitted_at or seg.submitted_at


@dataclass(frozen=True)
class AfterStep:
    """What the end of a step inside an allocation leads to: a restart in the job, or the job
    cancelled (a new segment follows as usual), or nothing (the job ends by itself)."""
    restart: Restart
    nodes: tuple[str, ...] = ()
    cancel_job: str = ""


def after_step(state: RunState, seg: SegmentRecord, verdict: Verdict, decision: Decision,
               spares: list[str],
               job_ended: bool, step_ok: bool = False, held: list[str] | None = None) -> AfterStep:
    """`step_ok`: the step ended with 0 on every node (the supervisor then ends the job by itself);
    `held`: the nodes the job holds now (default: its allocation)."""
    held = list(seg.allocation) if held is None else held
    if job_ended:
        return AfterStep(Restart(False, why_not="the job ended"))
    # a step stuck after the goal (teardown) would hold every node
    if decision.action == Action.DONE:
        return AfterStep(Restart(False, why_not="done"), cancel_job="" if step_ok
                         else "done: the goal is reached")
    if decision.action not in RESTARTABLE or state.status.value != "running":
        return AfterStep(Restart(False, why_not=decision.action.value),
                         cancel_job=f"{decision.action.value}: "
                         f"{decision.reason}"[:200])
    batch_host = seg.allocation[0] if seg.allocation else ""
    r = restart_in_allocation(verdict, decision, list(seg.nodes), spares, batch_host)
    if not r.ok:
        return AfterStep(r, cancel_job=f"no restart inside the job: {r.why_not}; a new segment "
                                       "follows")
    nodes = replace(list(seg.nodes), r.drop, r.promote)
    # e.g. a node that failed too but was not blamed
    if gone := [n for n in nodes if n not in held]:
        return AfterStep(Restart(False, why_not=f"{','.join(gone)} left the job"),
                         cancel_job=f"no restart inside the job: {','.join(gone)} left the job; a "
                                    "new segment follows")
    return AfterStep(r, nodes=tuple(nodes))
