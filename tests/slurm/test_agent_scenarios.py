"""Hangs and preflight on the real Slurm test cluster: a frozen node (D state), an interruptible hang,
a node whose GPU health check fails."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.slurm.conftest import TESTBED, make_config, orch, orch_bg, progressing, sh, status, uniq, wait_until

pytestmark = pytest.mark.slurm
HANG_WATCH = {"poll_interval_s": 1, "stall_timeout_s": 15, "startup_timeout_s": 90, "cascade_grace_s": 3}


def test_frozen_node_in_d_state_is_named_cancelled_and_excluded(cluster: None, tmp_path: Path) -> None:
    cfg = make_config(tmp_path, uniq("freeze"), iters=300, step=0.1, collective_timeout=600, watch=HANG_WATCH)
    proc = orch_bg("run", str(cfg), log=tmp_path / "ctl.log")
    try:
        wait_until(lambda: progressing(cfg, 20), 120, "segment 1 to make progress")
        sh(str(TESTBED), "freeze-job", "node2")
        frozen = [ln.split()[0] for ln in sh("ps", "-eo", "pid,stat,comm").stdout.splitlines() if " D" in ln]
        assert frozen, "freezing must leave processes in state D"
        assert proc.wait(timeout=400) == 0, (tmp_path / "ctl.log").read_text()[-3000:]
    finally:
        sh(str(TESTBED), "thaw-job", "node2", check=False)
        proc.kill() if proc.poll() is None else None
    st = status(cfg)
    s1 = st["segments"][0]
    assert s1["cause"] == "hang" and s1["culprit_nodes"] == ["node2"] and s1["job_state"] == "CANCELLED"
    assert all("node2" in s["excluded"] and "node2" not in s["nodes"] for s in st["segments"][1:])
    assert st["state"] == "done"
    # the healthy nodes answered the dump request; the frozen one could not
    dumps = sorted(p.name for p in (tmp_path / "run" / "segments" / "0001" / "nodes").glob("*.dump.json"))
    assert dumps == ["node1.dump.json", "node3.dump.json"]


def test_interruptible_hang_found_by_stack_dumps(cluster: None, tmp_path: Path) -> None:
    cfg = make_config(tmp_path, uniq("hang"), iters=80, faults=("hang:node2:30",), collective_timeout=600,
                      watch=HANG_WATCH)
    res = orch("run", str(cfg), timeout=400)
    assert res.returncode == 0, res.stdout + res.stderr
    st = status(cfg)
    s1 = st["segments"][0]
    assert s1["cause"] == "hang" and s1["culprit_nodes"] == ["node2"], s1
    d1 = json.loads((tmp_path / "run" / "segments" / "0001" / "nodes" / "node1.dump.json").read_text())
    assert any("__call__" in p["top_frame"] for p in d1["processes"])  # waiting in the all-reduce
    assert st["segments"][1]["start_iteration"] == 20 and st["state"] == "done"


def test_preflight_failure_excludes_node_before_training(cluster: None, tmp_path: Path) -> None:
    nvml = tmp_path / "nvml.json"
    nvml.write_text(json.dumps({"node2": [{}, {"ecc_uncorrected": 4}], "*": [{}, {}]}))
    cfg = make_config(tmp_path, uniq("pre"), env={"OMP_NUM_THREADS": "1", "ORCH_FAKE_NVML": str(nvml)})
    res = orch("run", str(cfg))
    assert res.returncode == 0, res.stdout + res.stderr
    st = status(cfg)
    s1 = st["segments"][0]
    assert s1["cause"] == "gpu_ecc" and s1["culprit_nodes"] == ["node2"]
    assert "ORCH-PREFLIGHT gpu: FAILED" in s1["evidence"][0]["text"]
    log2 = (tmp_path / "run" / "segments" / "0001" / "logs" / "node2.log").read_text()
    assert not re.search(r"iteration\s+\d+/", log2) and "starting from scratch" not in log2  # never trained
    assert all("node2" in s["excluded"] for s in st["segments"][1:]) and st["state"] == "done"
