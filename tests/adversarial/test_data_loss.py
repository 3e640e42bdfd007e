"""Issue 15, "Data loss": each test fails on the code before the fix."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.clock import FakeClock
from orchestrator.loop.controller import Controller
from orchestrator.model import Cause, RunStatus
from orchestrator.settings import load_settings, parse_overrides
from orchestrator.state import StateError, StateStore
from tests.conftest import base_config, write_config
from tests.fakes import FakeCluster, Fault

NODES = ["node1", "node2", "node3", "node4"]


def make(tmp_path: Path, faults: dict[str, Fault] | None = None, overrides: tuple[str, ...] = (),
         ) -> tuple[Controller, FakeCluster, FakeClock]:
    s = load_settings(write_config(tmp_path, base_config(tmp_path)), parse_overrides(list(overrides)))
    clock = FakeClock()
    cluster = FakeCluster(clock, NODES, 50, tmp_path / "ckpt", faults=faults)
    return Controller(s, cluster, clock, StateStore(s.run_dir), python="python"), cluster, clock


def test_5_hardware_fault_in_the_last_allowed_segment_is_still_blacklisted(tmp_path: Path) -> None:
    ctl, cluster, _ = make(tmp_path, {"node3": Fault("ecc", at=35)}, ("policy.max_segments=1",))
    state = ctl.run()
    assert state.status == RunStatus.STOPPED and "max_segments" in state.stop_reason
    assert state.segments[0].cause == Cause.GPU_ECC
    entry = state.blacklist.get("node3")
    assert entry is not None and entry.hard and "ECC" in entry.evidence
    assert StateStore(ctl.s.run_dir).load().blacklist.get("node3") is not None  # type: ignore[union-attr]


def test_1_state_deleted_with_backup_present_never_starts_over(tmp_path: Path) -> None:
    ctl, cluster, _ = make(tmp_path, {"node3": Fault("ecc", at=35)})
    assert ctl.run().status == RunStatus.DONE
    run_dir = ctl.s.run_dir
    (run_dir / "state.json").unlink()
    assert (run_dir / "state.json.bak").exists()
    again, cluster2, _ = make(tmp_path)
    with pytest.raises(StateError, match="state.json.bak"):
        again.run()
    assert not cluster2.submitted  # nothing submitted again, node3 not reused
    res = CliRunner().invoke(app, ["status", str(run_dir)])
    assert res.exit_code == 1 and "no run state yet" not in res.output and "state.json.bak" in res.output
    # the way back: restore the backup, and the run's history and blacklist are there
    (run_dir / "state.json.bak").rename(run_dir / "state.json")
    restored = StateStore(run_dir).load()
    assert restored is not None and restored.blacklist.get("node3") is not None


def test_1_segments_without_state_need_an_explicit_start_over(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    (run_dir / "segments" / "0001").mkdir(parents=True)
    with pytest.raises(StateError, match="--start-over"):
        StateStore(run_dir).load()
    assert StateStore(run_dir, start_over=True).load() is None
    assert StateStore(tmp_path / "fresh").load() is None  # a new run directory is a new run
