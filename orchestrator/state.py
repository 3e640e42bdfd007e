"""The run ledger (RunState, SegmentRecord), its store on disk: atomic, fsync, private (0600)."""

from __future__ import annotations

import errno
import json
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from orchestrator import failpoints
from orchestrator.blacklist import Blacklist
from orchestrator.contract import SegmentPaths
from orchestrator.files import atomic_write, private_dir, read_regular
from orchestrator.migrations import read_v1
from orchestrator.model import Action, CancelReason, Cause, Evidence, JobState, RunStatus
from orchestrator.placement import InAllocation, OwnJob, Placement, legacy_placement

# 2: cancel_reason beside the sentence, placement for the four spares fields (read_v1)
SCHEMA_VERSION = 2
STATE_FILE = "state.json"
BACKUP_FILE = "state.json.bak"
# what --start-over moves out of the way (segments, the backup) is kept, renamed
SET_ASIDE = "before-start-over-"
# queued blacklist edits (requests.py); acknowledged here, after the state is saved
REQUESTS_DIR, EVIDENCE_DIR = "requests", "evidence"  # loop/bundles.py writes the evidence
MAX_ACKED = 256
PASSING = (errno.EIO, errno.ESTALE, errno.ETIMEDOUT, errno.EAGAIN, errno.EINTR)  # may not recur


class StateError(Exception):
    """The state file is unreadable or of another schema: nothing is overwritten. `passing`: an
    I/O error a later try may not meet; else a person must act (gone, garbled, another schema)."""
    def __init__(self, message: str, passing: bool = False):
        super().__init__(message)
        self.passing = passing


class Ledger(BaseModel):
    """Base of the run ledger's records: immutable. A change is a new value made by `evolve`, which
    only `loop.advance` calls (tests/unit/test_architecture.py walks the AST); `model_copy` is
    refused."""
    model_config = ConfigDict(extra="forbid", frozen=True)

    def evolve(self, **changes: Any) -> Self:
        """A new record with `changes` applied and validated (the ledger's one way to change)."""
        return self.model_validate({**dict(self), **changes})

    def model_copy(self, *, update: Any = None, deep: bool = False) -> Self:
        raise TypeError(f"{type(self).__name__} is the run ledger's: it changes in loop.advance")


class SlowNodeRecord(Ledger):
    """A node found slowing the job (its ranks wait least in collectives), and what was done."""
    node: str
    factor: float
    since: datetime  # when the slowdown began
    evidence: str = ""
    action: str = ""  # "swapped for a spare" or "struck"


class SegmentRecord(Ledger):
    """One segment in the run ledger: its job, nodes, progress, how it ended and what was
    decided."""
    index: int
    job_name: str
    job_id: str | None = None
    submitted_at: datetime | None = None
    backend: str = ""
    nodes: list[str] = Field(default_factory=list)
    excluded: list[str] = Field(default_factory=list)
    resumed_from: str | None = None
    start_iteration: int = 0
    end_iteration: int | None = None
    first_progress_at: datetime | None = None
    last_progress_at: datetime | None = None
    ended_at: datetime | None = None
    job_state: JobState | None = None
    cause: Cause | None = None
    culprit_nodes: list[str] = Field(default_factory=list)
    action: Action | None = None
    reason: str = ""
    rule: str = ""  # the diagnosis rule that fired (docs/CAUSES.md)
    decision_rule: str = ""  # the policy rule that chose the action
    rollback_below: int | None = None  # the loss went NaN here: resume from before it
    infra: bool = False  # a node's strong fault or the environment's ended it (budget.py)
    confidence: float | None = None
    evidence: list[Evidence] = Field(default_factory=list)
    # why the controller cancelled it (the sentence is the next field)
    cancel_reason: CancelReason | None = None
    cancelled_by_controller: str = ""
    cancelled_at: datetime | None = None
    queue_note: str = ""  # while pending: time waited, reason, position in the queue
    interval_advice: str = ""  # the checkpoint interval handed to this segment, and why
    # a job of its own, or a step of a job with spares
    placement: Placement = Field(default_factory=OwnJob)
    checkpoint_write_s: float | None = None  # the median save, timed from the training's lines
    step_cadence_s: float | None = None  # its step cadence at the end: the next segment's seed
    # the job ran this many times slower than its own pace, from `slowdown_since` (lock-step)
    slowdown_factor: float | None = None
    slowdown_since: datetime | None = None
    slowdown_note: str = ""
    slow_nodes: list[SlowNodeRecord] = Field(default_factory=list)
    drained: dict[str, str] = Field(default_factory=dict)  # a node of the step Slurm drained: why
    losses: list[tuple[int, float]] = Field(default_factory=list)  # (step, loss) printed, thinned

    @model_validator(mode="before")
    @classmethod
    def _placement_of_old_fields(cls, data: Any) -> Any:
        return legacy_placement(data)  # schema 1's four fields (and callers that still name them)

    @property
    def spare_count(self) -> int:
        return self.placement.spares if isinstance(self.placement, InAllocation) else 0

    @property
    def allocation(self) -> list[str]:
        return list(self.placement.nodes) if isinstance(self.placement, InAllocation) else []

    @property
    def in_job_of(self) -> int | None:
        return self.placement.submitted_by if isinstance(self.placement, InAllocation) else None

    @property
    def allocation_dir(self) -> str:
        return self.placement.dir if isinstance(self.placement, InAllocation) else ""

    @property
    def job_root(self) -> int:
        """The index of the segment that submitted this segment's job (itself, unless a restart in a
        job)."""
        return self.in_job_of if self.in_job_of is not None else self.index


