"""Issue 21, files opened as what they should be: a FIFO (or a symlink) in place of the run state or of a
queued request is refused with a line that names it, and never blocks the reader."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from orchestrator.files import read_regular
from orchestrator.requests import take_requests
from orchestrator.state import REQUESTS_DIR, STATE_FILE, RunState, StateError, StateStore
from orchestrator.timeout import call_with_timeout

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def test_a_fifo_in_place_of_the_state_is_refused_not_waited_on(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / STATE_FILE)
    done, value = call_with_timeout(lambda: StateStore(tmp_path).load(), 10)
    assert done, "loading the state blocked on a FIFO"
    assert isinstance(value, StateError) and "FIFO" in str(value) and STATE_FILE in str(value)


def test_a_symlink_in_place_of_the_state_is_refused(tmp_path: Path) -> None:
    (tmp_path / "elsewhere.json").write_text("{}")
    (tmp_path / STATE_FILE).symlink_to(tmp_path / "elsewhere.json")
    with pytest.raises(StateError, match=STATE_FILE):
        StateStore(tmp_path).load()


def test_a_fifo_in_the_request_queue_is_reported_and_dropped(tmp_path: Path) -> None:
    queue = tmp_path / REQUESTS_DIR
    queue.mkdir()
    os.mkfifo(queue / "0001-1.json")
    state = RunState(run="r", created_at=NOW, updated_at=NOW)
    done, value = call_with_timeout(lambda: take_requests(tmp_path, state), 10)
    assert done, "reading the request queue blocked on a FIFO"
    requests, problems, _ = value
    assert requests == [] and len(problems) == 1 and "0001-1.json" in problems[0] and "FIFO" in problems[0]
    assert not (queue / "0001-1.json").exists()


def test_a_regular_file_is_read_whole_or_up_to_its_limit(tmp_path: Path) -> None:
    f = tmp_path / "x"
    f.write_bytes(b"a" * (3 << 20))
    assert len(read_regular(f)) == 3 << 20 and read_regular(f, 10) == b"a" * 10


@pytest.mark.parametrize("lock", ["blacklist-edit.lock", "controller.lock"])
def test_a_lock_that_cannot_be_taken_is_said_at_once_not_waited_for(tmp_path: Path, lock: str) -> None:
    """Issue 21: a lock replaced by a directory made `blacklist add` wait 31-60 s, then blame another edit."""
    from typer.testing import CliRunner

    from orchestrator.cli import app

    StateStore(tmp_path).save(RunState(run="r", created_at=NOW, updated_at=NOW))
    (tmp_path / lock).mkdir()
    r = CliRunner().invoke(app, ["blacklist", "add", str(tmp_path), "node4"])
    assert r.exit_code == 1 and "cannot take the run lock" in r.output and "another" not in r.output, r.output
    assert StateStore(tmp_path).load().blacklist.get("node4") is None  # type: ignore[union-attr]


def test_a_run_whose_log_cannot_be_written_is_one_line(tmp_path: Path) -> None:
    """Issue 21: `run` on a run dir where controller.log cannot be written was a traceback from setup_logging."""
    from typer.testing import CliRunner

    from orchestrator.cli import app
    from tests.conftest import base_config, write_config

    cfg = write_config(tmp_path, base_config(tmp_path))
    (tmp_path / "run" / "controller.log").mkdir(parents=True)  # what a full or read-only disk does, as root
    r = CliRunner().invoke(app, ["run", str(cfg)])
    assert r.exit_code == 1 and "cannot write the controller's log" in r.output, r.output
    assert "Traceback" not in r.output


def test_fifos_in_place_of_the_lock_the_job_table_the_shared_blacklist_and_a_result_never_block(
        tmp_path: Path) -> None:
    """Issue 21, files opened as what they should be: every other file the controller or the CLI opens under a
    run directory (the run lock, the local job table, a job's result, the shared blacklist) is refused or read
    as missing when a FIFO stands in its place, within a bound, never waited on."""
    from orchestrator.backends.local import LocalBackend
    from orchestrator.backends.local_jobs import LocalJobRecord
    from orchestrator.clock import FakeClock
    from orchestrator.runlock import LockUnavailable, RunLock
    from orchestrator.shared_blacklist import SharedBlacklist

    os.mkfifo(tmp_path / "controller.lock")
    lock = RunLock(tmp_path)
    done, got = call_with_timeout(lambda: (lock.is_held(), lock.holder()), 5)
    assert done and got == (False, None)
    done, err = call_with_timeout(lock.acquire, 5)
    assert done and isinstance(err, LockUnavailable) and "not a regular file" in str(err)
    state_dir = tmp_path / "local-backend"
    state_dir.mkdir()
    os.mkfifo(state_dir / "jobs.json")
    done, backend = call_with_timeout(lambda: LocalBackend(["node1"], state_dir, FakeClock()), 5)
    assert done and isinstance(backend, LocalBackend) and backend._records == {}
    seg = tmp_path / "segments" / "0001"
    (seg / "submitit" / "node1").mkdir(parents=True)
    os.mkfifo(seg / "submitit" / "node1" / "4242_0_result.pkl")
    rec = LocalJobRecord("1001", "j", datetime.now(UTC).isoformat(), {"segment_dir": str(seg)}, ["node1"], [4242])
    done, code = call_with_timeout(lambda: backend._node_result(rec, "node1", 4242), 5)
    assert done and code == 1  # a result that cannot be read is a failed node, not a wait
    os.mkfifo(tmp_path / "shared.json")
    done, err = call_with_timeout(lambda: SharedBlacklist(tmp_path / "shared.json").merge_into(
        RunState(run="r", created_at=datetime.now(UTC), updated_at=datetime.now(UTC)).blacklist), 5)
    assert done and isinstance(err, ValueError) and "FIFO" in str(err)


def _cli(args: list[str]) -> tuple[bool, object]:
    from typer.testing import CliRunner

    from orchestrator.cli import app

    return call_with_timeout(lambda: CliRunner().invoke(app, args), 20)


@pytest.mark.parametrize("command", [["validate"], ["run", "--dry-run"], ["import-sbatch"]])
def test_a_fifo_given_as_the_config_or_script_is_refused_not_waited_on(tmp_path: Path, command: list[str]) -> None:
    """Issue 21 re-run (B25, I8): `validate FIFO`, `run --dry-run FIFO` and `import-sbatch FIFO` hung."""
    fifo = tmp_path / "cfg.yaml"
    os.mkfifo(fifo)
    done, res = _cli([*command, str(fifo)])
    assert done, f"{command} blocked on a FIFO"
    assert getattr(res, "exit_code", 0) == 2 and "FIFO" in getattr(res, "output", ""), getattr(res, "output", res)


def test_dev_zero_as_a_config_is_bounded(tmp_path: Path) -> None:
    """Issue 21 re-run (B26): `validate /dev/zero` grew to 2 GB in 5 s."""
    done, res = _cli(["validate", "/dev/zero"])
    assert done and getattr(res, "exit_code", 0) == 2 and "not a regular file" in getattr(res, "output", "")


def test_a_fifo_as_the_import_output_is_refused(tmp_path: Path) -> None:
    """Issue 21 re-run (I9): `import-sbatch t.sbatch -o FIFO` hung writing to it."""
    script = tmp_path / "t.sbatch"
    script.write_text("#!/bin/bash\n#SBATCH -N 2\nsrun python train.py\n")
    os.mkfifo(tmp_path / "out.yaml")
    done, res = _cli(["import-sbatch", str(script), "-o", str(tmp_path / "out.yaml")])
    assert done and getattr(res, "exit_code", 0) == 2 and "FIFO" in getattr(res, "output", "")


def test_a_state_file_of_gigabytes_is_refused_without_reading_it(tmp_path: Path) -> None:
    """Issue 21 re-run (X9): a 2 GB sparse state.json made `status` take 19 s and 4.2 GB."""
    with (tmp_path / STATE_FILE).open("wb") as fh:
        fh.truncate(2 << 30)
    done, value = call_with_timeout(lambda: StateStore(tmp_path).load(), 20)
    assert done and isinstance(value, StateError) and "MiB" in str(value), value


def test_a_state_missing_its_fields_says_which_and_how_to_restore(tmp_path: Path) -> None:
    """Issue 21 re-run (F4): `{"schema_version": 1}` gave a 900-character pydantic dump and no restore hint."""
    (tmp_path / STATE_FILE).write_text('{"schema_version": 1}')
    with pytest.raises(StateError) as got:
        StateStore(tmp_path).load()
    text = str(got.value)
    assert "run: Field required" in text and "restore it from" in text and "pydantic" not in text and "\n" not in text
