"""Issue 42: the agent reads a plain, versioned spec, never the settings model. A spec of another version (a node
whose orchestrator is older or newer than the controller's) is refused in one line the diagnosis reads as a start-up
failure of the install: no rank is started."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.agent.main import run_node
from orchestrator.contract import CANNOT_START_EXIT
from orchestrator.model import SPEC_VERSION, SegmentSpec
from tests.conftest import REPO
from tests.unit.test_blind14_readings import _diagnose


def _spec(tmp_path: Path, **over: object) -> SegmentSpec:
    fields = dict(run_name="r", index=1, job_name="r.seg0001", nodes=1, tasks_per_node=1, gpus_per_node=0,
                  time_limit_min=5, command=("touch", str(tmp_path / "ran")), workdir=str(tmp_path),
                  run_dir=str(tmp_path), segment_dir=str(tmp_path / "s"), progress_regex=r"it (\d+)")
    return SegmentSpec.model_validate({**fields, **over})


@pytest.mark.parametrize("version", [SPEC_VERSION - 1, SPEC_VERSION + 1])
def test_a_spec_of_another_version_is_refused_in_one_line_and_nothing_runs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], version: int) -> None:
    with pytest.raises(SystemExit) as ended:
        run_node(_spec(tmp_path, version=version), "node1", 0, "7")
    said = capsys.readouterr().out.strip()
    assert ended.value.code == CANNOT_START_EXIT and not (tmp_path / "ran").exists()
    assert said.startswith("ORCH-AGENT cannot start the training command") and f"version {version}" in said
    d = _diagnose(tmp_path / "d", {"node1.out": [said], "node2.out": [said]})
    assert d["action"] == "stop_and_alert", d["reason"]  # the install, on every node: say so, do not loop


def test_a_spec_pickled_without_a_version_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An older controller's pickle has no `version` at all (the field is missing from its state)."""
    spec = _spec(tmp_path)
    state = spec.__getstate__()
    state["__dict__"] = {k: v for k, v in state["__dict__"].items() if k != "version"}
    old = SegmentSpec.__new__(SegmentSpec)
    old.__setstate__(state)
    with pytest.raises(SystemExit):
        run_node(pickle.loads(pickle.dumps(old)), "node1", 0, "7")
    assert "version None" in capsys.readouterr().out


def test_the_agent_runs_without_the_settings_model() -> None:
    """What a containerised or stdlib-light agent needs: importing it loads neither the settings nor
    pydantic-settings."""
    code = ("import sys, orchestrator.agent.main; bad = [m for m in sys.modules if m.startswith("
            "'orchestrator.settings') or m == 'pydantic_settings']; print(bad); sys.exit(1 if bad else 0)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
