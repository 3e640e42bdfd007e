"""The run's own rhythm while a segment runs: how long it usually goes between progress lines, and
whether a checkpoint is being written right now. The watchdog's early stall limit follows them."""

from __future__ import annotations

import os
from collections import deque
from datetime import datetime
from pathlib import Path

from orchestrator.timeout import call_with_timeout

KEEP = 64  # the most recent gaps between progress sightings
LEAST = 6  # fewer gaps than this: no cadence yet (the fixed limit alone): 30 s at a 5 s poll
PERCENTILE = 0.95
LISTED = 256  # entries of the checkpoint directory looked at, at most, per level


class Cadence:
    """Gaps between successive progress sightings of one segment (their resolution is the poll
    interval); a high percentile of them is the step cadence. A seed (the previous segment's
    cadence, or the step time the training prints) is the cadence until enough gaps are seen: a
    prior that the gaps seen since correct upward; the first gap (the first step: compilation,
    the first collective) is not the rhythm then, the first-step floor judges it instead."""

    def __init__(self, keep: int = KEEP, least: int = LEAST, seed: float | None = None) -> None:
        self._gaps: deque[float] = deque(maxlen=keep)
        self._least = least
        self._last: datetime | None = None
        self._seed = seed
        self._first = True  # the next gap closes the first step

    def see(self, last_progress: datetime | None) -> None:
        """The watcher's latest progress time, once per poll: a newer one closes a gap."""
        if last_progress is None or last_progress == self._last:
            return
        if self._last is not None and last_progress > self._last:
            if not (self._first and self._seed is not None):
                self._gaps.append((last_progress - self._last).total_seconds())
            self._first = False
        self._last = last_progress

    def seed(self, seconds: float | None) -> None:
        """A prior from the training's own printed step time, when none is known yet."""
        if self._seed is None and seconds is not None and seconds > 0:
            self._seed = seconds

    @property
    def seeded(self) -> bool:
        return self._seed is not None

    @property
    def learned(self) -> bool:
        """Enough gaps seen: the seed no longer counts."""
        return len(self._gaps) >= self._least

    @property
    def first_step(self) -> bool:
        """Progress was seen once and the first step has not ended: the first-step floor holds."""
        return self._last is not None and self._first

    def value(self) -> float | None:
        """The high percentile of the recent gaps; before enough of them, the seed corrected by
        the largest gap seen since (None without a seed)."""
        if not self.learned:
            return max([self._seed, *self._gaps]) if self._seed is not None else None
        ordered = sorted(self._gaps)
        return ordered[min(len(ordered) - 1, int(PERCENTILE * len(ordered)))]


def written_since(root: Path, since: datetime, timeout_s: float) -> bool:
    """Did anything in the checkpoint directory (its entries, and the entries of its newest
    subdirectory) change since `since`? A save in progress. Bounded by a timeout: a directory that
    does not answer says nothing (False)."""
    done, found = call_with_timeout(lambda: _changed(root, since.timestamp()), timeout_s)
    return bool(done and found is True)


def _changed(root: Path, since: float) -> bool:
    newest: tuple[float, str] | None = None
    for level in range(2):
        try:
            with os.scandir(root) as it:
                entries = [e for _, e in zip(range(LISTED), it, strict=False)]
        except OSError:
            return False
        for e in entries:
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue
            if st.st_mtime >= since:
                return True
            if level == 0 and e.is_dir(follow_symlinks=False) and (
                    newest is None or st.st_mtime > newest[0]):
                newest = (st.st_mtime, e.path)
        if newest is None:
            return False
        root = Path(newest[1])
    return False
