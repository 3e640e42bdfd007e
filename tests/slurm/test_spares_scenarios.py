"""Issue 14 on the real Slurm test cluster: 2 nodes + 1 spare (--no-kill), restarts inside the allocation.

(A) ECC on node2 -> segment 2 is a new step of the SAME job on node1+node3 (sacct: steps .0 and .1, node2 not in
    .1), resumed from the newest checkpoint; then node3 crashes while segment 2 trains -> no spare left -> a NEW
    job that excludes node2 and node3; the run finishes.
(B) node2 (not the batch host) crashes while segment 1 trains -> restart inside the same job on node1+node3
    (node_fail, culprit node2); then the batch host node1 crashes -> the job ends, a NEW job excludes node1 and
    node2 and the run finishes on node3+node4.
(C) an admin drains the spare node3 mid-run, then ECC on node2: node3 is not promoted, a new job follows.
(D) an admin drains node2 of the running step: named in status, swapped for the spare after a checkpoint.
Two faults per run keep the file short (scripts/test.sh budget). No fixed sleeps: conditions with deadlines.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.slurm.conftest import TESTBED, make_config, orch_bg, sacct_settled, sh, status, uniq, wait_until

pytestmark = pytest.mark.slurm
SPARES = {"nodes": 2, "spare_nodes": 1}


def hosts(nodelist: str) -> list[str]:
    return sh("scontrol", "show", "hostnames", nodelist).stdout.split() if nodelist.strip() else []


def steps(job_id: str) -> dict[str, list[str]]:
    """The job's sacct rows (allocation, batch, steps) -> their nodes."""
    out = sh("sacct", "-j", job_id, "-o", "JobID,NodeList", "-P", "-n").stdout
    rows = [ln.split("|") for ln in out.splitlines() if "|" in ln]
    return {r[0]: hosts(r[1]) for r in rows}


def training(cfg: Path, index: int, beyond: int) -> dict[str, Any] | None:
    """Segment `index` (1-based) is the current one and its training got past iteration `beyond`."""
    s = status(cfg)
    segs = s.get("segments") or []
    if len(segs) != index or segs[-1]["action"] is not None:
        return None
    seg: dict[str, Any] = segs[-1]
    return seg if (seg["end_iteration"] or 0) > beyond else None


def submitted_exclude(run: Path, index: int) -> str:
    """The --exclude line of the batch script submitit handed to sbatch for segment `index`."""
    scripts = list((run / "segments" / f"{index:04d}" / "submitit").rglob("*submission.sh"))
    assert scripts, f"no submission script for segment {index}"
    return next((ln for ln in scripts[0].read_text().splitlines() if "--exclude" in ln), "")


@contextlib.contextmanager
def drained_while_running(cfg: Path, tmp_path: Path, node: str, reason: str) -> Iterator[None]:
    """Run `cfg`; once segment 1 trains on node1+node2, an admin drains `node` with `reason`; the run must end
    done; the node is resumed whatever happens."""
    proc = orch_bg("run", str(cfg), log=tmp_path / "ctl.log")
    try:
        s1 = wait_until(lambda: training(cfg, 1, 5), 180, "segment 1 to make progress", every=1)
        assert s1["nodes"] == ["node1", "node2"], s1
        sh("scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}")
        yield
        assert proc.wait(timeout=420) == 0, (tmp_path / "ctl.log").read_text()[-4000:]
    finally:
        proc.kill() if proc.poll() is None else None
        sh("scontrol", "update", f"NodeName={node}", "State=RESUME", check=False)


def two_faults(tmp_path: Path, cfg: Path, first: str | None, crash: str) -> dict[str, Any]:
    """Run `cfg`; crash `first` (if given) while segment 1 trains, `crash` while segment 2 trains."""
    proc = orch_bg("run", str(cfg), log=tmp_path / "ctl.log")
    crashed: list[str] = []
    try:
        if first:
            wait_until(lambda: training(cfg, 1, 20), 180, "segment 1 to make progress", every=1)
            sh(str(TESTBED), "crash", first)
            crashed.append(first)
        s2 = wait_until(lambda: training(cfg, 2, 0), 240, "segment 2 to start training", every=1)
        wait_until(lambda: training(cfg, 2, s2["start_iteration"] + 10), 120, "segment 2 to progress", every=1)
        sh(str(TESTBED), "crash", crash)
        crashed.append(crash)
        assert proc.wait(timeout=420) == 0, (tmp_path / "ctl.log").read_text()[-4000:]
    finally:
        proc.kill() if proc.poll() is None else None
        for node in crashed:
            sh(str(TESTBED), "revive", node, timeout=90, check=False)
            sh("scontrol", "update", f"NodeName={node}", "State=RESUME", check=False)
    st = status(cfg)
    assert st["state"] == "done", st
    return st


def check_restart_in_job(name: str, st: dict[str, Any], culprit: str, cause: str) -> str:
    """Segment 2 is a restart of segment 1 inside the same job on node1+node3, resumed from a checkpoint."""
    s1, s2 = st["segments"][0], st["segments"][1]
    job = s1["job_id"]
    assert s1["cause"] == cause and s1["culprit_nodes"] == [culprit], s1
    assert s1["nodes"] == ["node1", "node2"] and s1["spare_count"] == 1, s1
    assert s2["job_id"] == job and s2["in_job_of"] == 1 and sorted(s2["nodes"]) == ["node1", "node3"], s2
    assert s2["resumed_from"] and s2["start_iteration"] > 0, s2
    rows = steps(job)
    assert f"{job}.0" in rows and f"{job}.1" in rows and f"{job}.2" not in rows, rows
    assert culprit in rows[f"{job}.0"] and culprit not in rows[f"{job}.1"], rows
    assert sorted(rows[f"{job}.1"]) == ["node1", "node3"], rows
    # one job id for both segments (a --no-kill job that lost a node is listed again after its resize)
    jobs = sacct_settled(name, 2)
    assert {r[0] for r in jobs if r[1] == f"{name}.seg0001"} == {job}, jobs
    assert not [r for r in jobs if r[1] == f"{name}.seg0002"], jobs  # segment 2 was never submitted
    return str(job)


