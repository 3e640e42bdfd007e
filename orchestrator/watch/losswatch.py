"""The loss detector of a running segment (orchestrator/losses.py) across its nodes: the first
anomaly any node's printed losses completed, and the terms of the next segment's detector, seeded
with the baseline this one ended with (issue 41)."""

from __future__ import annotations

from orchestrator.losses import LossRule
from orchestrator.model import LossAnomaly
from orchestrator.settings import Settings
from orchestrator.state import SegmentRecord
from orchestrator.watch.segment import SegmentWatch


def loss_terms(s: Settings, before: SegmentWatch | None, seg: SegmentRecord) -> LossRule | None:
    """The loss detector's terms for a new segment (or step), seeded with the baseline of the one
    before it in this controller when it resumes from a checkpoint (a spike in a resume's first
    steps is judged at once); one that starts from scratch warms up: no seed."""
    rule = s.loss.rule()
    if rule is None or before is None or not seg.resumed_from:
        return rule
    seed = max((nw.losses.baseline() for nw in before.nodes.values() if nw.losses), key=len,
               default=())
    return rule.model_copy(update={"seed": seed[-rule.window:]})


def newest_loss(watch: SegmentWatch) -> tuple[int, float] | None:
    """The newest printed loss with its step (the curve in the ledger): of the node with the newest
    step, one whose loss went bad first (the curve shows what was rolled back from)."""
    found = [(p, nw.losses.found is not None) for nw in watch.nodes.values()
             if nw.losses and (p := nw.losses.newest)]
    return max(found, key=lambda f: (f[0][0], f[1]), default=(None, False))[0]


def first_anomaly(watch: SegmentWatch) -> LossAnomaly | None:
    """The loss anomaly a node's printed losses completed, the earliest onset first."""
    found = [a for nw in watch.nodes.values() if nw.losses and (a := nw.losses.found)]
    return min(found, key=lambda a: (a.onset is None, a.onset or 0), default=None)
