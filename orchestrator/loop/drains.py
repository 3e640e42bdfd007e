"""Admins' decisions about the running step's nodes (issue 40): Slurm's drained, draining and
failing states with their reasons (NHC, `Kill task failed`, a health system's prefix), asked of the
scheduler in one call for all nodes at most every DRAIN_EVERY_S. Each new drain is an observation
(the segment names it: status, the verdict if the segment fails there); with a free spare, the node
is swapped out once a complete checkpoint newer than the drain is seen, so no work is lost. A failed
or garbled answer is unknown: nothing is concluded from it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from orchestrator.loop import observations as o

DRAIN_EVERY_S = 30.0  # the scheduler is asked about drains at most this often


class DrainSource(Protocol):
    """The backend's answer: of these nodes, the drained ones and why; None: unknown."""

    def drained_reasons(self, nodes: frozenset[str]) -> dict[str, str] | None: ...


@dataclass(frozen=True)
class DrainStep:
    """One poll's news: observations for the ledger, and (non-empty) the sentence that cancels the
    step to swap the drained node for a spare."""
    observations: tuple[o.Observation, ...] = ()
    swap: str = ""
    node: str = ""


@dataclass
class Drains:
    """The drains of one segment's step, as the scheduler reported them (a new one per segment)."""
    source: DrainSource | None
    swap: bool = True  # swap a drained node for a free spare at the next complete checkpoint
    asked_at: datetime | None = None
    known: dict[str, tuple[str, str | None]] = field(default_factory=dict)  # node: why, ckpt then

    def step(self, nodes: frozenset[str], now: datetime, checkpoint: str | None,
             terms: Callable[[], tuple[int, str]]) -> DrainStep:
        """`nodes`: the step's live nodes; `checkpoint`: the newest complete one seen; `terms`:
        the free spares now and the batch host (asked only when a swap is due: it reads the shared
        blacklist)."""
        obs: tuple[o.Observation, ...] = ()
        if self.source is not None and (self.asked_at is None or (
                now - self.asked_at).total_seconds() >= DRAIN_EVERY_S):
            self.asked_at = now
            found = self.source.drained_reasons(nodes)
            for node, why in sorted((found or {}).items()):
                if node not in self.known:
                    self.known[node] = (why, checkpoint)
                    obs += (o.NodeDrained(node, why),)
        due = [n for n, (_, ckpt) in sorted(self.known.items()) if n in nodes
               and checkpoint is not None and checkpoint != ckpt]
        if not (self.swap and due):
            return DrainStep(obs)
        spares, batch_host = terms()
        if spares < 1 or not (due := [n for n in due if n != batch_host]):
            return DrainStep(obs)
        node = due[0]
        return DrainStep(obs, f"{node} drained in Slurm ({self.known[node][0]}): swapped for a "
                              f"spare after the checkpoint {checkpoint}", node)
