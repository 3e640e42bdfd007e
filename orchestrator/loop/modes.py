"""How a segment's placement is carried out, behind one interface: a job of its own (the scheduler's
word is the segment's), or a step of a job with spare nodes (`steps.Steps`). The controller picks
the mode once (`Controller.mode`) and never branches on the placement itself; a new placement (an
elastic resize, a slow node swapped inside the job) is a new Mode, not a branch in a dozen places.
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from orchestrator.loop.conclude import Outcome
from orchestrator.model import JobStatus
from orchestrator.state import SegmentRecord


class Mode(Protocol):
    """What the controller needs from a placement's executor."""

    # a cancel concludes the segment at once (the job may go on without it)
    cancel_ends_segment: bool

    def observe(self, seg: SegmentRecord, job: JobStatus) -> JobStatus:
        """The segment's status from its job's."""
        ...

    @property
    def lost(self) -> list[str]:
        """Nodes the scheduler took out of the segment's job (first-hand evidence of their
        failure)."""
        ...

    def after(self, out: Outcome, now: datetime) -> None:
        """After the segment's verdict: what the placement does next (restart inside the job, end
        it)."""
        ...

    def free(self, seg: SegmentRecord, now: datetime) -> list[str]:
        """Spare nodes free to take a node's place inside the job now."""
        ...


class OwnJob:
    """A segment with a job of its own: the job's status is the segment's, a cancel ends the job
    (the segment is judged when the scheduler says it ended), and nothing follows the verdict but
    the next submission."""

    cancel_ends_segment = False

    def observe(self, seg: SegmentRecord, job: JobStatus) -> JobStatus:
        return job

    @property
    def lost(self) -> list[str]:
        return []

    def after(self, out: Outcome, now: datetime) -> None:
        return None

    def free(self, seg: SegmentRecord, now: datetime) -> list[str]:
        return []
