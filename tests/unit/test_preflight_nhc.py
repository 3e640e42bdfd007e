"""Issue 23: the preflight runs the site's LBNL Node Health Check where it is installed. NHC's own verdict
("Health check failed: ...", as NHC prints it, e.g. mej/nhc#82) fails the node with its reason; NHC that
cannot run (a permission, its log file, our timeout) is `unknown`: neither a failure nor a sign of health."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orchestrator.agent.preflight import check_nhc, run_all
from orchestrator.diagnose.signatures import table_for
from orchestrator.model import SegmentSpec
from orchestrator.settings import PROGRESS_REGEX

FAILED = "ERROR: nhc: Health check failed: check_hw_ib: No IB port is ACTIVE (LinkUp 100 Gb/sec)."


def _nhc(tmp: Path, body: str) -> Path:
    exe = tmp / "nhc"
    exe.write_text(f'#!/bin/bash\necho "$@" > "{tmp}/argv"\n{body}\n')
    exe.chmod(0o755)
    return exe


@pytest.mark.parametrize(("body", "verdict", "detail"), [
    ("exit 0", "ok", "passed"),
    (f"echo '{FAILED}'; exit 1", "FAILED", "ORCH-NHC FAILED: check_hw_ib: No IB port is ACTIVE"),
    ("echo '/usr/sbin/nhc: line 312: /var/log/nhc.log: Permission denied' >&2; exit 1", "unknown", "Permission"),
    ("exec sleep 30", "unknown", "did not finish"),
])
def test_nhcs_verdict_and_only_its_verdict_fails_the_node(tmp_path: Path, body: str, verdict: str,
                                                          detail: str) -> None:
    rec = check_nhc(tmp_path / "nhc.log", 3.0, str(_nhc(tmp_path, body)))
    assert rec is not None and rec.verdict == verdict and detail in rec.detail, rec
    assert (tmp_path / "argv").read_text().split()[0] == "MARK_OFFLINE=0"  # NHC never drains the node itself


def test_no_nhc_installed_adds_no_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert check_nhc(tmp_path / "nhc.log", 3.0) is None


def _spec(tmp: Path, nhc: str) -> SegmentSpec:
    return SegmentSpec(run_name="t", index=1, job_name="t.seg0001", nodes=1, tasks_per_node=1, gpus_per_node=0,
                       time_limit_min=5, command=("true",), workdir=str(tmp), run_dir=str(tmp),
                       segment_dir=str(tmp / "seg"), preflight_nhc=nhc, progress_regex=PROGRESS_REGEX)


@pytest.mark.parametrize("mode", ["auto", "off"])
def test_a_failed_nhc_check_fails_the_preflight_with_words_the_diagnosis_blames(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    _nhc(tmp_path, f"echo '{FAILED}'; exit 1")
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    failed = [r for r in run_all(_spec(tmp_path, mode), "node7") if not r.ok]
    if mode == "off":
        assert not failed
        return
    assert [r.name for r in failed] == ["nhc"]
    line = f"agent: ORCH-PREFLIGHT FAILED: {failed[0].detail}"
    sig = next(s for s in table_for([]) if s.regex.search(line))  # the first in the table decides
    assert sig.blame and sig.cause.value == "node_fail"
