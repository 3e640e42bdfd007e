"""Reads of the shared filesystem that may hang: directory listings and batches of log reads.

A batch runs in one worker; when one file hangs the controller abandons the batch and the rest of it
is read on the next poll, so a frozen file never blocks the others.
"""

from __future__ import annotations

import os
import queue
import stat
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar


class Tail(Protocol):
    """Anything that reads a file's new blocks."""
    def read_chunks(self, final: bool) -> list[tuple[int, bytes, int]]: ...


class HasTail(Protocol):
    """Anything with a Tail (a node watch)."""
    @property
    def tail(self) -> Tail: ...


BATCH = 256


Listing = dict[str, tuple[int, float]]  # name -> (size, mtime); size -1: not a regular file


def scan_dir(directory: Path) -> Listing:
    out: Listing = {}
    try:
        with os.scandir(directory) as it:
            for e in it:
                try:
                    st = e.stat()
                except OSError:
                    continue
                # a FIFO or device in place of a log: size -1 makes the poll read it (and notice if
                # it hangs)
                out[e.name] = (st.st_size if stat.S_ISREG(st.st_mode) else -1, st.st_mtime)
    except (FileNotFoundError, NotADirectoryError):
        pass
    return out


def submitit_logs(root: Path) -> dict[str, int]:
    """Path -> size of submitit's per-task logs under `root` (<job>/<job>_<task>_log.out)."""
    out: dict[str, int] = {}
    for job in scan_dir(root):
        for name, (size, _) in scan_dir(root / job).items():
            if name.endswith("_log.out"):
                out[str(root / job / name)] = size
    return out


def scheduler_log_node(key: str, nodes: list[str], first_only: bool = False) -> str | None:
    """The node whose agent wrote submitit's log `key`: the t-th node of the allocation for Slurm's
    <job>/<job>_<t>_log.out (one task per node), the folder's node for the local backend's
    <node>/<pid>_0_log.out. With the launch on the first node only, the idle nodes' agents are not
    the training's: their logs are not read (their clean ends would read as the training's)."""
    path = Path(key)
    parts = path.name.split("_")
    if len(parts) < 3 or not parts[1].isdigit():
        return None
    task = (nodes.index(path.parent.name) if path.parent.name != parts[0]
            and path.parent.name in nodes else int(parts[1]))
    return nodes[task] if task < len(nodes) and (task == 0 or not first_only) else None


T = TypeVar("T", bound=HasTail)


class Batch(Generic[T]):
    """Reads a batch of logs in one worker; the controller can abandon it if one file hangs."""

    def __init__(self, items: list[tuple[str, T]], budget: int = 1 << 62):
        self.items = items
        # bytes: once it holds this much the batch stops and hands over what it read
        self.budget = budget
        self.unread: list[tuple[str, T]] = []
        self.results: dict[str, list[tuple[int, bytes, int]]] = {}
        self.current: str | None = None
        self.abandoned = False
        self.lock = threading.Lock()
        self.done = threading.Event()

    def run(self, final: bool) -> None:
        try:
            held = 0
            for i, (node, nw) in enumerate(self.items):
                with self.lock:
                    if self.abandoned:
                        return
                    if held >= self.budget:
                        self.unread = self.items[i:]
                        break
                    self.current = node
                try:
                    self.results[node] = nw.tail.read_chunks(final)
                except OSError:
                    self.results[node] = []
                held += sum(len(block) for _, block, _ in self.results[node])
            with self.lock:
                self.current = None
        finally:
            self.done.set()


BATCH_BYTES = 8 << 20  # a batch hands over what it read once it holds this much
# batches read at once: a poll holds at most IN_FLIGHT * (BATCH_BYTES + one file's read) of logs
IN_FLIGHT = 4
# read per poll at most (the rest of a backlog next poll); a final poll reads everything
POLL_BYTES = 1 << 30


