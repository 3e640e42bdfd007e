"""run_dir/events.jsonl: what happened to the run, one JSON object per line, for log shippers
(Vector, Fluent Bit, Loki's promtail) and scripts. Events are read off the ledger after each poll,
so a controller killed at any point loses none and, restarted, repeats none (every event has a key;
the keys already in the file are not written again).

Every line: {"schema": 1, "key", "event", "time", "run", ...}. Events:
- segment_submitted: segment, job_id, excluded, resumed_from, start_iteration, in_job_of
- segment_ended: segment, job_id, job_state, nodes, cause, culprit_nodes, action, reason, rule,
  decision_rule,
  confidence, start_iteration, end_iteration
- slowdown: segment, job_id, factor, note (the job runs `factor` times slower than before)
- slow_node: segment, job_id, node, factor, evidence, action (swapped for a spare, or struck)
- node_blacklisted: node, cause, evidence (first 300 characters), strikes, hard, source, expires
- run_ended: status, stop_reason, iteration
"""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path
from typing import Any

from orchestrator.model import RunStatus
from orchestrator.state import RunState, SegmentRecord

EVENTS_FILE = "events.jsonl"
SCHEMA = 1


def _value(v: Any) -> Any:
    if isinstance(v, datetime):
        return v.isoformat()
    return getattr(v, "value", v)


def _segment_events(seg: SegmentRecord) -> list[tuple[str, str, datetime, dict[str, Any]]]:
    out = []
    if seg.job_id and seg.submitted_at:
        out.append((f"segment:{seg.index}:submitted", "segment_submitted", seg.submitted_at,
                    {"segment": seg.index, "job_id": seg.job_id, "excluded": seg.excluded,
                     "resumed_from": seg.resumed_from, "start_iteration": seg.start_iteration,
                     "in_job_of": seg.in_job_of}))
    if seg.slowdown_since and seg.slowdown_factor:
        out.append((f"segment:{seg.index}:slowdown:{seg.slowdown_factor}", "slowdown",
                    seg.slowdown_since, {"segment": seg.index, "job_id": seg.job_id,
                                         "factor": seg.slowdown_factor, "note": seg.slowdown_note}))
    for i, f in enumerate(seg.slow_nodes):
        out.append((f"segment:{seg.index}:slow_node:{i}:{f.node}", "slow_node", f.since,
                    {"segment": seg.index, "job_id": seg.job_id, "node": f.node,
                     "factor": f.factor, "evidence": f.evidence, "action": f.action}))
    if seg.ended_at and seg.action is not None:
        out.append((f"segment:{seg.index}:ended", "segment_ended", seg.ended_at,
                    {"segment": seg.index, "job_id": seg.job_id, "job_state": _value(seg.job_state),
                     "nodes": seg.nodes, "cause": _value(seg.cause),
                     "culprit_nodes": seg.culprit_nodes,
                     "action": _value(seg.action), "reason": seg.reason, "rule": seg.rule,
                     "decision_rule": seg.decision_rule, "confidence": seg.confidence,
                     "start_iteration": seg.start_iteration, "end_iteration": seg.end_iteration}))
    return out


def events(state: RunState, now: datetime) -> list[tuple[str, str, datetime, dict[str, Any]]]:
    """(key, event, time, fields) of everything the ledger says happened, oldest first."""
    out = [e for seg in state.segments for e in _segment_events(seg)]
    for b in state.blacklist.entries:
        out.append((f"blacklist:{b.node}:{b.since.isoformat()}:{b.strikes}", "node_blacklisted",
                    b.since,
                    {"node": b.node, "cause": _value(b.cause), "evidence": b.evidence[:300],
                     "strikes": b.strikes,
                     "hard": b.hard, "source": b.source, "expires": b.expires.isoformat()}))
    if state.status != RunStatus.RUNNING:
        out.append((f"run:{_value(state.status)}", "run_ended", state.updated_at or now,
                    {"status": _value(state.status), "stop_reason": state.stop_reason,
                     "iteration": state.best_iteration()}))
    return sorted(out, key=lambda e: e[2])


class EventLog:
    """Appends the events not in the file yet; private (0600), one write per line."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / EVENTS_FILE
        self._keys: set[str] | None = None

    def _load(self) -> set[str]:
        keys: set[str] = set()
        try:
            with self.path.open("rb") as f:
                for line in f:
                    try:
                        keys.add(str(json.loads(line)["key"]))
                    except (ValueError, KeyError, TypeError):
                        continue  # a line cut by a kill -9, or written by hand: skipped
        except FileNotFoundError:
            pass
        return keys

    def record(self, state: RunState, now: datetime) -> int:
        if self._keys is None:
            self._keys = self._load()
        new = [e for e in events(state, now) if e[0] not in self._keys]
        if not new:
            return 0
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            if os.fstat(fd).st_size and not _ends_with_newline(self.path):
                os.write(fd, b"\n")  # after a line cut short, the next one starts on its own line
            for key, event, at, fields in new:
                line = {"schema": SCHEMA, "key": key, "event": event, "time": at.isoformat(),
                        "run": state.run, **fields}
                os.write(fd, (json.dumps(line, default=str) + "\n").encode())
                self._keys.add(key)
        finally:
            os.close(fd)
        return len(new)


def _ends_with_newline(path: Path) -> bool:
    with path.open("rb") as f:
        f.seek(-1, os.SEEK_END)
        return f.read(1) == b"\n"
