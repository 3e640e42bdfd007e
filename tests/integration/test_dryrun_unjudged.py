"""Issue 37 re-probe, data loss (a): the controller killed (-9) before it saw any checkpoint, the job ran on and
saved, then the checkpoint directory came back empty (a late mount). The dry run, which cannot judge the segment
itself, reads its nodes' exit records: the training reported saving checkpoints, so `run` would wait, not train
from iteration 0 (exit 1), as `run` itself decides once it judges the segment."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from orchestrator.backends.procs import agents_under
from orchestrator.state import StateStore
from tests.conftest import REPO


@pytest.mark.parametrize("how", ["emptied", "removed"])
def test_a_dry_run_after_a_killed_controller_does_not_promise_iteration_0(tmp_path: Path, how: str) -> None:
    """Removed: the directory is gone (an unmounted filesystem above it), but the training's save lines named it."""
    cfg = yaml.safe_load((REPO / "configs" / "demo.yaml").read_text())
    cfg["run_dir"], cfg["workdir"] = str(tmp_path / "run"), str(REPO)
    cfg["checkpoint"]["dir"] = str(tmp_path / "run" / "checkpoints")
    cfg["command"] = [a for a in cfg["command"] if not a.startswith(("--fault", "--iters"))] + ["--iters=30"]
    cfg["goal"]["target_iteration"] = 60
    path = tmp_path / "demo.yaml"
    path.write_text(yaml.safe_dump(cfg))
    ctl = subprocess.Popen([sys.executable, "-m", "orchestrator", "run", str(path)], cwd=REPO,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    store, deadline = StateStore(tmp_path / "run"), time.monotonic() + 120
    try:
        while time.monotonic() < deadline:  # killed once the job is recorded, before any checkpoint
            state = store.load() if (tmp_path / "run" / "state.json").exists() else None
            if state and state.current and state.current.job_id:
                break
            time.sleep(0.05)
        ctl.send_signal(signal.SIGKILL)  # the controller alone, as `kill -9 PID`
        ctl.wait(timeout=30)
        deadline = time.monotonic() + 120
        segments = tmp_path / "run" / "segments"
        while (not list(segments.glob("*/nodes/*.exit.json")) or agents_under(segments)) \
                and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not agents_under(segments), "the job never ended"
    finally:
        if ctl.poll() is None:
            ctl.kill()
    state = store.load()
    assert state is not None and state.checkpoint_seen is None and state.current is not None
    assert state.current.action is None  # not judged: the controller died first
    shutil.rmtree(tmp_path / "run" / "checkpoints")
    if how == "emptied":
        (tmp_path / "run" / "checkpoints").mkdir()  # the mount point, back empty
    res = subprocess.run([sys.executable, "-m", "orchestrator", "run", str(path), "--dry-run"], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 1 and "reported saving checkpoints" in res.stderr, res.stdout + res.stderr
    assert "start from scratch" not in res.stdout


def _processes_under(run_dir: Path) -> list[int]:
    """Every process whose command line names the run directory: the agents and their ranks."""
    import os

    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if str(run_dir) in (entry / "cmdline").read_bytes().decode(errors="replace"):
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


@pytest.mark.parametrize("how", ["emptied", "removed"])
def test_a_job_killed_with_its_controller_is_judged_by_the_saves_its_logs_show(tmp_path: Path, how: str) -> None:
    """The re-probe (B4, B5): the controller killed -9, then the job's processes too (a reboot of the machine
    running the local backend, a node failure), so no agent wrote its exit record; then the checkpoints were
    gone. The node logs hold `successfully saved checkpoint ...`: neither the dry run nor `run` starts from 0."""
    import os

    run = tmp_path / "run"
    cfg = yaml.safe_load((REPO / "configs" / "demo.yaml").read_text())
    cfg["run_dir"], cfg["workdir"], cfg["checkpoint"]["dir"] = str(run), str(REPO), str(run / "checkpoints")
    cfg["command"] = [a for a in cfg["command"] if not a.startswith(("--fault", "--iters", "--step-time"))]
    cfg["command"] += ["--iters=4000", "--step-time=0.05"]
    cfg["goal"]["target_iteration"] = 4000
    path = tmp_path / "demo.yaml"
    path.write_text(yaml.safe_dump(cfg))
    ctl = subprocess.Popen([sys.executable, "-m", "orchestrator", "run", str(path)], cwd=REPO,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        store, deadline = StateStore(run), time.monotonic() + 120
        while time.monotonic() < deadline:
            state = store.load() if (run / "state.json").exists() else None
            if state and state.current and state.current.job_id:
                break
            time.sleep(0.05)
        ctl.send_signal(signal.SIGKILL)
        ctl.wait(timeout=30)
        logs = run / "segments" / "0001" / "logs"
        while time.monotonic() < deadline and not any(
                "successfully saved checkpoint" in p.read_text(errors="replace") for p in logs.glob("*.log")):
            time.sleep(0.2)
        for pid in _processes_under(run):  # the job dies with no time to write anything
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        while _processes_under(run) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not list((run / "segments" / "0001" / "nodes").glob("*.exit.json"))
    finally:
        if ctl.poll() is None:
            ctl.kill()
    shutil.rmtree(run / "checkpoints")
    if how == "emptied":
        (run / "checkpoints").mkdir()
    res = subprocess.run([sys.executable, "-m", "orchestrator", "run", str(path), "--dry-run"], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 1 and "reported saving checkpoints" in res.stderr, res.stdout + res.stderr
    out = tmp_path / "run2.out"
    with out.open("w") as sink:
        runner = subprocess.Popen([sys.executable, "-m", "orchestrator", "run", str(path)], cwd=REPO,
                                  stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not any(
                w in out.read_text() for w in ("not starting from scratch", "segment submitted")):
            time.sleep(0.2)
    finally:
        runner.send_signal(signal.SIGTERM)
        runner.wait(timeout=60)
    said = out.read_text()
    assert "not starting from scratch" in said and "start_iteration=0" not in said, said
    state = StateStore(run).load()
    assert state is not None and len(state.segments) == 1  # nothing submitted from iteration 0
