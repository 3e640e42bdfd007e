"""Pure: what a node's stack dump (or its silence) says about a stuck segment."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from orchestrator.contract import DumpRecord, ExitRecord


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
    quiet = asked is not None and (nw.heartbeat_seen_at is None or nw.heartbeat_seen_at < asked)
    if quiet and any(o.dump is not None for o in others):
        since = (nw.heartbeat_seen_at.isoformat(timespec="seconds") if nw.heartbeat_seen_at
                 else "start")
        return f"the agent did not answer the stack-dump request; its heartbeat stopped at {since}"
    return ""


def frames(dump: DumpRecord | None) -> tuple[str, ...]:
    return tuple(p.top_frame for p in (dump.processes if dump else []) if p.top_frame)


def fs_suspect(dump: DumpRecord | None) -> bool:
    return any(p.state == "D" and p.fs_suspect for p in (dump.processes if dump else []))


def stuck_dump(dump: DumpRecord) -> str:
    for p in dump.processes:
        if p.state == "D":
            return (f"pid {p.pid} in uninterruptible sleep (state D, wchan={p.wchan or '?'}); "
                    f"py-spy: {p.stack_summary or 'n/a'}")
    return ""
