"""`orchestrator stop` ends the controller and leaves the job running; a new controller re-attaches."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO

pytestmark = pytest.mark.integration


def _started(tmp_path: Path) -> tuple[Path, subprocess.Popen[bytes], dict[str, str]]:
    """A controller running the demo's training in its own process group (as in a terminal), past iteration 5."""
    cfg = yaml.safe_load((REPO / "configs" / "demo.yaml").read_text())
    cfg.update(run_dir=str(tmp_path / "run"), workdir=str(REPO))
    cfg["checkpoint"]["dir"] = str(tmp_path / "run" / "checkpoints")
    cfg["command"] = [a for a in cfg["command"] if not a.startswith(("--fault", "--iters"))] + ["--iters=150"]
    cfg["goal"]["target_iteration"] = 150
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump(cfg))
    env = {k: v for k, v in os.environ.items() if k != "ORCH_FAILPOINT"}
    log = (tmp_path / "ctl.log").open("w")
    ctl = subprocess.Popen([sys.executable, "-m", "orchestrator", "run", str(p)], stdout=log, stderr=log, cwd=REPO,
                           env=env, start_new_session=True)
    state_file = tmp_path / "run" / "state.json"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        st = json.loads(state_file.read_text()) if state_file.exists() else {}
        if st.get("segments") and (st["segments"][0].get("end_iteration") or 0) >= 5:
            return p, ctl, env
        time.sleep(0.2)
    pytest.fail("the run did not start")


def _reattaches(tmp_path: Path, p: Path, env: dict[str, str]) -> None:
    jobs = json.loads((tmp_path / "run" / "local-backend" / "jobs.json").read_text())["jobs"]
    assert len(jobs) == 1 and not next(iter(jobs.values()))["end_state"]  # the job kept running
    again = subprocess.run([sys.executable, "-m", "orchestrator", "run", str(p)], capture_output=True, text=True,
                           cwd=REPO, timeout=180, env=env)
    assert again.returncode == 0, again.stderr[-2000:]
    st = json.loads((tmp_path / "run" / "state.json").read_text())
    assert st["status"] == "done" and len(st["segments"]) == 1  # re-attached: no second submission
    assert st["segments"][0]["end_iteration"] == 150  # the job ran on through the stop, to its end


def test_stop_then_reattach(tmp_path: Path) -> None:
    p, ctl, env = _started(tmp_path)
    res = subprocess.run([sys.executable, "-m", "orchestrator", "stop", str(p)], capture_output=True, text=True,
                         cwd=REPO, timeout=90)
    assert res.returncode == 0 and "stopped" in res.stdout, res.stdout + res.stderr
    assert ctl.wait(timeout=30) == 0
    _reattaches(tmp_path, p, env)


def test_ctrl_c_in_the_terminal_stops_the_controller_and_leaves_the_local_job_running(tmp_path: Path) -> None:
    """Second re-run, N1: Ctrl-C (SIGINT to the terminal's whole process group) killed the local job's agents and
    training, with KeyboardInterrupt tracebacks; under Slurm the job outlives it, and so must a local one."""
    p, ctl, env = _started(tmp_path)
    os.killpg(ctl.pid, signal.SIGINT)  # what Ctrl-C in the terminal does
    assert ctl.wait(timeout=60) == 0
    assert "KeyboardInterrupt" not in (tmp_path / "ctl.log").read_text()
    logs = "".join(f.read_text() for f in (tmp_path / "run" / "segments" / "0001" / "logs").glob("*.log"))
    assert "KeyboardInterrupt" not in logs
    _reattaches(tmp_path, p, env)