def check_new_job(name: str, st: dict[str, Any], run: Path, job: str, excluded: set[str]) -> None:
    """Segment 3 is a new job that excludes `excluded` and ran on the other two nodes."""
    s3 = st["segments"][2]
    assert len(st["segments"]) == 3 and s3["job_id"] != job and s3["in_job_of"] is None, st["segments"]
    assert excluded <= set(s3["excluded"]) and sorted(s3["nodes"]) == sorted({"node1", "node2", "node3", "node4"}
                                                                             - excluded), s3
    line = submitted_exclude(run, 3)
    assert excluded <= set(hosts(line.partition("=")[2].strip("'\"")) if line else []), line
    jobs = {r[0]: r for r in sacct_settled(name, 2)}
    assert set(jobs) == {job, s3["job_id"]}, jobs
    assert not excluded & set(hosts(jobs[s3["job_id"]][3])), jobs[s3["job_id"]]


def test_a_ecc_restarts_on_the_spare_then_a_crash_exhausts_spares(cluster: None, tmp_path: Path) -> None:
    name = uniq("spare-ecc")
    cfg = make_config(tmp_path, name, iters=250, step=0.1, faults=("ecc:node2:30",), resources=SPARES)
    st = two_faults(tmp_path, cfg, None, "node3")
    job = check_restart_in_job(name, st, "node2", "gpu_ecc")
    s2 = st["segments"][1]
    assert s2["resumed_from"].endswith("iter_0000020") and s2["start_iteration"] == 20, s2
    assert s2["cause"] == "node_fail" and s2["culprit_nodes"] == ["node3"], s2
    check_new_job(name, st, tmp_path / "run", job, {"node2", "node3"})


def test_b_node_crash_restarts_on_the_spare_then_the_batch_host_crashes(cluster: None, tmp_path: Path) -> None:
    name = uniq("spare-crash")
    cfg = make_config(tmp_path, name, iters=300, step=0.1, collective_timeout=300, resources=SPARES)
    st = two_faults(tmp_path, cfg, "node2", "node1")
    job = check_restart_in_job(name, st, "node2", "node_fail")
    s2 = st["segments"][1]
    assert s2["cause"] == "node_fail" and "node1" in s2["culprit_nodes"], s2
    check_new_job(name, st, tmp_path / "run", job, {"node1", "node2"})


def test_c_a_spare_an_admin_drains_mid_run_is_not_promoted(cluster: None, tmp_path: Path) -> None:
    """Issue 40: while segment 1 trains on node1+node2 with node3 as its spare, an admin drains node3 with an
    NHC-style reason (sinfo: drng); then ECC on node2: no restart on node3 inside the job, a new job excludes
    node2 and runs where Slurm still gives nodes (node1+node4)."""
    name = uniq("spare-drained")
    cfg = make_config(tmp_path, name, iters=200, step=0.1, faults=("ecc:node2:80",), resources=SPARES)
    with drained_while_running(cfg, tmp_path, "node3", "NHC: check_gpu_ecc failed"):
        pass
    st = status(cfg)
    assert st["state"] == "done", st
    s1, s2 = st["segments"][0], st["segments"][1]
    assert s1["cause"] == "gpu_ecc" and s1["culprit_nodes"] == ["node2"], s1
    assert s2["job_id"] != s1["job_id"] and s2["in_job_of"] is None, s2
    assert "node3" not in s2["nodes"] and "node2" not in s2["nodes"], s2
    assert "node3" not in steps(str(s1["job_id"])).get(f"{s1['job_id']}.1", []), steps(str(s1["job_id"]))
    assert "drained or down in Slurm: not promoted" in (tmp_path / "ctl.log").read_text()


def test_d_a_node_of_the_running_step_an_admin_drains_is_named_and_swapped_for_the_spare(
        cluster: None, tmp_path: Path) -> None:
    """Issue 40: while segment 1 trains on node1+node2 with node3 as its spare, an admin drains node2 with an
    NHC-style reason: status --json names it on the segment, and after the next complete checkpoint the step
    restarts inside the same job on node1+node3 (node2 excluded, on the admin's word)."""
    name = uniq("step-drained")
    cfg = make_config(tmp_path, name, iters=400, step=0.1, resources=SPARES)
    reason = "NHC: check_gpu_ecc: GPU 3 has 2 uncorrectable ECC errors"
    with drained_while_running(cfg, tmp_path, "node2", reason):
        named = wait_until(lambda: (status(cfg).get("segments") or [{}])[0].get("drained"), 120,
                           "the drain to be named on segment 1", every=1)
        assert named == {"node2": reason}, named
    st = status(cfg)
    assert st["state"] == "done", st
    s1, s2 = st["segments"][0], st["segments"][1]
    assert s1["cause"] == "node_fail" and s1["culprit_nodes"] == ["node2"] and s1["rule"] == "drained_in_slurm", s1
    assert s2["job_id"] == s1["job_id"] and s2["nodes"] == ["node1", "node3"], s2
    assert s2["start_iteration"] > 0 and s2["resumed_from"], s2
    assert "node2" not in steps(str(s1["job_id"])).get(f"{s1['job_id']}.1", []), steps(str(s1["job_id"]))
