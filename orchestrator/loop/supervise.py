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
    # a read of the run directory hangs: no progress seen may be the controller's blindness
    blind: bool = False


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


def _stall(seen: Seen, now: datetime, w: Watch) -> Supervision:
    """No progress for the stall limit (or, before any progress line, the start-up limit): a hang.
    When no line was ever recognised as progress but output keeps flowing, the output is the
    liveness signal."""
    ref_time = seen.last_progress or seen.running_since
    assert ref_time is not None
    limit = w.stall_timeout_s if seen.last_progress else w.startup_timeout_s
    if (seen.last_progress is None and seen.last_output is not None
        and seen.running_since is not None):
        ref_time = max(seen.last_output, seen.running_since)
        limit = max(w.stall_timeout_s, w.startup_timeout_s)
    quiet = (now - ref_time).total_seconds()
    # ask for stack dumps early so they are in when the limit hits
    lead = min(DUMP_LEAD_S, limit / 2)
    if quiet < limit - lead:
        return Supervision(clear_dumps=seen.dumps_requested_at is not None)
    ask = seen.dumps_requested_at is None
    note = (f"no progress for {quiet:.0f}s (stall limit {limit:.0f}s): asked every node for stack "
            "dumps" if ask else "")
    if quiet >= limit:
        return Supervision(cancel=f"stall: no progress for {quiet:.0f}s (limit {limit:.0f}s)",
                           request_dumps=ask, note=note, reason=CancelReason.STALL)
    return Supervision(request_dumps=ask, note=note)
