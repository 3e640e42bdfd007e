"""Issue 21 on the real test cluster: 30 kill -9 schedules of the controller in one run, and short outages
of slurmctld and slurmdbd while a segment trains. The in-process versions with hundreds of schedules and
outages are tests/adversarial/test_crash_schedules.py and test_fail_open.py; these check the same invariants
against real sbatch, sacct, squeue and scancel."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO
from tests.slurm.conftest import TESTBED, make_config, orch_bg, sacct_settled, sh, slurm_env, status, uniq, wait_until

pytestmark = pytest.mark.slurm

# points a controller passes again in every life (a poll, a state save) and, now and then, at a submission
RECURRING = [("poll", 1), ("poll", 2), ("poll", 3), ("state_write", 1), ("state_write", 2), ("after_backup", 1)]


def live_jobs(prefix: str) -> list[str]:
    out = sh("squeue", "-h", "-o", "%j|%T", check=False).stdout
    return [ln for ln in out.splitlines() if ln.startswith(prefix) and not ln.endswith(("COMPLETED", "COMPLETING"))]


def saved(run_dir: Path) -> dict[str, Any]:
    state: dict[str, Any] = json.loads((run_dir / "state.json").read_text())
    return state


def test_thirty_kill_9_schedules_in_one_slurm_run(cluster: None, tmp_path: Path) -> None:
    rng = random.Random(21)
    name = uniq("kill30")
    cfg = make_config(tmp_path, name, iters=120, step=0.6, faults=("ecc:node3:50",), time_limit=15)
    run_dir, log, env = tmp_path / "run", tmp_path / "ctl.log", slurm_env()
    kills, banned, recorded = 0, set[str](), set[str]()
    for _ in range(60):
        point, n = rng.choice(RECURRING)
        e = {**env, "ORCH_FAILPOINT": f"{point}:{n}"} if kills < 30 else env
        with log.open("a") as fh:
            rc = subprocess.run([sys.executable, "-m", "orchestrator", "run", str(cfg)], stdout=fh, stderr=fh,
                                env=e, cwd=REPO, timeout=600).returncode
        if rc == 0:
            break
        assert rc == 137, log.read_text()[-3000:]
        kills += 1
        state = saved(run_dir)
        assert len(live_jobs(name)) <= 1, live_jobs(name)
        ids = {s["job_id"] for s in state["segments"] if s["job_id"]}
        assert recorded <= ids, f"recorded segments lost: {recorded - ids}"
        now_banned = {e["node"] for e in state["blacklist"]["entries"]}
        assert banned <= now_banned, f"blacklist entries lost: {banned - now_banned}"
        recorded, banned = ids, now_banned
    assert kills >= 30, f"only {kills} kill -9 schedules before the run finished"
    state = saved(run_dir)
    assert state["status"] == "done" and [e["node"] for e in state["blacklist"]["entries"]] == ["node3"]
    assert all(s["start_iteration"] > 0 for s in state["segments"][1:])  # every later segment resumed
    names = Counter(r[1] for r in sacct_settled(name, len(state["segments"])))
    assert all(c == 1 for c in names.values()) and len(names) == len(state["segments"]), names


def test_short_scheduler_and_accounting_outages_never_resubmit(cluster: None, tmp_path: Path) -> None:
    """Two slurmctld outages and two slurmdbd outages while the only segment trains: nothing is cancelled or
    resubmitted, each scheduler outage is said once, and the run ends with one job."""
    name = uniq("blind")
    cfg = make_config(tmp_path, name, iters=90, step=0.5, time_limit=15)
    proc = orch_bg("run", str(cfg), log=tmp_path / "ctl.log")
    try:
        wait_until(lambda: (s := status(cfg)) and s["segments"] and (s["segments"][0]["end_iteration"] or 0) > 5,
                   120, "segment 1 to make progress")
        for stop, start in (("stop-ctld", "start-ctld"), ("stop-dbd", "start-dbd")) * 2:
            sh(str(TESTBED), stop)
            until = time.monotonic() + 8
            while time.monotonic() < until and proc.poll() is None:  # the outage lasts 8 s (a wait on a deadline)
                time.sleep(0.5)
            sh(str(TESTBED), start, timeout=90)
            assert proc.poll() is None, "the controller must keep waiting through an outage"
    finally:
        sh(str(TESTBED), "start-ctld", timeout=90, check=False)
        sh(str(TESTBED), "start-dbd", timeout=90, check=False)
    assert proc.wait(timeout=300) == 0, (tmp_path / "ctl.log").read_text()[-3000:]
    st = status(cfg)
    assert st["state"] == "done" and len(st["segments"]) == 1 and st["segments"][0]["cause"] == "success"
    assert len(sacct_settled(name, 1)) == 1  # never resubmitted
    said = (tmp_path / "ctl.log").read_text().count("scheduler unreachable (")
    assert said <= 2, f"said {said} times for two scheduler outages"
