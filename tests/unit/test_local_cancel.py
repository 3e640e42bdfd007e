"""The local backend's cancel reaches an agent that dropped the first SIGTERM (submitit's job process does,
before the agent's handler is in) and stops one that never exits."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from orchestrator.backends.local import LocalBackend
from orchestrator.backends.local_jobs import LocalJobRecord
from orchestrator.backends.procs import proc_stat
from orchestrator.clock import FakeClock

# drops the first SIGTERM (as submitit's "Bypassing signal SIGTERM"), exits on the second
DROPS_ONE = """
import signal, sys, time
seen = []
def on_term(signum, frame):
    seen.append(signum)
    if len(seen) > 1:
        sys.exit(3)
signal.signal(signal.SIGTERM, on_term)
print("ready", flush=True)
while True:
    time.sleep(0.05)
"""


def started(code: str) -> subprocess.Popen[str]:
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    return p


def record(p: subprocess.Popen[str]) -> LocalJobRecord:
    st = proc_stat(p.pid)
    assert st is not None
    return LocalJobRecord(job_id="1", job_name="j", submitted_at="2026-01-01T00:00:00+00:00", spec={},
                          pids=[p.pid], pid_starts=[st[1]])


def test_a_dropped_sigterm_is_sent_again_until_the_agent_exits(tmp_path: Path) -> None:
    backend, p = LocalBackend(["n1"], tmp_path, FakeClock()), started(DROPS_ONE)
    rec = record(p)
    try:
        backend._kill(rec, "CANCELLED", grace_s=30)
        assert p.wait(timeout=5) == 3 and rec.end_state == "CANCELLED"  # the second SIGTERM, not SIGKILL
    finally:
        p.kill()


def test_an_agent_that_never_exits_is_killed_after_the_grace(tmp_path: Path) -> None:
    backend, p = LocalBackend(["n1"], tmp_path, FakeClock()), started(DROPS_ONE.replace("len(seen) > 1", "False"))
    rec = record(p)
    try:
        backend._kill(rec, "CANCELLED", grace_s=1.5)
        assert p.wait(timeout=5) == -signal.SIGKILL
    finally:
        p.kill()
