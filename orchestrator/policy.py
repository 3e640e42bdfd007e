"""Pure: (run state, verdict, now) -> Decision, by DECISIONS.md (docs/CAUSES.md): a node's fault
excludes it at the first occurrence on strong evidence and counts a strike on weak evidence; the
job's own fault, which repeats, stops with what to change; the shared environment's passing fault
waits; budgets and circuit breakers on top."""

from __future__ import annotations

import re
from datetime import datetime

from orchestrator import budget, numerics
from orchestrator.model import Action, Cause, Decision, JobState, Owner, Role, Verdict
from orchestrator.settings import Goal, Policy
from orchestrator.state import RunState, SegmentRecord

_progressed = budget.progressed
no_progress_streak = budget.no_progress_streak


LOAD_FAILURES = frozenset({Cause.USER_BUG, Cause.UNKNOWN, Cause.SEGFAULT, Cause.BUS_ERROR})
LOAD_TEXT = re.compile(r"PytorchStreamReader|unpickl|zip archive|checkpoint|safetensors|"
                       r"load_state_dict|EOFError|corrupt|truncated|\.pt\b|\.bin\b|shard",
                       re.IGNORECASE)
ADVICE: dict[str, str] = {  # what to change, for the job's own faults (by cause, or by rule)
    Cause.USER_BUG: "fix the code, data or config",
    Cause.USER_OOM: "the model does not fit: lower the batch size or sequence length, shard more, "
                    "or checkpoint activations",
    Cause.HOST_OOM: "host memory: ask for more (--mem) or use less (fewer DataLoader workers, load "
                    "the checkpoint sharded or on fewer ranks at once)",
    Cause.FILESYSTEM: "free space or raise the quota where the job writes",
    Cause.SEGFAULT: "the same crash on every node: a build, library or code problem",
    Cause.BUS_ERROR: "the same bus error on every node: usually /dev/shm too small for the "
                     "DataLoader workers (fewer workers, or a larger shared-memory size)",
    Cause.LOSS_ANOMALY: "no checkpoint before the onset to roll back to: lower the learning rate, "
                        "skip the batches or fix the data",
    "supervisor_no_restart": "read why it gave up (its log), fix it, then `orchestrator resume`",
}
CLEAN_ENDS = frozenset({JobState.TIMEOUT, JobState.COMPLETED, JobState.PREEMPTED})
NOT_REPEATS = frozenset({Cause.PREEMPTED, Cause.TIMELIMIT, Cause.CANCELLED, Cause.SUCCESS})


def _repeats_elsewhere(segments: list[SegmentRecord], verdict: Verdict) -> SegmentRecord | None:
    """The previous segment ended with the same failure at the same iteration on a different node
    set; two that failed before any progress from the same start, with nobody named either time,
    failed at the same step too. A scheduler's end or a cancel is no failure that repeats."""
    if len(segments) < 2 or verdict.cause in NOT_REPEATS:
        return None
    cur, prev = segments[-1], segments[-2]
    nobody = not verdict.culprit_nodes and not prev.culprit_nodes

    def reached(s: SegmentRecord) -> int | None:
        return s.end_iteration if s.end_iteration is not None or not nobody else s.start_iteration

    same = (
        prev.cause == verdict.cause
        and reached(prev) is not None
        and reached(prev) == reached(cur)
        and set(prev.nodes) != set(cur.nodes)
    )
    return prev if same else None


def lost_progress(state: RunState, checkpoint_dir: str = "") -> str:
    """Why the run is losing its progress for want of a checkpoint (stop the second time), or ''.

    The current segment started where an earlier one had started (from scratch, or from the same
    checkpoint) although that one trained past it and ended cleanly (exit 0, time limit, preemption,
    where a training saves), and it trained again: the progress of both is lost, and the next one
    would lose its own."""
    segs = state.segments
    if len(segs) < 2 or not _progressed(segs[-1]):
        return ""
    cur = segs[-1]
    for prev in reversed(segs[:-1]):
        if prev.index <= state.scratch_after:
            break  # before `run --from-scratch`: that progress was given up on purpose
        if prev.start_iteration != cur.start_iteration or prev.resumed_from != cur.resumed_from:
            continue
        if _progressed(prev) and (prev.job_state in CLEAN_ENDS or prev.cause == Cause.SUCCESS):
            where = f"under {checkpoint_dir}" if checkpoint_dir else "where checkpoint.dir points"
            start = f"from {cur.resumed_from}" if cur.resumed_from else "from scratch"
            return (f"segments {prev.index} and {cur.index} both started {start} although segment "
                    f"{prev.index} reached iteration {prev.end_iteration}: no newer complete "
                    f"checkpoint {where} (check checkpoint.dir and checkpoint.preset against where "
                    "and how the training saves)")
    return ""


