"""Issue 37, hostile files and hangs (re-probe): events.jsonl opened as what it must be (a FIFO or symlink in its
place is set aside, never waited on or followed), read with bounded lines, and written for every ledger and every
ending; request files and node logs that are not regular files are refused."""

from __future__ import annotations

import json
import os
import tracemalloc
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from loguru import logger
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.contract import SegmentPaths
from orchestrator.files import REQUEST_LIMIT, read_request
from orchestrator.flight import _read as flight_read
from orchestrator.loop.events import EVENTS_FILE, EventLog
from orchestrator.model import RunStatus
from orchestrator.state import RunState, SegmentRecord, StateStore
from orchestrator.timeout import call_with_timeout

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def ledger(begun: datetime, segments: int = 1, status: RunStatus = RunStatus.RUNNING,
           goal: int | None = None) -> RunState:
    segs = [SegmentRecord(index=i, job_name="t", job_id=f"{begun.hour}{i}",
                          submitted_at=begun + timedelta(minutes=i + 1)) for i in range(segments)]
    return RunState(run="t", created_at=begun, updated_at=begun + timedelta(hours=1), segments=segs,
                    status=status, target_iteration=goal)


def lines(run_dir: Path) -> list[dict[str, object]]:
    return [json.loads(x) for x in (run_dir / EVENTS_FILE).read_text().splitlines()]


def test_a_fifo_in_place_of_the_event_log_is_set_aside_not_waited_on(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / EVENTS_FILE)
    done, value = call_with_timeout(lambda: EventLog(tmp_path).record(ledger(T0), T0), 10)
    assert done, "the event log blocked on a FIFO"
    assert value == 1 and (tmp_path / EVENTS_FILE).is_file()
    assert (tmp_path / f"{EVENTS_FILE}.not-a-file").is_fifo()


def test_a_symlinked_event_log_is_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere.txt"
    outside.write_text("")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / EVENTS_FILE).symlink_to(outside)
    assert EventLog(run_dir).record(ledger(T0), T0) == 1
    assert outside.read_text() == "" and not (run_dir / EVENTS_FILE).is_symlink()
    assert [e["event"] for e in lines(run_dir)] == ["segment_submitted"]


@pytest.mark.parametrize("kind", ["symlink", "dangling", "fifo"])
def test_the_controller_log_and_a_node_log_are_never_written_through_a_link_or_a_fifo(tmp_path: Path,
                                                                                        kind: str) -> None:
    """The re-probe (C9): a symlinked controller.log was followed, the controller's lines appended to a file
    outside the run dir. The same opener writes the node logs."""
    from orchestrator.files import append_private

    outside = tmp_path / "precious.txt"
    outside.write_text("precious\n")
    log = tmp_path / "controller.log"
    if kind == "fifo":
        os.mkfifo(log)
    else:
        log.symlink_to(outside if kind == "symlink" else tmp_path / "nowhere")
    done, fh = call_with_timeout(lambda: append_private(log), 10)
    assert done, "opening the log blocked"
    assert not isinstance(fh, BaseException), fh
    with fh:
        fh.write("controller line\n")
    assert outside.read_text() == "precious\n" and not (tmp_path / "nowhere").exists()
    assert log.is_file() and not log.is_symlink() and log.read_text() == "controller line\n"
    assert (log.stat().st_mode & 0o777) == 0o600
    aside = tmp_path / "controller.log.not-a-file"
    assert aside.is_fifo() if kind == "fifo" else aside.is_symlink()


