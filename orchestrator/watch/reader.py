"""Reads of the shared filesystem that may hang: directory listings and batches of log reads.

A batch runs in one worker; when one file hangs the controller abandons the batch and the rest of it is
read on the next poll, so a frozen file never blocks the others.
"""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path
from typing import Generic, Protocol, TypeVar


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
