"""Views of the run ledger: the status table, the JSON object, the timeline."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from rich.table import Table

from orchestrator.state import RunState


def _ts(d: datetime | None) -> str | None:
    return d.isoformat(timespec="seconds") if d else None


def status_json(state: RunState, now: datetime) -> dict[str, Any]:
    return {
        "run": state.run,
        "state": state.status.value,
        "stop_reason": state.stop_reason,
        "iteration": state.best_iteration(),
        "segments": [
            {
                "index": s.index,
                "job_id": s.job_id,
                "nodes": s.nodes,
                "excluded": s.excluded,
                "resumed_from": s.resumed_from,
                "start_iteration": s.start_iteration,
                "end_iteration": s.end_iteration,
                "job_state": s.job_state.value if s.job_state else None,
                "cause": s.cause.value if s.cause else None,
                "culprit_nodes": s.culprit_nodes,
                "action": s.action.value if s.action else None,
                "reason": s.reason,
                "submitted_at": _ts(s.submitted_at),
                "ended_at": _ts(s.ended_at),
                "evidence": [e.model_dump(mode="json") for e in s.evidence if e.role == "root"][:5],
            }
            for s in state.segments
        ],
        "blacklist": [
            {
                "node": e.node,
                "cause": e.cause.value,
                "evidence": e.evidence,
                "job_id": e.job_id,
                "since": _ts(e.since),
                "expires": _ts(e.expires),
                "strikes": e.strikes,
                "active": e.expires > now,
            }
            for e in state.blacklist.entries
        ],
    }


def timeline_table(state: RunState) -> Table:
    t = Table(title=f"run {state.run}: {state.status.value}" + (f" ({state.stop_reason})" if state.stop_reason else ""))
    for col in ("seg", "job", "nodes", "excluded", "resumed from", "iters", "end", "cause", "culprit", "action"):
        t.add_column(col)
    for s in state.segments:
        t.add_row(
            str(s.index),
            s.job_id or "-",
            ",".join(s.nodes) or "-",
            ",".join(s.excluded) or "-",
            (s.resumed_from or "-").rsplit("/", 1)[-1],
            f"{s.start_iteration}->{s.end_iteration if s.end_iteration is not None else '?'}",
            s.job_state.value if s.job_state else "running",
            s.cause.value if s.cause else "-",
            ",".join(s.culprit_nodes) or "-",
            s.action.value if s.action else "-",
        )
    return t


def blacklist_table(state: RunState, now: datetime) -> Table:
    t = Table(title="blacklist")
    for col in ("node", "cause", "strikes", "since", "expires", "evidence"):
        t.add_column(col)
    for e in state.blacklist.entries:
        t.add_row(e.node, e.cause.value, str(e.strikes), _ts(e.since) or "",
                  (_ts(e.expires) or "") + ("" if e.expires > now else " (expired)"), e.evidence[:100])
    return t
