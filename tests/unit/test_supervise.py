"""The pure watchdog: when to ask for stack dumps and when to cancel (no clock, no I/O)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from orchestrator.contract import PREFLIGHT_EXIT
from orchestrator.loop.supervise import DUMP_WAIT_S, Seen, supervise
from orchestrator.settings import Watch

T0 = datetime(2026, 1, 1, tzinfo=UTC)
W = Watch(poll_interval_s=1, stall_timeout_s=120, startup_timeout_s=300, cascade_grace_s=5)
NODES = frozenset({"node1", "node2", "node3"})


def at(s: float) -> datetime:
    return T0 + timedelta(seconds=s)


def test_peers_failed_first_ask_the_running_node_for_dumps_then_cancel_when_it_answers() -> None:
    """seed-001 when the NCCL timeout fires first: node1 and node3 exit with the watchdog's error, node2
    (frozen) is still 'running'. The controller asks node2 for a dump before cancelling."""
    failed = {"node1": at(0), "node3": at(0)}
    base = Seen(failed=failed, exit_codes={"node1": 1, "node3": 1}, running_since=at(-100), nodes=NODES)
    assert supervise(base, at(2), W).cancel == ""  # within the cascade grace
    first = supervise(base, at(6), W)
    assert first.request_dumps and not first.cancel and "node2" in first.note
    asked = Seen(**{**base.__dict__, "dumps_requested_at": at(6)})
    assert supervise(asked, at(10), W).cancel == ""  # waiting for node2's dump
    answered = Seen(**{**asked.__dict__, "dumps_in": frozenset({"node2"})})
    assert supervise(answered, at(11), W).cancel.startswith("training failed on node1,node3")


def test_a_node_that_never_answers_is_cancelled_after_the_bound() -> None:
    failed = {"node1": at(0), "node3": at(0)}
    seen = Seen(failed=failed, exit_codes={"node1": 1, "node3": 1}, running_since=at(-100), nodes=NODES,
                dumps_requested_at=at(6))
    assert supervise(seen, at(6 + DUMP_WAIT_S - 1), W).cancel == ""
    assert supervise(seen, at(6 + DUMP_WAIT_S), W).cancel


def test_everyone_failed_cancels_without_waiting() -> None:
    failed = {n: at(0) for n in NODES}
    s = supervise(Seen(failed=failed, exit_codes={n: 1 for n in NODES}, nodes=NODES), at(6), W)
    assert s.cancel and not s.request_dumps


def test_preflight_failure_cancels_at_once() -> None:
    s = supervise(Seen(failed={"node2": at(0)}, exit_codes={"node2": PREFLIGHT_EXIT}, nodes=NODES), at(0), W)
    assert s.cancel.startswith("preflight failed on node2")


def test_stall_asks_for_dumps_before_the_limit_and_cancels_at_it() -> None:
    seen = Seen(last_progress=at(0), running_since=at(-50), nodes=NODES)
    assert supervise(seen, at(80), W) == supervise(seen, at(1), W)  # quiet, nothing to do yet
    early = supervise(seen, at(95), W)
    assert early.request_dumps and not early.cancel
    asked = Seen(**{**seen.__dict__, "dumps_requested_at": at(95)})
    assert not supervise(asked, at(100), W).request_dumps  # asked once
    assert supervise(asked, at(120), W).cancel.startswith("stall: no progress for 120s")
    assert supervise(asked, at(50), W).clear_dumps  # progress came back before the limit


def test_startup_uses_the_startup_limit() -> None:
    seen = Seen(running_since=at(0), nodes=NODES, dumps_requested_at=at(280))
    assert supervise(seen, at(299), W).cancel == ""
    assert "limit 300s" in supervise(seen, at(300), W).cancel


def test_output_without_recognised_progress_is_liveness() -> None:
    """A framework whose progress lines the pattern does not know: flowing output is never a hang."""
    seen = Seen(running_since=at(0), last_output=at(1000), nodes=NODES)
    assert supervise(seen, at(1100), W) == supervise(Seen(running_since=at(0), nodes=NODES), at(10), W)
    quiet = Seen(running_since=at(0), last_output=at(1000), nodes=NODES, dumps_requested_at=at(1280))
    assert supervise(quiet, at(1300), W).cancel.startswith("stall: no progress for 300s")  # the output stopped


def test_the_progress_summary_line() -> None:
    from orchestrator.loop.notes import summary
    from orchestrator.state import SegmentRecord

    seg = SegmentRecord(index=2, job_name="s", start_iteration=100, end_iteration=400, first_progress_at=at(0),
                        last_progress_at=at(3600))
    assert summary(seg, 1000, at(3600), True) == "iteration 400/1000, 300 it/h, ETA 2.0 h"
    assert summary(seg, 1000, at(3720), True).endswith("last progress 120s ago")
    fresh = SegmentRecord(index=1, job_name="s")
    assert "no line was recognised as progress" in summary(fresh, 1000, at(10), True)
    assert summary(fresh, None, at(10), False) == "no progress yet"


def test_status_says_when_output_flows_without_a_progress_line() -> None:
    from orchestrator.loop.notes import NO_PROGRESS, Notes
    from orchestrator.model import JobRef, JobState, JobStatus
    from orchestrator.state import RunState, SegmentRecord

    seg = SegmentRecord(index=1, job_name="s", job_id="7", submitted_at=at(0))
    state = RunState(run="r", created_at=at(0), updated_at=at(0), segments=[seg])
    notes, ref = Notes(lambda r: ""), JobRef(job_id="7", submitted_at=at(0), backend="fake")
    running = JobStatus(state=JobState.RUNNING, nodes=("node1",))

    def update(now: datetime) -> bool:
        """`notes.update` with its note written into the segment, as the controller does: True if it changed."""
        nonlocal seg, state
        note = notes.update(state, seg, running, ref, now, True)
        if note is None or note == seg.queue_note:
            return False
        seg = seg.evolve(queue_note=note)
        state = state.evolve(segments=[seg])
        return True

    assert not update(at(1))
    assert update(at(400)) and seg.queue_note == NO_PROGRESS
    seg = seg.evolve(end_iteration=5, first_progress_at=at(401))
    state = state.evolve(segments=[seg])
    assert update(at(402)) and seg.queue_note == ""


@pytest.mark.parametrize(("in_job_of", "reattached", "progressed", "said"), [
    (None, False, False, "job=7 running on node1 after 30s in the queue"),
    (None, False, True, "job=7 running on node1 after 30s in the queue"),  # progress seen before RUNNING
    (1, False, False, "job=7 segment 2 restarted inside the job on node1 (no queue)"),
    (1, True, False, "job=7 segment 2 still running on node1 (re-attached)"),  # before its first progress
    (None, True, False, "job=7 segment 2 still running on node1 (re-attached)"),
    (None, True, True, "job=7 segment 2 still running on node1 (re-attached)"),
])
def test_the_start_line_tells_a_new_job_a_restart_in_the_job_and_a_re_attach_apart(
        in_job_of: int | None, reattached: bool, progressed: bool, said: str) -> None:
    from loguru import logger

    from orchestrator.loop.notes import Notes
    from orchestrator.model import JobRef, JobState, JobStatus
    from orchestrator.placement import InAllocation, OwnJob
    from orchestrator.state import RunState, SegmentRecord

    seg = SegmentRecord(index=2, job_name="s", job_id="7", submitted_at=at(0),
                        placement=InAllocation(submitted_by=in_job_of) if in_job_of is not None else OwnJob(),
                        first_progress_at=at(10) if progressed else None)
    state = RunState(run="r", created_at=at(0), updated_at=at(0), segments=[seg])
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m).rstrip()), format="{message}")
    notes = Notes(lambda r: "")
    notes.reset(reattached)
    try:
        notes.update(state, seg, JobStatus(state=JobState.RUNNING, nodes=("node1",)),
                     JobRef(job_id="7", submitted_at=at(0), backend="fake"), at(30), True)
    finally:
        logger.remove(sink)
    assert lines == [said]
