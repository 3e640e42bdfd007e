"""Lines of a block of log bytes, taken without splitting the whole block: one line decoded (NULs
dropped, bounded), the block's last lines (a node's tail) and the bare host names printed after
`scontrol show hostnames`."""

from __future__ import annotations

from collections.abc import Iterator

from orchestrator.diagnose.lines import BARE_HOST

MAX_LINE_DECODE = 64 * 1024


def decode(raw: bytes) -> str:
    return raw[:MAX_LINE_DECODE].replace(b"\x00", b"").decode("utf-8", errors="replace").rstrip()


def last_lines(data: bytes, count: int, n_total: int) -> Iterator[tuple[int, str]]:
    """(line number, text) of the non-empty lines among the last `count` of `data`, whose lines end
    at line `n_total`."""
    tail_start = len(data)
    for _ in range(count):
        tail_start = data.rfind(b"\n", 0, max(tail_start - 1, 0)) if tail_start > 0 else -1
        if tail_start < 0:
            break
    lines = data[max(tail_start + 1, 0):].split(b"\n")
    for i, raw in enumerate(lines[-count:]):
        text = decode(raw)
        if text:
            yield n_total - len(lines) + 1 + i, text


def hostnames_after(data: bytes, end: int) -> Iterator[str]:
    """The bare host names printed after `scontrol show hostnames` (at most a few thousand), up to
    the first line that is not one."""
    pos = end + 1
    for _ in range(4096):
        nxt = data.find(b"\n", pos)
        name = decode(data[pos: len(data) if nxt < 0 else nxt]).strip()
        if not BARE_HOST.match(name):
            return
        yield name
        if nxt < 0:
            return
        pos = nxt + 1
