"""Failure scenarios on the real Slurm test cluster (slurmctld, 4 slurmd, slurmdbd)."""

from __future__ import annotations

import signal
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.slurm.conftest import (
    TESTBED,
    make_config,
    node_states,
    orch,
    orch_bg,
    sacct_jobs,
    sacct_settled,
    sh,
    status,
    uniq,
    wait_until,
)

pytestmark = pytest.mark.slurm


def test_sticky_ecc_excluded_resumed_and_array_baseline(cluster: None, tmp_path: Path) -> None:
    name = uniq("ecc")
    cfg = make_config(tmp_path, name, faults=("ecc:node3:35",))
    res = orch("run", str(cfg))
    assert res.returncode == 0, res.stdout + res.stderr
    st = status(cfg)
    assert st["state"] == "done"
    s1, s2 = st["segments"][0], st["segments"][1]
    assert s1["cause"] == "gpu_ecc" and s1["culprit_nodes"] == ["node3"] and "node3" in s1["nodes"]
    for seg in st["segments"][1:]:
        assert "node3" in seg["excluded"] and "node3" not in seg["nodes"]
    assert s2["resumed_from"].endswith("iter_0000030") and s2["start_iteration"] == 30
    rows = sacct_settled(name, len(st["segments"]))
    assert len(rows) == len(st["segments"]) and all("node3" not in r[3] or r[0] == s1["job_id"] for r in rows)

    # the same fault under a blind `sbatch --array=1-5%1`: Slurm puts every task on the lowest idle nodes
    base = tmp_path / "array"
    base.mkdir()
    script = base / "array.sh"
    script.write_text(
        "#!/bin/bash\n#SBATCH --array=1-5%1\n#SBATCH -N 3\n#SBATCH --time=5\n"
        f"#SBATCH --output={base}/%A_%a.out\n#SBATCH --job-name={name}-array\n"
        f"srun {sys.executable} {REPO}/scripts/demo_train.py --iters=60 --ckpt-dir={base}/ckpt "
        f"--sync-dir={base}/sync/$SLURM_ARRAY_TASK_ID --step-time=0.01 --collective-timeout=3 "
        "--fault=ecc:node3:35\n")
    sh("sbatch", str(script))
    wait_until(lambda: (r := sacct_jobs(f"{name}-array")) and len(r) >= 5
               and all(x[2] not in ("PENDING", "RUNNING") for x in r), 240, "the array to finish")
    arr = [r for r in sacct_jobs(f"{name}-array") if "_" in r[0]]
    on_bad = sum("node3" in sh("scontrol", "show", "hostnames", r[3]).stdout.split() for r in arr)
    failed = Counter(r[2].split()[0] for r in arr)
    print(f"blind array: {on_bad}/{len(arr)} tasks placed on node3; end states {dict(failed)}")
    assert on_bad == len(arr) == 5 and failed.get("FAILED", 0) == 5


def test_timelimit_resubmits_without_blame(cluster: None, tmp_path: Path) -> None:
    # 120 s of training: Slurm ends a 1-minute job 60-90 s in (it checks the limit about every 30 s)
    cfg = make_config(tmp_path, uniq("tl"), iters=2400, step=0.05, time_limit=1)
    res = orch("run", str(cfg), timeout=400)
    assert res.returncode == 0, res.stdout + res.stderr
    st = status(cfg)
    s1 = st["segments"][0]
    assert s1["cause"] == "timelimit" and s1["culprit_nodes"] == [] and s1["job_state"] == "TIMEOUT", s1
    # CI once saw segment 2 start at 0: say what segment 1 reached and which checkpoints were on disk
    ckpts = sorted(p.name for p in (tmp_path / "run" / "checkpoints").glob("iter_*"))
    log = (tmp_path / "run" / "controller.log").read_text() if (tmp_path / "run" / "controller.log").exists() else ""
    said = "\n".join(ln[:300] for ln in log.splitlines() if "segment " in ln or "running on" in ln)
    assert st["segments"][1]["start_iteration"] > 0, (
        f"segment 1 reached {s1.get('end_iteration')} ({s1.get('job_state')}); checkpoints at the end "
        f"{ckpts[-3:]}; segment 2 {st['segments'][1]}; the controller said:\n{said}")
    assert st["blacklist"] == [] and st["state"] == "done"


def test_node_crash_is_node_fail_and_excluded(cluster: None, tmp_path: Path) -> None:
    cfg = make_config(tmp_path, uniq("crash"), iters=500, step=0.1, collective_timeout=300)
    proc = orch_bg("run", str(cfg), log=tmp_path / "ctl.log")
    try:
        wait_until(lambda: (s := status(cfg)) and s["segments"] and (s["segments"][0]["end_iteration"] or 0) > 20,
                   120, "segment 1 to make progress")
        sh(str(TESTBED), "crash", "node2")
        assert proc.wait(timeout=300) == 0, (tmp_path / "ctl.log").read_text()
    finally:
        proc.kill() if proc.poll() is None else None
    st = status(cfg)
    s1 = st["segments"][0]
    assert s1["cause"] == "node_fail" and s1["culprit_nodes"] == ["node2"], s1
    # Slurm's NODE_FAIL, or the controller first: node2's agent silent and slurmctld unable to reach it (issue 39)
    assert s1["job_state"] == "NODE_FAIL" or (s1["job_state"] == "CANCELLED" and s1["rule"] == "node_unreachable"), s1
    assert all("node2" not in s["nodes"] for s in st["segments"][1:]) and st["state"] == "done"


