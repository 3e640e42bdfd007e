"""A training command that cannot start stops the run at once with the reason (issue 13), on the real
local backend (real agents, real processes)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.state import StateStore
from tests.conftest import REPO, base_config, write_config

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("command", [
    ["python3", "/nonexistent/torchrunx/train.py"],  # python cannot open the script
    ["bash", "-c", "set -e; torchrunx --nproc_per_node 2 train.py"],  # the user's shell cannot find it
])
def test_a_command_that_cannot_start_stops_after_one_segment(tmp_path: Path, command: list[str]) -> None:
    cfg = write_config(tmp_path, base_config(tmp_path, command=command, policy={"max_segments": 5}))
    (tmp_path / "ckpt").mkdir()
    res = subprocess.run([sys.executable, "-m", "orchestrator", "run", str(cfg)], capture_output=True, text=True,
                         timeout=240, cwd=REPO)
    assert res.returncode == 3, res.stdout + res.stderr
    state = StateStore(tmp_path / "run").load()
    assert state is not None and len(state.segments) == 1 and state.status.value == "stopped"
    seg = state.segments[0]
    assert seg.cause is not None and seg.cause.value == "user_bug" and not state.blacklist.entries
    assert "torchrunx" in state.stop_reason or any("torchrunx" in e.text for e in seg.evidence)
