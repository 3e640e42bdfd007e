"""Per-node evidence: feed lines in, keep matches, progress and a tail; never keep whole files."""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

from orchestrator.contract import EXIT_OK_RE, START_RE
from orchestrator.diagnose.prefilter import ALLOC_START_RE, Prefilter
from orchestrator.diagnose.signatures import Signature
from orchestrator.evidence import Match, NodeEvidence

PREFIX = re.compile(
    r"^\s*(?:\[?(?P<ts>\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?)\]?\s*)?"
    r"(?:(?P<r1>\d+): |\[rank(?P<r2>\d+)\]:? ?|\[default(?P<r3>\d+)\]:? ?)?"
)
# Our agent marks the start of every allocation in the per-node log; earlier ones are history.
ALLOC_MARK = re.compile(
    START_RE  # our agent
    + r"|submitit INFO \([^)]*\) - Starting with JobEnvironment\(job_id=(?P<sjob>\d+)"  # submitit
    r"|^ORCH-ALLOCATION (?P<mjob>\S+)"  # a marker users can echo from a prologue
)
# NCCL tells which address each host uses: "host:pid:tid [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:IP<0>"
NCCL_ADDR = re.compile(r"NCCL INFO (?:NET/\w+|Bootstrap) ?: Using .*?(?P<ip>\d+\.\d+\.\d+\.\d+)<\d+>")
COMPLETED = re.compile(r"submitit INFO \([^)]*\) - Job completed successfully|" + EXIT_OK_RE)
PYSPY_THREAD = re.compile(r"^Thread (?:0x)?[0-9a-f]+ \((?:idle|active)[^)]*\)")
PYSPY_FRAME = re.compile(r"^\s*(?P<fn>[\w<>.]+) \((?P<file>[^():]+):\d+\)\s*$")
PYSPY_STUCK = re.compile(r"Error: Failed to suspend process|py-spy timed out")
# A host at the start of a line: pdsh "host: ", NCCL "host:pid:tid [dev]", syslog "host kernel:".
HOST = r"(?!(?:rank|default|Rank|RANK|node_rank|local_rank)\d+\b)[A-Za-z][\w-]*\d[\w.-]*"
# "host: " (pdsh, after an optional "[tag] "), or "[host] " / "[tag host] " (an epilog or a wrapper naming the host)
HOST_PREFIX = re.compile(rf"^(?:\[[\w -]*\] ?)?(?P<h>{HOST}): (?=\S)|^\[(?:\w+ )?(?P<b>{HOST})\] ?")
HOST_IN_LINE = re.compile(rf"^(?P<h>{HOST}):\d+:\d+ \[\d+\]|(?:^|\s)(?P<k>{HOST}) kernel: "
                          rf"|^\[(?:\w+ )?(?P<b>{HOST})\]")  # kept for hosts inside a line
# Lines that tell which host a rank runs on: srun's task reports and NCCL's per-rank init lines.
SRUN_TASK = re.compile(rf"srun: error: (?P<h>{HOST}): tasks? (?P<t>\d+)(?:-\d+)?: ")
SUMMARY = re.compile(r"^\s*(?P<key>host|rank)\s+: (?P<val>\S.*)$")  # torchrun's ChildFailedError summary
NCCL_RANK = re.compile(rf"^(?P<h>{HOST}):\d+:\d+ \[\d+\] NCCL INFO comm \S+ rank (?P<r>\d+) ")
JOB_WIDE = re.compile(r"^(?:slurm|job|output|train|log|stdout|stderr)[-_.]?\d*(?:[-_.]\d+)*$", re.IGNORECASE)
# After Slurm ended a job (a JOB-level banner), these start the next allocation appended to the same file.
JOB_END = re.compile(r"\*\*\* JOB \d+ ON \S+ CANCELLED AT|DUE TO JOB REQUEUE")
ALLOC_START = re.compile(ALLOC_START_RE)
MAX_MATCHES = 400
MAX_LINE_DECODE = 64 * 1024
MAX_TEXT = 500


