"""Pure: while a segment runs, should the controller cancel it, ask the agents for stack dumps, or
wait?

Owns the stall and cascade watchdog. Input is a snapshot of what the watcher saw (`Seen`); output is
a `Supervision` value the controller carries out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from orchestrator.contract import PREFLIGHT_EXIT
from orchestrator.model import CancelReason
from orchestrator.settings import Watch

DUMP_LEAD_S = 30.0  # stack dumps are requested this long before the stall limit
DUMP_WAIT_S = 60.0  # after a rank failed: how long to wait for the dumps of the nodes still running
# at the stall limit: how long after the request to wait for dumps still out (two py-spy samples
# of every rank, each bounded by the agent's timeouts); a frozen node never answers; an agent that
# still beats is waited for up to DUMP_WAIT_S
STALL_DUMP_WAIT_S = 20.0
# the early limit: this many times the run's own step cadence (a high percentile of the recent gaps
# between progress lines), never under the floor; a hang is cancelled there only when the stacks
# confirm it, else at stall_timeout_s
CADENCE_MULTIPLE = 4.0
EARLY_FLOOR_S = 20.0
# until the first step after the first progress sighting ends (compilation, the first collective,
# data loading), a seeded early limit is never under this (the start-up's own default, vigil.py)
FIRST_STEP_S = 120.0
RESAMPLE_S = 30.0  # stacks that did not confirm a hang: sample again this long after


@dataclass(frozen=True)
class Seen:
    """What the watcher knows about a running segment at one poll."""

    # node -> when its non-zero exit was seen
    failed: dict[str, datetime] = field(default_factory=dict)
    exit_codes: dict[str, int] = field(default_factory=dict)
    last_progress: datetime | None = None
    running_since: datetime | None = None
    dumps_requested_at: datetime | None = None
    last_output: datetime | None = None  # any node's log last grew
    nodes: frozenset[str] = frozenset()  # every node with an agent log
    dumps_in: frozenset[str] = frozenset()  # nodes whose agent answered the current dump request
    # nodes whose agent still beats since the request but has not answered yet: at work on it
    answering: frozenset[str] = frozenset()
    # a read of the run directory hangs: no progress seen may be the controller's blindness
    blind: bool = False
    cadence_s: float | None = None  # a high percentile of recent gaps between progress lines
    first_step: bool = False  # one progress sighting, the step after it not ended: FIRST_STEP_S
    pausing: bool = False  # a checkpoint save or an eval is running: no early limit
    confirmed: str = ""  # the current dumps show a hang (a sentence naming it), or ""
    # silent nodes the scheduler cannot reach either (not responding, down): a node failure
    unreachable: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Supervision:
    """What the watchdog asks the controller to do at one poll."""
    cancel: str = ""  # non-empty: cancel the job; this sentence says why, for people
    reason: CancelReason | None = None  # set with `cancel`: why, for the code
    request_dumps: bool = False
    clear_dumps: bool = False  # progress resumed: earlier dumps describe no stall
    note: str = ""  # a line for the log


def supervise(seen: Seen, now: datetime, w: Watch) -> Supervision:
    # a read of the run directory hangs: judge nothing (no cancel, no dump request) until it answers
    if seen.blind:
        return Supervision()
    preflight = sorted(n for n, code in seen.exit_codes.items() if code == PREFLIGHT_EXIT
                       and n in seen.failed)
    if preflight:
        return Supervision(cancel=f"preflight failed on {','.join(preflight)}; no training can run "
                                  "there", reason=CancelReason.PREFLIGHT)
    if seen.failed:
        return _failed(seen, now, w)
    if seen.running_since is None:
        return Supervision()
    return _stall(seen, now, w)


def _failed(seen: Seen, now: datetime, w: Watch) -> Supervision:
    """Ranks failed. Usually they are the peers of the node that broke (their watchdog fired first):
    before cancelling, ask the nodes still running for stack and /proc dumps, and wait for them
    within a bound."""
    failed = ",".join(sorted(seen.failed))
    if (now - min(seen.failed.values())).total_seconds() < w.cascade_grace_s:
        return Supervision()
    waiting = seen.nodes - set(seen.failed)
    cancel = f"training failed on {failed}; peers would wait forever"
    if not waiting:
        return Supervision(cancel=cancel, reason=CancelReason.PEER_FAILED)
    if seen.dumps_requested_at is None:
        return Supervision(request_dumps=True, note=f"training failed on {failed}; asking "
                           f"{','.join(sorted(waiting))} (still running) for stack dumps before "
                           "cancelling")
    answered = waiting <= seen.dumps_in
    if answered or (now - seen.dumps_requested_at).total_seconds() >= DUMP_WAIT_S:
        return Supervision(cancel=cancel, reason=CancelReason.PEER_FAILED)
    return Supervision()


def early_limit(seen: Seen, w: Watch) -> float | None:
    """The stall limit the run's own cadence gives, below stall_timeout_s; None without one."""
    if seen.cadence_s is None or seen.pausing or seen.last_progress is None:
        return None
    limit = max(EARLY_FLOOR_S, CADENCE_MULTIPLE * seen.cadence_s,
                FIRST_STEP_S if seen.first_step else 0.0)
    return limit if limit < w.stall_timeout_s else None


