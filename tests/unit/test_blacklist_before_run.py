"""Issue 23: known-bad nodes can be kept out of segment 1. `blacklist add CONFIG NODES` before the first run begins
the run's ledger with the edit (it said `no run state yet`); a directory that is no run is still left alone."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.state import StateStore
from tests.conftest import base_config, write_config


def test_blacklist_add_before_the_first_run_keeps_the_node_out_of_segment_1(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, base_config(tmp_path))
    res = CliRunner().invoke(app, ["blacklist", "add", str(cfg), "node2", "--reason", "Xid 79 last week"])
    assert res.exit_code == 0 and "blacklisted node2" in res.output, res.output
    state = StateStore(tmp_path / "run").load()
    assert state is not None and state.segments == [] and state.blacklist.get("node2") is not None
    dry = CliRunner().invoke(app, ["run", str(cfg), "--dry-run"])
    assert dry.exit_code == 0 and "# exclude: node2" in dry.output, dry.output


def test_a_remove_or_a_run_directory_target_before_the_first_run_still_creates_nothing(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, base_config(tmp_path))
    res = CliRunner().invoke(app, ["blacklist", "remove", str(cfg), "node2"])
    assert res.exit_code == 1 and "no run state yet" in res.output
    (tmp_path / "run").mkdir()
    res = CliRunner().invoke(app, ["blacklist", "add", str(tmp_path / "run"), "node2"])
    assert res.exit_code == 1 and "no run state yet" in res.output
    assert not (tmp_path / "run" / "state.json").exists()


def test_a_directory_that_holds_other_things_is_not_made_a_run(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, base_config(tmp_path))
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "thesis.tex").write_text("mine")
    res = CliRunner().invoke(app, ["blacklist", "add", str(cfg), "node2"])
    assert res.exit_code == 2 and "not a run directory" in res.output
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["thesis.tex"]