def _blame(state: RunState, verdict: Verdict, policy: Policy,
           now: datetime) -> tuple[tuple[str, ...], bool, bool]:
    """(nodes to blame, hard, whether the blame excludes at once) for this verdict."""
    owner = verdict.fault_owner
    blame = (tuple(verdict.culprit_nodes) if verdict.blame
             and owner in (Owner.NODE, Owner.NODE_SUSPECT) else ())
    hard = owner == Owner.NODE

    def strikes(node: str) -> int:
        e = state.blacklist.get(node)
        return e.strikes if e and e.expires > now else 0

    excludes = bool(blame) and (hard or any(strikes(n) + 1 >= policy.strike_threshold
                                            for n in blame))
    return blame, hard, excludes


def _done(state: RunState, verdict: Verdict, goal: Goal) -> Decision | None:
    best = state.best_iteration()
    if verdict.cause != Cause.SUCCESS or (goal.target_iteration is not None
                                          and best < goal.target_iteration):
        return None
    exits = [f"{e.node} {e.text}" for e in verdict.evidence if e.role == Role.EXIT]
    how = ("the training printed its end" + (f" ({'; '.join(exits[:4])})" if exits else "")
           if verdict.rule == "printed_its_end" else "the training command exited 0 on every node")
    return Decision(action=Action.DONE, reason=how
                    + (f" and iteration {best} >= {goal.target_iteration}" if goal.target_iteration
                       else ""), rule="goal_reached")


def _checkpoint_retry(seg: SegmentRecord, state: RunState, verdict: Verdict) -> Decision | None:
    """The segment died loading its checkpoint: retry once, then fall back to the previous one."""
    ckpt = seg.resumed_from
    if (not ckpt or verdict.cause not in LOAD_FAILURES or _progressed(seg)
        or seg.first_progress_at is not None):
        return None
    if verdict.fault_owner in (Owner.JOB, Owner.NODE, Owner.NODE_SUSPECT) and not LOAD_TEXT.search(
            verdict.summary + " ".join(e.text for e in verdict.evidence[:5])):
        # the job's own error or one node's fault, not the checkpoint's: stop or strike below
        return None
    if state.bad_checkpoints.get(ckpt, 0) + 1 >= 2:
        return Decision(action=Action.RESUBMIT, checkpoint_failed=ckpt, rule="checkpoint_fallback",
                        reason=f"{ckpt} failed to load twice ({verdict.cause.value}): falling back "
                        "to the previous complete checkpoint")
    return Decision(action=Action.RESUBMIT, checkpoint_failed=ckpt, rule="checkpoint_retry",
                    reason=f"the segment died before its first iteration after loading {ckpt} "
                    f"({verdict.cause.value}): retrying once before falling back to an older "
                    "checkpoint")


def _job_stop(state: RunState, verdict: Verdict, policy: Policy) -> Decision | None:
    """The job's own fault, which repeats: stop, blame nobody, say what to change."""
    seg = state.segments[-1]
    prev = _repeats_elsewhere(state.segments, verdict)
    if prev is not None and verdict.fault_owner != Owner.NODE:
        return Decision(action=Action.STOP_AND_ALERT, rule="repeats_on_other_nodes",
                        reason=f"{verdict.cause.value} at iteration {seg.end_iteration} in "
                        f"segments {prev.index} and {seg.index} on different nodes: code, data or "
                        "numerics, not a node")
    if verdict.fault_owner != Owner.JOB or not policy.stop_on_user_bug:
        return None
    advice = ADVICE.get(verdict.rule) or ADVICE.get(verdict.cause, "fix the job")
    return Decision(action=Action.STOP_AND_ALERT, rule=verdict.rule or "job_fault",
                    reason=f"{verdict.cause.value}: {verdict.summary[:200]}; it will happen again: "
                           f"{advice}"[:400])


