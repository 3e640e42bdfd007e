"""Reading progress out of a block of log bytes without splitting it into lines: the last (and
first) progress line is searched from the block's ends, which is where it is."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

from orchestrator.diagnose.prefilter import candidate_ends
from orchestrator.progress import not_training_bytes

SEARCH_LINES = 400
NEAR_END = 8
# a progress line's last state (a tqdm bar's \r rewrites) is at its end
MAX_PROGRESS_LINE = 64 * 1024
# prefilter.candidate_ends: (pattern, data, start)
Candidates = Callable[[bytes, bytes, int], list[int] | None]


def group_int(m: re.Match[bytes] | re.Match[str] | None) -> int | None:
    """The iteration a progress match captured: its first group that holds a number (a default
    pattern that knows several frameworks has one group per alternative)."""
    if m is None:
        return None
    for g in m.groups() or ():
        if g is None:
            continue
        try:
            return int(g)
        except ValueError:
            continue
    return None


def last_int(rx: re.Pattern[bytes], line: bytes) -> int | None:
    """The iteration of the last progress match in a line: a tqdm bar rewrites one line with
    carriage returns, and its last state is the one that counts. NULs (a crashed node's padding) are
    not text."""
    if b"\x00" in line:
        line = line.replace(b"\x00", b"")
    found = None
    for m in rx.finditer(line):
        it = group_int(m)
        found = it if it is not None else found
    if found is not None and not_training_bytes(line):
        return None  # a loading bar (checkpoint shards, a dataset map), not training
    return found


def first_int(rx: re.Pattern[bytes], line: bytes) -> int | None:
    it = group_int(rx.search(line))
    return None if it is not None and not_training_bytes(line) else it


def iter_lines_backwards(data: bytes, stop: int, limit: int) -> Iterator[bytes]:
    end = len(data)
    for _ in range(limit):
        if end <= stop:
            return
        start = data.rfind(b"\n", stop, end - 1) + 1 if end - 1 > stop else stop
        yield data[start:end]
        end = start


def iter_lines_forward(data: bytes, start: int, limit: int) -> Iterator[bytes]:
    for _ in range(limit):
        if start >= len(data):
            return
        nl = data.find(b"\n", start)
        nl = len(data) if nl < 0 else nl
        yield data[start:nl]
        start = nl + 1


def _last(data: bytes, after: int, rx: re.Pattern[bytes],
          candidates: Candidates) -> tuple[bytes, int] | None:
    """The last progress line of data[after:] and its iteration. A long block is searched through
    the lines a Hyperscan pass (`candidates`) says may match (its cost is the bytes, not the
    pattern); a short one, or without Hyperscan (`candidates` gives None), line by line from its
    end, then by the pattern itself."""
    # where it usually is: no pass over the block
    for line in iter_lines_backwards(data, after, NEAR_END):
        if (it := last_int(rx, line[-MAX_PROGRESS_LINE:])) is not None:
            return line, it
    long_block = len(data) - after > SEARCH_LINES * 200
    ends = candidates(rx.pattern, data, after) if long_block else None
    if ends is not None:
        for le in reversed(ends):
            ls = data.rfind(b"\n", after, le)
            line = data[after if ls < 0 else ls + 1 : le]
            if (it := last_int(rx, line[-MAX_PROGRESS_LINE:])) is not None:
                return line, it
        return None
    for line in iter_lines_backwards(data, after, SEARCH_LINES):
        if (it := last_int(rx, line[-MAX_PROGRESS_LINE:])) is not None:
            return line, it
    if not long_block:
        return None
    for h in reversed(list(rx.finditer(data, after))):  # no Hyperscan: find the last hit directly
        ls = data.rfind(b"\n", 0, h.start()) + 1
        le = data.find(b"\n", h.end())
        line = data[ls : len(data) if le < 0 else le]
        if (it := last_int(rx, line[-MAX_PROGRESS_LINE:])) is not None:
            return line, it
    return None


def block_progress(data: bytes, after: int, rx: re.Pattern[bytes], want_first: bool,
                   candidates: Candidates = candidate_ends) -> tuple[int | None, int, bytes] | None:
    """(first iteration if asked, last iteration, the last progress line) in data[after:], or None.
    `candidates`: the Hyperscan pass (a test passes one that answers None, as without Hyperscan)."""
    last = _last(data, after, rx, candidates)
    if last is None:
        return None
    first = None
    if want_first:
        first = next((it for ln in iter_lines_forward(data, after, SEARCH_LINES)
                      if (it := first_int(rx, ln)) is not None), None)
    return first, last[1], last[0]
