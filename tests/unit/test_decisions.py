"""The policy of DECISIONS.md as a table: whose fault (the verdict's owner) and the run's history decide."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from orchestrator.blacklist import Blacklist
from orchestrator.model import Action, Cause, JobState, Owner, Verdict
from orchestrator.policy import decide, lost_progress
from orchestrator.settings import Goal, Policy
from orchestrator.state import RunState, SegmentRecord

NOW = datetime(2026, 1, 1, tzinfo=UTC)
P = Policy(max_segments=10, max_no_progress_segments=3, strike_threshold=2)
G = Goal(target_iteration=1000)


def seg(i: int, start: int, end: int | None, **kw: object) -> SegmentRecord:
    return SegmentRecord(index=i, job_name=f"t.seg{i}", start_iteration=start, end_iteration=end,
                         nodes=["n1", "n2", "n3"], **kw)


def state(*segs: SegmentRecord, bl: Blacklist | None = None) -> RunState:
    return RunState(run="t", created_at=NOW, updated_at=NOW, segments=list(segs), blacklist=bl or Blacklist())


def v(cause: Cause, owner: Owner | None, culprits: tuple[str, ...] = (), rule: str = "r") -> Verdict:
    return Verdict(cause=cause, culprit_nodes=culprits, blame=bool(culprits), confidence=0.9, owner=owner,
                   rule=rule, summary=f"{cause.value} summary")


def test_strong_node_evidence_excludes_at_the_first_occurrence() -> None:
    d = decide(state(seg(1, 0, 40)), v(Cause.NETWORK, Owner.NODE, ("n2",), "hca_error"), P, G, NOW)
    assert d.action == Action.RESUBMIT_EXCLUDE and d.blame_nodes == ("n2",) and d.hard and d.rule == "node_fault"


def test_weak_node_evidence_strikes_then_excludes() -> None:
    verdict = v(Cause.SEGFAULT, Owner.NODE_SUSPECT, ("n2",), "one_off_crash")
    first = decide(state(seg(1, 0, 40)), verdict, P, G, NOW)
    assert first.action == Action.RESUBMIT and first.blame_nodes == ("n2",) and not first.hard
    bl = Blacklist().record("n2", Cause.SEGFAULT, "x", "1", NOW, hard=False, expiry=timedelta(hours=72))
    second = decide(state(seg(1, 0, 40), seg(2, 40, 80), bl=bl), verdict, P, G, NOW)
    assert second.action == Action.RESUBMIT_EXCLUDE and second.blame_nodes == ("n2",)


def test_the_jobs_own_fault_stops_blames_nobody_and_says_what_to_change() -> None:
    d = decide(state(seg(1, 0, 40)), v(Cause.HOST_OOM, Owner.JOB, (), "killed_everywhere"), P, G, NOW)
    assert d.action == Action.STOP_AND_ALERT and d.blame_nodes == () and "--mem" in d.reason
    assert d.rule == "killed_everywhere"


def test_a_node_owned_crash_is_never_stopped_on() -> None:
    d = decide(state(seg(1, 0, 0)), v(Cause.NODE_FAIL, Owner.NODE, ("n3",), "node_reports_hardware"), P, G, NOW)
    assert d.action == Action.RESUBMIT_EXCLUDE


def test_shared_fault_waits_and_the_same_error_after_the_wait_stops() -> None:
    fs = v(Cause.FILESYSTEM, Owner.SHARED, (), "filesystem_outage")
    first = decide(state(seg(1, 0, 40)), fs, P, G, NOW)
    assert first.action == Action.WAIT_AND_RESUBMIT and first.wait_s == P.wait_before_resubmit_s
    waited = seg(1, 0, 40, cause=Cause.FILESYSTEM, action=Action.WAIT_AND_RESUBMIT)
    again = decide(state(waited, seg(2, 40, 40)), fs, P, G, NOW)
    assert again.action == Action.STOP_AND_ALERT and again.rule == "filesystem_again_after_wait"
    progressed = decide(state(waited, seg(2, 40, 90)), fs, P, G, NOW)  # it trained in between: a new outage
    assert progressed.action == Action.WAIT_AND_RESUBMIT


def test_a_requeue_waits_for_the_same_job() -> None:
    d = decide(state(seg(1, 0, 40)), v(Cause.PREEMPTED, Owner.SHARED, (), "requeued"), P, G, NOW)
    assert d.action == Action.WAIT_AND_RESUBMIT and "requeued" in d.reason


def test_exit_0_before_the_goal_without_a_checkpoint_stops_the_second_time() -> None:
    """Issue 20, across segments: at most one wasted segment, and the reason names where it looked."""
    one = seg(1, 0, 30, job_state=JobState.COMPLETED, cause=Cause.SUCCESS)
    ok = v(Cause.SUCCESS, Owner.FINISHED)
    assert decide(state(one), ok, P, G, NOW).action == Action.RESUBMIT
    d = decide(state(one, seg(2, 0, 30)), ok, P, G, NOW, checkpoint_dir="/ck")
    assert d.action == Action.STOP_AND_ALERT and d.rule == "no_checkpoint" and "/ck" in d.reason
    assert "from scratch" in d.reason and "iteration 30" in d.reason


def test_a_failure_before_the_next_save_is_not_lost_progress() -> None:
    crashed = seg(1, 100, 110, job_state=JobState.FAILED, resumed_from="iter_100")
    again = seg(2, 100, 105, resumed_from="iter_100")
    assert lost_progress(state(crashed, again)) == ""
    timed_out = seg(1, 100, 900, job_state=JobState.TIMEOUT, resumed_from="iter_100")  # a clean end saved nothing
    assert "iter_100" in lost_progress(state(timed_out, seg(2, 100, 300, resumed_from="iter_100")))


def test_a_generic_error_after_loading_a_checkpoint_is_the_jobs_unless_it_names_the_load() -> None:
    resumed = seg(1, 100, 100, resumed_from="iter_100")
    bug = v(Cause.USER_BUG, Owner.JOB, (), "program_error")
    assert decide(state(resumed), bug, P, G, NOW).action == Action.STOP_AND_ALERT
    load = bug.model_copy(update={"summary": "RuntimeError: PytorchStreamReader failed reading zip archive"})
    d = decide(state(resumed), load, P, G, NOW)
    assert d.action == Action.RESUBMIT and d.checkpoint_failed == "iter_100"
