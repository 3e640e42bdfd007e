"""Views of the run ledger: the status table, the JSON object, the timeline."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from rich.table import Table

from orchestrator.model import BlacklistEntry
from orchestrator.state import RunState, SegmentRecord
from orchestrator.views.ettr import human, run_metrics


def _ts(d: datetime | None) -> str | None:
    return d.isoformat(timespec="seconds") if d else None


def status_json(state: RunState, now: datetime) -> dict[str, Any]:
    last = next((s for s in reversed(state.segments) if s.action), None)
    return {
        "run": state.run,
        "state": state.status.value,
        "stop_reason": state.stop_reason,
        "iteration": state.best_iteration(),
        "target_iteration": state.target_iteration,
        "current": None if state.current is None else _current_json(state.current),
        "last_decision": None if last is None else {
            "segment": last.index, "action": last.action.value if last.action else None, "reason": last.reason,
        },
        "metrics": run_metrics(state, now),
        "drain_commands": drain_commands(state, now),
        "segments": [_segment_json(s) for s in state.segments],
        "blacklist": [_blacklist_entry_json(e, now) for e in state.blacklist.entries],
    }


def _current_json(cur: SegmentRecord) -> dict[str, Any]:
    return {
        "index": cur.index, "job_id": cur.job_id, "nodes": cur.nodes,
        "job_state": cur.job_state.value if cur.job_state else ("SUBMITTED" if cur.job_id else "SUBMITTING"),
        "queue": cur.queue_note,
    }


def _segment_json(s: SegmentRecord) -> dict[str, Any]:
    return {
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


def _blacklist_entry_json(e: BlacklistEntry, now: datetime) -> dict[str, Any]:
    return {
        "node": e.node,
        "cause": e.cause.value,
        "evidence": e.evidence,
        "job_id": e.job_id,
        "since": _ts(e.since),
        "expires": _ts(e.expires),
        "strikes": e.strikes,
        "active": e.expires > now,
    }


def drain_commands(state: RunState, now: datetime) -> list[str]:
    """What an admin could run for each blacklisted node (printed; never run unless configured)."""
    out = []
    for e in state.blacklist.entries:
        if e.expires > now and e.source == "auto":
            text = e.evidence.split(": ", 1)[1] if e.evidence.startswith("/") and ": " in e.evidence else e.evidence
            reason = f"orchestrator {state.run}: {e.cause.value} job {e.job_id}: {text}"[:200]
            reason = reason.replace('"', "'").replace("\n", " ")
            out.append(f'scontrol update NodeName={e.node} State=DRAIN Reason="{reason}"')
    return out


def summary_table(state: RunState, now: datetime) -> Table:
    m = run_metrics(state, now)
    t = Table(title=f"run {state.run}", show_header=False)
    t.add_column("what")
    t.add_column("value")
    cur = state.current
    t.add_row("state", state.status.value + (f" ({state.stop_reason})" if state.stop_reason else ""))
    if cur:
        t.add_row("current segment", f"{cur.index} job {cur.job_id or '-'} "
                  f"{cur.job_state.value if cur.job_state else 'running'} on {','.join(cur.nodes) or '-'}"
                  + (f" ({cur.queue_note})" if cur.queue_note else ""))
    goal = f" / {state.target_iteration}" if state.target_iteration else ""
    t.add_row("iteration", f"{state.best_iteration()}{goal}")
    t.add_row("rate", f"{m['rate_per_h']} iterations/h" if m["rate_per_h"] else "-")
    t.add_row("ETA to goal", human(m["eta_s"]))
    t.add_row("effective training time", f"{m['ettr']:.1%} of {human(m['wall_s'])}" if m["ettr"] is not None else "-")
    t.add_row("time lost", ", ".join(f"{k} {human(v)}" for k, v in m["lost_s_by_cause"].items()) or "-")
    last = next((s for s in reversed(state.segments) if s.action), None)
    if last:
        t.add_row("last decision", f"segment {last.index}: {last.action.value if last.action else '-'}: {last.reason}")
    return t


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
