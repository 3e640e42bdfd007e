"""What the controller feeds `advance`: each a value for one thing it saw or did, never a sentence
to parse.

Adding one: a frozen dataclass here, a member of `Observation`, and its handler in
`advance.HANDLERS` (the table test `tests/unit/test_advance.py` fails until every observation has
one).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from orchestrator.blacklist import Blacklist
from orchestrator.evidence import NodeEvidence
from orchestrator.model import CancelReason, JobRef, JobStatus, SegmentSpec


@dataclass(frozen=True)
class Planned:
    """The next segment is planned: its intent is recorded before the job is submitted (a crash
    between the two is found by the job's name), with the blacklist it was planned from and the
    checkpoint it resumes."""
    spec: SegmentSpec
    backend: str
    blacklist: Blacklist
    checkpoint: str | None = None


@dataclass(frozen=True)
class NodeDrained:
    """Slurm shows a node of the running step drained (an admin, a health check), with its
    reason."""
    node: str
    reason: str


@dataclass(frozen=True)
class Submitted:
    """The scheduler took the current segment's job (or it was found by its name after a
    restart)."""
    ref: JobRef


@dataclass(frozen=True)
class Withdrawn:
    """The current segment's intent is dropped: the submission was refused, or no job carries its
    name."""


@dataclass(frozen=True)
class Polled:
    """One poll of the current segment: its scheduler status, the nodes the scheduler and the logs
    name, the newest iteration its logs show and the newest loss they printed (step, loss)."""
    status: JobStatus
    scheduler_nodes: tuple[str, ...]
    log_nodes: tuple[str, ...]
    iteration: int | None
    loss: tuple[int, float] | None = None


@dataclass(frozen=True)
class QueueNoted:
    """What the current segment waits for (queue position, no progress line recognised), or '' for
    nothing."""
    note: str


@dataclass(frozen=True)
class Cancelling:
    """The controller cancels the current segment: why (for the code) and the sentence (for
    people)."""
    reason: CancelReason
    detail: str


@dataclass(frozen=True)
class Ended:
    """The current segment's job (or step) ended and its logs were read: `advance` judges it and
    decides. `lost`: nodes Slurm removed from its --no-kill job."""
    status: JobStatus
    evidence: tuple[NodeEvidence, ...]
    fs_stalls: tuple[str, ...] = ()
    lost: tuple[str, ...] = ()
    checkpoint_write_s: float | None = None
    cadence_s: float | None = None  # the step cadence the watchdog knew


@dataclass(frozen=True)
class AllocationKnown:
    """Every node of the current segment's job, spares included, as its allocation supervisor
    recorded it."""
    nodes: tuple[str, ...]


@dataclass(frozen=True)
class JobEnding:
    """After a verdict inside a job with spares: the job is ended (a new segment follows), and
    why."""
    why: str


@dataclass(frozen=True)
class RestartedInJob:
    """After a verdict inside a job with spares: the next segment runs in the same job, `drop`
    replaced by `promote`, on `nodes`."""
    spec: SegmentSpec
    nodes: tuple[str, ...]
    drop: tuple[str, ...]
    promote: tuple[str, ...]
    blacklist: Blacklist


@dataclass(frozen=True)
class CheckpointSeen:
    """The newest complete checkpoint found (its later loss is a lost filesystem, not a fresh
    start)."""
    path: str


@dataclass(frozen=True)
class Halted:
    """The run cannot go on without a human (an outage past its limit, a refused submission, no
    checkpoint)."""
    reason: str


@dataclass(frozen=True)
class BlacklistEdited:
    """Operator edits applied: the new blacklist and the queued request files it holds (acknowledged
    on save)."""
    blacklist: Blacklist
    acked: tuple[str, ...] = ()


@dataclass(frozen=True)
class Started:
    """A controller starts on this ledger with the config's goal: a done run whose goal was raised
    runs again; a stopped (or cancelled) one only with `resume` (`run --resume`: someone fixed what
    stopped it)."""
    target: int | None
    resume: bool = False


@dataclass(frozen=True)
class FromScratch:
    """`run --from-scratch`: the progress and checkpoints seen so far are given up, once, on
    purpose."""


@dataclass(frozen=True)
class SlowedDown:
    """The job's pace fell: `factor` times slower than its baseline since `since`."""
    factor: float
    since: datetime
    note: str


@dataclass(frozen=True)
class SlowNodeFound:
    """The profiles name the node that slows the job; `swap`: a spare takes its place (the step
    is cancelled and judged), else the node gets a strike and the job runs on."""
    node: str
    factor: float
    since: datetime
    evidence: str
    swap: bool


@dataclass(frozen=True)
class CancelledByOperator:
    """The operator's cancel (`--cancel-on-exit`, `orchestrator cancel`) of the current segment's
    job."""
    by: str


Observation = (
    Planned | Submitted | Withdrawn | Polled | QueueNoted | Cancelling | Ended | AllocationKnown
    | JobEnding | RestartedInJob | CheckpointSeen | Halted | BlacklistEdited | Started | FromScratch
    | CancelledByOperator | SlowedDown | SlowNodeFound | NodeDrained)
