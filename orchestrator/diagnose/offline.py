"""Offline diagnosis of any job's logs (`orchestrator diagnose DIR`, scripts/diagnose_accuracy.py):
scan every file, infer how Slurm ended the job from the lines it printed, classify, and show the
action the controller's own policy would take for a run with no history."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from orchestrator.diagnose.classify import Context, classify, infer_job_state
from orchestrator.diagnose.prefilter import Prefilter
from orchestrator.diagnose.scan import node_evidence, scan_file
from orchestrator.diagnose.signatures import build_table
from orchestrator.model import Verdict
from orchestrator.policy import decide
from orchestrator.settings import Goal, Policy
from orchestrator.state import RunState, SegmentRecord

DEFAULT_PROGRESS = r"iteration\s+(\d+)\s*/\s*\d+"
T0 = datetime(2000, 1, 1, tzinfo=UTC)


def action_without_history(verdict: Verdict) -> tuple[str, str]:
    """(action, reason) that `policy.decide` picks for this verdict in a fresh run."""
    state = RunState(run="offline", created_at=T0, updated_at=T0,
                     segments=[SegmentRecord(index=1, job_name="offline")])
    d = decide(state, verdict, Policy(), Goal(), T0)
    return d.action.value, d.reason


def diagnose_dir(directory: Path, progress_regex: str = DEFAULT_PROGRESS) -> dict[str, Any]:
    files = sorted(p for p in directory.iterdir() if p.is_file() and not p.name.startswith("."))
    sigs = build_table()
    rx = re.compile(progress_regex)
    prefilter = Prefilter([(s.pattern, s.ignore_case) for s in sigs])
    nodes = [node_evidence(scan_file(f, f.name.split(".")[0] if "." in f.name else f.name, sigs, rx, prefilter))
             for f in files]
    stalled = any(n.top_frames or n.stuck_detail for n in nodes)
    v = classify(infer_job_state(nodes), nodes, Context(stalled=stalled))
    action, reason = action_without_history(v)
    return {
        "cause": v.cause.value, "culprit_nodes": list(v.culprit_nodes), "blame": v.blame,
        "action": action, "reason": reason, "confidence": v.confidence, "summary": v.summary,
        "evidence": [{"node": e.node, "file": e.file, "line": e.line, "text": e.text, "role": e.role}
                     for e in v.evidence],
    }
