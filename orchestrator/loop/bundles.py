"""Evidence bundles for the admins (issue 40 item 3): per verdict against a node, one private JSON
file under `run_dir/evidence/` with what an admin needs to act on the node without reading the run:
the rule that fired and its cause, the decision, the lines (the training's and the node's own
reports: kernel log, NVML, counters), where the segment's logs and the agents' dumps are, whether
Slurm showed the node drained, and the drain-ready reason. Written from the ledger after each poll,
once (a bundle already there is left as it is), so a controller killed at any point loses none."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from orchestrator.contract import SegmentPaths
from orchestrator.files import atomic_write, private_dir
from orchestrator.model import EvidenceSource
from orchestrator.state import EVIDENCE_DIR, RunState, SegmentRecord
from orchestrator.views.nodes import drain_reason

UNSAFE = re.compile(r"[^A-Za-z0-9_.-]|^\.")
SCHEMA = 1


def bundle(state: RunState, seg: SegmentRecord, node: str, run_dir: Path) -> dict[str, Any]:
    """What the segment's verdict says against `node`, as one JSON object."""
    entry = state.blacklist.get(node)
    mine = [e for e in seg.evidence if e.node == node] or list(seg.evidence)
    logs = SegmentPaths.of(run_dir, seg.index).root
    return {
        "schema": SCHEMA, "run": state.run, "segment": seg.index, "job_id": seg.job_id,
        "node": node, "cause": seg.cause.value if seg.cause else None, "rule": seg.rule,
        "action": seg.action.value if seg.action else None, "decision_rule": seg.decision_rule,
        "reason": seg.reason, "confidence": seg.confidence,
        "ended_at": seg.ended_at.isoformat() if seg.ended_at else None,
        "lines": [e.model_dump(mode="json") for e in mine if e.source == EvidenceSource.LOG][:40],
        "node_reports": [e.model_dump(mode="json") for e in mine
                         if e.source == EvidenceSource.NODE][:40],
        "drained_in_slurm": seg.drained.get(node),
        "files": {"logs": str(logs / "logs"), "segment": str(logs)},
        "drain_reason": drain_reason(entry, state.run) if entry is not None else None,
    }


def write_bundles(state: RunState, run_dir: Path) -> list[Path]:
    """The bundles of every ended segment's culprits not written yet; the paths written."""
    out: list[Path] = []
    where = run_dir / EVIDENCE_DIR
    for seg in state.segments:
        if seg.action is None or not seg.culprit_nodes:
            continue
        for node in seg.culprit_nodes:
            # a node's name from a log is text: never a path of its own
            path = where / f"segment-{seg.index:04d}-{UNSAFE.sub('_', node)[:100]}.json"
            if path.exists():
                continue
            if not out:
                private_dir(where)
            atomic_write(path, json.dumps(bundle(state, seg, node, run_dir), indent=1))
            out.append(path)
    return out