class HardwareEvent(Ledger):
    """A node blamed for a hardware cause, kept a week: CUDA OOM there later is a poisoned GPU."""

    node: str
    cause: Cause
    job_id: str
    time: datetime


class RunState(Ledger):
    """The run ledger: every segment, the blacklist, hardware history, failed checkpoints,
    status."""

    schema_version: int = SCHEMA_VERSION
    run: str
    status: RunStatus = RunStatus.RUNNING
    stop_reason: str = ""
    created_at: datetime
    updated_at: datetime
    segments: list[SegmentRecord] = Field(default_factory=list)
    blacklist: Blacklist = Field(default_factory=Blacklist)
    bad_checkpoints: dict[str, int] = Field(default_factory=dict)
    hardware_events: list[HardwareEvent] = Field(default_factory=list)
    target_iteration: int | None = None
    wait_until: datetime | None = None
    # queued blacklist edits applied (their file names)
    applied_requests: list[str] = Field(default_factory=list)
    # the newest complete checkpoint the controller found (gone later: lost)
    checkpoint_seen: str | None = None
    # `run --from-scratch`: segments up to this index no longer count as progress to keep
    scratch_after: int = 0

    @classmethod
    def begin(cls, run: str, now: datetime) -> RunState:
        """A new, empty ledger for run `run`."""
        return cls(run=run, created_at=now, updated_at=now)

    @property
    def current(self) -> SegmentRecord | None:
        return self.segments[-1] if self.segments else None

    def best_iteration(self) -> int:
        its = [s.end_iteration for s in self.segments if s.end_iteration is not None]
        return max(its, default=0)

    def blamed_in_job(self, seg: SegmentRecord) -> set[str]:
        """Nodes blamed by any segment of `seg`'s job: out of its step, and never a spare of that
        job again, even below the strike threshold (a later job may use them, as the blacklist
        allows)."""
        return {n for s in self.segments if s.job_root == seg.job_root for n in s.culprit_nodes}


def run_traces(run_dir: Path) -> list[str]:
    """What in `run_dir` shows a run has already happened there (besides state.json)."""
    traces = [BACKUP_FILE] if (run_dir / BACKUP_FILE).exists() else []
    traces += [f"{EVIDENCE_DIR}/"] if (run_dir / EVIDENCE_DIR).is_dir() else []
    try:
        if any(SegmentPaths.under(run_dir).iterdir()):
            traces.append("segments/")
    except OSError:
        pass
    return traces


MAX_STATE_BYTES = 64 << 20


