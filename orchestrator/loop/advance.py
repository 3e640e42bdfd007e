"""Pure: the one place the run ledger changes. `advance(ledger, observation, config, now)` returns a
Transition: the new ledger (a new value; records are immutable), the effects to carry out, and, for
an ended segment, the verdict and decision. The controller observes, calls it, saves, and does the
effects.

A segment's phase follows from its record (`phase`): planned (no job id) ->
submitted/pending/running (polled) -> cancelling (the controller cancelled it) -> ended (verdict and
decision); a segment restarted inside its job is `in_job_of` the one that submitted it. Adding an
observation: a value in `observations`, a handler here, its row in HANDLERS.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from orchestrator import budget
from orchestrator.loop import observations as o
from orchestrator.loop import progress
from orchestrator.loop.conclude import Outcome, conclude
from orchestrator.loop.effects import Alert, Effect
from orchestrator.model import CancelReason, Cause, JobState, RunStatus, SegmentSpec
from orchestrator.placement import InAllocation, OwnJob
from orchestrator.settings import Goal, Policy, Settings
from orchestrator.state import MAX_ACKED, RunState, SegmentRecord, SlowNodeRecord


class Phase(StrEnum):
    """Where a segment is in its life, read from its record."""
    PLANNED = "planned"  # the intent is recorded, no job id yet
    SUBMITTED = "submitted"  # a job id, no scheduler state seen yet
    PENDING = "pending"
    RUNNING = "running"
    CANCELLING = "cancelling"  # the controller cancelled it; the verdict waits for the job's end
    ENDED = "ended"  # judged: verdict and decision recorded


def phase(seg: SegmentRecord) -> Phase:
    if seg.action is not None:
        return Phase.ENDED
    if seg.cancel_reason is not None:
        return Phase.CANCELLING
    if seg.job_id is None:
        return Phase.PLANNED
    if seg.job_state == JobState.RUNNING:
        return Phase.RUNNING
    return Phase.PENDING if seg.job_state == JobState.PENDING else Phase.SUBMITTED


@dataclass(frozen=True)
class Transition:
    """What one observation changes: the new ledger, whether it differs, the effects, and (after
    `Ended`) the outcome; `note` is a line for the log."""
    ledger: RunState
    changed: bool = False
    effects: tuple[Effect, ...] = ()
    outcome: Outcome | None = None
    note: str = ""


def intent(spec: SegmentSpec, backend_name: str, **more: Any) -> SegmentRecord:
    """The segment record written before submission, so a crash before the id is recorded is
    detected."""
    place = InAllocation(dir=spec.allocation_dir,
                         spares=spec.spares) if spec.allocation_dir or spec.spares \
        else OwnJob()
    return SegmentRecord(index=spec.index, job_name=spec.job_name, excluded=list(spec.exclude),
                         resumed_from=spec.resume_from, start_iteration=spec.start_iteration,
                         backend=backend_name,
                         interval_advice=spec.interval_advice, **{"placement": place, **more})


def _changed(old: RunState, now: datetime, **changes: Any) -> Transition:
    return Transition(old.evolve(**changes, updated_at=now), changed=True)


def _current(old: RunState, now: datetime, **changes: Any) -> Transition:
    """The current segment with `changes`; unchanged when they change nothing."""
    seg = old.current
    assert seg is not None, "an observation of the current segment with no segment"
    if all(getattr(seg, k) == v for k, v in changes.items()):
        return Transition(old)
    return _changed(old, now, segments=[*old.segments[:-1], seg.evolve(**changes)])


def _planned(old: RunState, obs: o.Planned, cfg: Settings | None, now: datetime) -> Transition:
    return _changed(old, now, segments=[*old.segments, intent(obs.spec, obs.backend)],
                    blacklist=obs.blacklist,
                    wait_until=None, checkpoint_seen=obs.checkpoint or old.checkpoint_seen)


def _submitted(old: RunState, obs: o.Submitted, cfg: Settings | None, now: datetime) -> Transition:
    return _current(old, now, job_id=obs.ref.job_id, submitted_at=obs.ref.submitted_at)


def _withdrawn(old: RunState, obs: o.Withdrawn, cfg: Settings | None, now: datetime) -> Transition:
    return _changed(old, now, segments=old.segments[:-1])


def _polled(old: RunState, obs: o.Polled, cfg: Settings | None, now: datetime) -> Transition:
    seg = old.current
    assert seg is not None
    return _current(old, now,
                    **progress.changes(seg, obs.status, list(obs.scheduler_nodes),
                                       list(obs.log_nodes), obs.iteration, now, obs.loss))


def _queue_noted(old: RunState, obs: o.QueueNoted, cfg: Settings | None,
                 now: datetime) -> Transition:
    return _current(old, now, queue_note=obs.note)


def _cancelling(old: RunState, obs: o.Cancelling, cfg: Settings | None,
                now: datetime) -> Transition:
    return _current(old, now, cancel_reason=obs.reason, cancelled_by_controller=obs.detail,
                    cancelled_at=now)


def _ended(old: RunState, obs: o.Ended, cfg: Settings | None, now: datetime) -> Transition:
    assert cfg is not None, "judging a segment needs the run's settings"
    return judged(old, obs, cfg.policy, cfg.goal, str(cfg.checkpoint.dir), now)


def judged(old: RunState, obs: o.Ended, policy: Policy, goal: Goal, checkpoint_dir: str,
           now: datetime) -> Transition:
    """The current segment judged (`conclude`) and its outcome written into the ledger: verdict,
    decision, blacklist, hardware history, failed checkpoints, run status and when to resubmit."""
    seg = old.current
    assert seg is not None
    out = conclude(old, seg, obs.status, list(obs.evidence), list(obs.fs_stalls), policy, goal, now,
                   obs.lost, checkpoint_dir)
    v, d = out.verdict, out.decision
    seg = seg.evolve(job_state=obs.status.state, ended_at=now, cause=v.cause,
                     culprit_nodes=list(v.culprit_nodes),
                     confidence=v.confidence, evidence=list(v.evidence), action=d.action,
                     reason=d.reason,
                     rule=v.rule, decision_rule=d.rule, checkpoint_write_s=obs.checkpoint_write_s,
                     rollback_below=d.rollback_below,
                     infra=budget.infra_verdict(v),
                     step_cadence_s=obs.cadence_s or seg.step_cadence_s)
    bad = dict(old.bad_checkpoints)
    if d.checkpoint_failed:
        bad[d.checkpoint_failed] = bad.get(d.checkpoint_failed, 0) + 1
    new = old.evolve(segments=[*old.segments[:-1], seg], blacklist=out.blacklist,
                     hardware_events=list(out.hardware),
                     bad_checkpoints=bad, status=out.status, wait_until=out.wait_until,
                     updated_at=now,
                     stop_reason=d.reason if out.status != RunStatus.RUNNING else old.stop_reason)
    return Transition(new, changed=True, effects=out.effects, outcome=out)


def _allocation_known(old: RunState, obs: o.AllocationKnown, cfg: Settings | None,
                      now: datetime) -> Transition:
    seg = old.current
    assert seg is not None
    if not isinstance(seg.placement, InAllocation) or seg.placement.nodes:
        return Transition(old)
    return _current(old, now, placement=seg.placement.model_copy(update={"nodes": obs.nodes}))


def _job_ending(old: RunState, obs: o.JobEnding, cfg: Settings | None, now: datetime) -> Transition:
    seg = old.current
    assert seg is not None
    # status and report say why not in the job
    return _current(old, now, reason=f"{seg.reason}; {obs.why}"[:500])


def _restarted(old: RunState, obs: o.RestartedInJob, cfg: Settings | None,
               now: datetime) -> Transition:
    seg = old.current
    assert seg is not None
    swap = ", ".join(f"{a} -> {b}" for a, b in zip(obs.drop, obs.promote, strict=True))
    done = seg.evolve(reason=f"{seg.reason}; restarted inside job {seg.job_id} ({swap}), no new "
                             "submission"[:500])
    place = InAllocation(dir=obs.spec.allocation_dir, spares=obs.spec.spares,
                         nodes=tuple(seg.allocation), submitted_by=seg.job_root)
    new = intent(obs.spec, seg.backend, job_id=seg.job_id, submitted_at=now, nodes=list(obs.nodes),
                 placement=place)
    return _changed(old, now, segments=[*old.segments[:-1], done, new], blacklist=obs.blacklist,
                    wait_until=None)


def _checkpoint_seen(old: RunState, obs: o.CheckpointSeen, cfg: Settings | None,
                     now: datetime) -> Transition:
    return (Transition(old) if old.checkpoint_seen == obs.path
            else _changed(old, now, checkpoint_seen=obs.path))


def _slowed(old: RunState, obs: o.SlowedDown, cfg: Settings | None,
            now: datetime) -> Transition:
    t = _current(old, now, slowdown_factor=round(obs.factor, 3), slowdown_since=obs.since,
                 slowdown_note=obs.note)
    return replace(t, effects=(Alert(f"{old.run}: running {obs.factor:.2f}x slower", obs.note),)
                   if t.changed else ())


def _drained(old: RunState, obs: o.NodeDrained, cfg: Settings | None, now: datetime) -> Transition:
    """A node of the running step Slurm shows drained: named in the segment (status, verdict)."""
    seg = old.current
    assert seg is not None
    return _current(old, now, drained={**seg.drained, obs.node: obs.reason[:200]})


def _slow_node(old: RunState, obs: o.SlowNodeFound, cfg: Settings | None,
               now: datetime) -> Transition:
    """A slow node recorded in the segment; without a swap it gets a (soft) strike now, once a
    segment (a slowdown that grows is profiled again: the same evidence must not exclude it)."""
    seg = old.current
    assert seg is not None and cfg is not None
    again = any(f.node == obs.node for f in seg.slow_nodes)
    found = SlowNodeRecord(node=obs.node, factor=round(obs.factor, 3), since=obs.since,
                           evidence=obs.evidence,
                           action="swapped for a spare" if obs.swap else "struck")
    bl = old.blacklist if obs.swap or again else old.blacklist.record(
        obs.node, Cause.SLOW_NODE, obs.evidence, seg.job_id or "", now, hard=False,
        expiry=timedelta(hours=cfg.policy.blacklist_expiry_h))
    t = _changed(old, now, segments=[*old.segments[:-1],
                                     seg.evolve(slow_nodes=[*seg.slow_nodes, found])],
                 blacklist=bl)
    what = "swapped for a spare" if obs.swap else "a strike; the job runs on"
    return replace(t, effects=(Alert(f"{old.run}: {obs.node} slows the job ({what})",
                                     obs.evidence),))


def _halted(old: RunState, obs: o.Halted, cfg: Settings | None, now: datetime) -> Transition:
    t = _changed(old, now, status=RunStatus.STOPPED, stop_reason=obs.reason)
    return replace(t, effects=(Alert(f"{old.run}: STOPPED, needs a human", obs.reason),))


def _edited(old: RunState, obs: o.BlacklistEdited, cfg: Settings | None,
            now: datetime) -> Transition:
    if obs.blacklist == old.blacklist and not obs.acked:
        return Transition(old)
    acked = [*old.applied_requests, *obs.acked][-MAX_ACKED:]
    return _changed(old, now, blacklist=obs.blacklist, applied_requests=acked)


def _started(old: RunState, obs: o.Started, cfg: Settings | None, now: datetime) -> Transition:
    """A finished run whose goal was raised, or a stopped one resumed on purpose (`run --resume`),
    runs again; the note says what changed. A stopped run without `resume` stays stopped."""
    before = old.target_iteration
    raised = old.status == RunStatus.DONE and before is not None and (obs.target or 0) > before
    if old.status == RunStatus.STOPPED and not obs.resume:
        return Transition(old)
    if old.status != RunStatus.STOPPED and not raised:
        if old.target_iteration == obs.target:
            return Transition(old)
        return _changed(old, now, target_iteration=obs.target)
    if raised and old.best_iteration() >= (obs.target or 0):  # already past it: nothing to run
        return replace(_changed(old, now, target_iteration=obs.target),
                       note=f"the goal was raised to {obs.target}, but the run already reached "
                            f"iteration {old.best_iteration()}: still done")
    why = "the goal was raised" if raised else f"it stopped because: {old.stop_reason}"
    t = _changed(old, now, target_iteration=obs.target, status=RunStatus.RUNNING, stop_reason="")
    return replace(t, note=f"resuming a {old.status.value} run ({why})")


def _from_scratch(old: RunState, obs: o.FromScratch, cfg: Settings | None,
                  now: datetime) -> Transition:
    if not old.segments:
        return Transition(old)
    return _changed(old, now, scratch_after=old.segments[-1].index, checkpoint_seen=None)


def _cancelled_by_operator(old: RunState, obs: o.CancelledByOperator, cfg: Settings | None,
                           now: datetime) -> Transition:
    seg = old.current
    assert seg is not None
    seg = seg.evolve(cancel_reason=CancelReason.OPERATOR, cancelled_by_controller=obs.by,
                     cancelled_at=now,
                     # what status shows for the current segment (it said RUNNING)
                     job_state=JobState.CANCELLED)
    return _changed(old, now, segments=[*old.segments[:-1], seg], status=RunStatus.STOPPED,
                    stop_reason=f"controller stopped with {obs.by}: job {seg.job_id} cancelled")


HANDLERS: dict[type, Callable[[RunState, Any, Settings | None, datetime], Transition]] = {
    o.Planned: _planned, o.Submitted: _submitted, o.Withdrawn: _withdrawn, o.Polled: _polled,
    o.QueueNoted: _queue_noted, o.Cancelling: _cancelling, o.Ended: _ended,
    o.AllocationKnown: _allocation_known,
    o.JobEnding: _job_ending, o.RestartedInJob: _restarted, o.CheckpointSeen: _checkpoint_seen,
    o.Halted: _halted,
    o.BlacklistEdited: _edited, o.Started: _started, o.FromScratch: _from_scratch,
    o.CancelledByOperator: _cancelled_by_operator, o.SlowedDown: _slowed,
    o.SlowNodeFound: _slow_node, o.NodeDrained: _drained,
}


def advance(ledger: RunState, observation: o.Observation, config: Settings | None,
            now: datetime) -> Transition:
    """The ledger after `observation`, and what to do about it. Pure: no I/O, no clock, no mutation.
    `config` (the run's settings) is needed to judge an ended segment; the commands that edit a
    ledger without a config (a run directory's blacklist) pass None."""
    return HANDLERS[type(observation)](ledger, observation, config, now)
