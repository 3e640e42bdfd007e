"""`orchestrator report`: the PNG is drawn without a display; the HTML, rendered by headless Chromium,
shows every segment of the timeline."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from orchestrator.blacklist import Blacklist
from orchestrator.model import Action, Cause, Evidence, JobState, RunStatus
from orchestrator.state import RunState, SegmentRecord
from orchestrator.views.report import COLOURS, write_report

T = datetime(2026, 1, 1, tzinfo=UTC)
CAUSES = [Cause.GPU_ECC, Cause.TIMELIMIT, Cause.NODE_FAIL, Cause.HANG, Cause.SUCCESS]


def run_state() -> RunState:
    segs, it = [], 0
    for i, cause in enumerate(CAUSES, 1):
        t = T + timedelta(hours=3 * (i - 1))
        segs.append(SegmentRecord(
            index=i, job_name=f"r.seg{i:04d}", job_id=str(100 + i), submitted_at=t, nodes=["n1", "n2"],
            start_iteration=it, end_iteration=it + 100, first_progress_at=t + timedelta(minutes=10),
            last_progress_at=t + timedelta(hours=2), ended_at=t + timedelta(hours=2, minutes=30),
            job_state=JobState.COMPLETED if cause == Cause.SUCCESS else JobState.FAILED, cause=cause,
            culprit_nodes=["n2"] if cause in (Cause.GPU_ECC, Cause.NODE_FAIL, Cause.HANG) else [],
            action=Action.DONE if cause == Cause.SUCCESS else Action.RESUBMIT,
            evidence=[Evidence(node="n2", file="n2.log", line=7, text="<uncorrectable ECC> & \"quotes\"")]))
        it += 80
    bl = Blacklist().record("n2", Cause.GPU_ECC, "n2.log:7: uncorrectable ECC error", "101", T, hard=True,
                            expiry=timedelta(days=30))
    return RunState(run="r", created_at=T, updated_at=T, segments=segs, status=RunStatus.DONE, blacklist=bl,
                    target_iteration=420)


def test_png_without_display(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DISPLAY", raising=False)
    html_path, png_path = write_report(run_state(), T + timedelta(days=1), tmp_path)
    assert png_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png_path.stat().st_size > 20_000
    text = html_path.read_text()
    assert len(re.findall(r'<div class="seg" data-index="\d+"', text)) == len(CAUSES)
    assert "&lt;uncorrectable ECC&gt; &amp; &quot;quotes&quot;" in text  # evidence is escaped
    assert 'scontrol update NodeName=n2 State=DRAIN' in text


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def test_html_rendered_headless_shows_every_segment(tmp_path: Path) -> None:
    exe = chromium()
    if exe is None:
        if os.environ.get("ORCH_REQUIRE_BROWSER") == "1":
            pytest.fail("chromium is not installed")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    html_path, _ = write_report(run_state(), T + timedelta(days=1), tmp_path)
    shot = tmp_path / "shot.png"
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tempfile.mkdtemp()}", "--window-size=1200,900"]
    dom = subprocess.run([exe, *flags, "--dump-dom", html_path.as_uri()], capture_output=True, text=True,
                         timeout=120).stdout
    assert len(re.findall(r'class="seg"', dom)) == len(CAUSES)
    subprocess.run([exe, *flags, f"--screenshot={shot}", html_path.as_uri()], capture_output=True, timeout=120)
    import matplotlib.image as mpimg

    img = (mpimg.imread(shot)[:, :, :3] * 255).round().astype(int)
    band = img[120:260]  # the HTML timeline sits under the title
    present = {tuple(px) for row in band[::2] for px in row[::2]}
    for cause in CAUSES:
        hexcol = COLOURS[cause.value].lstrip("#")
        rgb = tuple(int(hexcol[i : i + 2], 16) for i in (0, 2, 4))
        assert rgb in present, f"segment coloured {cause.value} not drawn"