def test_an_over_long_line_in_the_event_log_is_skipped_without_holding_it(tmp_path: Path) -> None:
    """A 500 MB line without a newline took the controller to 1 GB at start; 24 MB here, the production bound."""
    first = EventLog(tmp_path)
    assert first.record(ledger(T0), T0) == 1
    with (tmp_path / EVENTS_FILE).open("ab") as f:
        f.write(b'{"key": "' + b"x" * (24 << 20) + b'"}\n')
    with (tmp_path / EVENTS_FILE).open("ab") as f:  # and the keys after it are still seen
        f.write(b"\n".join((tmp_path / EVENTS_FILE).read_bytes().splitlines()[:1]) + b"\n")
    seen: list[str] = []
    sink = logger.add(lambda m: seen.append(str(m)), level="WARNING")
    tracemalloc.start()
    try:
        again = EventLog(tmp_path).record(ledger(T0), T0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        logger.remove(sink)
    assert again == 0 and peak < 8 << 20, f"peak {peak >> 20} MB"
    assert any("longer than" in m and EVENTS_FILE in m for m in seen)


def test_a_ledger_begun_again_writes_its_own_events(tmp_path: Path) -> None:
    """`run --start-over`: the old ledger's keys (segment:0:submitted...) blocked every event of the new one."""
    assert EventLog(tmp_path).record(ledger(T0, 2), T0) == 2
    later = T0 + timedelta(days=1)
    assert EventLog(tmp_path).record(ledger(later, 1), later) == 1
    got = lines(tmp_path)
    assert [(e["event"], e["ledger"]) for e in got][-1] == ("segment_submitted", later.isoformat())


def test_lines_from_before_the_ledger_field_are_not_written_again(tmp_path: Path) -> None:
    """An event log written before lines named their ledger: its keys still count for the ledger that wrote them
    (no duplicate on upgrade), not for a ledger begun after them."""
    old = {"schema": 1, "key": "segment:0:submitted", "event": "segment_submitted",
           "time": (T0 + timedelta(minutes=1)).isoformat(), "run": "t"}
    (tmp_path / EVENTS_FILE).write_text(json.dumps(old) + "\n")
    assert EventLog(tmp_path).record(ledger(T0), T0) == 0
    later = T0 + timedelta(days=1)
    assert EventLog(tmp_path).record(ledger(later), later) == 1


def test_a_raised_goal_ends_the_run_again_in_the_event_log(tmp_path: Path) -> None:
    log = EventLog(tmp_path)
    log.record(ledger(T0, 1, RunStatus.DONE, goal=50), T0)
    log.record(ledger(T0, 2, RunStatus.RUNNING, goal=100), T0)  # the goal raised, the run resumed
    log.record(ledger(T0, 2, RunStatus.DONE, goal=100), T0)
    ends = [e for e in lines(tmp_path) if e["event"] == "run_ended"]
    assert len(ends) == 2 and all(e["status"] == "done" for e in ends)


@pytest.mark.parametrize("read", [read_request, flight_read], ids=["agent", "flight-recorder"])
def test_a_fifo_or_huge_sparse_request_file_is_not_waited_on_nor_read_whole(tmp_path: Path, read: object) -> None:
    """A FIFO named profile-request hung every agent (its exit never reported, SIGTERM ignored); a 1 GB sparse
    dump-request made each agent write a 6.4 GB dump. Both readers: the agent's and the training's recorder."""
    assert callable(read)
    os.mkfifo(tmp_path / "profile-request")
    done, value = call_with_timeout(lambda: read(tmp_path / "profile-request"), 10)
    assert done, "reading a request blocked on a FIFO"
    assert value == ""
    sparse = tmp_path / "dump-request"
    with sparse.open("wb") as f:
        f.write(b"x" * 10)
        f.truncate(1 << 30)
    done, value = call_with_timeout(lambda: read(sparse), 10)
    assert done and isinstance(value, str) and len(value) <= REQUEST_LIMIT


def test_logs_does_not_print_a_node_log_that_is_a_symlink(tmp_path: Path) -> None:
    """`logs --node X` printed a node log linked to any file (/etc/shadow); `diagnose` skipped it already."""
    secret = tmp_path / "secret"
    secret.write_text("root:SECRET-HASH\n")
    run_dir = tmp_path / "run"
    StateStore(run_dir).save(RunState(run="t", created_at=T0, updated_at=T0,
                                      segments=[SegmentRecord(index=1, job_name="t", job_id="1")]))
    logs = SegmentPaths.of(run_dir, 1).logs
    logs.mkdir(parents=True)
    (logs / "node1.log").write_text("step 1\n")
    (logs / "node2.log").symlink_to(secret)
    for args in (["--node", "node2"], []):
        res = CliRunner().invoke(app, ["logs", str(run_dir), *args])
        assert "SECRET" not in res.output and "symlink" in res.output, res.output
    res = CliRunner().invoke(app, ["logs", str(run_dir)])
    assert res.exit_code == 0 and "node1: step 1" in res.output


def test_logs_does_not_follow_a_segments_logs_directory_that_is_a_symlink(tmp_path: Path) -> None:
    """Issue 37 re-probe: with segments/0001/logs a symlink to /var/log, `logs --node dpkg` printed dpkg.log."""
    elsewhere = tmp_path / "var-log"
    elsewhere.mkdir()
    (elsewhere / "dpkg.log").write_text("SECRET-LINE\n")
    run_dir = tmp_path / "run"
    StateStore(run_dir).save(RunState(run="t", created_at=T0, updated_at=T0,
                                      segments=[SegmentRecord(index=1, job_name="t", job_id="1")]))
    paths = SegmentPaths.of(run_dir, 1)
    paths.root.mkdir(parents=True)
    paths.logs.symlink_to(elsewhere)
    for args in (["--node", "dpkg"], []):
        res = CliRunner().invoke(app, ["logs", str(run_dir), *args])
        assert "SECRET" not in res.output and "symlink" in res.output, res.output


def test_diagnose_says_which_symlinked_node_log_it_did_not_read(tmp_path: Path) -> None:
    """The re-probes of issue 37 (N7): `diagnose DIR` skipped a node log linked from elsewhere and answered
    "unknown" without a word. It still does not follow the link, and now says so; the file given itself is read."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "node2.log").write_text("RuntimeError: CUDA error: uncorrectable ECC error encountered\n")
    logs = tmp_path / "dg"
    logs.mkdir()
    (logs / "node1.log").write_text("step 1\n")
    (logs / "node2.log").symlink_to(elsewhere / "node2.log")
    res = CliRunner().invoke(app, ["diagnose", str(logs)])
    assert res.exit_code == 0 and "note: not read: node2.log (a symlink that leads out" in res.output, res.output
    res = CliRunner().invoke(app, ["diagnose", str(logs), "--json"])
    assert json.loads(res.output)["not_read"] == ["node2.log"]
    res = CliRunner().invoke(app, ["diagnose", str(logs / "node2.log")])
    assert "cause: gpu_ecc" in res.output and "not read" not in res.output, res.output