def _decode(raw: bytes) -> str:
    return raw[:MAX_LINE_DECODE].replace(b"\x00", b"").decode("utf-8", errors="replace").rstrip()


def _int(m: re.Match[bytes] | None) -> int | None:
    try:
        return int(m.group(1)) if m else None
    except (ValueError, IndexError):
        return None


def _iter_lines_backwards(data: bytes, stop: int, limit: int) -> Iterator[bytes]:
    end = len(data)
    for _ in range(limit):
        if end <= stop:
            return
        start = data.rfind(b"\n", stop, end - 1) + 1 if end - 1 > stop else stop
        yield data[start:end]
        end = start


def _iter_lines_forward(data: bytes, start: int, limit: int) -> Iterator[bytes]:
    for _ in range(limit):
        if start >= len(data):
            return
        nl = data.find(b"\n", start)
        nl = len(data) if nl < 0 else nl
        yield data[start:nl]
        start = nl + 1


def _stamp(raw: str | None) -> datetime | None:
    if not raw:
        return None
    try:
        ts = datetime.fromisoformat(raw.replace(",", ".").replace(" ", "T").replace("Z", "+00:00"))
    except ValueError:
        return None
    return ts if ts.tzinfo is not None else ts.replace(tzinfo=UTC)


@dataclass(frozen=True)
class Prefixes:
    ts: datetime | None
    task: int | None  # srun --label task id ("3: ")
    rank: int | None  # torch rank ("[rank3]:", "[default3]:")
    body: str


def parse_prefixes(line: str) -> Prefixes:
    """Strip the stacked prefixes launchers put before a line (timestamp, srun label, torch rank)."""
    ts = task = rank = None
    body = line
    for _ in range(3):
        m = PREFIX.match(body)
        if not m or m.end() == 0:
            break
        ts = ts or _stamp(m.group("ts"))
        if m.group("r1") is not None and task is None:
            task = int(m.group("r1"))
        r = m.group("r2") or m.group("r3")
        if r is not None and rank is None:
            rank = int(r)
        body = body[m.end():]
    return Prefixes(ts, task, rank, body)


