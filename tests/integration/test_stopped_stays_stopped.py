"""Issue 37: a run stopped on a real bug stays stopped. A plain `run` afterwards submits nothing and exits 3
with one line saying how to go on; the systemd unit does not restart exit 3 (it restarts a crash);
`orchestrator resume` (or `run --resume`) is the deliberate way back."""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from orchestrator.cli.resuming import EXIT_STOPPED, stopped_line
from orchestrator.model import CancelReason, RunStatus
from orchestrator.state import RunState, SegmentRecord, StateStore
from tests.conftest import REPO

UNIT = REPO / "scripts" / "orchestrator@.service"


def _orch(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "orchestrator", *argv], cwd=REPO, capture_output=True, text=True,
                          timeout=240)


def _unit() -> configparser.SectionProxy:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.read_string(UNIT.read_text())
    return parser["Service"]


def systemd_restarts(rc: int) -> bool:
    """systemd.service(5): Restart=on-failure restarts a service that exits with a non-zero code, unless
    RestartPreventExitStatus= lists it; Restart=no never does."""
    svc = _unit()
    if svc.get("Restart", "no") != "on-failure":
        return svc.get("Restart", "no") in ("always", "on-abnormal") and rc != 0
    prevented = {int(x) for x in svc.get("RestartPreventExitStatus", "").split() if x.isdigit()}
    return rc != 0 and rc not in prevented


def _config(tmp_path: Path) -> Path:
    cfg = yaml.safe_load((REPO / "configs" / "demo.yaml").read_text())
    cfg["run_dir"], cfg["workdir"] = str(tmp_path / "run"), str(REPO)
    cfg["checkpoint"]["dir"] = str(tmp_path / "run" / "checkpoints")
    cfg["command"] = [a for a in cfg["command"] if not a.startswith("--fault")] + ["--fault=exception:all:15"]
    path = tmp_path / "demo.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_a_run_stopped_on_a_bug_is_not_resumed_by_run_nor_by_the_unit(tmp_path: Path) -> None:
    path = _config(tmp_path)
    first = _orch("run", str(path))
    assert first.returncode == EXIT_STOPPED, first.stderr[-3000:]
    store = StateStore(tmp_path / "run")
    state = store.load()
    assert state is not None and state.status == RunStatus.STOPPED and len(state.segments) == 1
    assert "--resume" in first.stderr and "it stops here" in first.stderr.lower()

    again = _orch("run", str(path))
    assert again.returncode == EXIT_STOPPED, again.stderr[-3000:]
    lines = [ln for ln in again.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: run demo is stopped: "), again.stderr
    assert f"orchestrator run {path} --resume" in lines[0] and "Nothing submitted" in lines[0]
    after = store.load()
    assert after is not None and len(after.segments) == 1 and after.status == RunStatus.STOPPED
    assert not (tmp_path / "run" / "segments" / "0002").exists()
    # under the unit: a stopped run is not restarted, a crashed controller is
    assert not systemd_restarts(again.returncode) and systemd_restarts(1)

    dry = _orch("run", str(path), "--dry-run")
    assert dry.returncode == 0 and "run would submit nothing and exit 3" in dry.stdout

    marked = _orch("resume", str(path))
    assert marked.returncode == 0, marked.stderr
    resumed = store.load()
    assert resumed is not None and resumed.status == RunStatus.RUNNING and len(resumed.segments) == 1
    assert "resuming a stopped run" in marked.stdout
    dry = _orch("run", str(path), "--dry-run")
    assert "exit 3" not in dry.stdout and "Segment 2 of run demo" in dry.stdout


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_the_unit_file_is_valid_for_systemd() -> None:
    res = subprocess.run(["systemd-analyze", "verify", str(UNIT)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "RestartPreventExitStatus" in _unit()


def test_a_cancelled_run_says_who_cancelled_it_and_when() -> None:
    now = datetime(2026, 12, 3, 17, 30, tzinfo=UTC)
    seg = SegmentRecord(index=2, job_name="r.seg0002", job_id="42", ended_at=now, cancel_reason=CancelReason.OPERATOR,
                        cancelled_by_controller="orchestrator cancel", cancelled_at=now)
    state = RunState(run="r", created_at=now, updated_at=now, segments=[seg], status=RunStatus.STOPPED,
                     stop_reason="controller stopped with orchestrator cancel: job 42 cancelled")
    line = stopped_line(state, Path("configs/r.yaml"))
    assert "was cancelled (orchestrator cancel, 2026-12-03 17:30 UTC)" in line
    assert "orchestrator run configs/r.yaml --resume" in line
