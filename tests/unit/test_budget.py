"""Issue 38: a retry budget that knows whose fault it was. A node's or the environment's failure does not spend
the user's max_segments nor the no-progress budget; max_infra_failures caps those; policy.on_cause overrides the
action for named causes (`any`: never run again)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from orchestrator.model import Action, Cause, Verdict
from orchestrator.policy import decide
from orchestrator.settings import ConfigError, Goal, Policy
from orchestrator.state import RunState, SegmentRecord

NOW = datetime(2026, 1, 1, tzinfo=UTC)
G = Goal(target_iteration=1000)


def seg(i: int, start: int, end: int, action: Action | None = None, cause: Cause | None = None,
        culprits: tuple[str, ...] = (), infra: bool = False) -> SegmentRecord:
    return SegmentRecord(index=i, job_name=f"t.seg{i}", start_iteration=start, end_iteration=end, action=action,
                         cause=cause, culprit_nodes=list(culprits), nodes=["n1", "n2", "n3"], infra=infra)


def ecc(i: int, start: int, end: int) -> SegmentRecord:
    return seg(i, start, end, Action.RESUBMIT_EXCLUDE, Cause.GPU_ECC, (f"n{i}",), infra=True)


def state(*segs: SegmentRecord) -> RunState:
    return RunState(run="t", created_at=NOW, updated_at=NOW, segments=list(segs))


def v(cause: Cause, culprits: tuple[str, ...] = (), blame: bool = False) -> Verdict:
    return Verdict(cause=cause, culprit_nodes=culprits, blame=blame, confidence=0.9)


def test_node_failures_do_not_spend_the_users_segments() -> None:
    p = Policy(max_segments=3, max_no_progress_segments=5)
    history = state(*[ecc(i, 10 * i, 10 * i + 5) for i in range(1, 6)], seg(6, 60, 65))
    d = decide(history, v(Cause.GPU_ECC, ("n9",), True), p, G, NOW)
    assert d.action == Action.RESUBMIT_EXCLUDE and d.blame_nodes == ("n9",)  # 6 segments, 1 of them the user's
    assert decide(history, v(Cause.NCCL_TIMEOUT), p, G, NOW).action == Action.RESUBMIT  # 2 of 3
    two = state(*history.segments, seg(7, 65, 70, Action.RESUBMIT, Cause.NCCL_TIMEOUT), seg(8, 70, 75))
    stop = decide(two, v(Cause.NCCL_TIMEOUT), p, G, NOW)
    assert stop.action == Action.STOP_AND_ALERT and stop.rule == "max_segments" and "do not count" in stop.reason


def test_endless_infrastructure_failures_stop_at_their_own_cap_and_the_culprit_is_still_blamed() -> None:
    p = Policy(max_segments=50, max_infra_failures=3)
    d = decide(state(ecc(1, 0, 5), ecc(2, 5, 9), seg(3, 9, 12)), v(Cause.GPU_LOST, ("n7",), True), p, G, NOW)
    assert d.action == Action.STOP_AND_ALERT and d.rule == "max_infra_failures" and d.blame_nodes == ("n7",)
    shared = seg(2, 5, 5, Action.WAIT_AND_RESUBMIT, Cause.FILESYSTEM, infra=True)
    assert decide(state(ecc(1, 0, 5), shared, seg(3, 5, 5)), v(Cause.PREEMPTED), p, G, NOW).rule == \
        "max_infra_failures"


def test_a_strike_on_weak_evidence_is_still_the_users_budget() -> None:
    """A one-node crash is weak evidence (a strike): when it repeats without progress, the no-progress breaker
    stops it, as the same crash at the same step is the job's."""
    p = Policy(max_no_progress_segments=2, strike_threshold=5)
    struck = seg(2, 1, 1, Action.RESUBMIT, Cause.SEGFAULT, ("n1",))
    d = decide(state(seg(1, 0, 1), struck, seg(3, 1, 1)), v(Cause.SEGFAULT, ("n1",), True), p, G, NOW)
    assert d.action == Action.STOP_AND_ALERT and d.rule == "no_progress"