def parse_prefix(line: str) -> tuple[datetime | None, int | None, str]:
    p = parse_prefixes(line)
    return p.ts, p.rank if p.rank is not None else p.task, p.body


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
    nul_padding: bool = False
    hosts: set[str] = field(default_factory=set)
    rank_hosts: dict[int, str] = field(default_factory=dict)
    task_hosts: dict[int, str] = field(default_factory=dict)
    address_hosts: dict[str, str] = field(default_factory=dict)  # IP -> host, from prefixed NCCL INFO lines
    _summary_host: str = ""
    _ended: bool = False  # Slurm printed a JOB-level end banner: what follows may be the next allocation
    top_frames: list[str] = field(default_factory=list)  # from py-spy dumps found in the log
    stuck: str = ""
    _frame_next: bool = False

    def feed_bytes(self, first_line: int, data: bytes, prefilter: Prefilter, newlines: int | None = None) -> None:
        """Scan a block of complete lines: only the lines the prefilter flags are decoded and matched;
        progress comes from the last progress line of the block, the tail from its last lines."""
        pos_line, pos = first_line, 0
        last_alloc = -1
        if b"\x00\x00" in data:
            self.nul_padding = True
        if self._frame_next:  # the previous block ended with a py-spy thread header
            nl = data.find(b"\n")
            _, _, body = parse_prefix(_decode(data[: len(data) if nl < 0 else nl]))
            self._stack_line(body)
        for start, end in prefilter.lines(data):
            pos_line += data.count(b"\n", pos, start)
            pos = start
            before = self.allocations
            self._raw_line(pos_line, data[start:end])
            if self.allocations != before:
                last_alloc = end
            if self._frame_next and end + 1 < len(data):  # a py-spy thread header: the frame is on the next line
                nxt = data.find(b"\n", end + 1)
                _, _, body = parse_prefix(_decode(data[end + 1 : len(data) if nxt < 0 else nxt]))
                self._stack_line(body)  # takes the frame if it is one; the line is not scanned twice
        newlines = data.count(b"\n") if newlines is None else newlines
        self.lines += newlines
        self._block_progress(data, max(last_alloc, 0))
        tail_start = len(data)
        for _ in range(self.tail.maxlen or 40):
            tail_start = data.rfind(b"\n", 0, max(tail_start - 1, 0)) if tail_start > 0 else -1
            if tail_start < 0:
                break
        lines = data[max(tail_start + 1, 0):].split(b"\n")
        n_total = first_line + newlines
        for i, raw in enumerate(lines[-(self.tail.maxlen or 40):]):
            text = _decode(raw)
            if text:
                self.tail.append((n_total - len(lines) + 1 + i, text[:MAX_TEXT]))

    def _raw_line(self, line_no: int, raw: bytes) -> None:
        text = _decode(raw)
        parts = [p for p in text.split("\r") if p.strip()] if "\r" in text else [text]
        for part in parts:
            self._line(line_no, part, count=False)

    def _block_progress(self, data: bytes, after: int) -> None:
        """Last (and, the first time, first) progress line of the block, searched from its ends."""
        rx = self._progress_bytes()
        last = None
        for m in _iter_lines_backwards(data, after, 400):
            hit = rx.search(m)
            if hit:
                last = (m, hit)
                break
        if last is None and len(data) - after > 400 * 200:
            hits = list(rx.finditer(data, after))
            if hits:
                h = hits[-1]
                ls = data.rfind(b"\n", 0, h.start()) + 1
                le = data.find(b"\n", h.end())
                line = data[ls : len(data) if le < 0 else le]
                again = rx.search(line)
                last = (line, again) if again else None
        if last is None:
            return
        line, hit = last
        it = _int(hit)
        if it is None:
            return
        if self.first_iteration is None:
            first = next((rx.search(ln) for ln in _iter_lines_forward(data, after, 400) if rx.search(ln)), None)
            self.first_iteration = _int(first) if first else it
        self.last_iteration = it
        ts, _, _ = parse_prefix(_decode(line[:80]))
        self.last_progress_ts = ts or self.last_progress_ts

    def _progress_bytes(self) -> re.Pattern[bytes]:
        if getattr(self, "_prog_b", None) is None:
            self._prog_b = re.compile(self.progress.pattern.encode(), self.progress.flags & ~re.UNICODE)
        return self._prog_b

    def feed(self, numbered: list[tuple[int, str]]) -> None:
        for line_no, raw in numbered:
            self._line(line_no, raw)

    def _line(self, line_no: int, raw: str, count: bool = True) -> None:
        if count:
            self.lines += 1
        if not raw:
            self._frame_next = False  # a py-spy frame is on the line right after its thread header
            return
        p = parse_prefixes(raw)
        ts, task, rank, body = p.ts, p.task, p.rank, p.body
        host = None
        hm = HOST_PREFIX.match(body)
        if hm:
            host = hm.group("h") or hm.group("b")
            p2 = parse_prefixes(body[hm.end():])
            ts, body = ts or p2.ts, p2.body
            task = task if task is not None else p2.task
            rank = rank if rank is not None else p2.rank
        else:
            hm2 = HOST_IN_LINE.search(body)
            if hm2:
                host = hm2.group("h") or hm2.group("k") or hm2.group("b")
        if host:
            self.hosts.add(host)
        if ts:
            self.last_ts = ts
        if self._frame_next and self._stack_line(body):  # the line right after a py-spy thread header
            return
        if "ORCH" in body or "submitit" in body:
            if ALLOC_MARK.search(body):
                self._new_allocation()
        if self._ended and ALLOC_START.search(body):
            self._new_allocation()
        self._rank_host(body, task)
        if "NCCL INFO" in body:
            am = NCCL_ADDR.search(body)
            if am:
                self.addresses.add(am.group("ip"))
                if host and len(self.address_hosts) < 4096:
                    self.address_hosts.setdefault(am.group("ip"), host)
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
                if sig.kind == "info":
                    return
                if self._ended and not sig.cascade and not sig.kind:
                    self._new_allocation()  # a fresh error after Slurm ended the job: the next allocation
                groups = m.groupdict()
                named = groups.get(sig.node_group) if sig.node_group else None
                peer = groups.get(sig.peer_group) if sig.peer_group else None
                self._add(Match(line_no, body[:MAX_TEXT], sig.name, sig.cause.value, sig.blame, sig.cascade,
                                rank if rank is not None else task, ts, named, self.file, peer, host, sig.kind,
                                task))
                if JOB_END.search(body):
                    self._ended = True
                return

    def _rank_host(self, body: str, task: int | None) -> None:
        """Learn which host runs which srun task (srun's task reports, NCCL lines under an srun label) and
        which torch rank (torchrun's failure summary: "host : X" then "rank : N")."""
        if len(self.task_hosts) + len(self.rank_hosts) >= 8192:
            return
        tm = SRUN_TASK.search(body)
        if tm:
            self.task_hosts.setdefault(int(tm.group("t")), tm.group("h"))
            return
        nm = NCCL_RANK.match(body) if "NCCL INFO comm" in body else None
        if nm and task is not None:
            self.task_hosts.setdefault(task, nm.group("h"))
            return
        sm = SUMMARY.match(body)
        if sm and sm.group("key") == "host":
            self._summary_host = sm.group("val")
        elif sm and self._summary_host and sm.group("val").split()[0].isdigit():
            self.rank_hosts.setdefault(int(sm.group("val").split()[0]), self._summary_host)
            self._summary_host = ""

    def _stack_line(self, body: str) -> bool:  # noqa: C901
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
        self.nul_padding = False
        self._ended = False


