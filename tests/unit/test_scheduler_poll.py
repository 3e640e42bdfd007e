"""The scheduler is asked less often than the node files are read (sacct is slurmdbd's cost, shared by the
cluster), yet a job's end is seen as soon as the files tell of it, and at once after a cancel."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from orchestrator.backends.base import SchedulerUnavailable
from orchestrator.loop.outage import Outage, SchedulerPoll
from orchestrator.model import Cause, JobRef, JobState, JobStatus, RunStatus
from tests.fakes import Fault
from tests.unit.test_controller_fake import make

T0 = datetime(2026, 12, 2, tzinfo=UTC)
REF = JobRef(job_id="7", submitted_at=T0, backend="stub")


class Stub:
    """A costly backend that answers with `state` (or raises while `down`) and counts the questions."""
    name = "stub"
    costly_poll = True

    def __init__(self) -> None:
        self.asked, self.state, self.down = 0, JobState.RUNNING, False

    def poll(self, refs: list[JobRef]) -> dict[str, JobStatus]:
        self.asked += 1
        if self.down:
            raise SchedulerUnavailable("slurm_load_jobs error: Unable to contact slurm controller")
        return {r.job_id: JobStatus(state=self.state) for r in refs}


def at(s: float) -> datetime:
    return T0 + timedelta(seconds=s)


def test_asks_every_period_and_at_once_when_the_files_change() -> None:
    stub = Stub()
    poll = SchedulerPoll(stub, Outage("scheduler unreachable"), every_s=30)
    assert poll.status(REF, at(0), (3, 0)) == JobStatus(state=JobState.RUNNING) and stub.asked == 1
    for s in range(5, 30, 5):
        poll.status(REF, at(s), (3, 0))
    assert stub.asked == 1  # the files said nothing new: the last answer stands
    stub.state = JobState.FAILED
    assert poll.status(REF, at(31), (3, 0)) == JobStatus(state=JobState.FAILED)
    assert stub.asked == 2  # the period is up
    stub.state = JobState.RUNNING
    poll.status(REF, at(32), (3, 0))
    assert stub.asked == 3  # the last answer was an end: it is asked again, never kept
    poll.status(REF, at(33), (3, 1))
    assert stub.asked == 4  # an agent exited: ask now
    poll.status(REF, at(34), (3, 1))
    poll.hurry()
    poll.status(REF, at(35), (3, 1))
    assert stub.asked == 5  # after a cancel: ask now
    poll.reset()
    poll.status(REF, at(36), (3, 1))
    assert stub.asked == 6  # a new segment


def test_an_unreachable_scheduler_is_asked_again_at_the_next_poll() -> None:
    stub, outage = Stub(), Outage("scheduler unreachable")
    poll = SchedulerPoll(stub, outage, every_s=30)
    stub.down = True
    assert poll.status(REF, at(0), (3, 0)) is None and outage.since == at(0)
    stub.down = False
    assert poll.status(REF, at(5), (3, 0)) == JobStatus(state=JobState.RUNNING) and stub.asked == 2
    assert outage.since is None


def test_a_cheap_backend_is_asked_every_poll() -> None:
    stub = Stub()
    stub.costly_poll = False
    poll = SchedulerPoll(stub, Outage("scheduler unreachable"), every_s=30)
    for s in range(5):
        poll.status(REF, at(s), (3, 0))
    assert stub.asked == 5


def test_a_whole_run_asks_the_scheduler_at_its_own_period_and_ends_as_promptly(tmp_path: Path) -> None:
    ends = {}
    for costly in (False, True):
        (root := tmp_path / str(costly)).mkdir()
        ctl, cluster, clock = make(root, target=200, watch={"poll_interval_s": 2})
        cluster.costly_poll = costly
        state = ctl.run()
        assert state.status == RunStatus.DONE
        ends[costly] = clock.slept
        if costly:
            # 30 s between questions, plus the ones the files asked for (start, the agents' exits)
            assert cluster.polls <= clock.slept / 30 + 6, (cluster.polls, clock.slept)
    assert ends[True] <= ends[False] + 2 * 2  # the end seen within a poll or two of the cheap run's


def test_the_end_after_a_cancel_is_seen_at_the_next_poll(tmp_path: Path) -> None:
    ctl, cluster, _ = make(tmp_path, {"node2": Fault("hang", at=20, sticky=False)},
                           watch={"stall_timeout_s": 30, "poll_interval_s": 2})
    cluster.costly_poll = True
    state = ctl.run()
    first = state.segments[0]
    assert first.cause == Cause.HANG and first.cancelled_at and first.ended_at
    assert (first.ended_at - first.cancelled_at).total_seconds() <= 2 * 2
