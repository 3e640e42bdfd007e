"""Issue 21, views: the dry run of a run with a segment still out, or of a finished or stopped run, says so
before the segment it shows (it used to describe a next segment as if nothing ran)."""

from __future__ import annotations

from datetime import UTC, datetime

from orchestrator.cli.dryrun import where_it_stands
from orchestrator.model import RunStatus
from orchestrator.state import RunState, SegmentRecord

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def state(**kw: object) -> RunState:
    return RunState(run="r", created_at=NOW, updated_at=NOW, **kw)


def test_a_segment_still_out_is_watched_not_followed() -> None:
    out = state(segments=[SegmentRecord(index=3, job_name="r.seg0003", job_id="4711")])
    assert "segment 3 (job 4711) has not ended" in where_it_stands(out)


def test_a_finished_or_stopped_run_says_so() -> None:
    ended = SegmentRecord(index=1, job_name="r.seg0001", job_id="1", ended_at=NOW)
    done = state(segments=[ended], status=RunStatus.DONE, stop_reason="iteration 60 >= 60")
    assert "the run is done (iteration 60 >= 60): run would submit nothing" in where_it_stands(done)
    stopped = state(segments=[ended], status=RunStatus.STOPPED, stop_reason="user_bug: KeyError")
    # issue 37: a stopped run stays stopped; only --resume goes on
    assert "stopped (user_bug: KeyError): run would submit nothing and exit 3" in where_it_stands(stopped)
    assert "stopped (user_bug: KeyError): run --resume resumes it" in where_it_stands(stopped, resume=True)
    assert where_it_stands(state(segments=[ended])) == "" and where_it_stands(state()) == ""


def test_a_finished_run_whose_goal_the_config_raised_is_resumed_as_run_would() -> None:
    """Issue 21 re-run (W7): the dry run said `run would submit nothing` while run resumed and submitted."""
    from orchestrator.loop.advance import advance
    from orchestrator.loop.observations import Started

    def resume(ledger: RunState, target: int | None) -> str:
        return advance(ledger, Started(target), None, NOW).note

    ended = SegmentRecord(index=2, job_name="r.seg0002", job_id="2", ended_at=NOW)
    done = state(segments=[ended], status=RunStatus.DONE, stop_reason="iteration 60 >= 60", target_iteration=60)
    said = where_it_stands(done, 100)
    assert "raised it to 100: run would resume it and submit this segment" in said
    assert "submit nothing" in where_it_stands(done, 60)
    assert resume(done, 100) and not resume(done, 60)  # as run decides


def test_a_goal_raised_to_an_iteration_the_run_already_passed_submits_nothing() -> None:
    """Issue 37, second re-probe (N1): a run done at goal 10 that reached iteration 30, its goal raised to 20, submitted
    a segment 30->30. It stays done, with the new goal, and the dry run says so."""
    from orchestrator.loop.advance import advance
    from orchestrator.loop.observations import Started

    ended = SegmentRecord(index=1, job_name="r.seg0001", job_id="1", ended_at=NOW, end_iteration=30)
    done = state(segments=[ended], status=RunStatus.DONE, stop_reason="iteration 30 >= 10", target_iteration=10)
    t = advance(done, Started(20), None, NOW)
    assert t.ledger.status == RunStatus.DONE and t.ledger.target_iteration == 20
    assert "already reached iteration 30: still done" in t.note
    assert "already reached iteration 30: run would submit nothing" in where_it_stands(done, 20)
    t = advance(done, Started(31), None, NOW)  # past what it reached: it runs again
    assert t.ledger.status == RunStatus.RUNNING and "the goal was raised" in t.note
