"""Issue 36: a rank whose work runs in processes that leave its tree (podman's conmon double-forks into a session of
its own, the container's processes under it) stays in reach of the agent: the dumps see those processes, a stop
ends them, and the agent ends what a rank left behind before it exits. A detached double-fork stands in for the
container's monitor here; tests/slurm/test_container_scenarios.py does it with real podman."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.conftest import REPO

# a "monitor": forks, the child starts a session of its own and forks the "container" process, the parent exits
DETACH = ("import os, sys, time\n"
          "if os.fork() == 0:\n"
          "    os.setsid()\n"
          "    if os.fork() == 0:\n"
          "        os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(300)', sys.argv[1]])\n"
          "    os._exit(0)\n"
          "os.wait()\n")
AGENT = """
import json, sys
from collections.abc import Callable
from pathlib import Path
from typing import Any
from orchestrator.agent.main import run_node
from orchestrator.model import SegmentSpec
from orchestrator.settings import PROGRESS_REGEX
tmp = Path(sys.argv[1])
spec = SegmentSpec(run_name="t", index=1, job_name="t.seg0001", nodes=1, tasks_per_node=1, gpus_per_node=0,
                   time_limit_min=5, command=tuple(json.loads(sys.argv[2])), env=(), workdir=str(tmp),
                   run_dir=str(tmp / "run"), segment_dir=str(tmp / "run" / "segments" / "0001"),
                   progress_regex=PROGRESS_REGEX)
try:
    run_node(spec, "vn1", 0, "1")
except SystemExit:
    pass
"""


def wait_for(pred: Callable[[], Any], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, f"timed out after {timeout:.0f}s waiting for {what}"
        time.sleep(0.1)


def _agent(tmp_path: Path, command: list[str]) -> subprocess.Popen[bytes]:
    import json

    return subprocess.Popen([sys.executable, "-c", AGENT, str(tmp_path), json.dumps(command)], cwd=REPO,
                            env={**os.environ, "PYTHONPATH": str(REPO)}, start_new_session=True)


def _sleepers(marker: str) -> list[int]:
    out = subprocess.run(["pgrep", "-f", "--", rf"-c import time; time\.sleep\(300\) {marker}"], capture_output=True,
                         text=True, check=False)
    return [int(p) for p in out.stdout.split()]


def _log(tmp_path: Path) -> str:
    log = tmp_path / "run" / "segments" / "0001" / "logs" / "vn1.log"
    return log.read_text() if log.exists() else ""


def test_a_stop_ends_what_the_rank_started_in_a_session_of_its_own(tmp_path: Path) -> None:
    marker = uuid.uuid4().hex
    command = ["bash", "-c", f"{sys.executable} -c \"$0\" {marker}; echo 'step 1: started'; sleep 300", DETACH]
    agent = _agent(tmp_path, command)
    try:
        wait_for(lambda: _sleepers(marker) and "step 1" in _log(tmp_path), 30, "the rank and its detached process")
        sleeper = _sleepers(marker)[0]
        # adopted below the rank (a subreaper), not by PID 1
        assert int(Path(f"/proc/{sleeper}/stat").read_text().rsplit(")", 1)[1].split()[1]) != 1
        os.kill(agent.pid, signal.SIGTERM)
        assert agent.wait(timeout=60) is not None
        assert not _sleepers(marker), "the detached process outlived the stop"
    finally:
        for pid in _sleepers(marker):
            os.kill(pid, signal.SIGKILL)
        agent.kill() if agent.poll() is None else None


def test_the_agent_ends_what_an_exited_rank_left_running_before_it_exits(tmp_path: Path) -> None:
    marker = uuid.uuid4().hex
    command = [sys.executable, "-c", DETACH, marker]  # the rank exits at once, its "container" runs on
    agent = _agent(tmp_path, command)
    try:
        assert agent.wait(timeout=60) == 0
        assert "left running (a container's)" in _log(tmp_path)
        wait_for(lambda: not _sleepers(marker), 10, "the detached process to be gone")
    finally:
        for pid in _sleepers(marker):
            os.kill(pid, signal.SIGKILL)
