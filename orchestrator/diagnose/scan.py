"""Per-node evidence: feed lines in, keep matches, progress and a tail; never keep whole files."""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from orchestrator.diagnose.blocks import block_progress, group_int
from orchestrator.diagnose.judge import banner_time
from orchestrator.diagnose.linear import bytes_twin
from orchestrator.diagnose.lines import (
    ALLOC_MARK,
    ALLOC_START,
    ATTEMPT_END,
    COMPLETED,
    HOSTNAMES_CMD,
    JOB_END,
    JOB_START,
    LOCAL_GID,
    NATIVE_ADDRESS,
    NCCL_ADDR,
    NODE_IP,
    PYSPY_FRAME,
    PYSPY_STUCK,
    PYSPY_THREAD,
    job_named,
    line_rank,
    own_names,
    peer_name,
)
from orchestrator.diagnose.origin import MAX_TIES, HostMap, Prefixes, parse_line, parse_prefix
from orchestrator.diagnose.prefilter import Prefilter
from orchestrator.diagnose.rawlines import decode as _decode
from orchestrator.diagnose.rawlines import hostnames_after, last_lines
from orchestrator.diagnose.signatures import Signature
from orchestrator.evidence import Match
from orchestrator.progress import not_training

TEARDOWN = timedelta(minutes=5)
# printed by the rank that drives the job, not quoted
QUOTED_OK = frozenset({"ray_node_dead", "ray_node_died_ip", "sigkill"})
TEARDOWN_LINES, MAX_MATCHES, MAX_TEXT = 200, 400, 500
MATCH_CHARS = 8 * 1024  # signatures look at a line's first 8 KB: crafted monster lines stay cheap


