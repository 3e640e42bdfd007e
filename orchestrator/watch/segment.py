"""Watching one running segment: per-node logs (incrementally), exit records, stack dumps, progress.
Every read of the shared filesystem goes through a worker with a timeout, so a hung file (a frozen
filesystem, a FIFO with no writer) never hangs the controller; the stall is recorded instead."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from loguru import logger

from orchestrator.contract import DumpRecord, ExitRecord, R, SegmentPaths, read_record
from orchestrator.diagnose.prefilter import Prefilter
from orchestrator.diagnose.scan import NodeScan
from orchestrator.diagnose.signatures import Signature
from orchestrator.evidence import NodeEvidence
from orchestrator.flight import FLIGHT_DIR
from orchestrator.losses import LossRule, LossSeries
from orchestrator.saves import reported_saves
from orchestrator.tail import LogTail
from orchestrator.timeout import call_with_timeout
from orchestrator.watch.evidence import node_evidences
from orchestrator.watch.flight import read_flight
from orchestrator.watch.node import NodeWatch
from orchestrator.watch.reader import (
    Batch,
    DaemonPool,
    Listing,
    pending,
    read_batched,
    scan_dir,
    scheduler_log_node,
    submitit_logs,
)
from orchestrator.watch.roster import Roster
from orchestrator.watch.stuck import stuck_detail


@dataclass
class SegmentWatch:
    """Owns reading one running segment's files (logs, records, dumps) with timeouts, and the
    views derived from them (progress, failed nodes, evidence)."""
    segment_dir: Path
    signatures: tuple[Signature, ...]
    progress: re.Pattern[str]
    read_timeout_s: float
    nodes: dict[str, NodeWatch] = field(default_factory=dict)
    fs_stalls: list[str] = field(default_factory=list)
    slurm_nodes: list[str] = field(default_factory=list)
    dumps_requested_at: datetime | None = None
    dump_request_id: str = ""
    # when any node's log last grew (liveness without progress lines)
    last_output_at: datetime | None = None
    scheduler_logs: dict[str, NodeWatch] = field(default_factory=dict)
    blind_since: datetime | None = None  # a read of the run directory has not returned since then
    first_only: bool = False  # resources.launch_nodes: first (the other nodes' agents idle)
    loss_rule: LossRule | None = None  # the printed losses are judged by it (None: not watched)
    roster: Roster = field(default_factory=Roster)
    # one directory's entries (a test passes one that hangs)
    listing: Callable[[Path], Listing] = scan_dir
    _pool: DaemonPool = field(default_factory=lambda: DaemonPool(max_workers=8))
    prefilter: Prefilter = field(init=False)

    def __post_init__(self) -> None:
        self.prefilter = Prefilter([(s.pattern, s.ignore_case) for s in self.signatures])

    @functools.cached_property
    def paths(self) -> SegmentPaths:
        return SegmentPaths(self.segment_dir)

    def _call(self, what: str, fn: Any, *args: Any) -> tuple[bool, Any]:
        fut = self._pool.submit(fn, *args)
        try:
            return True, fut.result(timeout=self.read_timeout_s)
        except FutureTimeout:
            self.fs_stalls.append(f"read of {what} did not return within "
                                  f"{self.read_timeout_s:.0f}s")
            return False, None
        except OSError as exc:
            return True, exc

    def _listing(self, directory: Path) -> dict[str, tuple[int, float]] | None:
        """name -> (size, mtime) of a directory, read with a timeout; None: it hung or failed."""
        ok, value = self._call(str(directory), self.listing, directory)
        return value if ok and isinstance(value, dict) else None

    def _discover(self, logs: dict[str, tuple[int, float]], records: dict[str, tuple[int, float]],
                  final: bool) -> None:
        """New node logs: only the job's nodes count (watch/roster.py); a name that is no host name
        never does."""
        self.roster.scheduled(self.slurm_nodes)
        for node in self.roster.new_nodes(logs, records, self.nodes):
            p, path = self.paths, self.paths.log(node)
            self.nodes[node] = NodeWatch(tail=LogTail(path), scan=NodeScan(
                node, str(path), self.signatures, self.progress), names=(
                path.name, p.heartbeat(node).name, p.exit(node).name, p.dump(node).name),
                losses=LossSeries(self.loss_rule, node) if self.loss_rule else None)
        self.roster.warn_strays(final)

    def _discover_scheduler_logs(self) -> dict[str, int]:
        """submitit's per-task files (<job>/<job>_<task>_log.out) hold slurmstepd's and srun's own
        lines; with one task per node, task t ran on the t-th node of the allocation. Returns every
        such file's size."""
        if not self.slurm_nodes:
            return {}
        ok, sizes = self._call("submitit logs", submitit_logs, self.paths.submitit)
        if not ok or not isinstance(sizes, dict):
            return {}
        for key in sorted(sizes.keys() - self.scheduler_logs.keys()):
            if node := scheduler_log_node(key, self.slurm_nodes, self.first_only):
                self.scheduler_logs[key] = NodeWatch(
                    tail=LogTail(Path(key)),
                    scan=NodeScan(node, key, self.signatures, self.progress))
        return sizes

    def _read_tail(self, label: str, nw: NodeWatch,
                   final: bool) -> list[tuple[int, bytes, int]] | None:
        """One file on its own (scheduler logs, few); a read that hangs is left pending, not
        repeated."""
        if nw.pending_read is not None and not nw.pending_read.done():
            return None
        fut = nw.pending_read or self._pool.submit(nw.tail.read_chunks, final)
        nw.pending_read = None
        try:
            return list(fut.result(timeout=self.read_timeout_s))
        except FutureTimeout:
            nw.pending_read = fut
            self.fs_stalls.append(f"{label}: read of {nw.tail.path} did not return within "
                                  f"{self.read_timeout_s:.0f}s")
        except OSError:
            pass
        return None

    def _read_logs(self, todo: list[tuple[str, NodeWatch]], final: bool, now: datetime) -> None:
        """Read and scan the changed node logs, a bounded number of bytes held at a time
        (watch/reader.py). A file whose read hangs is recorded as a stall and left to its worker;
        the rest of its batch is read next poll."""
        def feed(node: str, blocks: list[tuple[int, bytes, int]]) -> None:
            for first, block, newlines in blocks:
                self.nodes[node].feed(first, block, self.prefilter, newlines)
            if blocks:
                self.last_output_at = now

        def stuck(node: str, batch: Batch[NodeWatch]) -> None:
            nw = self.nodes[node]
            nw.pending_read = batch
            self.fs_stalls.append(f"{node}: read of {nw.tail.path} did not return within "
                                  f"{self.read_timeout_s:.0f}s")

        read_batched(self._pool, todo, final, self.read_timeout_s, feed, stuck)

    def poll(self, now: datetime, final: bool = False) -> None:
        """Read what is new (`_poll`) and note whether the filesystem answered: while a read hangs
        the watch is blind (`blind_since`), said once when it begins and once when it ends."""
        before = len(self.fs_stalls)
        self._poll(now, final)
        stuck = (len(self.fs_stalls) > before
                 or any(pending(nw.pending_read) for nw in self.nodes.values()))
        if stuck and self.blind_since is None:
            logger.warning("the run directory's filesystem does not answer ({}): blind to the node "
                           "logs; no hang is judged until it answers",
                           (self.fs_stalls[before:] or ["a read still pending"])[0])
        elif not stuck and self.blind_since is not None:
            logger.info("the run directory's filesystem answers again after {:.0f}s",
                        (now - self.blind_since).total_seconds())
        self.blind_since = (self.blind_since or now) if stuck else None

    def judgeable(self, now: datetime, limit_s: float) -> bool:
        """The segment's files can be judged: the filesystem answers, or has not for longer than
        `limit_s`."""
        return self.blind_since is None or (now - self.blind_since).total_seconds() > limit_s

    def _poll(self, now: datetime, final: bool = False) -> None:
        """Read what is new on every node. Two directory listings tell which logs grew and which
        records changed, so an idle poll reads no file; a node whose read hangs is skipped until it
        returns."""
        logs = self._listing(self.paths.logs)
        records = self._listing(self.paths.nodes) or {}
        if logs is None:
            return
        self._discover(logs, records, final)
        sizes = self._discover_scheduler_logs()
        for key, sw in self.scheduler_logs.items():
            if not final and sizes.get(key, 0) == sw.tail.offset:
                continue  # read only when it grew
            for first, block, newlines in self._read_tail(key, sw, final) or []:
                sw.feed(first, block, self.prefilter, newlines)
        todo = []
        for node, nw in self.nodes.items():
            pending = nw.pending_read
            if isinstance(pending, Batch):
                if not pending.done.is_set():
                    continue  # still stuck: do not pile up readers
                nw.pending_read = None
                for first, block, newlines in pending.results.get(node, []):
                    nw.feed(first, block, self.prefilter, newlines)
            size = logs.get(nw.names[0], (0, 0.0))[0]
            if final or size != nw.tail.offset:
                todo.append((node, nw))
        self._read_logs(todo, final, now)
        for node, nw in self.nodes.items():
            if nw.scan.last_iteration is not None and nw.scan.last_iteration != nw.last_iteration:
                nw.last_iteration = nw.scan.last_iteration
                nw.progress_seen_at = now
            self._read_records(node, nw, now, records)

    def _read(self, path: Path, kind: type[R]) -> R | None:
        ok, value = self._call(str(path), read_record, path, kind)
        return value if ok and isinstance(value, kind) else None

    def _read_records(self, node: str, nw: NodeWatch, now: datetime,
                      records: dict[str, tuple[int, float]]) -> None:
        """Heartbeats count by their mtime (no read); exit records and dumps are read once they
        exist."""
        # names made once: no Path per node per poll
        p, (_, hb_name, exit_name, dump_name) = self.paths, nw.names
        hb = records.get(hb_name)
        if hb is not None and str(hb[1]) != nw.heartbeat:
            nw.heartbeat, nw.heartbeat_seen_at = str(hb[1]), now
        if nw.exit_record is None and exit_name in records:
            nw.exit_record = self._read(p.exit(node), ExitRecord)
            if nw.exit_record is not None:
                nw.exit_seen_at = now
        dump_file = records.get(dump_name)
        if (nw.dump is None and self.dump_request_id and dump_file
            and str(dump_file[1]) != nw.dump_mtime):
            nw.dump_mtime = str(dump_file[1])
            got = self._read(p.dump(node), DumpRecord)
            if got is not None and got.request == self.dump_request_id:
                nw.dump = got

    # ---- derived views ---------------------------------------------------------------------
    def max_iteration(self) -> int | None:
        its = [nw.last_iteration for nw in self.nodes.values() if nw.last_iteration is not None]
        return max(its) if its else None

    def turns(self) -> tuple[int, int]:
        """What tells of the job's change before the scheduler does: nodes writing, agents done."""
        return len(self.nodes), sum(nw.exit_record is not None for nw in self.nodes.values())

    def last_progress(self) -> datetime | None:
        seen = [nw.progress_seen_at for nw in self.nodes.values() if nw.progress_seen_at]
        return max(seen) if seen else None

    def failed_nodes(self) -> dict[str, datetime]:
        """Nodes whose agent finished with a non-zero exit, and when the controller saw it."""
        return {n: nw.exit_seen_at for n, nw in self.nodes.items()
                if nw.exit_record and nw.exit_record.exit_code != 0 and nw.exit_seen_at}

    def checkpoint_write_s(self) -> float | None:
        times = sorted(t for nw in self.nodes.values() if nw.exit_record
                       for t in nw.exit_record.checkpoint_write_s)
        if not times and not all(nw.exit_record for nw in self.nodes.values()):  # agents killed
            ok, found = self._call("the node logs' saves", reported_saves, self.segment_dir)
            times = sorted(t for x in (found if ok else []) for t in x.durations)
        return times[len(times) // 2] if times else None  # the median

    def exit_code(self, node: str) -> int | None:
        nw = self.nodes.get(node)
        return nw.exit_record.exit_code if nw and nw.exit_record else None

    def request_dumps(self, now: datetime) -> None:
        """Ask every agent for a stack dump; the request id tells fresh dumps from older ones."""
        self.dumps_requested_at, self.dump_request_id = now, now.isoformat()
        for nw in self.nodes.values():
            nw.dump = None
        path = self.paths.dump_request
        self._call(str(path), path.write_text, self.dump_request_id + "\n")

    def clear_dumps(self) -> None:
        self.dumps_requested_at, self.dump_request_id = None, ""
        for nw in self.nodes.values():
            nw.dump = None

    def dumps_in(self) -> frozenset[str]:
        """Nodes whose agent answered the current dump request."""
        return frozenset(n for n, nw in self.nodes.items() if nw.dump is not None)

    def evidence(self) -> list[NodeEvidence]:
        """Every node's evidence: its scan, exit, stuck state, stacks, the scheduler's lines about
        it and, where the ranks wrote their flight recorders, whether its ranks are behind."""
        # its own timeout: a slow read of big recorders is no filesystem stall
        ok, late = call_with_timeout(functools.partial(read_flight, self.paths.root / FLIGHT_DIR,
                                                       self.dump_request_id), self.read_timeout_s)
        return node_evidences(self.nodes, self.scheduler_logs.values(), self._stuck,
                              late if ok and isinstance(late, dict) else {})

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _stuck(self, nw: NodeWatch) -> str:
        return stuck_detail(nw, [o for o in self.nodes.values() if o is not nw],
                            self.dumps_requested_at)

