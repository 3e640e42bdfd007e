"""Reads of the shared filesystem that may hang: directory listings and batches of log reads.

A batch runs in one worker; when one file hangs the controller abandons the batch and the rest of it is
read on the next poll, so a frozen file never blocks the others.
"""

from __future__ import annotations

import os
import queue
import stat
import threading
from collections.abc import Callable
from concurrent.futures import Future
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


def scan_dir(directory: Path) -> dict[str, tuple[int, float]]:
    out: dict[str, tuple[int, float]] = {}
    try:
        with os.scandir(directory) as it:
            for e in it:
                try:
                    st = e.stat()
                except OSError:
                    continue
                # a FIFO or device in place of a log: size -1 makes the poll read it (and notice if it hangs)
                out[e.name] = (st.st_size if stat.S_ISREG(st.st_mode) else -1, st.st_mtime)
    except FileNotFoundError:
        pass
    return out


T = TypeVar("T", bound=HasTail)


class Batch(Generic[T]):
    """Reads a batch of logs in one worker; the controller can abandon it if one file hangs."""

    def __init__(self, items: list[tuple[str, T]]):
        self.items = items
        self.results: dict[str, list[tuple[int, bytes, int]]] = {}
        self.current: str | None = None
        self.abandoned = False
        self.lock = threading.Lock()
        self.done = threading.Event()

    def run(self, final: bool) -> None:
        try:
            for node, nw in self.items:
                with self.lock:
                    if self.abandoned:
                        return
                    self.current = node
                try:
                    self.results[node] = nw.tail.read_chunks(final)
                except OSError:
                    self.results[node] = []
            with self.lock:
                self.current = None
        finally:
            self.done.set()


class DaemonPool:
    """`submit(fn, *args) -> Future` on at most `max_workers` daemon threads. Unlike ThreadPoolExecutor, whose
    threads interpreter exit joins, a read blocked for ever (a FIFO, a hung mount) never keeps the controller
    from exiting."""

    def __init__(self, max_workers: int = 8):
        self._queue: queue.SimpleQueue[tuple[Future[Any], Callable[..., Any], tuple[Any, ...]] | None] = \
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
                    except BaseException as exc:  # noqa: BLE001 - handed to the caller through the future
                        fut.set_exception(exc)
            finally:
                with self._lock:
                    self._busy -= 1

    def shutdown(self, wait: bool = False, cancel_futures: bool = True) -> None:
        """Cancel what has not started and let idle workers end; a blocked worker is abandoned (daemon)."""
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
