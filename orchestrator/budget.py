"""Whose budget a segment spends (issue 38). A segment that a node or the shared environment ended
(a node's strong fault, excluded at once; a wait for a filesystem outage; a preemption) does not
spend the user's `policy.max_segments` nor break or extend the no-progress streak: the job did
nothing wrong there.
Those count against `policy.max_infra_failures` instead, the breaker for endless infrastructure
trouble. `policy.on_cause` overrides the action for named causes (`any`: every cause but success),
e.g. `{nccl_timeout: stop}` or `{any: stop}` for a job whose side effects forbid a second run.
Pure."""

from __future__ import annotations

from collections.abc import Mapping

from orchestrator.model import Cause, Owner, Verdict
from orchestrator.state import SegmentRecord


def infra_segment(seg: SegmentRecord) -> bool:
    """A judged segment that a node (strong evidence) or the environment ended."""
    return seg.infra


def infra_verdict(verdict: Verdict) -> bool:
    """The segment being judged was ended by a node's strong fault (it is excluded at once), the
    shared environment's passing fault, or a preemption. Weak node evidence (a strike) stays the
    user's: a crash that repeats without progress must meet the no-progress breaker."""
    owner = verdict.fault_owner
    return verdict.cause == Cause.PREEMPTED or owner == Owner.SHARED or (
        owner == Owner.NODE and verdict.blame and bool(verdict.culprit_nodes))


def spent(segments: list[SegmentRecord], current_infra: bool) -> tuple[int, int]:
    """(segments spent from the user's budget, infrastructure failures), the last segment judged
    by `current_infra`."""
    earlier = [infra_segment(s) for s in segments[:-1]]
    flags = [*earlier, current_infra] if segments else earlier
    return flags.count(False), flags.count(True)


def progressed(seg: SegmentRecord) -> bool:
    return seg.end_iteration is not None and seg.end_iteration > seg.start_iteration


def no_progress_streak(segments: list[SegmentRecord], current_infra: bool = False) -> int:
    """Consecutive segments that did not move the run forward, newest first: none trained past
    the furthest iteration an earlier segment reached (a job that resumes at 20 and dies at 25
    every time makes no progress, although each segment trained 5 steps). Infrastructure failures
    are skipped (they neither break nor extend it)."""
    n = 0
    for i, seg in enumerate(reversed(segments)):
        earlier = segments[:len(segments) - 1 - i]
        frontier = max((s.end_iteration or 0 for s in earlier), default=0)
        if progressed(seg) and (seg.end_iteration or 0) > frontier:
            break
        if current_infra if i == 0 else infra_segment(seg):
            continue
        n += 1
    return n


def override(on_cause: Mapping[str, str], cause: Cause) -> str:
    """The configured action for `cause` ('stop', 'resubmit', 'wait'), or '' for the policy's."""
    if cause == Cause.SUCCESS:
        return ""
    return on_cause.get(cause.value) or on_cause.get("any") or ""
