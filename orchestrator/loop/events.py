"""run_dir/events.jsonl: what happened to the run, one JSON object per line, for log shippers
(Vector, Fluent Bit, Loki's promtail) and scripts. Events are read off the ledger after each poll,
so a controller killed at any point loses none and, restarted, repeats none (every event has a key;
the keys already in the file are not written again).

Every line: {"schema": 1, "key", "event", "time", "run", "ledger", ...}. Events:
- segment_submitted: segment, job_id, excluded, resumed_from, start_iteration, in_job_of
- segment_ended: segment, job_id, job_state, nodes, cause, culprit_nodes, action, reason, rule,
  decision_rule,
  confidence, start_iteration, end_iteration
- slowdown: segment, job_id, factor, note (the job runs `factor` times slower than before)
- slow_node: segment, job_id, node, factor, evidence, action (swapped for a spare, or struck)
- node_drained: segment, job_id, node, reason (Slurm showed a node of the running step drained)
- node_blacklisted: node, cause, evidence (first 300 characters), strikes, hard, source, expires,
  from_run (another run's verdict, from the shared blacklist), drain_reason (for `scontrol update
  NodeName=... State=DRAIN Reason=...`)
- run_ended: status, stop_reason, iteration
"""

from __future__ import annotations

import errno
import json
import os
import stat
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from loguru import logger

from orchestrator.model import RunStatus
from orchestrator.state import RunState, SegmentRecord
from orchestrator.views.nodes import drain_reason

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
    if (when := seg.cancelled_at or seg.submitted_at) is not None:  # seen while it ran
        out += [(f"segment:{seg.index}:drained:{node}", "node_drained", when,
                 {"segment": seg.index, "job_id": seg.job_id, "node": node, "reason": why})
                for node, why in seg.drained.items()]
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
                     "strikes": b.strikes, "hard": b.hard, "source": b.source,
                     "expires": b.expires.isoformat(), "from_run": b.run or None,
                     "drain_reason": drain_reason(b, state.run)}))
    if state.status != RunStatus.RUNNING:  # once per ending: a raised goal ends the run again
        ending = f"run:{_value(state.status)}:{len(state.segments)}:{state.target_iteration}"
        out.append((ending, "run_ended", state.updated_at or now,
                    {"status": _value(state.status), "stop_reason": state.stop_reason,
                     "iteration": state.best_iteration()}))
    return sorted(out, key=lambda e: e[2])


class EventLog:
    """Appends the events not in the file yet; private (0600), one write per line. Each line
    names its ledger (`ledger`: when the ledger began), so a ledger begun again (`run
    --start-over`) writes its own events although the old one's keys are in the file. The file is
    opened as what it must be: a FIFO or symlink in its place is set aside (never waited on, never
    followed), and a line longer than `max_line` is skipped while reading the keys, never held
    whole."""

    max_line = 1 << 20  # an event line is a few KB; the longest, segment_ended, names its nodes

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / EVENTS_FILE
        self._keys: set[tuple[str, str]] | None = None
        self._legacy: dict[str, str] = {}  # key -> latest time, of lines written before `ledger`

    def _load(self) -> set[tuple[str, str]]:
        keys: set[tuple[str, str]] = set()
        fd = self._open(os.O_RDONLY)
        if fd is None:
            return keys
        try:
            for line in self._lines(fd):
                try:
                    e = json.loads(line)
                    if "ledger" in e:
                        keys.add((str(e["ledger"]), str(e["key"])))
                    else:
                        key, at = str(e["key"]), str(e["time"])
                        self._legacy[key] = max(at, self._legacy.get(key, at))
                except (ValueError, KeyError, TypeError):
                    continue  # a line cut by a kill -9, or written by hand: skipped
        finally:
            os.close(fd)
        return keys

    def _lines(self, fd: int) -> Iterator[bytes]:
        buf, skipping, skipped = b"", False, 0
        while chunk := os.read(fd, 1 << 16):
            parts = (buf + chunk).split(b"\n")
            buf = parts.pop()
            for part in parts:
                if not skipping:
                    yield part
                skipping = False  # the first part ends the over-long line
            if len(buf) > self.max_line:
                skipped += not skipping
                skipping, buf = True, b""
        if buf and not skipping:
            yield buf
        if skipped:
            logger.warning("{}: {} line(s) longer than {} bytes skipped", self.path, skipped,
                           self.max_line)

    def _open(self, flags: int) -> int | None:
        """The file opened without blocking or following a link; a non-regular file in its place
        is renamed aside (a directory is an error). None: no file to read."""
        try:
            mode = os.lstat(self.path).st_mode
        except FileNotFoundError:
            mode = None
        if mode is not None and not stat.S_ISREG(mode):
            if stat.S_ISDIR(mode):
                raise OSError(errno.EISDIR, "a directory, not a regular file", str(self.path))
            aside = self.path.with_name(EVENTS_FILE + ".not-a-file")
            os.replace(self.path, aside)
            logger.warning("{}: {}, not a regular file: renamed to {}, a new one begins",
                           self.path, "a symlink" if stat.S_ISLNK(mode) else "a FIFO or special "
                           "file", aside.name)
        if (mode is None or not stat.S_ISREG(mode)) and not flags & os.O_CREAT:
            return None
        fd = os.open(self.path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # replaced between the two looks
            os.close(fd)
            raise OSError(errno.EINVAL, "not a regular file", str(self.path))
        return fd

    def record(self, state: RunState, now: datetime) -> int:
        if self._keys is None:
            self._keys = self._load()
        ledger, begun = state.created_at.isoformat(), state.created_at
        new = [e for e in events(state, now)
               if (ledger, e[0]) not in self._keys and not _legacy_of(self._legacy, e[0], begun)]
        if not new:
            return 0
        fd = self._open(os.O_RDWR | os.O_APPEND | os.O_CREAT)
        assert fd is not None
        try:
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                os.write(fd, b"\n")  # after a line cut short, the next one starts on its own line
            for key, event, at, fields in new:
                line = {"schema": SCHEMA, "key": key, "event": event, "time": at.isoformat(),
                        "run": state.run, "ledger": ledger, **fields}
                os.write(fd, (json.dumps(line, default=str) + "\n").encode())
                self._keys.add((ledger, key))
        finally:
            os.close(fd)
        return len(new)


def _legacy_of(legacy: dict[str, str], key: str, begun: datetime) -> bool:
    """Whether a line written before lines named their ledger holds `key` for this ledger (it was
    written at or after the ledger began)."""
    try:
        return key in legacy and datetime.fromisoformat(legacy[key]) >= begun
    except (ValueError, TypeError):
        return True
