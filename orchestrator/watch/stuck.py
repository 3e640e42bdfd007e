"""Pure: what a node's stack dump (or its silence) says about a stuck segment."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from typing import Protocol

from orchestrator.contract import DumpRecord, ExitRecord
from orchestrator.diagnose.culprits import stack_outliers
from orchestrator.diagnose.rules import COLLECTIVE, IN_BACKWARD, PROGRAM_WAIT
from orchestrator.evidence import NodeEvidence

# an agent quiet this long after a dump request, while the others answered, is frozen (its
# heartbeat comes every 5 s)
SILENT_AFTER_S = 12.0
# a rank outside the collective in these frames may be saving a checkpoint, evaluating, reading
# its data or waiting in its own code (a queue, a lock): not an early hang, as a slow shard or a
# filesystem hiccup of a minute would exclude a node or stop the run; the fixed limit judges those
# (one stuck in the kernel shows as state D)
SAVING = re.compile(r"save|checkpoint|serializ|pickle|write|flush|fsync|close|eval|valid|"
                    r"\bread\b|\bopen\b|\bstat\b|\bos\.|\bio\.", re.IGNORECASE)


class _Node(Protocol):
    """What the judgement reads of a node's watch (its dump, exit record and last heartbeat)."""
    dump: DumpRecord | None
    exit_record: ExitRecord | None
    heartbeat_seen_at: datetime | None


def stuck_detail(nw: _Node, others: list[_Node], asked: datetime | None) -> str:
    """A process in D state, or an agent that did not answer the dump request while its heartbeat
    stopped (the whole node's job processes are frozen) while other agents answered. A node whose
    agent already exited had nothing to answer."""
    if nw.dump is not None:
        return stuck_dump(nw.dump)
    if nw.exit_record is not None:
        return ""
    if silent(nw, others, asked):
        since = (nw.heartbeat_seen_at.isoformat(timespec="seconds") if nw.heartbeat_seen_at
                 else "start")
        return f"the agent did not answer the stack-dump request; its heartbeat stopped at {since}"
    return ""


def silent(nw: _Node, others: list[_Node], asked: datetime | None) -> bool:
    """The node's agent did not answer the dump request and its heartbeat stopped, while another
    agent answered."""
    quiet = asked is not None and (nw.heartbeat_seen_at is None or nw.heartbeat_seen_at < asked)
    return (quiet and nw.dump is None and nw.exit_record is None
            and any(o.dump is not None for o in others))


def silent_nodes(nodes: Mapping[str, _Node], asked: datetime | None) -> frozenset[str]:
    """The live nodes whose only sign of a hang is their agent's silence."""
    live = {n: nw for n, nw in nodes.items() if nw.exit_record is None}
    return frozenset(n for n, nw in live.items()
                     if silent(nw, [o for o in live.values() if o is not nw], asked))


def frames(dump: DumpRecord | None) -> tuple[str, ...]:
    return tuple(p.top_frame for p in (dump.processes if dump else []) if p.top_frame)


def fs_suspect(dump: DumpRecord | None) -> bool:
    return any(p.state == "D" and p.fs_suspect for p in (dump.processes if dump else []))


def stuck_dump(dump: DumpRecord) -> str:
    """A training process in D state (stuck in the kernel) or stopped (T: a SIGSTOP, a debugger
    or a frozen cgroup)."""
    for p in dump.processes:
        if p.state == "D":
            return (f"pid {p.pid} in uninterruptible sleep (state D, wchan={p.wchan or '?'}); "
                    f"py-spy: {p.stack_summary or 'n/a'}")
    for p in dump.processes:
        if p.state in ("T", "t"):
            return f"pid {p.pid} stopped (state {p.state}, wchan={p.wchan or '?'})"
    return ""


def _all_wait_there(answered: Mapping[str, DumpRecord], odd: list[str], common: str) -> bool:
    """A frame that is no collective of a known framework (a file or socket barrier, JAX, MPI, a
    framework's own wait) is where the others wait when one node alone is elsewhere, among three
    or more, and every rank of every other node shows that frame in both samples (issue 39)."""
    others = [p for n, d in answered.items() if n not in odd for p in d.processes if p.top_frame]
    return (len(answered) >= 3 and len(odd) == 1 and bool(others) and not SAVING.search(common)
            and all(p.top_frame == common == p.top_frame_again for p in others))


def hang_confirmed(nodes: Mapping[str, _Node], asked: datetime | None, now: datetime,
                   paused: str = "") -> str:
    """Do the current dumps confirm a hang? A sentence naming it, or "" (no dumps yet, not all in,
    or they show none). Confirmed: some nodes (not all) stuck in the kernel, stopped or silent
    while the others answered; or the ranks of some nodes outside the collective every other rank
    waits in (or, one node among three or more, outside whatever frame every other rank shows in
    both samples), with the same innermost frame in both samples, and not saving or writing, nor
    in a pause a log announced (`paused`: the line that began an eval or a save)."""
    if asked is None:
        return ""
    live = {n: nw for n, nw in nodes.items() if nw.exit_record is None}
    late = (now - asked).total_seconds() >= SILENT_AFTER_S
    if len(live) < 2 or not (late or all(nw.dump is not None for nw in live.values())):
        return ""
    stuck = {n: d for n, nw in live.items()
             if (d := stuck_detail(nw, [o for o in live.values() if o is not nw], asked))}
    if 0 < len(stuck) < len(live):
        return "; ".join(f"{n}: {d}" for n, d in sorted(stuck.items()))
    answered = {n: nw.dump for n, nw in live.items() if nw.dump is not None}
    if len(answered) < len(live):
        return ""
    odd, common = stack_outliers([NodeEvidence(node=n, top_frames=frames(d))
                                  for n, d in sorted(answered.items())])
    if paused or not odd or not (COLLECTIVE.search(common) or IN_BACKWARD.search(common)
                                 or _all_wait_there(answered, odd, common)):
        return ""
    outside = [p for n in odd for p in answered[n].processes
               if p.top_frame and p.top_frame != common]
    if any(p.top_frame_again != p.top_frame or SAVING.search(p.top_frame)
           or PROGRAM_WAIT.search(p.top_frame) for p in outside):
        return ""
    return (f"{','.join(odd)} outside {common}, where every other rank waits, in both stack "
            f"samples ({outside[0].top_frame})")