@dataclass
class NodeScan:
    """One output file's incremental scan: matches, progress, tail, allocations, py-spy, hosts."""
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
    earlier: list[NodeScan] = field(default_factory=list)  # earlier allocations, oldest first
    _at: tuple[bytes, int, int] | None = None  # the block, where its allocation began, the line
    _job_starts: int = 0  # lines that start a job (SLURM_JOB_ID=...); `job`: the id the last named
    job: int | None = None
    addresses: set[str] = field(default_factory=set)
    completed: bool = False
    nul_padding: bool = False
    hosts: set[str] = field(default_factory=set)  # hosts named by line prefixes
    host_map: HostMap = field(default_factory=HostMap)
    _ended: bool = False  # Slurm printed a JOB-level end banner: the next allocation may follow
    _ended_at: datetime | None = None  # when (the banner's own time, else the line's)
    _ended_line: int = 0
    top_frames: list[str] = field(default_factory=list)  # from py-spy dumps found in the log
    stuck: str = ""
    _frame_next: bool = False
    _nccl_seen: set[bytes] = field(default_factory=set)  # NCCL INFO comm prefixes learnt from
    signalled_at: datetime | None = None  # when the training was told to stop (SIGTERM, ^C)

    def feed_bytes(self, first_line: int, data: bytes, prefilter: Prefilter,
                   newlines: int | None = None) -> None:
        """Scan a block of complete lines (only those the prefilter flags are decoded and matched);
        progress from the block's last progress line, the tail from its last lines."""
        pos_line, pos, last_alloc = first_line, 0, -1
        if b"\x00" in data and b"\x00\x00" in data:  # memchr first: the two-byte search is slower
            self.nul_padding = True
        taken = self._frames_after(data, -1)  # the previous block may end with a thread header
        for start, end in prefilter.lines(data):
            pos_line += data.count(b"\n", pos, start)
            pos = start
            if start < taken or self._known_nccl(data, start, end):
                continue
            before, self._at = self.allocations, (data, max(last_alloc, 0), start)
            self._raw_line(pos_line, data[start:end])
            if self.allocations != before:
                last_alloc = end
            if HOSTNAMES_CMD.search(data[start:end].decode("utf-8", "replace")):
                self.hosts.update(hostnames_after(data, end))
            taken = max(taken, self._frames_after(data, end))  # a dump's lines: taken once
        newlines = data.count(b"\n") if newlines is None else newlines
        self.lines += newlines
        self._block_progress(data, max(last_alloc, 0))
        for line_no, text in last_lines(data, self.tail.maxlen or 40, first_line + newlines):
            self.tail.append((line_no, text[:MAX_TEXT]))

    def _known_nccl(self, data: bytes, start: int, end: int) -> bool:
        """An `NCCL INFO comm ... rank N` line whose prefixes were seen: nothing to add."""
        at = data.find(b"NCCL INFO comm ", start, end)
        if at < 0 or self._ended or self._frame_next:
            return False
        raw = data[start:end]
        if raw.count(b"NCCL INFO") != 1 or any(
                w in raw for w in (b"ORCH", b"submitit", b"async event", b"\r")):
            return False
        key = data[start:at]
        if key in self._nccl_seen:
            return True
        if len(self._nccl_seen) < MAX_TIES:
            self._nccl_seen.add(key)
        return False

    def _raw_line(self, line_no: int, raw: bytes) -> None:
        text = _decode(raw)
        parts = [p for p in text.split("\r") if p.strip()] if "\r" in text else [text]
        for part in parts:
            self._line(line_no, part, count=False)

    def _block_progress(self, data: bytes, after: int) -> None:
        """Last (and, the first time, first) progress line of the block, searched from its ends."""
        found = block_progress(data, after, self._progress_bytes(),
                               want_first=self.first_iteration is None)
        if found is None:
            return
        first, last, line = found
        if self.first_iteration is None:
            self.first_iteration = first if first is not None else last
        self.last_iteration = last
        ts, _, _ = parse_prefix(_decode(line[:80]))
        self.last_progress_ts = ts or self.last_progress_ts

    def _progress_bytes(self) -> re.Pattern[bytes]:
        if getattr(self, "_prog_b", None) is None:
            self._prog_b = bytes_twin(self.progress)
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
        p = parse_line(raw)
        ts, body, host = p.ts, p.body, p.host
        self.hosts.update([host] if host else [])
        if ts:
            self.last_ts = ts
        if self._frame_next and self._stack_line(body):  # right after a py-spy thread header
            return
        if "ORCH" in body or "submitit" in body:
            am = ALLOC_MARK.search(body)
            # the agent's and a prologue's markers count unless a rank printed them; submitit's do
            if am and (am.group("sjob") or (p.task is None and p.rank is None)):
                self._new_allocation()
        if ATTEMPT_END.search(body) and p.rank is None and p.task is None:  # the script's own
            self._ended, self._ended_line, self._ended_at = True, line_no, p.ts or self.last_ts
        if ALLOC_START.search(body) and (self._restarted(body, p) or self._ended):
            self._new_allocation()
        self.job = job_named(body) if JOB_START.search(body) and p.rank is None else self.job
        self.host_map.learn(body, p.task, host)
        for name in own_names(body):
            self._address(name, host)
        if "NCCL INFO" in body:
            am = NCCL_ADDR.search(body)
            if am:
                self._address(am.group("ip"), host)
            if "async event" not in body:  # NCCL reports an HCA's own async events at INFO level
                return
        self.tail.append((line_no, raw[:MAX_TEXT]))
        if ("node-ip-address" in body or "node IP" in body) and (ip := NODE_IP.search(body)):
            self._address(ip.group(1), host)  # Ray: the address this host joined the cluster with
        if self._stack_line(body):
            return
        pm = self.progress.search(body, 0, MATCH_CHARS)
        it = group_int(pm) if pm is None or not not_training(body) else None
        if it is not None:  # an error line may say "at iteration N" too: it is still matched below
            if self.first_iteration is None:
                self.first_iteration = it
            self.last_iteration = it
            self.last_progress_ts = ts or self.last_progress_ts
        self._match(line_no, p)

    def _match(self, line_no: int, p: Prefixes) -> None:
        """The first signature that matches names the line's cause; info lines are dropped."""
        body = p.body
        probe = body[:MATCH_CHARS]
        by_rank = p.task is not None or p.rank is not None
        for sig in self.signatures:
            m = sig.regex.search(probe)
            if not m:
                continue
            if sig.name == "info_killed":
                self.signalled_at = p.ts or self.last_ts or self.signalled_at
            if sig.kind == "info" or (sig.node_group and by_rank and sig.name not in QUOTED_OK):
                return  # a rank quoting `srun: error: Node failure on X` is not Slurm saying it
            if (self._ended and not sig.cascade and not sig.kind
                    and not self._teardown(p.ts or self.last_ts, line_no)):
                # a fresh error after Slurm ended the job: the next allocation
                self._new_allocation()
            groups, host = m.groupdict(), p.host or self.host_map.section_host(sig.kind, sig.name)
            named, value = groups.get(sig.node_group or ""), groups.get(sig.peer_group or "")
            peer = peer_name(sig.peer_group or "", value) if value else None
            # NCCL names this host's own address in the same warning
            if peer and "localGid" in body and (gid := LOCAL_GID.search(body)):
                self._address(gid.group(1), p.host)
            rank = line_rank(groups, p.rank, p.task, sig.kind, body)
            self._add(Match(line_no, body[:MAX_TEXT], sig.name, sig.cause, sig.blame, sig.cascade,
                            rank, p.ts or self.last_ts, named, self.file, peer, host, sig.kind,
                            p.task))
            if JOB_END.search(body):
                self._ended = True
                self._ended_at = banner_time(body) or p.ts or self.last_ts
                self._ended_line = line_no
            return

    def _frames_after(self, data: bytes, end: int) -> int:
        """After a py-spy thread header ending at `end`: its frames (or another header), the next
        line's first (after unnamed native ones); where the last one taken ends, -1 if none."""
        taken = -1
        while self._frame_next and end + 1 < len(data):
            nxt = data.find(b"\n", end + 1) % (len(data) + 1)  # -1: the block's end
            if self._stack_line(parse_line(_decode(data[end + 1 : nxt])).body):
                taken = nxt
            end = nxt
        return taken

    def _address(self, name: str, host: str | None) -> None:
        """A name this file's host (or the line's `host`) goes by: an IP, an IB LID, an instance."""
        self.addresses.add(name)
        self.host_map.learn_address(name, host)

    def _restarted(self, body: str, p: Prefixes) -> bool:
        """A second job start line that no rank printed: a requeued allocation appended."""
        self._job_starts += bool(JOB_START.search(body)) and p.rank is None and p.task is None
        return self._job_starts > 1 and bool(JOB_START.search(body))

    def _teardown(self, ts: datetime | None, line_no: int) -> bool:
        """An error within minutes (or a few hundred lines) of Slurm's end banner: its teardown."""
        return (ts - self._ended_at < TEARDOWN if ts is not None and self._ended_at is not None
                else line_no - self._ended_line < TEARDOWN_LINES)

    def _stack_line(self, body: str) -> bool:  # noqa: C901
        """py-spy dumps in the log: each thread dump's innermost frame, and failures to suspend."""
        if self._frame_next:
            self._frame_next = False
            fm = PYSPY_FRAME.match(body)
            if fm:  # `0x14cd955ebdbc (libcuda.so.1)` has no name: the next frame says where
                self._frame_next = bool(NATIVE_ADDRESS.match(fm.group("fn") or ""))
                fn, file = fm.group("fn") or fm.group("ffn"), fm.group("file") or fm.group("ffile")
                at = self.host_map.at(self.node)  # a dump under a header naming its host
                self.top_frames += [] if self._frame_next else [f"{fn} ({file}){at}"]
                return True
        if ("hread " in body[:16]) and PYSPY_THREAD.match(body):
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
        if self._at is not None:  # the block's progress before this line was the old one's
            self._block_progress(self._at[0][: self._at[2]], self._at[1])
        if self.matches or self.last_iteration is not None:  # what it was: the run's history
            self.earlier = [*self.earlier[-7:], replace(self, matches=list(self.matches),
                                                        earlier=[], tail=deque(self.tail))]
        self.allocations += 1
        self.matches, self.dropped_matches = [], 0
        self.host_map, self.hosts = HostMap(), set()  # another allocation: other hosts
        self.first_iteration = self.last_iteration = self.last_progress_ts = None
        self.tail.clear()
        self.completed, self.top_frames, self.stuck = False, [], ""
        self.nul_padding = self._ended = False
