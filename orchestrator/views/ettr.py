"""Pure: how well a run used its wall time. Productive time, time lost per cause, rate, ETA,
ETTR."""

from __future__ import annotations

import re
from collections import defaultdict
from datetime import datetime
from typing import Any

from orchestrator.checkpoint_interval import measured_write_s
from orchestrator.model import Action, Cause, RunStatus
from orchestrator.state import RunState, SegmentRecord


def _rate(s: SegmentRecord) -> float | None:
    """Iterations per second while the segment trained (between the first and last progress
    seen)."""
    if s.first_progress_at and s.last_progress_at and s.end_iteration is not None:
        span = (s.last_progress_at - s.first_progress_at).total_seconds()
        done = s.end_iteration - s.start_iteration
        if span > 0 and done > 0:
            return done / span
    return None


LOST_NO_CHECKPOINT = "lost: no checkpoint"
EXIT_BEFORE_GOAL = "exit 0 before the goal"


def segment_label(s: SegmentRecord) -> str:
    """What a segment's time was, for the views: its cause, except that a segment whose progress was
    thrown away for want of a checkpoint, or that exited 0 short of the goal, is lost time, never
    'success'."""
    if s.decision_rule == "no_checkpoint":
        return LOST_NO_CHECKPOINT
    if s.cause == Cause.SUCCESS and s.action is not None and s.action != Action.DONE:
        return EXIT_BEFORE_GOAL
    return s.cause.value if s.cause else "in progress"


STARTUP = "startup"


def lost_bucket(s: SegmentRecord) -> str:
    """Where a segment's unproductive time goes: its cause's bucket, or `startup` for a segment that
    succeeded (start-up, load, wind-down: overhead, not a failure's cost, never 'success') and for
    the running one before its first progress."""
    label = segment_label(s)
    if label == Cause.SUCCESS.value or (s.cause is None and s.first_progress_at is None):
        return STARTUP
    return label


def run_metrics(state: RunState, now: datetime) -> dict[str, Any]:
    segs = [s for s in state.segments if s.submitted_at]
    if not segs:
        return {"wall_s": 0.0, "productive_s": 0.0, "ettr": None, "lost_s_by_cause": {},
                "rate_per_h": None, "eta_s": None}
    ended = [s.ended_at for s in segs if s.ended_at]
    end = now if state.status == RunStatus.RUNNING or not ended else max(ended)
    first = segs[0].submitted_at
    assert first is not None
    wall = max((end - first).total_seconds(), 0.0)
    productive = 0.0
    lost: defaultdict[str, float] = defaultdict(float)
    rate_now = None
    for i, s in enumerate(segs):
        nxt = segs[i + 1] if i + 1 < len(segs) else None
        assert s.submitted_at is not None
        span_end = nxt.submitted_at if nxt and nxt.submitted_at else end
        span = max((span_end - s.submitted_at).total_seconds(), 0.0)
        rate = _rate(s)
        reached = s.end_iteration if s.end_iteration is not None else s.start_iteration
        # later work lost to the crash
        kept_to = min(nxt.start_iteration, reached) if nxt else reached
        useful = (max(kept_to - s.start_iteration, 0) / rate) if rate else 0.0
        useful = min(useful, span)
        productive += useful
        lost[lost_bucket(s)] += span - useful
        rate_now = rate or rate_now
    best = state.best_iteration()
    eta = None
    # a stopped run waits for a human: no time to the goal can be promised
    if (rate_now and state.target_iteration and best < state.target_iteration
            and state.status != RunStatus.STOPPED):
        eta = (state.target_iteration - best) / rate_now
    return {
        "wall_s": round(wall, 1),
        "productive_s": round(productive, 1),
        "ettr": round(productive / wall, 4) if wall > 0 else None,
        "lost_s_by_cause": {k: round(v, 1) for k, v in sorted(lost.items(), key=lambda kv: -kv[1])
                            if v > 0.05},
        "rate_per_h": round(rate_now * 3600, 1) if rate_now else None,
        "eta_s": round(eta, 0) if eta is not None else None,
        # what a save blocks the training, timed from the ranks' save lines (the interval advice's)
        "checkpoint_write_s": None if (w := measured_write_s(state)) is None else round(w, 2),
    }


def short_advice(advice: str) -> str:
    """'every 30 min (expected effective training time 93.7%)' of the planner's paragraph."""
    every = re.match(r"every [^ (;:]+ \w+", advice)
    ettr = re.search(r"expected effective training time [\d.]+%", advice)
    if every is None:
        return advice[:60]
    return every.group() + (f" ({ettr.group()})" if ettr else "")


def human(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    return ((f"{d}d" if d else "") + (f"{h}h" if h or d else "") + f"{m:02d}m{s:02d}s"
            if (d or h or m) else f"{s}s")