def _stall(seen: Seen, now: datetime, w: Watch) -> Supervision:
    """No progress for the stall limit (or, before any progress line, the start-up limit): a hang.
    When no line was ever recognised as progress but output keeps flowing, the output is the
    liveness signal. Past the early limit (from the step cadence) the stacks decide: a hang they
    confirm is cancelled there; otherwise the fixed limit stays the bound."""
    ref_time = seen.last_progress or seen.running_since
    assert ref_time is not None
    limit = w.stall_timeout_s if seen.last_progress else w.startup_timeout_s
    if (seen.last_progress is None and seen.last_output is not None
        and seen.running_since is not None):
        ref_time = max(seen.last_output, seen.running_since)
        limit = max(w.stall_timeout_s, w.startup_timeout_s)
    quiet = (now - ref_time).total_seconds()
    early = early_limit(seen, w)
    if seen.unreachable and quiet >= min(early or limit, limit):
        down = ",".join(sorted(seen.unreachable))
        return Supervision(cancel=f"node failure: {down} fell silent (its agent's heartbeat "
                                  "stopped and it did not answer the stack-dump request) and "
                                  "slurmctld cannot reach it either",
                           reason=CancelReason.NODE_DOWN)
    if early is not None and early / 2 <= quiet < limit:
        return _early(seen, now, quiet, early)
    return _fixed(seen, now, quiet, limit)


def _early(seen: Seen, now: datetime, quiet: float, early: float) -> Supervision:
    """Quiet for half the early limit: stacks are sampled; at the early limit a hang they confirm
    is cancelled, stacks that show none are sampled again, and the fixed limit stays the bound."""
    cadence = seen.cadence_s or 0.0
    asked = seen.dumps_requested_at
    if asked is None:
        return Supervision(request_dumps=True, note=f"no progress for {quiet:.0f}s, "
                           f"{quiet / max(cadence, 1e-9):.1f}x the step cadence ({cadence:.1f}s): "
                           "asked every node for stack dumps")
    if quiet >= early and seen.confirmed:
        return Supervision(cancel=f"hang: no progress for {quiet:.0f}s (early limit {early:.0f}s, "
                                  f"{CADENCE_MULTIPLE:.0f}x the step cadence of {cadence:.1f}s); "
                                  f"{seen.confirmed}", reason=CancelReason.STALL)
    answered = seen.nodes <= seen.dumps_in
    if quiet >= early and answered and (now - asked).total_seconds() >= RESAMPLE_S:
        return Supervision(request_dumps=True, note="the stacks showed no hang; sampling again")
    return Supervision()


def _fixed(seen: Seen, now: datetime, quiet: float, limit: float) -> Supervision:
    """The fixed limit: dumps asked for ahead of it, the job cancelled at it once every node
    answered (or a bound after asking: a frozen node never answers)."""
    # ask for stack dumps early so they are in when the limit hits
    lead = min(DUMP_LEAD_S, limit / 2)
    if quiet < limit - lead:
        return Supervision(clear_dumps=seen.dumps_requested_at is not None)
    asked = seen.dumps_requested_at
    note = (f"no progress for {quiet:.0f}s (stall limit {limit:.0f}s): asked every node for stack "
            "dumps" if asked is None else "")
    if asked is None or quiet < limit:
        return Supervision(request_dumps=asked is None, note=note)
    out, waited = seen.nodes - seen.dumps_in, (now - asked).total_seconds()
    if out and waited < STALL_DUMP_WAIT_S:
        return Supervision()  # the dumps still out are worth a few seconds
    if out & seen.answering and waited < DUMP_WAIT_S:
        return Supervision()  # a live agent at work on its stacks (slow under load)
    return Supervision(cancel=f"stall: no progress for {quiet:.0f}s (limit {limit:.0f}s)",
                       reason=CancelReason.STALL)