def _rollback(state: RunState, verdict: Verdict, policy: Policy,
              blame: tuple[tuple[str, ...], bool] = ((), False)) -> Decision | None:
    """The loss went NaN or spiked (numerics.py, losses.py): resume from a checkpoint written
    before the onset, at most `policy.nan_rollbacks` times for the same onset, then stop with the
    history. A run with no checkpoint yet has nothing to roll back to: the job's fault."""
    seg, bad = state.segments[-1], numerics.anomaly(verdict)
    at = bad.onset if bad is not None and bad.onset is not None else numerics.onset(
        verdict.evidence, seg.end_iteration)
    saved = state.checkpoint_seen or any(s.resumed_from for s in state.segments)
    if not (bad or numerics.not_finite(verdict)) or policy.nan_rollbacks == 0 or at is None \
            or not saved:
        return None
    what = "spiked" if bad is not None and bad.kind == "spike" else "went NaN"
    earlier = numerics.pending([(s.index, s.rollback_below, s.end_iteration)
                                for s in state.segments[:-1] if s.index > state.scratch_after])
    if len(earlier) >= policy.nan_rollbacks:
        history = ", ".join(f"{below} (segment {index})" for index, below in earlier)
        return Decision(action=Action.STOP_AND_ALERT, rule="loss_not_finite_again",
                        reason=f"the loss {what} again at iteration {at} after "
                               f"{len(earlier)} rollback(s) (before: {history}): the data or the "
                               "numerics, not bad luck: lower the learning rate, skip the batches "
                               "or fix the data, then 'orchestrator run --resume'")
    nodes, excludes = blame  # its ranks alone went bad: a strike on the node (excluded at two)
    return Decision(action=Action.RESUBMIT_EXCLUDE if excludes else Action.RESUBMIT,
                    rule="loss_rollback", rollback_below=at, blame_nodes=nodes,
                    reason=f"the loss {what} at iteration {at}: resume from a checkpoint "
                           f"written before it (rollback {len(earlier) + 1} of "
                           f"{policy.nan_rollbacks})"
                           + (f"; {','.join(nodes)} alone: a strike" if nodes else ""))


def _shared_wait(state: RunState, verdict: Verdict, policy: Policy) -> Decision | None:
    if verdict.fault_owner != Owner.SHARED:
        return None
    segs = state.segments
    prev = segs[-2] if len(segs) >= 2 else None
    if verdict.cause == Cause.FILESYSTEM and prev is not None and prev.cause == Cause.FILESYSTEM \
            and prev.action == Action.WAIT_AND_RESUBMIT and not _progressed(segs[-1]):
        return Decision(action=Action.STOP_AND_ALERT, rule="filesystem_again_after_wait",
                        reason="the same filesystem error again after the wait: the job's (its "
                        "paths, its quota, its I/O), not a passing outage: "
                        f"{verdict.summary[:200]}")
    what = "the job was requeued: wait for it" if verdict.cause == Cause.PREEMPTED else \
        "shared filesystem trouble: wait, then resubmit"
    return Decision(action=Action.WAIT_AND_RESUBMIT, reason=what,
                    wait_s=policy.wait_before_resubmit_s, rule=verdict.rule or "shared_fault")


def _stop(blame: tuple[str, ...], hard: bool, rule: str, reason: str) -> Decision:
    return Decision(action=Action.STOP_AND_ALERT, blame_nodes=blame, hard=hard, rule=rule,
                    reason=reason)


def _breakers(state: RunState, verdict: Verdict, policy: Policy,
              blame_hard: tuple[tuple[str, ...], bool]) -> Decision | None:
    """The segment budgets: the user's, and infrastructure failures'. A stop for a spent budget
    still blames the segment's culprit."""
    blame, hard = blame_hard
    infra = budget.infra_verdict(verdict)
    user, infra_n = budget.spent(state.segments, infra)
    if user >= policy.max_segments and not infra:
        return _stop(blame, hard, "max_segments", f"max_segments={policy.max_segments} reached "
                     f"({user} segments ended by the job or nobody; {infra_n} by nodes or the "
                     "environment do not count)")
    if infra and infra_n >= policy.max_infra_failures:
        return _stop(blame, hard, "max_infra_failures", f"max_infra_failures="
                     f"{policy.max_infra_failures} reached: {infra_n} segments ended by nodes or "
                     "the environment (hardware, network, filesystem, preemption): ask the admins")
    return None


