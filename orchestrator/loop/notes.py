"""The lines a run prints while a segment runs, so that hours between "running" and "segment ended"
are not silent: when the job starts, where it waits in the queue (every 10 min), and a one-line
progress summary (iteration, rate, ETA; every 5 min), or that output flows with no recognised
progress line."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from loguru import logger

from orchestrator.loop import progress
from orchestrator.loop.conclude import Outcome
from orchestrator.model import JobRef, JobState, JobStatus, RunStatus
from orchestrator.state import RunState, SegmentRecord

SUMMARY_EVERY_S = 300.0
NO_PROGRESS = "output flows, no line recognised as progress (set progress_regex)"


def summary(seg: SegmentRecord, target: int | None, now: datetime, output_flows: bool) -> str:
    """One line: where the segment is, how fast it goes and when it reaches the goal."""
    if seg.end_iteration is None or seg.first_progress_at is None:
        return ("output flows, but no line was recognised as progress (set progress_regex); output "
                "counts as liveness" if output_flows else "no progress yet")
    done = seg.end_iteration - seg.start_iteration
    span = ((seg.last_progress_at or now) - seg.first_progress_at).total_seconds()
    rate = done / span if span > 0 and done > 0 else 0.0
    line = f"iteration {seg.end_iteration}" + (f"/{target}" if target else "")
    line += f", {rate * 3600:.0f} it/h" if rate else ""
    if target and rate and seg.end_iteration < target:
        line += f", ETA {(target - seg.end_iteration) / rate / 3600:.1f} h"
    quiet = (now - (seg.last_progress_at or now)).total_seconds()
    return line + (f", last progress {quiet:.0f}s ago" if quiet >= 60 else "")


class Notes:
    """Owns the periodic lines of one controller: the job's start, its queue wait, the progress
    summary."""

    def __init__(self, queue_position: Callable[[JobRef], str]):
        self.queue_position = queue_position
        self.running_since: datetime | None = None
        self._pending: datetime | None = None
        self._summary: datetime | None = None
        self.reattached = False

    def reset(self, reattached: bool = False) -> None:
        self.running_since = self._pending = self._summary = None
        # the job was submitted before this controller started watching it
        self.reattached = reattached

    def update(self, state: RunState, seg: SegmentRecord, status: JobStatus, ref: JobRef,
               now: datetime, output_flows: bool) -> str | None:
        """Log what is due; the segment's new queue note, or None to keep it."""
        log = logger.bind(run=state.run, segment=seg.index)
        note: str | None = None
        if status.state == JobState.RUNNING and self.running_since is None:
            self.running_since = self._summary = now
            note = ""
            where = ",".join(status.nodes or seg.nodes) or "nodes not listed yet"
            # the job may have run for long: no queue time, no "restarted" line again
            if self.reattached:
                log.info("job={} segment {} still running on {} (re-attached)", seg.job_id,
                         seg.index, where)
            elif seg.in_job_of is not None:
                log.info("job={} segment {} restarted inside the job on {} (no queue)", seg.job_id,
                         seg.index, where)
            else:
                log.info("job={} running on {} after {:.0f}s in the queue", seg.job_id, where,
                         (now - seg.submitted_at).total_seconds() if seg.submitted_at else 0.0)
        if status.state == JobState.RUNNING and self._summary is not None and \
                (now - self._summary).total_seconds() >= SUMMARY_EVERY_S:
            self._summary = now
            line = summary(seg, state.target_iteration, now, output_flows)
            log.info("segment {} job={}: {}", seg.index, seg.job_id, line)
            if seg.end_iteration is None and output_flows and seg.queue_note != NO_PROGRESS:
                return NO_PROGRESS  # `status` shows it on the current segment
        if seg.end_iteration is not None and seg.queue_note == NO_PROGRESS:
            return ""  # progress lines are recognised now
        if status.state == JobState.PENDING and progress.pending_note_due(self._pending, now):
            self._pending = now
            note = progress.pending_note(seg, status, self.queue_position(ref), now)
            log.info("job={} {}", seg.job_id, note)
        return note


def log_end(state: RunState, out: Outcome) -> None:
    """The lines a judged segment leaves in the log: one per blamed node, with the evidence its
    blacklist entry holds, then the verdict and the decision (and the stop, if the run stopped)."""
    seg, v, d = state.current, out.verdict, out.decision
    assert seg is not None
    log = logger.bind(run=state.run, segment=seg.index, job=seg.job_id)
    for node, entry in ((n, state.blacklist.get(n)) for n in d.blame_nodes):
        log.warning("blacklist node={} cause={} hard={} evidence={!r}", node, v.cause.value, d.hard,
                    entry.evidence[:200] if entry else "")
    log.info("segment ended job={} state={} cause={} culprits={} confidence={:.2f} action={} "
             "reason={!r}",
             seg.job_id, seg.job_state, v.cause.value, ",".join(v.culprit_nodes) or "-",
             v.confidence, d.action.value, d.reason)
    if state.status == RunStatus.STOPPED:
        log.error("controller stopped reason={!r}", d.reason)
