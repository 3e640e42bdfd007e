"""Issue 11 on the real Slurm test cluster: real PyTorch failure text, cascades, silence and symmetry.

(a) one rank frozen in state D while the peers' collective timeout (10 s) is shorter than the stall timeout
    (120 s): the peers exit with the watchdog's DistBackendError output first; the frozen node is named
    (hang), excluded (sacct), and the run resumes and finishes;
(b) the same with the node's agent frozen too (its heartbeat goes stale, it cannot answer a dump request);
(c) the same KeyError on every rank: the run stops after one segment as user_bug;
(d) the same segfault on every node: nobody is excluded.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.slurm.conftest import (
    TESTBED,
    make_config,
    orch,
    orch_bg,
    progressing,
    sacct_settled,
    sh,
    status,
    uniq,
    wait_until,
)

pytestmark = pytest.mark.slurm
FAST_WATCH = {"poll_interval_s": 1, "stall_timeout_s": 120, "startup_timeout_s": 180, "cascade_grace_s": 3}


def frozen_run(tmp_path: Path, name: str, how: str, foreign_oom: bool = False) -> dict[str, object]:
    cfg = make_config(tmp_path, name, iters=150, step=0.1, collective_timeout=10, watch=FAST_WATCH)
    proc = orch_bg("run", str(cfg), log=tmp_path / "ctl.log")
    try:
        wait_until(lambda: progressing(cfg, 20), 150, "segment 1 to make progress")
        sh(str(TESTBED), how, "node2")
        if foreign_oom:  # another workload's process OOM-killed: every node's kernel log holds it (issue 38)
            oom = sh(str(TESTBED), "foreign-oom", check=False)
            assert oom.returncode == 0 and oom.stdout.strip().isdigit(), oom.stderr
        assert proc.wait(timeout=600) == 0, (tmp_path / "ctl.log").read_text()[-4000:]
    finally:
        sh(str(TESTBED), "thaw-job", "node2", check=False)
        proc.kill() if proc.poll() is None else None
    st = status(cfg)
    logs = tmp_path / "run" / "segments" / "0001" / "logs"
    peers = (logs / "node1.log").read_text() + (logs / "node3.log").read_text()
    assert "torch.distributed.DistBackendError" in peers and "what():" in peers  # the real multi-line output
    s1 = st["segments"][0]
    assert s1["cause"] == "hang" and s1["culprit_nodes"] == ["node2"], s1
    assert st["state"] == "done" and all("node2" in s["excluded"] for s in st["segments"][1:])
    jobs = sacct_settled(name, len(st["segments"]))
    assert len(jobs) == len(st["segments"]) and all("node2" not in nodes for *_, nodes in jobs[1:]), jobs
    return st


def test_a_frozen_rank_whose_peers_time_out_first_is_the_hang(cluster: None, tmp_path: Path) -> None:
    """Also, while the rank is frozen, a process that is not the job's is OOM-killed on the host every node
    shares: the kill is context in each node's log, the verdict stays the hang on node2 and the run goes on
    (issue 38: it used to become host_oom / stop_and_alert)."""
    frozen_run(tmp_path, uniq("frank"), "freeze-rank", foreign_oom=True)
    dump = tmp_path / "run" / "segments" / "0001" / "nodes" / "node2.dump.json"
    assert dump.exists() and '"state":"D"' in dump.read_text().replace(" ", "")  # its agent answered
    logs = tmp_path / "run" / "segments" / "0001" / "logs"
    said = [n for n in ("node1", "node2", "node3") if "not a process of this job" in (logs / f"{n}.log").read_text()]
    assert said, "no node said the OOM kill was another workload's"


def test_b_a_frozen_node_agent_included_is_the_hang(cluster: None, tmp_path: Path) -> None:
    frozen_run(tmp_path, uniq("fnode"), "freeze-job")
    assert not (tmp_path / "run" / "segments" / "0001" / "nodes" / "node2.dump.json").exists()


def test_c_the_same_keyerror_on_every_rank_stops_as_user_bug(cluster: None, tmp_path: Path) -> None:
    cfg = make_config(tmp_path, uniq("kerr"), faults=("keyerror:all:25",))
    res = orch("run", str(cfg))
    assert res.returncode == 3, res.stdout + res.stderr
    st = status(cfg)
    assert len(st["segments"]) == 1 and st["state"] == "stopped"
    s1 = st["segments"][0]
    assert s1["cause"] == "user_bug" and s1["culprit_nodes"] == [] and s1["action"] == "stop_and_alert"
    assert "KeyError: 'input_ids'" in " ".join(e["text"] for e in s1["evidence"])


def test_d_the_same_segfault_on_every_node_excludes_nobody(cluster: None, tmp_path: Path) -> None:
    cfg = make_config(tmp_path, uniq("segv"), faults=("segfault:all:25",),
                      policy={"max_segments": 2, "max_no_progress_segments": 2})
    orch("run", str(cfg))
    st = status(cfg)
    s1 = st["segments"][0]
    assert s1["cause"] == "segfault" and s1["culprit_nodes"] == [], s1
    assert not st["blacklist"] and all(not s["excluded"] for s in st["segments"])
