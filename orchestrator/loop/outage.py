"""How long a condition that blocks submitting (an unreachable scheduler, a filesystem stall) has
lasted: the pure bookkeeping behind "alert once, stop when it persists beyond the configured bound".

Kept in memory: a restarted controller starts counting again (it alerts again, never stops early).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from loguru import logger

from orchestrator.backends.base import SchedulerUnavailable
from orchestrator.clock import Clock
from orchestrator.loop.effects import Alert
from orchestrator.model import JobRef, JobState, JobStatus
from orchestrator.state import RunState, StateError, StateStore


@dataclass(frozen=True)
class Held:
    """What to do about one more observation of the condition."""
    alerts: tuple[Alert, ...] = ()
    stop: str = ""


class Outage:
    """One condition (`what`, e.g. "scheduler unreachable"), its start and whether the alert went
    out."""

    def __init__(self, what: str):
        self.what = what
        self.since: datetime | None = None
        self.alerted = False
        # the last time it was found over (for the scheduler: it answered)
        self.seen_at: datetime | None = None

    def note(self, run: str, now: datetime, limit_s: float, detail: str) -> Held:
        """The condition holds at `now`: alert the first time, stop once it lasted longer than
        `limit_s`."""
        if self.since is None:
            self.since = now
        lasted = now - self.since
        if lasted > timedelta(seconds=limit_s):
            return Held(stop=f"{self.what} for {_human(lasted)} (limit "
                             f"{_human(timedelta(seconds=limit_s))}): {detail}")
        if self.alerted:
            return Held()
        self.alerted = True
        return Held(alerts=(Alert(f"{run}: {self.what}",
                                  f"since {self.since.isoformat(timespec='seconds')}; "
                                "waiting and retrying, stopping after "
                                f"{_human(timedelta(seconds=limit_s))}: {detail}"),))

    def clear(self, now: datetime) -> timedelta | None:
        """The condition is over; how long it lasted (None if it was not on)."""
        self.seen_at = now
        lasted = None if self.since is None else now - self.since
        self.since, self.alerted = None, False
        return lasted


def _human(d: timedelta) -> str:
    s = int(d.total_seconds())
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


class Pollable(Protocol):
    """What the scheduler poll needs of a backend."""
    costly_poll: bool

    def poll(self, refs: list[JobRef]) -> dict[str, JobStatus]: ...


class SchedulerPoll:
    """Owns how often the scheduler is asked about the running job. The node files are read every
    poll; the scheduler (sacct: its database's cost, shared by every user of the cluster) only every
    `every_s`, and at once when the files say the job changed before it does (a node began writing,
    an agent exited) or after the controller cancelled. A backend whose poll costs nothing (local,
    the tests' fake) is asked every time."""

    def __init__(self, backend: Pollable, outage: Outage, every_s: float):
        self.backend, self.outage, self.every_s = backend, outage, every_s
        self.reset()

    def reset(self) -> None:
        """A new segment: ask at the next poll."""
        self.last: JobStatus | None = None
        self.asked_at: datetime | None = None
        self.turns: tuple[int, ...] = ()

    def hurry(self) -> None:
        """Ask at the next poll (the controller cancelled the job: its end comes soon)."""
        self.asked_at = None

    def status(self, ref: JobRef, now: datetime, turns: tuple[int, ...]) -> JobStatus | None:
        """The job's status, asked of the scheduler when due, else the last answer; None while the
        scheduler cannot be reached (as `poll_job`)."""
        due = (not self.backend.costly_poll or self.last is None or self.asked_at is None
               or turns != self.turns or self.last.state.terminal
               or (now - self.asked_at).total_seconds() >= self.every_s)
        self.turns = turns
        if due:
            self.last, self.asked_at = poll_job(self.backend, self.outage, ref, now), now
        return self.last


def poll_job(backend: Pollable, outage: Outage, ref: JobRef, now: datetime) -> JobStatus | None:
    """The job's status, or None while the scheduler cannot be reached: the caller waits and never
    cancels or resubmits a job it cannot see. Said once when the outage begins and once when it
    ends."""
    try:
        status = backend.poll([ref]).get(ref.job_id, JobStatus(state=JobState.UNKNOWN))
    except SchedulerUnavailable as exc:
        if outage.since is None:
            logger.warning("scheduler unreachable ({}): blind to the job; reading node logs, never "
                           "cancelling or resubmitting a job it cannot see until it answers",
                           str(exc)[:300])
        outage.since = outage.since or now
        return None
    if (lasted := outage.clear(now)) is not None:
        logger.info("scheduler reachable again after {}", lasted)
    return status


def save_patiently(store: StateStore, state: RunState, clock: Clock, every_s: float, limit_s: float,
                   stopping: Callable[[], bool]) -> None:
    """Save the run state; a run directory that cannot take it (full, read-only) is waited out, said
    once, and retried every `every_s`: the controller never exits with a decision unsaved while its
    job runs or ended (a restart would judge the segment again on the same logs). A stop request or
    `limit_s` ends the wait with the StateError (the previous state is intact)."""
    since: datetime | None = None
    while True:
        try:
            store.save(state)
        except StateError as exc:
            now = clock.now()
            if since is None:
                since = now
                logger.error("{}; waiting for the run directory, retrying every {:g}s", exc,
                             every_s)
            if stopping() or (now - since).total_seconds() > limit_s:
                raise
            clock.sleep(every_s)
            continue
        if since is not None:
            logger.info("run state written again after {}", _human(clock.now() - since))
        return
