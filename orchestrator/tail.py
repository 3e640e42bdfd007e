"""Incremental, offset-tracking reader of one log file. Only new bytes are read on each call.

Robust to what crashed jobs leave behind: invalid UTF-8, NUL padding, carriage-return progress bars,
huge lines (cut at MAX_LINE), and a half-written last line (held back until completed or `final`).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

MAX_LINE = 64 * 1024
CHUNK = 4 * 1024 * 1024


class LogTail:
    """Reads what a file gained since the last read, in bounded chunks of whole lines."""
    def __init__(self, path: Path, start_offset: int = 0):
        self.path = Path(path)
        self.offset = start_offset
        self.line_no = 0
        self._held = 0  # bytes at the end of what was read that are not a complete line yet

    def read_new(self, final: bool = False, max_bytes: int = 4 * CHUNK) -> list[tuple[int, str]]:
        """Return (line_no, text) for every complete line appended since the last call."""
        out: list[tuple[int, str]] = []
        for first, data, _ in self.read_chunks(final, max_bytes):
            lines = data.split(b"\n")
            if data.endswith(b"\n"):
                lines.pop()
            out.extend((first + i, _clean(raw)) for i, raw in enumerate(lines))
        return out

    def read_chunks(self, final: bool = False,
                    max_bytes: int = 4 * CHUNK) -> list[tuple[int, bytes, int]]:
        """New data as (number of its first line, bytes of complete lines, number of newlines in
        them); cheaper than read_new for big files: nothing is split or decoded here (the scanner
        decodes only the lines it needs)."""
        out: list[tuple[int, bytes, int]] = []
        try:
            # may block (hung filesystem, FIFO): callers use a timeout
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return out
        try:
            size = os.fstat(fd).st_size
            if size < self.offset:
                self.offset, self._held, self.line_no = 0, 0, 0
            budget = max_bytes
            while budget > 0:
                # a hole of a sparse file (NULs no one wrote) is skipped, not read
                if not self._held:
                    self.offset = _next_data(fd, self.offset, size)
                # the held-back part of a line is read again with what follows it, not joined in
                # memory (a copy)
                buf = os.pread(fd, min(CHUNK, budget) + self._held, self.offset - self._held)
                if len(buf) <= self._held:
                    break
                self.offset += len(buf) - self._held
                budget -= len(buf) - self._held
                cut = buf.rfind(b"\n") + 1
                if cut == 0 and len(buf) > MAX_LINE:
                    cut = len(buf)  # a monster line without an end: hand it over as it is
                if cut:
                    block = buf if cut == len(buf) else buf[:cut]
                    newlines = block.count(b"\n")
                    out.append((self.line_no + 1, block, newlines))
                    # a monster line handed over in pieces is still one line
                    self.line_no += newlines
                # NULs after the last line (a crash's padding, a sparse file's hole) start no line:
                # not held
                self._held = len(buf) - cut if buf[cut:].strip(b"\x00") else 0
            if final and self._held:
                out.append((self.line_no + 1, os.pread(fd, self._held, self.offset - self._held),
                            0))
                self.line_no += 1
                self._held = 0
        finally:
            os.close(fd)
        return out


def _next_data(fd: int, offset: int, size: int) -> int:
    """Where data starts at or after `offset` (SEEK_DATA): a hole reads as NULs, which hold no line
    and are dropped anyway, so a 2 GB sparse log costs what its data costs. `offset` itself where it
    cannot be told."""
    if not hasattr(os, "SEEK_DATA") or offset >= size:
        return offset
    try:
        return max(offset, os.lseek(fd, offset, os.SEEK_DATA))
    # ENXIO: only a hole to the end; EINVAL and others: a filesystem that cannot say
    except OSError as exc:
        return size if exc.errno == errno.ENXIO else offset


def _clean(raw: bytes) -> str:
    """NULs dropped, invalid UTF-8 replaced, a line cut at MAX_LINE; of a carriage-return progress
    bar, the last non-empty state."""
    text = raw.replace(b"\x00", b"")[:MAX_LINE].decode("utf-8", errors="replace")
    if "\r" in text:
        parts = [p for p in text.split("\r") if p.strip()]
        text = parts[-1] if parts else ""
    return text.rstrip()
