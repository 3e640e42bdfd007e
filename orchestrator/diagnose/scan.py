"""Per-node evidence: feed lines in, keep matches, progress and a tail; never keep whole files."""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime

from orchestrator.diagnose.signatures import Signature

PREFIX = re.compile(
    r"^\s*(?:\[?(?P<ts>\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?)\]?\s*)?"
    r"(?:(?P<r1>\d+): |\[rank(?P<r2>\d+)\]:? ?|\[default(?P<r3>\d+)\]:? ?)?"
)
# Our agent marks the start of every allocation in the per-node log; earlier ones are history.
ALLOC_MARK = re.compile(
    r"ORCH-AGENT start segment=(?P<seg>\d+) job=(?P<job>\S+)"  # our agent
    r"|submitit INFO \([^)]*\) - Starting with JobEnvironment\(job_id=(?P<sjob>\d+)"  # submitit
    r"|^ORCH-ALLOCATION (?P<mjob>\S+)"  # a marker users can echo from a prologue
)
# NCCL tells which address each host uses: "host:pid:tid [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:IP<0>"
NCCL_ADDR = re.compile(r"NCCL INFO (?:NET/\w+|Bootstrap) ?: Using .*?(?P<ip>\d+\.\d+\.\d+\.\d+)<\d+>")
COMPLETED = re.compile(
    r"submitit INFO \([^)]*\) - Job completed successfully|ORCH-AGENT exit segment=\d+ codes=\[0(?:, 0)*\]"
)
PYSPY_THREAD = re.compile(r"^Thread (?:0x)?[0-9a-f]+ \((?:idle|active)[^)]*\)")
PYSPY_FRAME = re.compile(r"^\s*(?P<fn>[\w<>.]+) \((?P<file>[^():]+):\d+\)\s*$")
PYSPY_STUCK = re.compile(r"Error: Failed to suspend process|py-spy timed out")
MAX_MATCHES = 400
MAX_TEXT = 500


@dataclass(frozen=True)
class Match:
    line: int
    text: str
    signature: str
    cause: str
    blame: bool
    cascade: bool
    rank: int | None = None
    ts: datetime | None = None
    named_node: str | None = None
    file: str = ""
    peer_ip: str | None = None


def parse_prefix(line: str) -> tuple[datetime | None, int | None, str]:
    m = PREFIX.match(line)
    if not m:
        return None, None, line
    ts = None
    if m.group("ts"):
        raw = m.group("ts").replace(",", ".").replace(" ", "T")
        try:
            ts = datetime.fromisoformat(raw.replace("Z", "+00:00"))
            if ts.tzinfo is None:
                ts = ts.replace(tzinfo=UTC)
        except ValueError:
            ts = None
    rank_s = m.group("r1") or m.group("r2") or m.group("r3")
    return ts, (int(rank_s) if rank_s is not None else None), line[m.end() :]


@dataclass
class NodeScan:
    node: str
    file: str
    signatures: tuple[Signature, ...]
    progress: re.Pattern[str]
    matches: list[Match] = field(default_factory=list)
    dropped_matches: int = 0
    tail: deque[tuple[int, str]] = field(default_factory=lambda: deque(maxlen=40))
    first_iteration: int | None = None
    last_iteration: int | None = None
    last_progress_ts: datetime | None = None
    last_ts: datetime | None = None
    lines: int = 0
    allocations: int = 0
    history: list[Match] = field(default_factory=list)
    addresses: set[str] = field(default_factory=set)
    completed: bool = False
    top_frames: list[str] = field(default_factory=list)  # from py-spy dumps found in the log
    stuck: str = ""
    _frame_next: bool = False

    def feed(self, numbered: list[tuple[int, str]]) -> None:
        for line_no, raw in numbered:
            self._line(line_no, raw)

    def _line(self, line_no: int, raw: str) -> None:
        self.lines += 1
        if not raw:
            return
        ts, rank, body = parse_prefix(raw)
        if ts:
            self.last_ts = ts
        if "ORCH" in body or "submitit" in body:
            if ALLOC_MARK.search(body):
                self._new_allocation()
        if "NCCL INFO" in body:
            am = NCCL_ADDR.search(body)
            if am:
                self.addresses.add(am.group("ip"))
            return
        self.tail.append((line_no, raw[:MAX_TEXT]))
        if self._stack_line(body):
            return
        pm = self.progress.search(body)
        if pm:
            try:
                it = int(pm.group(1))
            except (ValueError, IndexError):
                it = None
            if it is not None:
                if self.first_iteration is None:
                    self.first_iteration = it
                self.last_iteration = it
                self.last_progress_ts = ts or self.last_progress_ts
            return
        for sig in self.signatures:
            m = sig.regex.search(body)
            if m:
                groups = m.groupdict()
                named = groups.get(sig.node_group) if sig.node_group else None
                peer = groups.get(sig.peer_group) if sig.peer_group else None
                self._add(Match(line_no, body[:MAX_TEXT], sig.name, sig.cause.value, sig.blame, sig.cascade,
                                rank, ts, named, self.file, peer))
                return

    def _stack_line(self, body: str) -> bool:
        """py-spy dumps in the log: the innermost frame of each thread dump, and failures to suspend."""
        if self._frame_next:
            self._frame_next = False
            fm = PYSPY_FRAME.match(body)
            if fm:
                self.top_frames.append(f"{fm.group('fn')} ({fm.group('file')})")
                return True
        if body.startswith("Thread ") and PYSPY_THREAD.match(body):
            self._frame_next = True
            return True
        if PYSPY_STUCK.search(body):
            self.stuck = f"py-spy could not inspect a process: {body.strip()[:200]}"
            return True
        if COMPLETED.search(body):
            self.completed = True
            return True
        return False

    def _add(self, match: Match) -> None:
        if len(self.matches) < MAX_MATCHES:
            self.matches.append(match)
        else:  # keep the first ones (root causes come first) and count the rest
            self.dropped_matches += 1

    def _new_allocation(self) -> None:
        if self.allocations > 0 or self.matches:
            self.history.extend(self.matches[:50])
        self.allocations += 1
        self.matches = []
        self.dropped_matches = 0
        self.first_iteration = self.last_iteration = None
        self.last_progress_ts = None
        self.tail.clear()
        self.completed, self.top_frames, self.stuck = False, [], ""
