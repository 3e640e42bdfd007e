"""Issue 15, "accepted nonsense": run directories that belong to another run or to the checkpoints, and a
finished run whose goal was raised."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.clock import FakeClock
from orchestrator.loop.controller import Controller
from orchestrator.model import RunStatus
from orchestrator.settings import ConfigError, load_settings, parse_overrides
from orchestrator.state import StateError, StateStore
from tests.conftest import base_config, write_config
from tests.fakes import FakeCluster

runner = CliRunner()


def controller(tmp_path: Path, target: int = 20, **over: object) -> tuple[Controller, FakeCluster]:
    over.setdefault("goal", {"target_iteration": target})
    s = load_settings(write_config(tmp_path, base_config(tmp_path, **over)), parse_overrides([]))
    clock = FakeClock()
    cluster = FakeCluster(clock, ["node1", "node2", "node3", "node4"], target, tmp_path / "ckpt")
    return Controller(s, cluster, clock, StateStore(s.run_dir), python="python"), cluster


def test_a_config_pointing_at_another_runs_directory_is_refused(tmp_path: Path) -> None:
    ctl, _ = controller(tmp_path)
    assert ctl.run().status == RunStatus.DONE
    other, cluster = controller(tmp_path, name="other")
    with pytest.raises(StateError, match="holds run 't', not 'other'"):
        other.run()
    assert not cluster.submitted
    cfg = write_config(tmp_path, base_config(tmp_path, name="other"), "other.yaml")
    res = runner.invoke(app, ["run", str(cfg), "--dry-run"])
    assert res.exit_code == 1 and "holds run 't'" in res.output


def test_a_run_dir_inside_the_checkpoint_dir_is_refused(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, base_config(tmp_path, run_dir=str(tmp_path / "ckpt" / "run")))
    with pytest.raises(ConfigError, match="inside checkpoint.dir"):
        load_settings(cfg, parse_overrides([]))


def test_raising_the_goal_of_a_finished_run_runs_on(tmp_path: Path) -> None:
    ctl, cluster = controller(tmp_path, 20)
    first = ctl.run()
    assert first.status == RunStatus.DONE and first.best_iteration() == 20 and len(cluster.submitted) == 1
    more, cluster2 = controller(tmp_path, 40)
    state = more.run()
    assert state.status == RunStatus.DONE and state.best_iteration() == 40 and len(cluster2.submitted) == 1
    assert cluster2.submitted[0].start_iteration == 20  # resumed from the last checkpoint, not from scratch
