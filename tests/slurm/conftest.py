"""Fixtures for scenario tests on the real test cluster (scripts/slurm-testbed.sh start).

The tests skip when no cluster answers, unless ORCH_REQUIRE_SLURM=1 (CI), where that is a failure.
They never sleep for a fixed time: they wait on conditions with deadlines.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO

TESTBED = REPO / "scripts" / "slurm-testbed.sh"
DEFAULT_CONF = Path(os.environ.get("ORCH_TESTBED_DIR", "/tmp/orch-testbed")) / "etc" / "slurm.conf"


_FIRST_FAILURES: list[tuple[str, str]] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Keeps the failure of a scenario that scripts/test.sh runs a second time (--reruns): printed at the end."""
    if str(report.outcome) == "rerun":  # the plugin's own outcome, beyond pytest's three
        _FIRST_FAILURES.append((report.nodeid, report.longreprtext[-6000:]))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for nodeid, text in _FIRST_FAILURES:
        terminalreporter.write_sep("=", f"first failure of {nodeid} (it was run again)")
        terminalreporter.write_line(text)


def slurm_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("SLURM_CONF", str(DEFAULT_CONF))
    return env


def sh(*argv: str, timeout: float = 60, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, env=slurm_env(),
                          check=check)


def wait_until(pred: Callable[[], Any], timeout: float, what: str, every: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(every)


def node_states() -> dict[str, str]:
    out = sh("sinfo", "-h", "-N", "-o", "%N %t", check=False).stdout
    return dict(line.split() for line in out.splitlines() if line.strip())


@pytest.fixture(scope="session")
def slurm_up() -> None:
    ok = False
    try:
        ok = sh("scontrol", "ping", timeout=10, check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    if not ok:
        if os.environ.get("ORCH_REQUIRE_SLURM") == "1":
            pytest.fail("the Slurm test cluster is not up (scripts/slurm-testbed.sh start)")
        pytest.skip("no Slurm test cluster (run scripts/slurm-testbed.sh start)")


@pytest.fixture
def cluster(slurm_up: None) -> None:
    """Every test starts on an idle cluster: no jobs, no frozen tasks, every node back up."""
    sh("scancel", "--user=root", check=False)
    for node, st in node_states().items():
        sh(str(TESTBED), "thaw-job", node, check=False)
        if st.startswith("down") or st.endswith("*") or st.startswith("drain"):
            sh(str(TESTBED), "revive", node, timeout=90, check=False)
            sh("scontrol", "update", f"NodeName={node}", "State=RESUME", check=False)
    # a node the previous scenario crashed or froze can take a while to finish its job's teardown (state
    # `completing`) on a loaded machine: the deadline is generous, the message names the states it saw
    try:
        wait_until(lambda: all(s == "idle" for s in node_states().values()) and len(node_states()) >= 4,
                   240, "all test nodes idle")
    except AssertionError as e:
        queue = sh("squeue", "-h", "-o", "%i %T %R %N", check=False).stdout
        raise AssertionError(f"{e}: sinfo {node_states()}; squeue {queue!r}") from None


def make_config(tmp_path: Path, name: str, *, iters: int = 60, faults: tuple[str, ...] = (), nodes: int = 3,
                step: float = 0.05, collective_timeout: float = 120, time_limit: int = 10,
                **over: Any) -> Path:
    cfg: dict[str, Any] = {
        "name": name,
        "run_dir": str(tmp_path / "run"),
        "workdir": str(REPO),
        "command": ["{python}", "scripts/demo_train.py", f"--iters={iters}", "--ckpt-every=10",
                    "--ckpt-dir={run_dir}/checkpoints", "--resume={checkpoint}",
                    "--sync-dir={run_dir}/sync/seg{segment}", f"--step-time={step}",
                    f"--collective-timeout={collective_timeout}", *[f"--fault={f}" for f in faults]],
        "env": {"OMP_NUM_THREADS": "1"},
        "resources": {"nodes": nodes, "time_limit_min": time_limit},
        "checkpoint": {"dir": str(tmp_path / "run" / "checkpoints"), "preset": "megatron"},
        "goal": {"target_iteration": iters},
        "policy": {"max_segments": 6, "max_no_progress_segments": 2},
        "watch": {"poll_interval_s": 1, "stall_timeout_s": 120, "startup_timeout_s": 180, "cascade_grace_s": 3},
        "backend": {"kind": "slurm", "slurm": {"command_timeout_s": 20}},
    }
    for k, v in over.items():
        cfg[k] = {**cfg[k], **v} if isinstance(v, dict) and isinstance(cfg.get(k), dict) else v
    p = tmp_path / f"{name}.yaml"
    p.write_text(yaml.safe_dump(cfg))
    return p


def orch(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True,
                          timeout=timeout, env=slurm_env(), cwd=REPO)


def orch_bg(*args: str, log: Path) -> subprocess.Popen[bytes]:
    fh = log.open("ab")
    return subprocess.Popen([sys.executable, "-m", "orchestrator", *args], stdout=fh, stderr=subprocess.STDOUT,
                            env=slurm_env(), cwd=REPO)


def status(cfg: Path) -> dict[str, Any]:
    res = orch("status", str(cfg), "--json", timeout=60)
    return json.loads(res.stdout) if res.returncode == 0 else {}


def sacct_jobs(name_prefix: str) -> list[tuple[str, str, str, str]]:
    out = sh("sacct", "-X", "-n", "-P", "-a", "-S", "now-1days", "-o", "JobID,JobName,State,NodeList").stdout
    rows = [tuple(line.split("|")) for line in out.splitlines() if line.strip()]
    return [r for r in rows if r[1].startswith(name_prefix)]  # type: ignore[misc]


def sacct_settled(name_prefix: str, expected: int, timeout: float = 60) -> list[tuple[str, str, str, str]]:
    """Accounting records jobs asynchronously: wait until it knows at least `expected` jobs of this name."""
    wait_until(lambda: len(sacct_jobs(name_prefix)) >= expected, timeout, f"sacct to record {expected} job(s)")
    return sacct_jobs(name_prefix)


def uniq(prefix: str) -> str:
    """A job-name prefix unique to one test (sacct keeps every earlier run's jobs)."""
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def progressing(cfg: Path, beyond: int) -> bool:
    s = status(cfg)
    return bool(s and s["segments"] and (s["segments"][0]["end_iteration"] or 0) > beyond)
