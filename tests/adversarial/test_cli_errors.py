"""Issue 15, "tracebacks": every CLI error is one line with the place, never a traceback."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from orchestrator.cli import app

runner = CliRunner()


def one_line_error(res: Result, code: int | None = None) -> str:
    out = res.output
    assert "Traceback" not in out and (res.exception is None or isinstance(res.exception, SystemExit)), out
    if code is not None:
        assert res.exit_code == code, out
    errors = [ln for ln in out.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, out
    return errors[0]


def test_report_on_a_broken_state(tmp_path: Path) -> None:
    (tmp_path / "state.json").write_text("{not json")
    line = one_line_error(runner.invoke(app, ["report", str(tmp_path)]), 1)
    assert "state.json" in line


def test_report_out_is_a_file(tmp_path: Path) -> None:
    from datetime import UTC, datetime

    from orchestrator.state import RunState, StateStore

    now = datetime.now(UTC)
    StateStore(tmp_path / "run").save(RunState(run="r", created_at=now, updated_at=now))
    (tmp_path / "f").write_text("x")
    line = one_line_error(runner.invoke(app, ["report", str(tmp_path / "run"), "--out", str(tmp_path / "f")]), 2)
    assert "is a file" in line


def test_import_sbatch_to_a_directory_and_malformed_scripts(tmp_path: Path) -> None:
    script = tmp_path / "t.sbatch"
    script.write_text("#!/bin/bash\n#SBATCH -N 2\nsrun python train.py\n")
    line = one_line_error(runner.invoke(app, ["import-sbatch", str(script), "-o", str(tmp_path)]), 2)
    assert "is a directory" in line
    for text in ("#SBATCH --nodes=\nsrun \"unterminated\n", "#SBATCH " + "(" * 5000 + "\nsrun x\n",
                 "#SBATCH -N 2\n" + "srun \\\n" * 3000):
        script.write_text(text)
        res = runner.invoke(app, ["import-sbatch", str(script)])
        assert res.exit_code in (0, 2) and "Traceback" not in res.output, res.output


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_an_unreadable_log_in_diagnose(tmp_path: Path) -> None:
    log = tmp_path / "node1.log"
    log.write_text("x\n")
    log.chmod(0)
    line = one_line_error(runner.invoke(app, ["diagnose", str(tmp_path)]), 1)
    assert "node1.log" in line and "cannot read" in line


def test_an_unreadable_log_in_diagnose_as_root(tmp_path: Path) -> None:
    """As root a mode does not stop a read: a directory named like a log does (EISDIR is not a file,
    skipped) and a FIFO with no writer must not hang or crash either: it is not a regular file."""
    (tmp_path / "node1.log").write_text("srun: error: Node failure on node1\n")
    os.mkfifo(tmp_path / "node2.log")
    res = runner.invoke(app, ["diagnose", str(tmp_path), "--json"])
    assert res.exit_code == 0 and "node_fail" in res.output, res.output


def test_status_watch_every_zero_is_refused(tmp_path: Path) -> None:
    res = runner.invoke(app, ["status", str(tmp_path), "--watch", "--every", "0"])
    assert res.exit_code == 2 and "--every" in res.output


@pytest.mark.parametrize("command", [["status"], ["blacklist", "list"], ["diagnose"], ["stop"]])
def test_a_path_the_system_refuses_is_one_short_line(tmp_path: Path, command: list[str]) -> None:
    """Issue 21 re-run: a 5000-character path given to status, blacklist, diagnose or stop was a traceback
    (File name too long); now one line with the path cut short, exit 1."""
    import subprocess
    import sys

    from tests.conftest import REPO

    res = subprocess.run([sys.executable, "-m", "orchestrator", *command, str(tmp_path / ("a" * 5000))],
                         capture_output=True, text=True, cwd=REPO, timeout=60)
    assert res.returncode in (1, 2) and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert res.stderr.startswith("error:") and len(res.stderr) < 400, res.stderr[:600]


def test_a_run_lock_that_cannot_be_written_is_said_not_a_traceback(tmp_path: Path) -> None:
    from orchestrator.runlock import LockUnavailable, RunLock

    def full(fd: int, data: bytes) -> int:  # the holder's line into the lock file, as on a full disk
        with open("/dev/full", "wb", buffering=0) as dev:
            return dev.write(data)  # ENOSPC, from the kernel

    with pytest.raises(LockUnavailable, match="No space left on device"):
        RunLock(tmp_path, write=full).acquire()
