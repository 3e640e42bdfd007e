"""Views of the run ledger: the status table, the JSON object, the timeline."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from rich.table import Table
from rich.text import Text

from orchestrator import numerics
from orchestrator.blacklist import compress
from orchestrator.model import Action, BlacklistEntry, EntrySource, EvidenceSource, Role
from orchestrator.state import RunState, SegmentRecord
from orchestrator.views.ettr import STARTUP, human, run_metrics, segment_label, short_advice
from orchestrator.views.fit import as_lines, fits, kept_columns
from orchestrator.views.nodes import drain_reason
from orchestrator.views.restarts import (
    job_cell,
    job_spares,
    restarts,
    spares_cell,
    summary,
    summary_text,
    uses_spares,
)
from orchestrator.views.stopped import stop_rows
from orchestrator.views.text import cut, plain, shell_dq

NOT_LOST = (STARTUP, "in progress")  # start-up and load time of healthy segments: not a failure's
ACTION_WIDTH = max(len(a.value) for a in Action)
WHOLE = ("nodes", "cause", "action")
DROP_ORDER = ("resumed from", "excluded", "spares", "end", "job", "seg")  # least needed first


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
            "segment": last.index, "action": last.action.value if last.action else None,
            "reason": last.reason,
        },
        "metrics": run_metrics(state, now),
        "restarts": _restarts_json(state),
        "drain_commands": drain_commands(state, now),
        "segments": [_segment_json(s) for s in state.segments],
        "slow_nodes": slow_nodes_json(state),
        "blacklist": [_blacklist_entry_json(e, now) for e in state.blacklist.entries],
        # the loss went bad there: no checkpoint written at or after it is resumed from (issue 41)
        "checkpoints_suspect_from": numerics.run_ceiling(state.segments, state.scratch_after),
    }


def slow_nodes_json(state: RunState) -> list[dict[str, Any]]:
    """Every node found slowing the job, newest last: node, slowdown, since, evidence, action."""
    return [{"node": f.node, "slowdown": f.factor, "since": f.since.isoformat(),
             "evidence": f.evidence, "action": f.action, "segment": s.index, "job_id": s.job_id}
            for s in state.segments for f in s.slow_nodes]


def _current_json(cur: SegmentRecord) -> dict[str, Any]:
    return {
        "index": cur.index, "job_id": cur.job_id, "nodes": cur.nodes,
        "job_state": cur.job_state.value if cur.job_state
        else ("SUBMITTED" if cur.job_id else "SUBMITTING"),
        "queue": cur.queue_note, "in_job_of": cur.in_job_of, "spare_count": cur.spare_count,
        "allocation": cur.allocation,
    }


def _restarts_json(state: RunState) -> dict[str, Any]:
    """Restarts inside a job's allocation vs new submissions (count, seconds from the failed
    segment's end to the next one's first progress), each restart, and the spares of every job that
    held some."""
    rows = restarts(state)
    return {**summary(rows), "list": [r.json() for r in rows],
            "jobs": [j.json() for j in job_spares(state)]}


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
        "rule": s.rule,
        "decision_rule": s.decision_rule,
        "rollback_below": s.rollback_below,  # resumed from a checkpoint before this iteration
        "in_job_of": s.in_job_of,
        "spare_count": s.spare_count,
        "allocation": s.allocation,
        "submitted_at": _ts(s.submitted_at), "first_progress_at": _ts(s.first_progress_at),
        "ended_at": _ts(s.ended_at),
        "cancelled": s.cancelled_by_controller or None,  # by the controller: why, and when
        "checkpoint_write_s": s.checkpoint_write_s,  # its saves' median, timed from the save lines
        "interval_advice": s.interval_advice or None,  # the checkpoint interval handed to it, why
        "cancelled_at": _ts(s.cancelled_at),
        "slowdown": {"factor": s.slowdown_factor, "since": _ts(s.slowdown_since),
                     "detail": s.slowdown_note} if s.slowdown_factor else None,
        "drained": s.drained,  # nodes of the step Slurm showed drained while it ran, and why
        "losses": s.losses,  # (step, loss) the ranks printed, thinned to at most 256 points
        "evidence": [e.model_dump(mode="json") for e in s.evidence if e.role == Role.ROOT][:5],
        "node_evidence": [e.model_dump(mode="json") for e in s.evidence
                          if e.source == EvidenceSource.NODE][:5],
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
        "from_run": e.run or None,  # another run's verdict, from the shared blacklist
    }


def _evidence_line(evidence: str) -> str:
    """The log line of '/path/to/host.log:44: text', without the path."""
    return evidence.split(": ", 1)[1] if evidence.startswith("/") and ": " in evidence else evidence


def _short_evidence(evidence: str) -> str:
    """'/path/to/host.log:44: text' as 'host.log:44: text'."""
    where, sep, text = evidence.partition(": ")
    return where.rsplit("/", 1)[-1] + sep + text if evidence.startswith("/") and sep else evidence


def drain_commands(state: RunState, now: datetime) -> list[str]:
    """What an admin could run for each blacklisted node (printed; never run unless configured)."""
    out = []
    for e in state.blacklist.entries:
        if e.expires > now and e.source == EntrySource.AUTO:
            reason = shell_dq(drain_reason(e, state.run))
            out.append(f'scontrol update NodeName={e.node} State=DRAIN Reason="{reason}"')
    return out


def lost_text(m: dict[str, Any]) -> tuple[str, str]:
    """('gpu_ecc 4m10s, hang 20m00s' or '-', start-up overhead of healthy segments or ''): success
    is not lost."""
    by = m["lost_s_by_cause"]
    lost = ", ".join(f"{k} {human(v)}" for k, v in by.items() if k not in NOT_LOST) or "-"
    overhead = sum(v for k, v in by.items() if k in NOT_LOST)
    return lost, human(overhead) if overhead else ""


def summary_table(state: RunState, now: datetime, controller: str | None = None) -> Table:
    """`controller`: whether a controller is attached (the CLI knows; the ledger does not)."""
    m = run_metrics(state, now)
    t = Table(title=plain(f"run {state.run}"), show_header=False)
    t.add_column("what")
    t.add_column("value", overflow="fold")  # a narrow terminal wraps a long word, never cuts it

    def row(key: str, value: object) -> None:
        t.add_row(key, plain(value))  # values come from logs and state: never markup

    cur = state.current
    stop = stop_rows(state)  # a decision stopped the run: its rows say why, once
    row("state", state.status.value + (f" ({state.stop_reason})" if state.stop_reason and not stop
                                       else ""))
    if controller is not None:
        row("controller", controller)
    if cur:
        row("current segment", f"{cur.index} {'in ' if cur.in_job_of is not None else ''}job "
                  f"{cur.job_id or '-'} {cur.job_state.value if cur.job_state else 'running'} on "
                  f"{','.join(cur.nodes) or '-'}"
                  + (f" ({cur.queue_note})" if cur.queue_note else ""))
        if spares := current_spares(state):
            row("spares", spares)
        if cur.slowdown_factor:
            row("slowdown", f"{cur.slowdown_factor:.2f}x since {_ts(cur.slowdown_since)}"
                + "".join(f"; {f.node} {f.action}" for f in cur.slow_nodes))
        if cur.drained:
            row("drained in Slurm", "; ".join(f"{n}: {why}" for n, why in cur.drained.items()))
    goal = f" / {state.target_iteration}" if state.target_iteration else ""
    row("iteration", f"{state.best_iteration()}{goal}{quiet_note(cur, now)}")
    row("rate", f"{m['rate_per_h']} iterations/h" if m["rate_per_h"] else "-")
    row("ETA to goal", human(m["eta_s"]))
    row("effective training time", f"{m['ettr']:.1%} of {human(m['wall_s'])}"
        if m["ettr"] is not None else "-")
    lost, overhead = lost_text(m)
    row("time lost", lost)
    if overhead:
        row("start-up overhead", overhead)
    if text := summary_text(restarts(state)):
        row("restarts", text)
    advice = next((s.interval_advice for s in reversed(state.segments) if s.interval_advice), "")
    if advice:
        row("checkpoint interval", short_advice(advice))
    for key, value in stop:
        row(key, value)
    last = next((s for s in reversed(state.segments) if s.action), None)
    if last and not stop:
        row("last decision", f"segment {last.index}: {last.action.value if last.action else '-'}: "
                             f"{last.reason}")
    return t


def quiet_note(cur: SegmentRecord | None, now: datetime) -> str:
    """' (last progress 2m05s ago)' for a running segment silent for a minute or more, else ''."""
    if cur is None or cur.last_progress_at is None or cur.ended_at is not None:
        return ""
    quiet = (now - cur.last_progress_at).total_seconds()
    return f" (last progress {human(quiet)} ago)" if quiet >= 60 else ""


def current_spares(state: RunState) -> str:
    """'job 269 (5 nodes): spares node4,node5; promoted node4; free node5' for the current segment's
    job, or ''. The spares are the job's spare nodes from its start; the job keeps a blamed node
    until it ends."""
    cur = state.current
    job = next((j for j in job_spares(state) if cur is not None and cur.index in j.segments), None)
    if job is None:
        return ""
    held = f" ({len(job.allocation)} nodes): spares {','.join(job.spares)}" if job.allocation else \
        f": {job.spare_count} spares asked for (the job's nodes are not known yet)"
    free = (",".join(job.free) or "none") if job.allocation else "-"
    return (f"job {job.job_id or '-'}{held}; promoted {','.join(job.promoted) or 'none'}; free "
            f"{free}")


def _end_text(s: SegmentRecord) -> str:
    if s.cancelled_by_controller and s.ended_at is None:
        return f"cancelled ({s.cancelled_by_controller})"
    return s.job_state.value if s.job_state else "running"


def timeline_table(state: RunState, last: int | None = None, reason: bool = True,
                   width: int | None = None) -> Table:
    """Every segment, or the `last` ones (a caption says how many are hidden); `reason`: the stop's
    reason in the title (not under a summary that says it); `width`: the columns that fit it, whole
    (views/fit.py: the nodes, iterations, cause, culprit and action are never dropped)."""
    shown = (state.segments if last is None or len(state.segments) <= last
             else state.segments[-last:])
    hidden = len(state.segments) - len(shown)
    t = Table(title=plain(f"run {state.run}: {state.status.value}"
                          + (f" ({state.stop_reason})" if state.stop_reason and reason else "")),
              caption=plain(f"{hidden} earlier segments not shown") if hidden else None)
    # a column only for runs with spare nodes: the others keep their table
    spares = uses_spares(state)
    headers = ["seg", "job", "nodes", *(["spares"] if spares else []), "excluded", "resumed from",
               "iters", "end", "cause", "culprit", "action"]
    rows = [[plain(c) for c in (
        str(s.index), job_cell(s), compress(s.nodes) or "-",
        *((spares_cell(state, s),) if spares else ()),
        ",".join(s.excluded) or "-", (s.resumed_from or "-").rsplit("/", 1)[-1],
        f"{s.start_iteration}->{s.end_iteration if s.end_iteration is not None else '?'}",
        _end_text(s), segment_label(s) if s.cause else "-", ",".join(s.culprit_nodes) or "-",
        s.action.value if s.action else "-")] for s in shown]
    keep = kept_columns(headers, rows, width, DROP_ORDER)
    # too narrow even so: a line per segment, wrapped
    if not fits(headers, rows, keep, width, {"action": ACTION_WIDTH}):
        return as_lines(t, headers, rows, WHOLE)
    for i in keep:
        # the nodes (a hostlist), the cause and the action stay whole: the others give way
        t.add_column(headers[i], no_wrap=headers[i] in WHOLE,
                     min_width=ACTION_WIDTH if headers[i] == "action" else None)
    for r in rows:
        t.add_row(*(r[i] for i in keep))
    return t


def blacklist_table(state: RunState, now: datetime) -> Table:
    t = Table(title="blacklist")
    for col in ("node", "cause", "strikes", "since", "expires", "evidence"):
        t.add_column(col)
    # entries alike but for the node: one row, a hostlist
    groups: dict[tuple[str, ...], list[str]] = {}
    for e in state.blacklist.entries:
        expires = (_ts(e.expires) or "") + ("" if e.expires > now else " (expired)")
        key = (e.cause.value, str(e.strikes), _ts(e.since) or "", expires,
               cut((f"run {e.run}: " if e.run else "") + _short_evidence(e.evidence), 100))
        groups.setdefault(key, []).append(e.node)
    for (cause, strikes, since, expires, evidence), nodes in groups.items():
        t.add_row(*(plain(c) for c in (compress(nodes), cause, strikes, since, expires)),
                  Text(evidence))
    return t
