"""Node lists in the config: a list of names, a Slurm hostlist (`gpu[001-004,017]`), or both."""

from __future__ import annotations

import re

import hostlist

SAFE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]{0,127}$")
MAX_LISTED = 100_000


def node_list(v: object) -> list[str]:
    """Expanded, sorted and unique node names; a clear error names the bad entry."""
    items = [v] if isinstance(v, str) else v
    if not isinstance(items, list | tuple):
        raise ValueError("must be a list of node names or a hostlist such as 'gpu[001-004]'")
    out: set[str] = set()
    for item in items:
        if not isinstance(item, str):
            raise ValueError(f"node names are text, not {item!r}"[:120])
        try:
            names = hostlist.expand_hostlist(item.strip()) if item.strip() else []
        except hostlist.BadHostlist as exc:
            raise ValueError(f"bad hostlist {item[:80]!r}: {exc}") from None
        for n in names:
            if not SAFE_NAME.match(n):
                raise ValueError(f"invalid node name {n[:80]!r}")
        out.update(names)
        if len(out) > MAX_LISTED:
            raise ValueError(f"more than {MAX_LISTED} nodes listed")
    return sorted(out)