@dataclass(frozen=True)
class Bounds:
    """The tuning knobs of `read_batched` (a test passes small ones to see them hold): logs per
    batch, the bytes a batch holds before it hands over, the batches read at once, the bytes one
    (non-final) poll reads."""
    batch: int = BATCH
    batch_bytes: int = BATCH_BYTES
    in_flight: int = IN_FLIGHT
    poll_bytes: int = POLL_BYTES


Blocks = list[tuple[int, bytes, int]]


def read_batched(pool: DaemonPool, todo: list[tuple[str, T]], final: bool, timeout_s: float,
                 feed: Callable[[str, Blocks], None], stuck: Callable[[str, Batch[T]], None],
                 bounds: Bounds = Bounds()) -> None:
    """Read the logs in `todo` in batches, a few at a time, handing each batch's blocks to `feed`
    (which scans and drops them) before more are read: memory is bounded whatever the backlog. A
    batch whose read does not return within `timeout_s` is abandoned: `stuck` gets the node it hangs
    on, the rest of it waits for the next poll."""
    waiting, inflight, total = deque(todo), deque[tuple[Batch[T], Future[Any], float]](), 0
    while waiting or inflight:
        while waiting and len(inflight) < bounds.in_flight and (final or total < bounds.poll_bytes):
            batch = Batch([waiting.popleft() for _ in range(min(bounds.batch, len(waiting)))],
                          bounds.batch_bytes)
            inflight.append((batch, pool.submit(batch.run, final), time.monotonic()))
        if not inflight:
            return
        batch, fut, started = inflight.popleft()
        try:
            fut.result(timeout=max(0.0, started + timeout_s - time.monotonic()))
        except FutureTimeout:
            with batch.lock:
                batch.abandoned = True
                hung = batch.current
            if hung is not None:
                stuck(hung, batch)
        for node, blocks in list(batch.results.items()):
            if node != batch.current or not batch.abandoned:
                total += sum(len(b) for _, b, _ in blocks)
                feed(node, blocks)
                del batch.results[node]
        if not batch.abandoned:
            waiting.extend(batch.unread)


class DaemonPool:
    """`submit(fn, *args) -> Future` on at most `max_workers` daemon threads. Unlike
    ThreadPoolExecutor, whose threads interpreter exit joins, a read blocked for ever (a FIFO, a
    hung mount) never keeps the controller from exiting."""

    def __init__(self, max_workers: int = 8):
        self._queue: queue.SimpleQueue[tuple[Future[Any], Callable[..., Any],
                                             tuple[Any, ...]] | None] = \
            queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._max = max_workers
        self._busy = 0
        self._lock = threading.Lock()

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        fut: Future[Any] = Future()
        with self._lock:
            if self._busy >= len(self._threads) and len(self._threads) < self._max:
                t = threading.Thread(target=self._work, name="orchestrator-read", daemon=True)
                self._threads.append(t)
                t.start()
            self._busy += 1
        self._queue.put((fut, fn, args))
        return fut

    def _work(self) -> None:
        while (item := self._queue.get()) is not None:
            fut, fn, args = item
            try:
                if fut.set_running_or_notify_cancel():
                    try:
                        fut.set_result(fn(*args))
                    # handed to the caller through the future
                    except BaseException as exc:  # noqa: BLE001
                        fut.set_exception(exc)
            finally:
                with self._lock:
                    self._busy -= 1

    def shutdown(self, wait: bool = False, cancel_futures: bool = True) -> None:
        """Cancel what has not started and let idle workers end; a blocked worker is abandoned
        (daemon)."""
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                item[0].cancel()
                with self._lock:
                    self._busy -= 1
        for _ in self._threads:
            self._queue.put(None)


def pending(read: Any) -> bool:
    """A read left to its worker (a Batch or a Future) that has not returned yet."""
    if read is None:
        return False
    return not (read.done.is_set() if isinstance(read, Batch) else read.done())
