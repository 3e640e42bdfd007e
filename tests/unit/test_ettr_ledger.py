from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from orchestrator.blacklist import Blacklist
from orchestrator.loop.progress import changes
from orchestrator.model import Action, Cause, JobState, JobStatus, RunStatus
from orchestrator.state import RunState, SegmentRecord
from orchestrator.views.ettr import human, run_metrics
from orchestrator.views.status import drain_commands, status_json, summary_table

T = datetime(2026, 1, 1, tzinfo=UTC)


def at(s: float) -> datetime:
    return T + timedelta(seconds=s)


def test_productive_time_and_lost_time_per_cause() -> None:
    # segment 1: queued 10 s, trains iterations 0->40 from t=20 to t=60 (1 it/s), dies; the checkpoint was at 30
    s1 = SegmentRecord(index=1, job_name="r.seg1", job_id="1", submitted_at=at(0), start_iteration=0,
                       end_iteration=40, first_progress_at=at(20), last_progress_at=at(60), ended_at=at(70),
                       cause=Cause.GPU_ECC, action=Action.RESUBMIT_EXCLUDE, reason="gpu_ecc: exclude node3")
    # segment 2: resumes at 30, trains 30->100 from t=100 to t=170, done at t=175
    s2 = SegmentRecord(index=2, job_name="r.seg2", job_id="2", submitted_at=at(80), start_iteration=30,
                       end_iteration=100, first_progress_at=at(100), last_progress_at=at(170), ended_at=at(175),
                       cause=Cause.SUCCESS, action=Action.DONE)
    st = RunState(run="r", created_at=T, updated_at=T, segments=[s1, s2], status=RunStatus.DONE,
                  target_iteration=100)
    m = run_metrics(st, at(1000))
    assert m["wall_s"] == 175  # a finished run's wall time ends with its last segment
    assert m["productive_s"] == 30 + 70  # 30 kept iterations of segment 1, all 70 of segment 2
    assert m["ettr"] == round(100 / 175, 4)
    assert m["lost_s_by_cause"] == {"gpu_ecc": 50.0, "startup": 25.0}
    assert m["rate_per_h"] == 3600.0 and m["eta_s"] is None


def test_eta_while_running() -> None:
    s1 = SegmentRecord(index=1, job_name="r.seg1", job_id="1", submitted_at=at(0), start_iteration=0,
                       end_iteration=50, first_progress_at=at(10), last_progress_at=at(60))
    st = RunState(run="r", created_at=T, updated_at=T, segments=[s1], target_iteration=150)
    m = run_metrics(st, at(60))
    assert m["eta_s"] == 100 and m["lost_s_by_cause"] == {"in progress": 10.0}
    # a stopped run (a bug, a breaker) waits for a human: no ETA (the re-probes of issue 37)
    stopped = RunState(run="r", created_at=T, updated_at=T, segments=[s1], target_iteration=150,
                       status=RunStatus.STOPPED)
    assert run_metrics(stopped, at(60))["eta_s"] is None
    assert status_json(st, at(60))["current"]["job_state"] == "SUBMITTED"  # no poll yet
    from orchestrator.views.status import quiet_note

    assert quiet_note(s1, at(60)) == "" and quiet_note(s1, at(119)) == ""
    assert quiet_note(s1, at(185)) == " (last progress 02m05s ago)"
    assert "50 / 150 (last progress 02m05s ago)" in str(summary_table(st, at(185)).columns[1]._cells)


@pytest.mark.parametrize("live", [JobState.PENDING, JobState.RUNNING])
def test_a_polled_segment_shows_the_scheduler_state(live: JobState) -> None:
    s1 = SegmentRecord(index=1, job_name="r.seg1", job_id="1", submitted_at=at(0))
    st = RunState(run="r", created_at=T, updated_at=T, segments=[s1])
    assert (c := changes(s1, JobStatus(state=live), [], [], None, at(5)))  # changed: worth saving
    s1 = s1.evolve(**c)
    st = st.evolve(segments=[s1])
    assert status_json(st, at(5))["current"]["job_state"] == live.value
    assert not changes(s1, JobStatus(state=live), [], [], None, at(10))  # nothing new
    assert live.value in str(summary_table(st, at(10)).columns[1]._cells)
    assert not changes(s1, JobStatus(state=JobState.UNKNOWN), [], [], None, at(15))  # not listed: kept
    assert status_json(st, at(15))["current"]["job_state"] == live.value


def test_drain_lines_quote_safely() -> None:
    bl = Blacklist().record("gpu-a7", Cause.GPU_ECC, '/x/gpu-a7.log:3: say "hi"\nnext', "9", T, hard=True,
                            expiry=timedelta(hours=1))
    st = RunState(run="r", created_at=T, updated_at=T, blacklist=bl)
    [line] = drain_commands(st, T)
    assert line.startswith('scontrol update NodeName=gpu-a7 State=DRAIN Reason="[node_problem] orchestrator r: '
                           'gpu_ecc job 9: ')  # whose problem it is, first (issue 23)
    assert line.count('"') == 2 and "\n" not in line
    assert drain_commands(st, T + timedelta(hours=2)) == []  # expired entries are not drained
    soft = Blacklist().record("gpu-a8", Cause.SEGFAULT, "x", "9", T, hard=False, expiry=timedelta(hours=1))
    [line] = drain_commands(RunState(run="r", created_at=T, updated_at=T, blacklist=soft), T)
    assert 'Reason="[node_suspect] orchestrator r: segfault' in line


def test_human() -> None:
    assert (human(5), human(65), human(3 * 3600 + 61), human(None)) == ("5s", "01m05s", "3h01m01s", "-")
