"""Lines of several node logs in one time order. The agent starts every line it writes with its ISO
timestamp (`2026-01-01T00:00:00.000Z 0: text`); a line without one (the rest of a cut-off head, a
line a tool wrote itself) stays right after the line it follows, in its own node."""

from __future__ import annotations

import heapq
import re
from datetime import UTC, datetime

STAMP = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?(?:Z|[+-]\d\d:?\d\d)?)\s")
EARLIEST = datetime.min.replace(tzinfo=UTC)


def stamp(line: str) -> datetime | None:
    """The time a node log line starts with (UTC when it names no zone); None without one."""
    m = STAMP.match(line)
    if m is None:
        return None
    try:
        when = datetime.fromisoformat(m.group(1))
    except ValueError:  # 2026-13-40T99:...: not a time
        return None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def merge(blocks: dict[str, list[str]],
          after: dict[str, datetime] | None = None) -> list[tuple[str, str]]:
    """(node, line) for every line of `blocks` (node -> its lines, oldest first), oldest first
    across nodes; each node's own order is kept, and on equal times the node listed first goes
    first. A line without a timestamp takes the time of the line before it; leading a block, the
    node's time in `after` (what an earlier call ended at), else it goes first. `after` gets each
    node's last time."""
    last = after if after is not None else {}
    runs: list[list[tuple[datetime, str, str]]] = []
    for node, lines in blocks.items():
        key = last.get(node, EARLIEST)
        keyed = []
        for line in lines:
            key = stamp(line) or key
            keyed.append((key, node, line))
        last[node] = key
        runs.append(keyed)
    return [(node, line) for _, node, line in heapq.merge(*runs, key=lambda k: k[0])]
