"""Issue 23: known-bad nodes can be kept out of segment 1. `blacklist add CONFIG NODES` before the first run begins
the run's ledger with the edit (it said `no run state yet`); a directory that is no run is still left alone."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from orchestrator.blacklist import Blacklist
from orchestrator.cli import app
from orchestrator.model import Cause, EntrySource
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


@given(st.lists(st.sampled_from(["n1", "n2", "n3", "n4"]), max_size=12), st.lists(st.sampled_from(["n1", "n3"])))
def test_adding_many_nodes_at_once_is_as_many_records_in_a_row(existing: list[str], added: list[str]) -> None:
    """Second re-run, X5: add_manual rebuilt the whole list per node (4,096 nodes onto 20,000: 40 s); the one-pass
    version must leave exactly what as many record() calls in a row leave (strikes, order, expiry)."""
    now = datetime(2026, 12, 1, tzinfo=UTC)
    base = Blacklist()
    for i, n in enumerate(existing):
        base = base.record(n, Cause.GPU_ECC, "x", str(i), now - timedelta(hours=i), hard=i % 2 == 0,
                           expiry=timedelta(hours=3))
    one_by_one = base
    for n in added:
        one_by_one = one_by_one.record(n, Cause.MANUAL, "r", "manual", now, hard=True, expiry=timedelta(hours=1),
                                       source=EntrySource.MANUAL)
    assert base.add_manual(added, "r", now, timedelta(hours=1)) == one_by_one


def test_the_blacklist_table_shows_alike_entries_as_one_hostlist_row() -> None:
    """X5: 24,576 rows took `blacklist list` 22 s; entries alike but for the node are one row."""
    from rich.console import Console

    from orchestrator.state import RunState
    from orchestrator.views.status import blacklist_table

    now = datetime(2026, 12, 1, tzinfo=UTC)
    bl = Blacklist().add_manual([f"gpu{i:03d}" for i in range(1, 4097)], "bad rack", now, timedelta(hours=2))
    bl = bl.record("gpu900", Cause.GPU_ECC, "Xid 48", "7", now, hard=True, expiry=timedelta(hours=2))
    state = RunState(run="r", created_at=now, updated_at=now, blacklist=bl)
    console = Console(width=200, record=True)
    console.print(blacklist_table(state, now))
    text = console.export_text()
    assert "gpu[001-899,901-4096]" in text and "gpu900" in text and text.count("bad rack") == 1
