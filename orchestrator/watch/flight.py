"""The flight recorders the ranks wrote in the segment's flight/ directory (orchestrator.flight on a
dump request, as JSON; NCCL on a collective timeout, as a pickle): which nodes' ranks are behind in
the collectives the others wait in. A file is named `NODE.rank-RANK[.json]` (the agent sets the
prefix); only the newest set is compared: the latest dump request's answers, or the timeout's.
NCCL's pickle is read with an unpickler that refuses every class: plain data only, never code."""

from __future__ import annotations

import io
import json
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.contract import NODE_NAME

MAX_BYTES = 32 << 20  # 2,000 entries with stacks stay well under this
MAX_TOTAL = 256 << 20  # all files of one segment: past this, the rest is not read
TIMEOUT = "timeout"  # the set NCCL wrote on its own


@dataclass(frozen=True)
class RankTrace:
    """One rank's recorder: the last collective it enqueued on the default process group."""
    node: str
    rank: int
    enqueued: int
    collective: str  # e.g. gloo:all_reduce, nccl:all_reduce
    request: str  # the dump request it answered, or TIMEOUT


class _PlainData(pickle.Unpickler):
    """Builtin containers and scalars only: a pickle naming any class or function is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refused: {module}.{name}")


def parse(name: str, raw: bytes) -> RankTrace | None:
    """One file, or None when it is no recorder of a node's rank."""
    node, _, rest = name.partition(".rank-")
    rank = rest.removesuffix(".json")
    if not NODE_NAME.fullmatch(node) or not rank.isdigit():
        return None
    try:
        if name.endswith(".json"):
            outer = json.loads(raw)
            trace, request = outer.get("trace", {}), str(outer.get("request", ""))
        else:
            trace, request = _PlainData(io.BytesIO(raw)).load(), TIMEOUT
        enqueued = int(trace["pg_status"]["0"]["last_enqueued_collective"])
    except (ValueError, KeyError, TypeError, AttributeError, pickle.UnpicklingError, EOFError):
        return None
    names = [e.get("profiling_name", "") for e in trace.get("entries", [])
             if isinstance(e, dict) and e.get("collective_seq_id") == enqueued
             and e.get("pg_id", 0) == 0]
    return RankTrace(node, int(rank), enqueued, names[-1] if names else "", request)


def behind(traces: list[RankTrace], request: str) -> dict[str, str]:
    """Pure: node -> why it is behind, among the answers to `request` (or the timeout's set when it
    has none): the nodes whose ranks enqueued fewer collectives than the most advanced rank, when
    they are at most half the nodes (more behind than ahead: the one ahead is the odd one)."""
    group = [t for t in traces if t.request == request] or [t for t in traces
                                                            if t.request == TIMEOUT]
    if not group:
        return {}
    top = max(t.enqueued for t in group)
    late = {t.node: t for t in sorted(group, key=lambda t: t.enqueued, reverse=True)
            if t.enqueued < top}
    nodes = {t.node for t in group}
    if not late or 2 * len(late) > len(nodes):
        return {}
    what = next((t.collective for t in group if t.enqueued == top and t.collective), "collective")
    return {n: (f"flight recorder: rank {t.rank} enqueued collective {t.enqueued}, the others "
                f"{top} ({what}), where they wait") for n, t in late.items()}


def read_flight(directory: Path, request: str) -> dict[str, str]:
    """The nodes behind, from the files in `directory` (none: {})."""
    traces, total = [], 0
    for f in sorted(directory.iterdir()) if directory.is_dir() else []:
        size = f.stat().st_size if f.is_file() and not f.name.endswith(".tmp") else MAX_BYTES + 1
        if size > MAX_BYTES or total + size > MAX_TOTAL:
            continue
        total += size
        try:
            t = parse(f.name, f.read_bytes())
        except Exception:  # noqa: BLE001 - a malformed file (a fuzzed pickle, deep JSON) is no trace
            t = None
        if t is not None:
            traces.append(t)
    return behind(traces, request)
