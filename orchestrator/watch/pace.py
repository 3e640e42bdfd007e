"""Pure: is the job running slower than it did? The iterations seen per poll give the seconds per
iteration over windows of the segment's own history; a slowdown is a run of slow windows against the
fastest steady window before them (a change point, with the time it started). A lock-step job runs
at the pace of its slowest node, so one slow node slows everything: this finds that it happened and
when; which node is a separate question (its stacks)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from datetime import datetime

WINDOW_S = 20.0  # seconds of progress per window
KEEP = 90  # windows kept (30 min at 20 s)
WARM = 3  # windows before any baseline: start-up and compilation are not the pace
SLOW_FACTOR = 1.2  # this much slower than the baseline is slow
CONFIRM = 2  # consecutive slow windows before a slowdown is reported
# a gap between progress sightings this many times the median gap is a pause (an eval, a checkpoint
# save): the window holding it says nothing about the pace and is dropped
PAUSE_GAP = 3.0


@dataclass(frozen=True)
class Slowdown:
    """The job runs `factor` times slower than its baseline since `since`."""
    factor: float
    since: datetime
    baseline_s: float  # seconds per iteration before
    now_s: float  # seconds per iteration in the recent windows


class Pace:
    """Seconds per iteration, window by window, from (time, iteration) sightings at each poll."""

    def __init__(self, window_s: float = WINDOW_S) -> None:
        self._window_s = window_s
        self._windows: deque[tuple[datetime, float]] = deque(maxlen=KEEP)  # (start, s/it)
        self._open: tuple[datetime, int] | None = None
        self._last: tuple[datetime, int] | None = None
        self._gaps: deque[float] = deque(maxlen=64)
        self._paused = False  # the open window holds a pause

    def see(self, now: datetime, iteration: int | None) -> None:
        """One poll's newest iteration. A window closes once it spans `window_s` with progress."""
        if iteration is None:
            return
        if self._open is None or self._last is None or iteration < self._last[1]:
            self._open = self._last = (now, iteration)  # first sighting, or a restart from earlier
            return
        if iteration == self._last[1]:
            return
        gap = (now - self._last[0]).total_seconds()
        usual = sorted(self._gaps)[len(self._gaps) // 2] if self._gaps else None
        self._paused |= usual is not None and gap > PAUSE_GAP * usual
        self._gaps.append(gap)
        self._last = (now, iteration)
        start, it0 = self._open
        span = (now - start).total_seconds()
        if span >= self._window_s and iteration > it0:
            if not self._paused:
                self._windows.append((start, span / (iteration - it0)))
            self._open, self._paused = (now, iteration), False

    def recent_s(self) -> float | None:
        """Seconds per iteration in the newest window (None: none closed yet)."""
        return self._windows[-1][1] if self._windows else None

    def slowdown(self) -> Slowdown | None:
        """The last CONFIRM windows all slower than SLOW_FACTOR x the fastest earlier window."""
        ws = list(self._windows)
        if len(ws) < WARM + CONFIRM:
            return None
        recent, before = ws[-CONFIRM:], ws[WARM - 1:-CONFIRM]
        base = min(s for _, s in before)
        if not all(s >= SLOW_FACTOR * base for _, s in recent):
            return None
        # the change point: the first of the slow windows at the end
        first = len(ws) - CONFIRM
        while first - 1 >= WARM and ws[first - 1][1] >= SLOW_FACTOR * base:
            first -= 1
        now_s = sorted(s for _, s in recent)[len(recent) // 2]
        return Slowdown(factor=now_s / base, since=ws[first][0], baseline_s=base, now_s=now_s)
