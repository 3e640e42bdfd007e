"""The loss went NaN or infinite (a framework's own check raised: `Loss is NaN`,
`FloatingPointError`, `Detected inf or nan`, `non-finite loss`): the training state is bad from
that iteration on, not the code. The run rolls back to a checkpoint written before the onset, a
bounded number of times (`policy.nan_rollbacks`), then stops with the history; a checkpoint written
at or after the onset is never resumed from (issue 41). Pure."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Protocol

from orchestrator.evidence import NodeEvidence
from orchestrator.model import (
    HARDWARE_CAUSES,
    CancelReason,
    Cause,
    Evidence,
    LossAnomaly,
    Owner,
    Role,
    Verdict,
)

NOT_FINITE = re.compile(r"loss is (?:nan|inf)|nan loss|Detected (?:inf|nan)|FloatingPointError|"
                        r"found (?:NaN|Inf)|non-finite loss|loss (?:became|went|is) (?:NaN|inf)",
                        re.IGNORECASE)
_AT = re.compile(r"\b(?:iteration|iter|step|global_step)[\s:=#]*(\d+)", re.IGNORECASE)


def not_finite(verdict: Verdict) -> bool:
    """The segment ended on the job's own check that the loss is no longer a number."""
    return verdict.cause == Cause.USER_BUG and any(
        e.role == Role.ROOT and NOT_FINITE.search(e.text) for e in verdict.evidence)


def anomaly(verdict: Verdict) -> LossAnomaly | None:
    """What the printed loss did, when the verdict is that it went bad (loss_anomaly)."""
    return verdict.loss if verdict.cause == Cause.LOSS_ANOMALY else None


def over_loss(v: Verdict, nodes: Sequence[NodeEvidence], cancel: CancelReason | None) -> Verdict:
    """The printed loss went bad (orchestrator/losses.py): the segment's cause when the controller
    cancelled it for that, or when the loss went NaN and the job then failed on its own error or
    nothing named; a hardware fault the classifier found still says more (the node goes)."""
    found = sorted((n.loss for n in nodes if n.loss is not None),
                   key=lambda a: (a.onset is None, a.onset or 0))
    if not found or v.cause in HARDWARE_CAUSES:
        return v
    bad = found[0]
    if cancel != CancelReason.LOSS_ANOMALY and not (
            bad.kind == "nan" and v.cause in (Cause.USER_BUG, Cause.UNKNOWN)):
        return v
    first = Evidence(node=bad.node, text=bad.sentence(), role=Role.ROOT, cause=Cause.LOSS_ANOMALY)
    later = tuple(e.model_copy(update={"role": Role.SECONDARY}) if e.role == Role.ROOT else e
                  for e in v.evidence)
    # its ranks alone: the others printed a sound loss at or after its onset (a strike on it)
    alone = len(found) == 1 and bad.node != "" and bad.onset is not None and any(
        n.loss is None and n.loss_sound_to is not None and n.loss_sound_to >= bad.onset
        for n in nodes)
    return Verdict(cause=Cause.LOSS_ANOMALY, confidence=0.9, evidence=(first, *later)[:20],
                   summary=bad.sentence() + ("; the other nodes' loss stayed sound" if alone
                                             else ""),
                   owner=Owner.NODE_SUSPECT if alone else Owner.JOB, loss=bad,
                   culprit_nodes=(bad.node,) if alone else (), blame=alone,
                   rule="loss_not_finite" if bad.kind == "nan" else "loss_spike")


def onset(evidence: Sequence[Evidence], reached: int | None) -> int | None:
    """The first iteration whose state is suspect: the one a NaN line names, else the one after the
    last the segment reached (a check raises at the first bad step). None: not known."""
    named = [int(m.group(1)) for e in evidence if e.role == Role.ROOT and NOT_FINITE.search(e.text)
             for m in [_AT.search(e.text)] if m]
    after = [reached + 1] if reached is not None else []
    found = named + after
    return min(found) if found else None


def pending(onsets: Sequence[tuple[int, int | None, int | None]]) -> list[tuple[int, int]]:
    """(segment, onset) of the rollbacks still in force: since the last segment that trained past
    them with a sound loss (a segment whose own loss went bad trained soundly up to its own onset:
    the controller cancels it a few steps later, past an earlier onset it met again). `onsets`:
    (segment, rollback_below, reached) per segment, oldest first."""
    out: list[tuple[int, int]] = []
    for index, below, reached in onsets:
        sound = reached if below is None or reached is None else min(reached, below - 1)
        if out and sound is not None and sound > max(at for _, at in out):
            out = []
        if below is not None:
            out.append((index, below))
    return out


def ceiling(onsets: Sequence[tuple[int, int | None, int | None]]) -> int | None:
    """The iteration at or above which no checkpoint may be resumed from: the lowest onset of the
    rollbacks in force (a checkpoint written after the loss went bad is never resumed from)."""
    return min((at for _, at in pending(onsets)), default=None)


class Rolled(Protocol):
    """A segment as the rollbacks see it (state.SegmentRecord)."""
    @property
    def index(self) -> int: ...

    @property
    def rollback_below(self) -> int | None: ...

    @property
    def end_iteration(self) -> int | None: ...


def run_ceiling(segments: Sequence[Rolled], scratch_after: int = 0) -> int | None:
    """`ceiling` over a run's segments since it last started from scratch: checkpoints written at
    or after it are suspect and never resumed from."""
    return ceiling([(s.index, s.rollback_below, s.end_iteration) for s in segments
                    if s.index > scratch_after])


def skip_ranges(segments: Sequence[Rolled], scratch_after: int = 0) -> str:
    """The iterations to skip data for on a rollback (`ORCH_SKIP_BATCHES`: Megatron's
    `--skip-train-iteration-range` form, `330-341 900-912`): from each onset in force to the last
    iteration its segment reached. Empty when none is in force."""
    ends = {s.index: s.end_iteration for s in segments}
    found = pending([(s.index, s.rollback_below, s.end_iteration) for s in segments
                     if s.index > scratch_after])
    return " ".join(f"{at}-{max(at, ends.get(index) or at)}" for index, at in found)
