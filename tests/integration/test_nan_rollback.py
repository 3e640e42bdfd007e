"""Issue 41 on the real demo (local backend: real processes, real checkpoints): a loss gone NaN at iteration 25
rolls back to the checkpoint of iteration 20; once, the run then finishes; every time, it stops after 2
rollbacks with the history, and no segment ever resumes from a checkpoint written at or after 25."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO

pytestmark = pytest.mark.integration


def _run(tmp_path: Path, fault: str) -> tuple[subprocess.CompletedProcess[str], dict[str, object]]:
    cfg = yaml.safe_load((REPO / "configs" / "demo.yaml").read_text())
    cfg["run_dir"], cfg["workdir"] = str(tmp_path / "run"), str(REPO)
    cfg["checkpoint"]["dir"] = str(tmp_path / "run" / "checkpoints")
    cfg["command"] = [a for a in cfg["command"] if not a.startswith("--fault")] + [f"--fault={fault}"]
    path = tmp_path / "demo.yaml"
    path.write_text(yaml.safe_dump(cfg))
    res = subprocess.run([sys.executable, "-m", "orchestrator", "run", str(path)], capture_output=True, text=True,
                         timeout=300, cwd=REPO)
    return res, json.loads((tmp_path / "run" / "state.json").read_text())


def _from(seg: dict[str, object]) -> int:
    resumed = seg.get("resumed_from")
    return int(str(resumed).rsplit("iter_", 1)[1]) if resumed else 0


def test_a_nan_once_is_rolled_back_and_the_run_finishes(tmp_path: Path) -> None:
    res, state = _run(tmp_path, "nan_once:all:25")
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    segs = state["segments"]
    assert isinstance(segs, list) and [s["decision_rule"] for s in segs][0] == "loss_rollback"
    assert segs[0]["rollback_below"] == 25 and _from(segs[1]) == 20 and state["status"] == "done"


def test_a_nan_every_time_stops_after_two_rollbacks(tmp_path: Path) -> None:
    res, state = _run(tmp_path, "nan:all:25")
    assert res.returncode == 3, res.stdout[-2000:] + res.stderr[-2000:]
    segs = state["segments"]
    assert isinstance(segs, list)
    assert [s["decision_rule"] for s in segs] == ["loss_rollback", "loss_rollback", "loss_not_finite_again"]
    assert all(_from(s) < 25 for s in segs)
    assert "after 2 rollback(s)" in str(state["stop_reason"]) and "the loss went NaN" in res.stderr
