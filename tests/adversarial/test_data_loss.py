"""Issue 15, "Data loss": each test fails on the code before the fix."""

from __future__ import annotations

from pathlib import Path

from orchestrator.clock import FakeClock
from orchestrator.loop.controller import Controller
from orchestrator.model import Cause, RunStatus
from orchestrator.settings import load_settings, parse_overrides
from orchestrator.state import StateStore
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
