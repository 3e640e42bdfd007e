"""Parsing Slurm's answers, and the Slurm backend's retry behaviour, with a recording runner."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pytest

from orchestrator.backends.base import SchedulerUnavailable
from orchestrator.backends.slurm import SlurmBackend
from orchestrator.backends.slurm_commands import (
    CommandFailed,
    parse_node_states,
    parse_sacct,
    parse_squeue,
    parse_state,
    ping_window,
    unreachable,
    usable,
)
from orchestrator.clock import FakeClock
from orchestrator.model import JobRef, JobState
from orchestrator.settings import SlurmBackendCfg

LOCAL = datetime(2026, 3, 1, 12, 0, 0).astimezone()


def ref(job: str, at: datetime = LOCAL) -> JobRef:
    return JobRef(job_id=job, submitted_at=at, backend="slurm")


@pytest.mark.parametrize("raw,state", [
    ("COMPLETED", JobState.COMPLETED), ("CANCELLED by 0", JobState.CANCELLED), ("NODE_FAIL", JobState.NODE_FAIL),
    ("OUT_OF_MEMORY", JobState.OUT_OF_MEMORY), ("TIMEOUT", JobState.TIMEOUT), ("PREEMPTED", JobState.PREEMPTED),
    ("REQUEUED", JobState.PENDING), ("BOOT_FAIL", JobState.NODE_FAIL), ("", JobState.UNKNOWN),
    ("WEIRD", JobState.UNKNOWN),
])
def test_states(raw: str, state: JobState) -> None:
    assert parse_state(raw) == state


def test_sacct_rows_and_reused_job_ids() -> None:
    text = ("77|old.seg0001|COMPLETED|0:0|node[1-2]|2026-01-01T00:00:00|2026-01-01T00:00:01|2026-01-01T01:00:00\n"
            "77|run.seg0003|NODE_FAIL|1:0|node[1-2,4]|2026-03-01T12:00:01|2026-03-01T12:00:02|2026-03-01T12:30:00\n"
            "78|run.seg0004|CANCELLED by 0|0:15|None assigned|2026-03-01T12:31:00|Unknown|2026-03-01T12:31:05\n")
    got = parse_sacct(text, [ref("77"), ref("78", LOCAL + timedelta(minutes=31))])
    assert got["77"].state == JobState.NODE_FAIL and got["77"].nodes == ("node1", "node2", "node4")  # not the old 77
    assert got["77"].exit_code == 1 and got["77"].nodes_final
    assert got["78"].state == JobState.CANCELLED and got["78"].nodes == () and got["78"].reason == "signal 15"


def test_squeue_partial_node_list_is_not_final() -> None:
    got = parse_squeue("80|COMPLETING|node1|None\n81|RUNNING|node[1-3]|None\n82|PENDING||Resources\n")
    assert not got["80"].nodes_final and got["81"].nodes_final and got["81"].nodes == ("node1", "node2", "node3")
    assert got["82"].state == JobState.PENDING and got["82"].reason == "Resources"


def test_poll_is_one_command_and_falls_back_to_squeue(tmp_path: Path) -> None:
    calls: list[list[str]] = []

    def runner(argv: list[str], timeout: float) -> str:
        calls.append(argv)
        if argv[0] == "sacct":
            return ""  # accounting has not recorded the job yet
        return "90|RUNNING|node[2-3]|None\n"

    b = SlurmBackend(SlurmBackendCfg(), FakeClock(), tmp_path, runner=runner)
    st = b.poll([ref("90")])["90"]
    assert st.state == JobState.RUNNING and st.nodes == ("node2", "node3")
    assert [c[0] for c in calls] == ["sacct", "squeue"]
    calls.clear()

    def sacct_answers(argv: list[str], timeout: float) -> str:
        calls.append(argv)
        return "91|run.seg1|RUNNING|0:0|node1|2026-03-01T12:00:00|2026-03-01T12:00:01|Unknown\n"

    b.runner = sacct_answers
    b.poll([ref("91")])
    assert [c[0] for c in calls] == ["sacct"]  # one command when accounting answers


def down_backend(tmp_path: Path) -> tuple[SlurmBackend, list[str], FakeClock]:
    """A Slurm backend whose every command fails as with slurmctld down, and the commands it tried."""
    clock, attempts = FakeClock(), []

    def down(argv: list[str], timeout: float) -> str:
        attempts.append(argv[0])
        raise CommandFailed(argv, "slurm_load_jobs error: Unable to contact slurm controller")

    return SlurmBackend(SlurmBackendCfg(retry_max_s=600), clock, tmp_path, runner=down, attempts=4), attempts, clock


def test_retries_then_unknown_never_failed(tmp_path: Path) -> None:
    b, attempts, clock = down_backend(tmp_path)
    with pytest.raises(SchedulerUnavailable):
        b.cancel(ref("92"))
    assert attempts.count("scancel") == 4
    assert 0 < clock.slept <= 6 * 30  # backed off (on the injected clock), bounded


def test_a_poll_says_unknown_within_seconds_not_minutes(tmp_path: Path) -> None:
    """Issue 21: a full outage used to keep one poll retrying for up to retry_max_s (minutes) before anything
    was logged and while no node log was read; a poll is repeated by the loop, so it tries twice, briefly."""
    b, attempts, clock = down_backend(tmp_path)
    with pytest.raises(SchedulerUnavailable):
        b.poll([ref("92")])
    assert attempts == ["sacct", "sacct", "squeue", "squeue"]
    assert clock.slept <= 4  # at most two short backoffs on the injected clock


def test_queue_position_among_pending_jobs_of_the_partition(tmp_path: Path) -> None:
    out = ("501|gpu|2026-03-02T08:00:00\n502|debug|N/A\n503|gpu|2026-03-02T09:30:00\n504|gpu|N/A\n")
    b = SlurmBackend(SlurmBackendCfg(), FakeClock(), tmp_path, runner=lambda argv, t: out)
    assert b.queue_position(ref("503")) == "position 2 of 3 pending in gpu, expected start 2026-03-02T09:30:00"
    assert b.queue_position(ref("504")).startswith("position 3 of 3") and "expected start unknown" in \
        b.queue_position(ref("504"))
    assert b.queue_position(ref("999")) == ""  # not pending any more


def test_the_first_failure_of_a_command_is_said_before_the_retries_not_after(tmp_path: Path) -> None:
    """Issue 23: with no scheduler reachable, a new run said nothing for the 2 minutes its first sbatch/sinfo
    retries took. The first failure is said at once, on one line, with how long the retries may take."""
    from loguru import logger

    b, attempts, clock = down_backend(tmp_path)
    said: list[tuple[float, str]] = []
    sink = logger.add(lambda m: said.append((clock.slept, str(m))), level="WARNING")
    try:
        with pytest.raises(SchedulerUnavailable):
            b.cancel(ref("92"))
    finally:
        logger.remove(sink)
    assert len(said) == 1 and said[0][0] == 0  # before the first backoff
    assert "scancel failed (scancel: slurm_load_jobs error: Unable to contact" in said[0][1]
    assert "retrying for up to 600 s" in said[0][1] and "\n" not in said[0][1].rstrip("\n")


def test_unreachable_nodes_are_those_slurmctld_cannot_reach() -> None:
    """sinfo's compact states (slurm 22.05, the test cluster): a trailing * is not responding; down
    with or without it; drained, idle, allocated or completing nodes are reachable."""
    rows = parse_node_states("node1 alloc\nnode2 alloc*\nnode3 down*\nnode4 drain\nnode5 down\n"
                             "node6 comp\nnode7 idle*\n")
    assert rows is not None
    asked = frozenset({"node1", "node2", "node3", "node4", "node5", "node6"})
    assert unreachable(rows, asked) == {"node2", "node3", "node5"}
    assert unreachable(rows, frozenset({"node9"})) == frozenset()
    assert usable(rows) == ["node1", "node6"]
    for text in ("", "sinfo: error: Unable to contact slurm controller\n", "node1\n"):
        assert parse_node_states(text) is None  # not the answer asked for: unknown


def test_a_node_an_admin_drains_while_a_job_holds_it_is_not_usable() -> None:
    """sinfo(1): a drained node still allocated is `drng` (draining), a failing one `failg`, power states
    `pow_dn`/`pow_up`: none of them can take a spare's place; allocated and mixed nodes can."""
    rows = parse_node_states("n1 alloc\nn2 drng\nn3 mix\nn4 failg\nn5 pow_dn\nn6 drain\nn7 comp\n")
    assert rows is not None and usable(rows) == ["n1", "n3", "n7"]


def test_the_ping_window_is_read_from_scontrol_show_config() -> None:
    """Lines as Slurm 22.05 prints them (the test cluster; the defaults 300 s and 10 s elsewhere)."""
    test_cluster = ("Configuration data as of 2026-12-03T20:40:11\nMessageTimeout          = 10 sec\n"
                    "SlurmctldTimeout        = 120 sec\nSlurmdTimeout           = 20 sec\n")
    assert ping_window(test_cluster) == 50.0  # slurmctld set a crashed node down 43 s after
    defaults = test_cluster.replace("= 20 sec", "= 300 sec")
    assert ping_window(defaults) == 300.0  # bounded
    assert ping_window("SlurmdTimeout = 20 sec\n") == 0.0  # a value missing: unknown
