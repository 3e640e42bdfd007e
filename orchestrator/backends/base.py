"""What every backend provides. Only backends run scheduler commands or import submitit."""

from __future__ import annotations

from typing import Protocol

from orchestrator.model import JobRef, JobStatus, SegmentSpec


class BackendError(Exception):
    """A permanent submission error (bad spec, rejected by the scheduler): the controller stops."""


class SchedulerUnavailable(Exception):
    """The scheduler did not answer (after retries): state is unknown, never 'failed'."""


class Backend(Protocol):
    """What the loop needs from a scheduler: submit a spec, poll, cancel, list nodes, find jobs by
    name, and render what would be submitted."""
    name: str
    # a poll asks a shared service (sacct: slurmdbd): the loop asks less often than it reads logs
    costly_poll: bool

    def submit(self, spec: SegmentSpec) -> JobRef:
        """Submit one segment; return its reference as soon as the scheduler accepted it."""
        ...

    def poll(self, refs: list[JobRef]) -> dict[str, JobStatus]:
        """State of all given jobs, with one scheduler query; a job the scheduler does not answer
        for is UNKNOWN. Raises SchedulerUnavailable when the scheduler cannot be reached at all."""
        ...

    def cancel(self, ref: JobRef) -> None: ...

    def nodes(self) -> list[str] | None:
        """Node names the scheduler knows (to validate --exclude), or None if unknown."""
        ...

    def find_jobs(self, job_name: str) -> list[JobRef]:
        """Live (pending or running) jobs with this name, for re-attaching after a controller
        crash."""
        ...

    def render(self, spec: SegmentSpec) -> str:
        """The exact submission, for --dry-run."""
        ...

    # optional features: BackendDefaults says what a backend without them does
    def usable_nodes(self) -> list[str] | None:
        """Nodes up and able to take work (spares are only sized from these), or None if unknown."""
        ...

    def unreachable(self, nodes: frozenset[str]) -> frozenset[str] | None:
        """Of `nodes`, those the scheduler itself cannot reach now (not responding, down): their
        silence is a node failure the scheduler is about to declare. None: unknown."""
        ...

    def ping_window_s(self) -> float:
        """How long the scheduler may take to notice a node that stopped answering (0: at once,
        or unknown)."""
        ...

    def drained_reasons(self, nodes: frozenset[str]) -> dict[str, str] | None:
        """Of `nodes`, those an admin or a health check drained (or that are failing), with the
        reason they gave; None: unknown (never "none drained")."""
        ...

    def drain(self, node: str, reason: str) -> None:
        """Take a node out of the scheduler's service with a reason (an admin's courtesy); may do
        nothing."""
        ...

    def queue_position(self, ref: JobRef) -> str:
        """Where a pending job stands in its queue, in words, or ''."""
        ...


class BackendDefaults:
    """The optional features of a backend, declared once: a backend that has no such thing inherits
    these (the loop never asks with getattr whether a backend can)."""
    costly_poll = False

    def nodes(self) -> list[str] | None:
        raise NotImplementedError

    def usable_nodes(self) -> list[str] | None:
        return self.nodes()

    def unreachable(self, nodes: frozenset[str]) -> frozenset[str] | None:
        return None  # no scheduler that watches its nodes: unknown

    def ping_window_s(self) -> float:
        return 0.0

    def drained_reasons(self, nodes: frozenset[str]) -> dict[str, str] | None:
        return {}  # no scheduler whose admins drain nodes

    def drain(self, node: str, reason: str) -> None:
        return None  # no scheduler to drain in: the blacklist alone keeps the node out

    def queue_position(self, ref: JobRef) -> str:
        return ""
