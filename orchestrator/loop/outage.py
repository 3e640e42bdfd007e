"""How long a condition that blocks submitting (an unreachable scheduler, a filesystem stall) has lasted: the
pure bookkeeping behind "alert once, stop when it persists beyond the configured bound".

Kept in memory: a restarted controller starts counting again (it alerts again, never stops early).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from orchestrator.loop.effects import Alert


@dataclass(frozen=True)
class Held:
    """What to do about one more observation of the condition."""
    alerts: tuple[Alert, ...] = ()
    stop: str = ""


class Outage:
    """One condition (`what`, e.g. "scheduler unreachable"), its start and whether the alert went out."""

    def __init__(self, what: str):
        self.what = what
        self.since: datetime | None = None
        self.alerted = False

    def note(self, run: str, now: datetime, limit_s: float, detail: str) -> Held:
        """The condition holds at `now`: alert the first time, stop once it lasted longer than `limit_s`."""
        if self.since is None:
            self.since = now
        lasted = now - self.since
        if lasted > timedelta(seconds=limit_s):
            return Held(stop=f"{self.what} for {_human(lasted)} (limit {_human(timedelta(seconds=limit_s))}): "
                             f"{detail}")
        if self.alerted:
            return Held()
        self.alerted = True
        return Held(alerts=(Alert(f"{run}: {self.what}", f"since {self.since.isoformat(timespec='seconds')}; "
                                f"waiting and retrying, stopping after {_human(timedelta(seconds=limit_s))}: "
                                f"{detail}"),))

    def clear(self, now: datetime) -> timedelta | None:
        """The condition is over; how long it lasted (None if it was not on)."""
        lasted = None if self.since is None else now - self.since
        self.since, self.alerted = None, False
        return lasted


def _human(d: timedelta) -> str:
    s = int(d.total_seconds())
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"
