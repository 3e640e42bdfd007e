"""Issue 36: a batch script's launch without srun in a job of several nodes ran once, on the first node, under
sbatch; the other nodes waited. `resources.launch_nodes: first` (what import-sbatch writes for it) runs it so: on
the local backend, with the real agent and the demo's training, the first node trains alone, the others run
nothing and write nothing the watch reads, and a hang of the first node is diagnosed as a hang of a one-node job,
not read through the idle nodes (whose clean exits once made a hang look like a training that quit early)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO

pytestmark = pytest.mark.integration


def _config(tmp_path: Path, fault: str | None) -> Path:
    cfg = yaml.safe_load((REPO / "configs" / "demo.yaml").read_text())
    cfg["run_dir"] = str(tmp_path / "run")
    cfg["checkpoint"]["dir"] = str(tmp_path / "run" / "checkpoints")
    cfg["workdir"] = str(REPO)
    cfg["command"] = [a for a in cfg["command"] if not a.startswith(("--iters", "--step-time", "--fault"))]
    cfg["command"] += ["--iters=30", "--step-time=0.05"] + ([f"--fault={fault}"] if fault else [])
    cfg["goal"]["target_iteration"] = 30
    cfg["resources"].update(nodes=3, launch_nodes="first")
    cfg["watch"].update(poll_interval_s=0.3, stall_timeout_s=8)
    p = tmp_path / "first.yaml"
    p.write_text(yaml.safe_dump(cfg))
    return p


def _run(cfg: Path) -> tuple[int, str]:
    log = cfg.parent / "ctl.log"
    env = {k: v for k, v in os.environ.items() if k != "ORCH_FAILPOINT"}
    with log.open("w") as fh:
        rc = subprocess.run([sys.executable, "-m", "orchestrator", "run", str(cfg)], stdout=fh, stderr=fh,
                            timeout=240, env=env, cwd=REPO).returncode
    return rc, log.read_text()[-4000:]


def _logs(run: Path, segment: int) -> list[str]:
    return sorted(p.name for p in (run / "segments" / f"{segment:04d}" / "logs").glob("*.log"))


def test_the_first_node_trains_alone_and_the_others_stay_idle(tmp_path: Path) -> None:
    rc, out = _run(_config(tmp_path, None))
    assert rc == 0, out
    run = tmp_path / "run"
    state = json.loads((run / "state.json").read_text())
    assert state["status"] == "done", out
    assert len(state["segments"]) == 1
    # one node trained; the two idle ones wrote no log, no heartbeat, no exit record
    assert _logs(run, 1) == ["node1.log"]
    records = sorted(p.name for p in (run / "segments" / "0001" / "nodes").iterdir())
    assert all(name.startswith("node1.") for name in records), records
    text = (run / "segments" / "0001" / "logs" / "node1.log").read_text()
    assert "iteration       30/" in text or "iteration 30" in text.replace("  ", " "), text[-800:]


def test_a_hang_on_the_first_node_is_a_hang_not_an_early_exit(tmp_path: Path) -> None:
    rc, out = _run(_config(tmp_path, "hang:node1:12"))
    run = tmp_path / "run"
    state = json.loads((run / "state.json").read_text())
    first = state["segments"][0]
    assert first["cause"] == "hang", (first["cause"], first["reason"], out)
    assert first["action"] != "stop_and_alert", first["reason"]
    # the run went on (the hang happens once per run) and finished
    assert rc == 0 and state["status"] == "done", out
    assert _logs(run, 1) == ["node1.log"]
