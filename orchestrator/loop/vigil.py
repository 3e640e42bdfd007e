"""What the watchdog knows beyond one poll's snapshot, kept across the polls of one segment: the
step cadence (its early stall limit), whether a checkpoint is being written, whether the current
stacks confirm a hang, and the job's pace (a slowdown and when it began)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path

from orchestrator.loop.supervise import EARLY_FLOOR_S, Seen
from orchestrator.watch.cadence import Cadence, written_since
from orchestrator.watch.pace import Pace, Slowdown
from orchestrator.watch.segment import SegmentWatch
from orchestrator.watch.stuck import hang_confirmed


class Vigil:
    """The cadence and pace of one segment, fed once per poll."""

    def __init__(self, checkpoint_dir: Path, read_timeout_s: float) -> None:
        self.cadence, self.pace = Cadence(), Pace()
        self._dir, self._timeout = checkpoint_dir, read_timeout_s
        self.reported: Slowdown | None = None  # the slowdown last reported

    def seen(self, watch: SegmentWatch, base: Seen, now: datetime) -> Seen:
        """`base` with the cadence, a checkpoint save in progress and the stacks' confirmation."""
        last = base.last_progress
        self.cadence.see(last)
        self.pace.see(now, watch.max_iteration())
        cadence = self.cadence.value()
        recent = now - timedelta(seconds=max(EARLY_FLOOR_S / 2, 2 * (cadence or 0.0)))
        # only while quiet: a directory walk per poll of a healthy run would be waste
        saving = (last is not None and last < recent and cadence is not None
                  and written_since(self._dir, recent, self._timeout))
        return replace(base, cadence_s=cadence, pausing=saving,
                       confirmed=hang_confirmed(watch.nodes, watch.dumps_requested_at, now))

    def new_slowdown(self) -> Slowdown | None:
        """A slowdown not reported yet (or one that grew by half since): report it once."""
        sd = self.pace.slowdown()
        if sd is None or (self.reported is not None and sd.factor < 1.5 * self.reported.factor):
            return None
        self.reported = sd
        return sd


def slowdown_note(sd: Slowdown) -> str:
    return (f"the job runs {sd.factor:.2f}x slower than before: {sd.now_s:.3f} s per iteration "
            f"since {sd.since:%Y-%m-%d %H:%M:%S}, {sd.baseline_s:.3f} s before (a lock-step job "
            "runs at the pace of its slowest node)")
