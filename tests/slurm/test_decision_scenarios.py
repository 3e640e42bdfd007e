"""Issue 20 on the real Slurm test cluster: decisions by DECISIONS.md, with real faults.

(a) every rank dies with the same SIGSEGV before its first progress: stopped after one segment, nobody
    excluded, the alert names the symptom;
(b) a training that exits 0 before the goal and writes no checkpoint where the config looks: stopped after
    two segments, with a reason that names the missing checkpoint; status shows the time as lost;
(c) a node whose NVML (the stand-in at the library boundary, tests/nvml_standin.py) reports uncorrectable ECC
    errors rising during the segment while the training prints only a generic CUDA error: that node is
    excluded, on the agent's own reading of the node.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.slurm.conftest import make_config, orch, sacct_settled, status, uniq

pytestmark = pytest.mark.slurm


def test_a_the_same_segfault_before_any_progress_stops_after_one_segment(cluster: None, tmp_path: Path) -> None:
    cfg = make_config(tmp_path, uniq("segv0"), faults=("segfault:all:1",))
    res = orch("run", str(cfg))
    assert res.returncode == 3, res.stdout + res.stderr
    st = status(cfg)
    assert len(st["segments"]) == 1 and st["state"] == "stopped", st["segments"]
    s1 = st["segments"][0]
    assert s1["cause"] == "segfault" and s1["culprit_nodes"] == [] and s1["action"] == "stop_and_alert", s1
    assert s1["rule"] == "same_on_every_node" and "segfault" in st["stop_reason"], st["stop_reason"]
    assert not st["blacklist"] and not s1["excluded"]


def test_b_exit_0_before_the_goal_without_a_checkpoint_stops_the_second_time(cluster: None,
                                                                            tmp_path: Path) -> None:
    looks = tmp_path / "run" / "not-where-it-saves"
    cfg = make_config(tmp_path, uniq("nockpt"), iters=30, goal={"target_iteration": 60},
                      checkpoint={"dir": str(looks), "preset": "megatron"})
    res = orch("run", str(cfg))
    assert res.returncode == 3, res.stdout + res.stderr
    st = status(cfg)
    segs = st["segments"]
    assert len(segs) == 2 and st["state"] == "stopped", segs
    assert all(s["start_iteration"] == 0 and s["end_iteration"] == 30 for s in segs), segs
    assert segs[1]["decision_rule"] == "no_checkpoint" and str(looks) in st["stop_reason"], st["stop_reason"]
    text = orch("status", str(cfg)).stdout
    assert "lost: no checkpoint" in text and "exit 0 before the goal" in text, text


def test_c_rising_ecc_counters_behind_a_generic_cuda_error_exclude_the_node(cluster: None,
                                                                           tmp_path: Path) -> None:
    standin = tmp_path / "nvml.json"
    standin.write_text(json.dumps({"*": [{"ecc_volatile_uncorrected": 0, "util": 100, "sm_clock": 1410}] * 2}))
    name = uniq("nvml")
    cfg = make_config(tmp_path, name, iters=60, faults=("cudaerr:node2:25",), collective_timeout=10,
                      env={"OMP_NUM_THREADS": "1", "ORCH_NVML_MODULE": str(REPO / "tests" / "nvml_standin.py"),
                           "ORCH_NVML_STANDIN": str(standin)})
    res = orch("run", str(cfg))
    assert res.returncode == 0, res.stdout + res.stderr
    st = status(cfg)
    s1 = st["segments"][0]
    assert s1["cause"] == "gpu_ecc" and s1["culprit_nodes"] == ["node2"] and s1["action"] == "resubmit_exclude", s1
    assert s1["rule"] == "node_reports_hardware", s1
    node_side = s1["node_evidence"]
    assert any("uncorrectable ECC errors rose" in e["text"] and e["node"] == "node2" for e in node_side), s1
    log = (tmp_path / "run" / "segments" / "0001" / "logs" / "node2.log").read_text()
    assert "ORCH-NODE nvml: GPU 0: volatile uncorrectable ECC errors rose 0 -> 2" in log
    assert st["state"] == "done" and all("node2" in s["excluded"] for s in st["segments"][1:])
    jobs = sacct_settled(name, len(st["segments"]))
    assert all("node2" not in nodes for *_, nodes in jobs[1:]), jobs
