"""Pure: (run state, verdict, now) -> Decision. Budgets, strikes and circuit breakers live here."""

from __future__ import annotations

from datetime import datetime

from orchestrator.model import HARDWARE_CAUSES, Action, Cause, Decision, Verdict
from orchestrator.settings import Goal, Policy
from orchestrator.state import RunState, SegmentRecord


def _progressed(seg: SegmentRecord) -> bool:
    return seg.end_iteration is not None and seg.end_iteration > seg.start_iteration


LOAD_FAILURES = frozenset({Cause.USER_BUG, Cause.UNKNOWN, Cause.SEGFAULT, Cause.BUS_ERROR})
CODE_CAUSES = frozenset({Cause.USER_BUG, Cause.USER_OOM})  # the code's, never a node's


def no_progress_streak(segments: list[SegmentRecord]) -> int:
    n = 0
    for seg in reversed(segments):
        if _progressed(seg):
            break
        n += 1
    return n


def _repeats_elsewhere(segments: list[SegmentRecord], verdict: Verdict) -> SegmentRecord | None:
    """The previous segment ended with the same cause at the same iteration on a different node set."""
    if len(segments) < 2:
        return None
    cur, prev = segments[-1], segments[-2]
    same = (
        prev.cause == verdict.cause
        and prev.end_iteration is not None
        and prev.end_iteration == cur.end_iteration
        and set(prev.nodes) != set(cur.nodes)
    )
    return prev if same else None


def _blame(state: RunState, verdict: Verdict, policy: Policy, now: datetime) -> tuple[tuple[str, ...], bool, bool]:
    """(nodes to blame, hard, whether the blame excludes at once) for this verdict."""
    blame = tuple(verdict.culprit_nodes) if verdict.blame and verdict.cause not in CODE_CAUSES else ()
    hard = verdict.cause in HARDWARE_CAUSES or verdict.cause == Cause.HANG

    def strikes(node: str) -> int:
        e = state.blacklist.get(node)
        return e.strikes if e and e.expires > now else 0

    excludes = bool(blame) and (hard or any(strikes(n) + 1 >= policy.strike_threshold for n in blame))
    return blame, hard, excludes


def _done(state: RunState, verdict: Verdict, goal: Goal) -> Decision | None:
    best = state.best_iteration()
    if verdict.cause != Cause.SUCCESS or (goal.target_iteration is not None and best < goal.target_iteration):
        return None
    return Decision(action=Action.DONE, reason="the training command exited 0 on every node"
                    + (f" and iteration {best} >= {goal.target_iteration}" if goal.target_iteration else ""))


def _checkpoint_retry(seg: SegmentRecord, state: RunState, verdict: Verdict) -> Decision | None:
    """The segment died loading its checkpoint: retry once, then fall back to the previous one."""
    ckpt = seg.resumed_from
    if not ckpt or verdict.cause not in LOAD_FAILURES or _progressed(seg) or seg.first_progress_at is not None:
        return None
    if state.bad_checkpoints.get(ckpt, 0) + 1 >= 2:
        return Decision(action=Action.RESUBMIT, checkpoint_failed=ckpt,
                        reason=f"{ckpt} failed to load twice ({verdict.cause.value}): falling back to the "
                        "previous complete checkpoint")
    return Decision(action=Action.RESUBMIT, checkpoint_failed=ckpt,
                    reason=f"the segment died before its first iteration after loading {ckpt} "
                    f"({verdict.cause.value}): retrying once before falling back to an older checkpoint")


def _bug_stop(state: RunState, verdict: Verdict, policy: Policy) -> str:
    """Why this ending is the code's (stop, blame nobody), or ''."""
    seg = state.segments[-1]
    if verdict.cause == Cause.USER_BUG and policy.stop_on_user_bug:
        return f"user_bug: {verdict.summary}"[:300]
    if verdict.cause == Cause.USER_OOM:
        return "user_oom: the model does not fit; change the config"
    prev = _repeats_elsewhere(state.segments, verdict)
    if prev is not None and verdict.cause not in HARDWARE_CAUSES:
        return (f"{verdict.cause.value} at iteration {seg.end_iteration} in segments {prev.index} and "
                f"{seg.index} on different nodes: code, data or numerics, not a node")
    return ""


def _budget_stop(state: RunState, policy: Policy) -> str:
    """Why the run's budget is spent (stop, but still blame the culprit), or ''."""
    streak = no_progress_streak(state.segments)
    if streak >= policy.max_no_progress_segments:
        return (f"no progress across {streak} consecutive segments (stuck at iteration {state.best_iteration()}): "
                "a bug or a bad checkpoint")
    return ""


def decide(state: RunState, verdict: Verdict, policy: Policy, goal: Goal, now: datetime) -> Decision:
    """Decide what to do after the current (last) segment ended with `verdict`.

    A stop for a spent budget (max_segments, no progress) still blames the segment's culprit, so a hardware
    fault in the last segment allowed is blacklisted like any other (issue 15, data loss 5).
    """
    done = _done(state, verdict, goal)
    if done is not None:
        return done
    if verdict.cause == Cause.SUCCESS:
        verdict = verdict.model_copy(update={"cause": Cause.UNKNOWN})
    blame, hard, excludes = _blame(state, verdict, policy, now)
    if len(state.segments) >= policy.max_segments:
        return Decision(action=Action.STOP_AND_ALERT, reason=f"max_segments={policy.max_segments} reached",
                        blame_nodes=blame, hard=hard)
    retry = _checkpoint_retry(state.segments[-1], state, verdict)
    if retry is not None:
        return retry
    why = _bug_stop(state, verdict, policy)
    if why:
        return Decision(action=Action.STOP_AND_ALERT, reason=why)
    why = _budget_stop(state, policy)
    if why:
        return Decision(action=Action.STOP_AND_ALERT, reason=why, blame_nodes=blame, hard=hard)
    if verdict.cause == Cause.FILESYSTEM:
        return Decision(action=Action.WAIT_AND_RESUBMIT, reason="shared filesystem trouble: wait, then resubmit",
                        wait_s=policy.wait_before_resubmit_s, blame_nodes=())
    if blame:
        what = "exclude" if hard else "strike against"
        return Decision(action=Action.RESUBMIT_EXCLUDE if excludes else Action.RESUBMIT,
                        reason=f"{verdict.cause.value}: {what} {','.join(blame)}", blame_nodes=blame, hard=hard)
    return Decision(action=Action.RESUBMIT, reason=f"{verdict.cause.value}: resubmit; {verdict.summary}"[:300])
