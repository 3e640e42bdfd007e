"""Issue 40 on the real Slurm test cluster: two runs share the nodes' reputation. Run A's node2 reports an
uncorrectable ECC error: A excludes it and publishes the verdict, with A's name, to the shared blacklist; run B's
first segment is submitted without node2, B's status shows A's evidence, and `orchestrator nodes` ranks node2 with
a drain-ready line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.slurm.conftest import make_config, orch, sacct_settled, status, uniq

pytestmark = pytest.mark.slurm


def test_a_node_that_failed_run_a_is_kept_out_of_run_bs_first_segment(cluster: None, tmp_path: Path) -> None:
    shared = tmp_path / "site" / "blacklist.json"
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    name_a, name_b = uniq("rep-a"), uniq("rep-b")
    cfg_a = make_config(tmp_path / "a", name_a, iters=40, faults=("ecc:node2:15",),
                        policy={"shared_blacklist": str(shared)})
    res = orch("run", str(cfg_a))
    assert res.returncode == 0, res.stdout + res.stderr
    seg_a = status(cfg_a)["segments"][0]
    assert seg_a["cause"] == "gpu_ecc" and seg_a["culprit_nodes"] == ["node2"], seg_a

    cfg_b = make_config(tmp_path / "b", name_b, iters=20, policy={"shared_blacklist": str(shared)})
    res = orch("run", str(cfg_b))
    assert res.returncode == 0, res.stdout + res.stderr
    st = status(cfg_b)
    assert "node2" in st["segments"][0]["excluded"] and "node2" not in st["segments"][0]["nodes"], st["segments"]
    entry = next(e for e in st["blacklist"] if e["node"] == "node2")
    assert entry["from_run"] == name_a and "ECC" in entry["evidence"].upper(), entry
    jobs = sacct_settled(name_b, len(st["segments"]))
    assert all("node2" not in nodes for *_, nodes in jobs), jobs

    res = orch("nodes", str(tmp_path), "--shared", str(shared), "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    worst = json.loads(res.stdout)[0]
    assert worst["node"] == "node2" and worst["runs"] == [name_a] and worst["strong"] == 1, worst
    drain = 'scontrol update NodeName=node2 State=DRAIN Reason="[node_problem] gpu_ecc'
    assert worst["drain_command"].startswith(drain), worst
