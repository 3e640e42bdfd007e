"""Incremental, offset-tracking reader of one log file. Only new bytes are read on each call.

Robust to what crashed jobs leave behind: invalid UTF-8, NUL padding, carriage-return progress bars,
huge lines (cut at MAX_LINE), and a half-written last line (held back until completed or `final`).
"""

from __future__ import annotations

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
        self._partial = b""

    def read_new(self, final: bool = False, max_bytes: int = 4 * CHUNK) -> list[tuple[int, str]]:
        """Return (line_no, text) for every complete line appended since the last call."""
        out: list[tuple[int, str]] = []
        for first, data, _ in self.read_chunks(final, max_bytes):
            lines = data.split(b"\n")
            if data.endswith(b"\n"):
                lines.pop()
            out.extend((first + i, _clean(raw)) for i, raw in enumerate(lines))
        return out

    def read_chunks(self, final: bool = False, max_bytes: int = 4 * CHUNK) -> list[tuple[int, bytes, int]]:
        """New data as (number of its first line, bytes of complete lines, number of newlines in them);
        cheaper than read_new for big files: nothing is split or decoded here (the scanner decodes only
        the lines it needs)."""
        out: list[tuple[int, bytes, int]] = []
        try:
            fd = os.open(self.path, os.O_RDONLY)  # may block (hung filesystem, FIFO): callers use a timeout
        except FileNotFoundError:
            return out
        try:
            size = os.fstat(fd).st_size
            if size < self.offset:
                self.offset, self._partial, self.line_no = 0, b"", 0
            budget = max_bytes
            while budget > 0:
                data = os.pread(fd, min(CHUNK, budget), self.offset)
                if not data:
                    break
                self.offset += len(data)
                budget -= len(data)
                buf = self._partial + data
                cut = buf.rfind(b"\n") + 1
                if cut == 0 and len(buf) > MAX_LINE:
                    cut = len(buf)  # a monster line without an end: hand it over as it is
                if cut:
                    newlines = buf.count(b"\n", 0, cut)
                    out.append((self.line_no + 1, buf[:cut], newlines))
                    self.line_no += newlines + (0 if buf[cut - 1:cut] == b"\n" else 1)
                self._partial = buf[cut:]
        finally:
            os.close(fd)
        if final and self._partial:
            out.append((self.line_no + 1, self._partial, 0))
            self.line_no += 1
            self._partial = b""
        return out


def _clean(raw: bytes) -> str:
    """NULs dropped, invalid UTF-8 replaced, a line cut at MAX_LINE; of a carriage-return progress bar,
    the last non-empty state."""
    text = raw.replace(b"\x00", b"")[:MAX_LINE].decode("utf-8", errors="replace")
    if "\r" in text:
        parts = [p for p in text.split("\r") if p.strip()]
        text = parts[-1] if parts else ""
    return text.rstrip()