def test_user_bug_stops_instead_of_looping(cluster: None, tmp_path: Path) -> None:
    cfg = make_config(tmp_path, uniq("bug"), faults=("exception:all:25",))
    res = orch("run", str(cfg))
    assert res.returncode == 3
    st = status(cfg)
    assert st["state"] == "stopped" and len(st["segments"]) == 1
    assert st["segments"][0]["cause"] == "user_bug" and st["blacklist"] == []
    assert "user_bug" in st["stop_reason"]


def test_poisoned_gpu_after_ecc_is_not_user_oom(cluster: None, tmp_path: Path) -> None:
    cfg = make_config(tmp_path, uniq("poison"), faults=("ecc:node3:35",))
    # stop after segment 1, then an operator returns node3 to the pool by hand: its GPU is still poisoned
    res = orch("run", str(cfg), "--set", "policy.max_infra_failures=1")
    assert res.returncode == 3 and status(cfg)["segments"][0]["cause"] == "gpu_ecc"
    assert orch("blacklist", "remove", str(cfg), "node3").returncode == 0
    res = orch("run", str(cfg), "--resume")  # a stopped run goes on only on purpose (issue 37)
    assert res.returncode == 0, res.stdout + res.stderr
    st = status(cfg)
    s2 = st["segments"][1]
    assert "node3" in s2["nodes"] and s2["cause"] == "gpu_oom_startup" and s2["culprit_nodes"] == ["node3"]
    assert all("node3" in s["excluded"] for s in st["segments"][2:]) and st["state"] == "done"


def test_controller_killed_and_restarted_reattaches(cluster: None, tmp_path: Path) -> None:
    name = uniq("kill")
    cfg = make_config(tmp_path, name, iters=300, step=0.1)
    log = tmp_path / "ctl.log"
    proc = orch_bg("run", str(cfg), log=log)
    wait_until(lambda: (s := status(cfg)) and s["segments"] and (s["segments"][0]["end_iteration"] or 0) > 10,
               120, "segment 1 running")
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    proc2 = orch_bg("run", str(cfg), log=log)
    assert proc2.wait(timeout=300) == 0, log.read_text()
    st = status(cfg)
    assert st["state"] == "done" and len(st["segments"]) == 1
    names = Counter(r[1] for r in sacct_settled(name, 1))
    assert names == Counter({f"{name}.seg0001": 1})
    assert node_states()  # the cluster still answers


def test_scheduler_outage_is_not_a_failure(cluster: None, tmp_path: Path) -> None:
    import time

    name = uniq("outage")
    cfg = make_config(tmp_path, name, iters=700, step=0.1)
    proc = orch_bg("run", str(cfg), log=tmp_path / "ctl.log")
    try:
        wait_until(lambda: (s := status(cfg)) and s["segments"] and (s["segments"][0]["end_iteration"] or 0) > 20,
                   120, "segment 1 to make progress")
        sh(str(TESTBED), "stop-ctld")
        assert sh("scontrol", "ping", check=False).returncode != 0
        t0 = time.monotonic()
        wait_until(lambda: time.monotonic() - t0 >= 60 or proc.poll() is not None, 90, "60 s of outage")
        assert proc.poll() is None, "the controller must keep waiting through a scheduler outage"
        assert len(status(cfg)["segments"]) == 1 and status(cfg)["segments"][0]["cause"] is None
    finally:
        sh(str(TESTBED), "start-ctld", timeout=90)
    assert proc.wait(timeout=300) == 0, (tmp_path / "ctl.log").read_text()[-3000:]
    st = status(cfg)
    assert st["state"] == "done" and len(st["segments"]) == 1 and st["segments"][0]["cause"] == "success"
    assert len(sacct_settled(name, 1)) == 1  # never resubmitted


SLURM_POINTS = [("after_intent", 1), ("after_submit", 1), ("after_record", 2), ("poll", 4), ("state_write", 5),
                ("after_blacklist", 1)]


@pytest.mark.parametrize("point,n", SLURM_POINTS, ids=[f"{p}-{n}" for p, n in SLURM_POINTS])
def test_kill_and_restart_on_slurm(cluster: None, tmp_path: Path, point: str, n: int) -> None:
    """kill -9 at a point of a real Slurm run, then a restart: no duplicate job in sacct, node3 stays excluded."""
    import json
    import subprocess
    import sys

    from tests.slurm.conftest import slurm_env

    name = uniq("kill9")
    cfg = make_config(tmp_path, name, iters=30, step=0.03, faults=("ecc:node3:17",))
    env = slurm_env()
    log = tmp_path / "ctl.log"

    def run(failpoint: str | None) -> int:
        e = {k: v for k, v in env.items() if k != "ORCH_FAILPOINT"}
        if failpoint:
            e["ORCH_FAILPOINT"] = failpoint
        with log.open("a") as fh:
            return subprocess.run([sys.executable, "-m", "orchestrator", "run", str(cfg)], stdout=fh, stderr=fh,
                                  env=e, cwd=REPO, timeout=300).returncode

    assert run(f"{point}:{n}") == 137, log.read_text()[-2000:]
    assert run(None) == 0, log.read_text()[-3000:]
    state = json.loads((tmp_path / "run" / "state.json").read_text())
    assert state["status"] == "done"
    assert [e["node"] for e in state["blacklist"]["entries"]] == ["node3"]
    names = Counter(r[1] for r in sacct_settled(name, len(state["segments"])))
    assert all(c == 1 for c in names.values()) and len(names) == len(state["segments"]), names