class StateStore:
    """Owns the state file: atomic replace with fsync, a .bak of the previous version, 0600."""
    def __init__(self, run_dir: Path, failpoint: Callable[[str], None] | None = None,
                 start_over: bool = False):
        """`start_over`: a missing state.json beside traces of a run starts a new ledger (`run
        --start-over`, an operator's choice); otherwise that is an error."""
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / STATE_FILE
        self.failpoint = failpoint or failpoints.hit
        self.start_over = start_over

    def load(self) -> RunState | None:
        """The run's state; None only where no run left a trace (or with start_over)."""
        try:
            data = read_regular(self.path, MAX_STATE_BYTES + 1)
            # years of segments are a few MB; gigabytes are not a state file
            if len(data) > MAX_STATE_BYTES:
                raise OSError(f"over {MAX_STATE_BYTES >> 20} MiB")
            raw = data.decode("utf-8")
        except FileNotFoundError:
            traces = run_traces(self.run_dir)
            if self.start_over:
                self._set_aside(traces)
                traces = []
            if traces:
                restore = (f"restore it (cp -p {self.run_dir / BACKUP_FILE} {self.path})"
                           if BACKUP_FILE in traces else "restore it from a backup")
                raise StateError(
                    f"{self.path} is missing but the run directory holds {' and '.join(traces)}: "
                    f"starting over would lose the run's history and blacklist; {restore} or, to "
                    "start the ledger over on purpose, run with --start-over") from None
            return None
        except (OSError, UnicodeDecodeError) as exc:  # a directory there, unreadable, not UTF-8
            raise self._bad(f"cannot read the run state ({exc})",
                            getattr(exc, "errno", None) in PASSING) from None
        try:
            parsed = json.loads(raw)
        except (json.JSONDecodeError, RecursionError) as exc:
            raise self._bad(f"not valid JSON ({str(exc)[:120]})") from None
        version = parsed.get("schema_version") if isinstance(parsed, dict) else None
        if version == 1:
            parsed = read_v1(parsed)
        elif version != SCHEMA_VERSION:
            raise StateError(f"{self.path}: schema_version {version!r}, this orchestrator reads "
                             f"{SCHEMA_VERSION}")
        try:
            return RunState.model_validate(parsed)
        except ValidationError as exc:  # each problem as field: message, not pydantic's dump
            problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(top)'}: {e['msg']}"
                                 for e in exc.errors()[:3])
            more = f" (and {exc.error_count() - 3} more)" if exc.error_count() > 3 else ""
            raise self._bad(f"not a valid run state: {problems[:300]}{more}") from None

    def _bad(self, what: str, passing: bool = False) -> StateError:
        """The file is there and cannot be used: how a person goes on (the backup only if it is)."""
        bak = self.run_dir / BACKUP_FILE
        how = (f"restore it (cp -p {bak} {self.path})" if bak.is_file() else "restore it from a "
               "backup, or move it aside and give --start-over")
        return StateError(f"{self.path}: {what}; {how}", passing=passing)

    def save(self, state: RunState) -> None:
        """Atomic: on any failure (full disk, read-only or immutable file, a directory in its place)
        the previous state stays intact and the caller gets a StateError naming the file."""
        text = state.model_dump_json(indent=2)
        try:
            private_dir(self.run_dir)
            if self.path.exists():
                atomic_write(self.run_dir / BACKUP_FILE, read_regular(self.path).decode("utf-8"))
                self.failpoint("after_backup")
            atomic_write(self.path, text, self.failpoint)
        except (OSError, UnicodeDecodeError) as exc:
            raise StateError(f"{self.path}: cannot write the run state ({exc}); the previous state "
                             "is intact", passing=True) from None
        self._acknowledge(state.applied_requests)

    def _set_aside(self, traces: list[str]) -> None:
        """--start-over: the old run's segments and backup are renamed aside (kept, never judged
        again, never appended to): the new segment 1 starts in an empty segments/0001."""
        stamp = datetime.now().strftime("%Y%m%dT%H%M%S")
        for name in (t.rstrip("/") for t in traces):
            try:
                (self.run_dir / name).rename(self.run_dir / f"{SET_ASIDE}{stamp}-{name}")
            except OSError as exc:
                raise StateError(f"{self.run_dir / name}: cannot set it aside for --start-over "
                                 f"({exc})") from None

    def _acknowledge(self, names: list[str]) -> None:
        """A queued edit's file goes only once the state that holds it is on disk: the CLI reads the
        file's disappearance as 'applied', and a crash before the save re-reads it (its name makes
        that idempotent)."""
        for name in names[-MAX_ACKED:]:
            try:
                (self.run_dir / REQUESTS_DIR / name).unlink(missing_ok=True)
            except OSError:
                continue
            self.failpoint("after_ack")
