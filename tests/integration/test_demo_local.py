"""The real demo on the embedded local backend: real processes, real checkpoints, a real fault."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO

pytestmark = pytest.mark.integration


def orch(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO)


@pytest.fixture
def demo_cfg(tmp_path: Path) -> Path:
    cfg = yaml.safe_load((REPO / "configs" / "demo.yaml").read_text())
    cfg["run_dir"] = str(tmp_path / "run")
    cfg["checkpoint"]["dir"] = str(tmp_path / "run" / "checkpoints")
    cfg["workdir"] = str(REPO)
    p = tmp_path / "demo.yaml"
    p.write_text(yaml.safe_dump(cfg))
    return p


def test_demo_end_to_end(demo_cfg: Path, tmp_path: Path) -> None:
    dry = orch("run", str(demo_cfg), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "nothing is submitted" in dry.stdout and "would run on: node1,node2,node3" in dry.stdout
    assert not (tmp_path / "run" / "state.json").exists()

    res = orch("run", str(demo_cfg))
    assert res.returncode == 0, res.stdout + res.stderr
    st = json.loads(orch("status", str(demo_cfg), "--json").stdout)
    assert st["state"] == "done"
    s1, s2 = st["segments"][:2]
    assert s1["cause"] == "gpu_ecc" and s1["culprit_nodes"] == ["node3"]
    assert s2["excluded"] == ["node3"] and "node3" not in s2["nodes"]
    assert s2["resumed_from"] and s2["start_iteration"] > 0
    assert st["blacklist"][0]["node"] == "node3" and "ECC" in st["blacklist"][0]["evidence"]
    # per-node output, one file per host, each line tagged with its rank
    logs = tmp_path / "run" / "segments" / "0002" / "logs"
    assert sorted(p.name for p in logs.glob("*.log")) == ["node1.log", "node2.log", "node4.log"]
    assert " 2:  iteration" in (logs / "node4.log").read_text()
    # the training really resumed: segment 2's first progress line is past the checkpoint
    first = next(ln for ln in (logs / "node1.log").read_text().splitlines() if re.search(r"iteration\s+\d+/", ln))
    assert f"iteration {s2['start_iteration'] + 1:8d}/" in first

    # dry-run of a finished run shows the exclusion and the checkpoint it would resume from
    dry2 = orch("run", str(demo_cfg), "--dry-run")
    assert "# exclude: node3" in dry2.stdout and "iter_0000060" in dry2.stdout


def test_second_controller_is_refused(demo_cfg: Path, tmp_path: Path) -> None:
    from orchestrator.runlock import RunLock

    lock = RunLock(tmp_path / "run")
    lock.acquire()
    try:
        res = orch("run", str(demo_cfg))
        assert res.returncode == 1 and "another controller" in res.stderr
    finally:
        lock.release()