def _no_progress(state: RunState, verdict: Verdict, policy: Policy, goal: Goal,
                 blame_hard: tuple[tuple[str, ...], bool], clean_exit: bool) -> Decision | None:
    """No progress across max_no_progress_segments (infrastructure failures skipped)."""
    blame, hard = blame_hard
    streak = budget.no_progress_streak([s for s in state.segments if s.index > state.scratch_after],
                                       budget.infra_verdict(verdict))
    if streak < policy.max_no_progress_segments:
        return None
    return _stop(blame, hard, "no_progress", (
        f"the training exited 0 on every node at iteration {state.best_iteration()}, short "
        f"of the goal {goal.target_iteration}, {streak} segments in a row without training: it "
        "takes itself for done (its own iteration count or stop condition is below the goal)"
        if clean_exit else f"no progress across {streak} consecutive segments (stuck at "
        f"iteration {state.best_iteration()}): a bug or a bad checkpoint"))


def _overridden(verdict: Verdict, how: str, blame: tuple[str, ...], hard: bool, excludes: bool,
                policy: Policy) -> Decision:
    """policy.on_cause: the action the config names for this cause."""
    why = f"policy.on_cause: {verdict.cause.value} -> {how}; {verdict.summary}"[:300]
    if how == "stop":
        return _stop(blame, hard, "on_cause", why)
    if how == "wait":
        return Decision(action=Action.WAIT_AND_RESUBMIT, reason=why, blame_nodes=blame, hard=hard,
                        wait_s=policy.wait_before_resubmit_s, rule="on_cause")
    return Decision(action=Action.RESUBMIT_EXCLUDE if excludes else Action.RESUBMIT, reason=why,
                    blame_nodes=blame, hard=hard, rule="on_cause")


def decide(state: RunState, verdict: Verdict, policy: Policy, goal: Goal, now: datetime,
           checkpoint_dir: str = "") -> Decision:
    """Decide what to do after the current (last) segment ended with `verdict`: the goal, the
    config's override for the cause, the budgets (budget.py: a node's or the environment's failure
    does not spend the user's), lost checkpoints, a checkpoint that fails to load, the job's own
    fault, the shared environment's, a node's."""
    done = _done(state, verdict, goal)
    if done is not None:
        return done
    how = budget.override(policy.on_cause, verdict.cause)
    # exit 0 on every node short of the goal: nothing failed to load
    clean_exit = verdict.cause == Cause.SUCCESS
    if clean_exit:
        verdict = verdict.model_copy(update={"cause": Cause.UNKNOWN, "owner": Owner.NOBODY})
    blame, hard, excludes = _blame(state, verdict, policy, now)
    if how == "stop":
        return _overridden(verdict, how, blame, hard, excludes, policy)
    if (brake := _breakers(state, verdict, policy, (blame, hard))) is not None:
        return brake
    lost = lost_progress(state, checkpoint_dir)
    if lost:
        return _stop(blame, hard, "no_checkpoint", lost)
    retry = None if clean_exit else _checkpoint_retry(state.segments[-1], state, verdict)
    if retry is not None:
        return retry
    if not how and (back := _rollback(state, verdict, policy, (blame, excludes))) is not None:
        return back
    if not how and (stop := _job_stop(state, verdict, policy)) is not None:
        return stop
    if (still := _no_progress(state, verdict, policy, goal, (blame, hard), clean_exit)) is not None:
        return still
    if how:
        return _overridden(verdict, how, blame, hard, excludes, policy)
    return _shared_wait(state, verdict, policy) or _node_or_resubmit(verdict, blame, hard, excludes)


def _node_or_resubmit(verdict: Verdict, blame: tuple[str, ...], hard: bool,
                      excludes: bool) -> Decision:
    if blame:
        what = "exclude" if hard else "strike against"
        return Decision(action=Action.RESUBMIT_EXCLUDE if excludes else Action.RESUBMIT,
                        reason=f"{verdict.cause.value}: {what} {','.join(blame)}",
                        blame_nodes=blame, hard=hard, rule="node_fault" if hard else "node_strike")
    return Decision(action=Action.RESUBMIT, rule="resubmit",
                    reason=f"{verdict.cause.value}: resubmit; {verdict.summary}"[:300])
