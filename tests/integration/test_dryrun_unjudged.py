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