def scan_file(path: Path, node: str, signatures: tuple[Signature, ...], progress: re.Pattern[str],
              prefilter: Prefilter) -> NodeScan:
    """A whole file, block by block (bounded memory whatever its size)."""
    from orchestrator.tail import LogTail

    scan = NodeScan(node, str(path), signatures, progress)
    tail = LogTail(path)
    while True:
        blocks = tail.read_chunks(final=True)
        if not blocks:
            return scan
        for first, block, newlines in blocks:
            scan.feed_bytes(first, block, prefilter, newlines)


def _host_of(scan: NodeScan, m: Match) -> str | None:
    if m.task is not None and m.task in scan.task_hosts:
        return scan.task_hosts[m.task]
    return scan.rank_hosts.get(m.rank) if m.rank is not None else None


def node_evidence(scan: NodeScan, exit_code: int | None = None, stuck_detail: str = "",
              top_frames: tuple[str, ...] = (), fs_suspect: bool = False) -> NodeEvidence:
    job_wide = bool(JOB_WIDE.match(scan.node))
    matches = tuple(scan.matches)
    if job_wide and (scan.rank_hosts or scan.task_hosts):
        matches = tuple(replace(m, host=m.host or _host_of(scan, m)) for m in matches)
    return NodeEvidence(
        node=scan.node,
        file=scan.file,
        matches=matches,
        first_iteration=scan.first_iteration,
        last_iteration=scan.last_iteration,
        last_progress_ts=scan.last_progress_ts,
        exit_code=exit_code if exit_code is not None else (0 if scan.completed else None),
        tail=tuple(scan.tail),
        stuck_detail=stuck_detail or scan.stuck,
        top_frames=top_frames or tuple(scan.top_frames),
        fs_suspect=fs_suspect,
        addresses=frozenset(scan.addresses),
        address_hosts=tuple(sorted(scan.address_hosts.items())),
        abrupt_end=scan.nul_padding,
        hosts=frozenset(scan.hosts | set(scan.rank_hosts.values()) | set(scan.task_hosts.values())),
        job_wide=job_wide,
    )
