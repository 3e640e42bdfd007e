"""Pure: the restarts of a run and the spare nodes of its jobs, from the run ledger (issue 14).

A segment that follows a failed one is a restart, either inside the failed segment's job
(`in_job_of` set: a spare promoted in place of the blamed node, no queue wait) or through a new
submission (`--exclude`, a queue wait). The time a restart took runs from the failed segment's end
as the controller saw it (its cancel, else its recorded end) to the first progress line of the next
segment; unknown until that line arrives.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from orchestrator.model import Cause
from orchestrator.state import RunState, SegmentRecord
from orchestrator.views.ettr import human

# a new segment after these is the plan, not a restart
NOT_A_FAULT = frozenset({Cause.SUCCESS, Cause.TIMELIMIT})


@dataclass(frozen=True)
class RestartEvent:
    """One restart: the segment that failed, the one that followed, where it ran, the nodes swapped,
    how long."""

    segment: int
    after: int
    in_job: bool
    job_id: str
    cause: str
    culprits: tuple[str, ...]
    dropped: tuple[str, ...]
    promoted: tuple[str, ...]
    seconds: float | None  # failed segment's end -> next segment's first progress

    def json(self) -> dict[str, Any]:
        return {"segment": self.segment, "after": self.after, "where": "in_job" if self.in_job
                else "new_job",
                "job_id": self.job_id, "cause": self.cause, "culprit_nodes": list(self.culprits),
                "dropped": list(self.dropped), "promoted": list(self.promoted),
                "seconds": self.seconds}


@dataclass(frozen=True)
class JobSpares:
    """The spare nodes of one job that held spares: which it had, which were promoted, which are
    still free."""

    job_id: str
    submitted_by: int
    segments: tuple[int, ...]
    allocation: tuple[str, ...]
    spares: tuple[str, ...]  # the job's spares when its first step started (empty while not placed)
    spare_count: int  # as asked at submission
    promoted: tuple[str, ...]
    free: tuple[str, ...]

    def json(self) -> dict[str, Any]:
        return {"job_id": self.job_id, "submitted_by": self.submitted_by,
                "segments": list(self.segments),
                "allocation": list(self.allocation), "spares": list(self.spares),
                "spare_count": self.spare_count,
                "promoted": list(self.promoted), "free": list(self.free)}


def _fault_seen(seg: SegmentRecord) -> datetime | None:
    return seg.cancelled_at or seg.ended_at


def swapped(prev: SegmentRecord, seg: SegmentRecord) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(nodes dropped, spares promoted) between two steps of one job, paired: a spare takes its
    node's place (rank), so the pairs are read by position; nothing for a new submission."""
    if seg.in_job_of is None:
        return (), ()
    dropped = [n for n in prev.nodes if n not in seg.nodes]
    promoted = [n for n in seg.nodes if n not in prev.nodes]
    placed = {a: b for a, b in zip(prev.nodes, seg.nodes, strict=False) if a in dropped
              and b in promoted}
    rest = iter([n for n in promoted if n not in placed.values()])
    return tuple(dropped), tuple(placed.get(d) or next(rest, "?") for d in dropped)


def restarts(state: RunState) -> list[RestartEvent]:
    out = []
    for prev, seg in zip(state.segments, state.segments[1:], strict=False):
        if seg.in_job_of is None and (prev.cause is None or prev.cause in NOT_A_FAULT):
            continue
        seen = _fault_seen(prev)
        took = ((seg.first_progress_at - seen).total_seconds() if seen and seg.first_progress_at
                else None)
        dropped, promoted = swapped(prev, seg)
        out.append(RestartEvent(segment=seg.index, after=prev.index,
                                in_job=seg.in_job_of is not None,
                           job_id=seg.job_id or "", cause=prev.cause.value if prev.cause
                                else "unknown",
                           culprits=tuple(prev.culprit_nodes), dropped=dropped, promoted=promoted,
                           seconds=None if took is None else round(max(took, 0.0), 1)))
    return out


def summary(rows: list[RestartEvent]) -> dict[str, dict[str, Any]]:
    """Per kind ('in_job', 'new_job'): how many, how many were timed, the median and the longest
    seconds."""
    out = {}
    for kind, in_job in (("in_job", True), ("new_job", False)):
        mine = [r for r in rows if r.in_job == in_job]
        timed = [r.seconds for r in mine if r.seconds is not None]
        out[kind] = {"count": len(mine), "timed": len(timed),
                     "median_s": round(statistics.median(timed), 1) if timed else None,
                     "max_s": max(timed) if timed else None}
    return out


def summary_text(rows: list[RestartEvent]) -> str:
    """'2 inside the job (median 45s from the end of the failed segment to progress again), 1 new
    submission (...)', or '' for none. The segment ends when the controller cancels it or concludes:
    after detection, so the time from the fault itself is longer."""
    parts = []
    for kind, label in (("in_job", "inside the job"), ("new_job", "new submission")):
        k = summary(rows)[kind]
        if k["count"]:
            took = (f"median {human(k['median_s'])} from the end of the failed segment to progress "
                    "again" if k["median_s"] is not None else "not timed")
            plural = "s" if kind == "new_job" and k["count"] > 1 else ""
            parts.append(f"{k['count']} {label}{plural} ({took})")
    return ", ".join(parts)


def job_spares(state: RunState) -> list[JobSpares]:
    """One entry per job that held spare nodes, in submission order."""
    groups: dict[int, list[SegmentRecord]] = {}
    for seg in state.segments:
        groups.setdefault(seg.job_root, []).append(seg)
    out = []
    for segs in groups.values():
        first, last = segs[0], segs[-1]
        if not (first.spare_count or first.allocation_dir or len(segs) > 1):
            continue
        allocation = tuple(last.allocation or first.allocation)
        dropped = {n for p, s in zip(segs, segs[1:], strict=False) for n in swapped(p, s)[0]}
        promoted = tuple(n for p, s in zip(segs, segs[1:], strict=False) for n in swapped(p, s)[1])
        # never a spare of this job again, as the controller decides
        blamed = state.blamed_in_job(first)
        out.append(JobSpares(
            job_id=first.job_id or "", submitted_by=first.index,
            segments=tuple(s.index for s in segs),
            allocation=allocation, spares=tuple(n for n in allocation if n not in first.nodes),
            spare_count=first.spare_count, promoted=promoted,
            free=tuple(n for n in allocation if n not in last.nodes and n not in dropped
                       and n not in blamed)))
    return out


def job_cell(seg: SegmentRecord) -> str:
    """The job column: the job id, or 'in job 269' for a restart inside another segment's job."""
    if seg.in_job_of is not None:
        return f"in job {seg.job_id or '?'} (seg {seg.in_job_of})"
    return seg.job_id or "-"


def spares_cell(state: RunState, seg: SegmentRecord) -> str:
    """The spares column: the job's spares for the segment that submitted it, the swap for a restart
    in it."""
    if seg.in_job_of is not None:
        i = state.segments.index(seg)
        dropped, promoted = swapped(state.segments[i - 1], seg) if i else ((), ())
        swap = ", ".join(f"{b} for {a}" for a,
                         b in zip(dropped, promoted, strict=False)) or "no swap"
        return f"{swap}; {seg.spare_count} left"
    if not seg.spare_count and not seg.allocation_dir:
        return "-"
    spares = [n for n in seg.allocation if n not in seg.nodes]
    return ",".join(spares) if spares else f"{seg.spare_count} asked for"


def uses_spares(state: RunState) -> bool:
    return any(s.spare_count or s.allocation_dir or s.in_job_of is not None for s in state.segments)
