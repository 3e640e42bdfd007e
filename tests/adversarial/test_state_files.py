"""Issue 15, "tracebacks": a broken state file, a state or lock replaced by a directory, a state that
cannot be written, a shared blacklist that is not one: one line, the state intact, never a traceback."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest
from loguru import logger
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.runlock import LockHeld, RunLock
from orchestrator.shared_blacklist import SharedBlacklist
from orchestrator.state import RunState, StateError, StateStore
from tests.conftest import base_config, write_config

runner = CliRunner()
NOW = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize("content", [b"\xff\xfe{", b"[" * 200000 + b"]" * 200000, b"{}", b"[]"])
def test_a_broken_state_file_is_one_line(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "state.json").write_bytes(content)
    with pytest.raises(StateError):
        StateStore(tmp_path).load()
    res = runner.invoke(app, ["status", str(tmp_path)])
    assert res.exit_code == 1 and res.output.startswith("error:") and "Traceback" not in res.output, res.output


def test_a_state_or_lock_replaced_by_a_directory(tmp_path: Path) -> None:
    (tmp_path / "state.json").mkdir()
    with pytest.raises(StateError, match="cannot read"):
        StateStore(tmp_path).load()
    (tmp_path / "state.json").rmdir()
    (tmp_path / "controller.lock").mkdir()
    with pytest.raises(LockHeld, match="cannot take the run lock"):
        RunLock(tmp_path).acquire()


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_a_state_that_cannot_be_written_leaves_the_old_one(tmp_path: Path) -> None:
    store = StateStore(tmp_path)
    store.save(RunState(run="r", created_at=NOW, updated_at=NOW))
    tmp_path.chmod(0o500)
    try:
        with pytest.raises(StateError, match="previous state is intact"):
            store.save(RunState(run="r2", created_at=NOW, updated_at=NOW))
    finally:
        tmp_path.chmod(0o700)
    loaded = store.load()
    assert loaded is not None and loaded.run == "r"


def test_a_state_that_cannot_be_written_as_root(tmp_path: Path) -> None:
    """As root a mode stops nothing: a directory where the temporary file's directory should be does."""
    store = StateStore(tmp_path / "file-not-dir")
    (tmp_path / "file-not-dir").write_text("x")
    with pytest.raises(StateError, match="cannot write the run state"):
        store.save(RunState(run="r", created_at=NOW, updated_at=NOW))


@pytest.mark.parametrize("content", ["[]", '{"entries": 3}', '{"entries": [{"node": 1}]}'])
def test_a_shared_blacklist_that_is_not_one(tmp_path: Path, content: str) -> None:
    shared = tmp_path / "shared.json"
    shared.write_text(content)
    with pytest.raises(ValueError, match="shared"):
        SharedBlacklist(shared).publish([])
    assert shared.read_text() == content  # never overwritten
    cfg = write_config(tmp_path, base_config(tmp_path, policy={"shared_blacklist": str(shared)}))
    logger.remove()  # sinks earlier CLI tests left on streams that are closed now
    res = runner.invoke(app, ["run", str(cfg), "--dry-run"])
    assert res.exit_code == 0 and "Traceback" not in res.output, res.output
    assert json.loads(shared.read_text()) == json.loads(content)


@pytest.mark.parametrize("edit", [["add", "node4"], ["remove", "node4"], ["clear"]])
def test_a_blacklist_edit_on_a_full_disk_is_one_line_and_changes_nothing(tmp_path: Path, edit: list[str]) -> None:
    """Issue 21: `blacklist add/remove/clear` on a full disk was a traceback."""
    import errno

    from orchestrator import failpoints

    store = StateStore(tmp_path)
    store.save(RunState(run="r", created_at=NOW, updated_at=NOW))
    before = (tmp_path / "state.json").read_bytes()

    def full(point: str) -> None:  # the state's write points (orchestrator/failpoints.py) find the disk full
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "state.json"))

    failpoints.install(full)
    try:
        res = runner.invoke(app, ["blacklist", edit[0], str(tmp_path), *edit[1:]])
    finally:
        failpoints.install(None)
    assert res.exit_code == 1 and "Traceback" not in res.output and isinstance(res.exception, SystemExit), res.output
    assert "No space left on device" in res.output and "nothing changed" in res.output, res.output
    assert (tmp_path / "state.json").read_bytes() == before
