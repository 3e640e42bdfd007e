"""Pure bookkeeping of a running segment in its record: which nodes it runs on, its newest
iteration, when progress was first and last seen, and the queue note of a pending job."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from orchestrator.model import JobState, JobStatus
from orchestrator.state import SegmentRecord

PENDING_NOTE_S = 600.0  # how often a pending job's wait is logged


def changes(seg: SegmentRecord, status: JobStatus, scheduler_nodes: list[str], log_nodes: list[str],
            iteration: int | None, now: datetime,
            loss: tuple[int, float] | None = None) -> dict[str, Any]:
    """The segment's fields a poll changes: scheduler state, nodes, iteration, the loss curve
    (empty: nothing changed)."""
    out: dict[str, Any] = {}
    # the live state, as the last poll saw it (not UNKNOWN: a job sacct does not list yet); the
    # conclusion sets the end
    if status.state in (JobState.PENDING, JobState.RUNNING) and seg.job_state != status.state:
        out["job_state"] = status.state
    # squeue lists only the nodes still busy once a job is completing: trust RUNNING and accounting;
    # sacct lists a job that is starting as PENDING on its batch host alone
    if status.nodes and status.nodes_final and status.state != JobState.PENDING:
        if list(status.nodes) != seg.nodes:
            out["nodes"] = list(status.nodes)
    elif not scheduler_nodes and (grown := sorted(set(seg.nodes) | set(log_nodes) | set(
            status.nodes if status.state != JobState.PENDING else ()))) != seg.nodes:
        # no full list from the scheduler: what the agents' logs and a partial list show, never
        # fewer than known
        out["nodes"] = grown
    if iteration is not None and iteration != seg.end_iteration:
        out.update(end_iteration=iteration, first_progress_at=seg.first_progress_at or now,
                   last_progress_at=now)
    if loss is not None and (not seg.losses or loss[0] > seg.losses[-1][0]):
        out["losses"] = curve(seg.losses, loss)
    return out


CURVE_POINTS = 256  # a segment's loss curve in the ledger: thinned by half when it grows past this


def curve(points: list[tuple[int, float]], new: tuple[int, float]) -> list[tuple[int, float]]:
    """The curve with `new` appended, every other older point dropped once it holds CURVE_POINTS
    (the shape of a long segment stays, at a coarser step)."""
    kept = points[::2] if len(points) >= CURVE_POINTS else points
    return [*kept, (new[0], float(f"{new[1]:.6g}"))]


def pending_note(seg: SegmentRecord, status: JobStatus, where: str, now: datetime) -> str:
    waited = (now - seg.submitted_at).total_seconds() if seg.submitted_at else 0.0
    return f"pending {waited:.0f}s, reason {status.reason or '-'}" + (f", {where}" if where else "")


def pending_note_due(last: datetime | None, now: datetime) -> bool:
    return last is None or (now - last).total_seconds() >= PENDING_NOTE_S