def test_the_no_progress_streak_skips_segments_a_node_ended() -> None:
    p = Policy(max_no_progress_segments=2)
    stuck_on_nodes = state(seg(1, 0, 40), ecc(2, 40, 40), ecc(3, 40, 40), seg(4, 40, 40))
    assert decide(stuck_on_nodes, v(Cause.UNKNOWN), p, G, NOW).action == Action.RESUBMIT  # the user's 1st
    stuck = state(seg(1, 0, 40), seg(2, 40, 40, Action.RESUBMIT, Cause.UNKNOWN), seg(3, 40, 40))
    d = decide(stuck, v(Cause.UNKNOWN), p, G, NOW)
    assert d.action == Action.STOP_AND_ALERT and d.rule == "no_progress"


def test_on_cause_overrides_the_action_for_a_cause_or_for_any() -> None:
    one = state(seg(1, 0, 40))
    p = Policy(on_cause={"nccl_timeout": "stop", "user_bug": "resubmit", "filesystem": "stop"})
    d = decide(one, v(Cause.NCCL_TIMEOUT), p, G, NOW)
    assert d.action == Action.STOP_AND_ALERT and d.rule == "on_cause" and "nccl_timeout -> stop" in d.reason
    assert decide(one, v(Cause.USER_BUG), p, G, NOW).action == Action.RESUBMIT
    assert decide(one, v(Cause.FILESYSTEM), p, G, NOW).action == Action.STOP_AND_ALERT
    assert decide(one, v(Cause.GPU_ECC, ("n2",), True), p, G, NOW).action == Action.RESUBMIT_EXCLUDE  # not named
    never = Policy(on_cause={"any": "stop"})  # a job with side effects: never a second run
    d = decide(one, v(Cause.GPU_ECC, ("n2",), True), never, G, NOW)
    assert d.action == Action.STOP_AND_ALERT and d.blame_nodes == ("n2",)  # the bad node is still blacklisted
    assert decide(one, v(Cause.TIMELIMIT), never, G, NOW).action == Action.STOP_AND_ALERT
    done = state(seg(1, 0, 1000))
    assert decide(done, v(Cause.SUCCESS), never, G, NOW).action == Action.DONE  # success is never overridden


def test_on_cause_names_only_known_causes(tmp_path: object) -> None:
    from pathlib import Path

    from orchestrator.settings import load_settings, parse_overrides

    cfg = Path(str(tmp_path)) / "c.yaml"
    cfg.write_text("name: t\ncommand: [true]\nresources: {nodes: 1}\ncheckpoint: {dir: ck}\n"
                   "backend: {kind: local}\npolicy: {on_cause: {ncl_timeout: stop}}\n")
    with pytest.raises(ConfigError) as err:
        load_settings(cfg, parse_overrides([]))
    assert "policy.on_cause: unknown cause ncl_timeout: one of any," in str(err.value)
    assert "nccl_timeout" in str(err.value)
    cfg.write_text(cfg.read_text().replace("ncl_timeout: stop", "any: never"))
    with pytest.raises(ConfigError):
        load_settings(cfg, parse_overrides([]))


def test_a_job_that_dies_past_its_checkpoint_at_the_same_step_makes_no_progress() -> None:
    """Each segment resumes at 20 and dies at 25: five steps trained every time, but the run never gets past
    iteration 25; the no-progress breaker counts the segments that did not pass the furthest point reached."""
    from orchestrator.budget import no_progress_streak

    crash = [seg(i, 20, 25, Action.RESUBMIT, Cause.UNKNOWN) for i in range(2, 5)]
    assert no_progress_streak([seg(1, 0, 25), *crash]) == 3
    assert no_progress_streak([seg(1, 0, 25), *crash, seg(5, 20, 26)]) == 0  # past the frontier: progress
    stop = decide(state(seg(1, 0, 25), *crash), v(Cause.UNKNOWN), Policy(max_no_progress_segments=3), G, NOW)
    assert stop.action == Action.STOP_AND_ALERT and stop.rule == "no_progress"
