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

    def submit(self, spec: SegmentSpec) -> JobRef:
        """Submit one segment; return its reference as soon as the scheduler accepted it."""
        ...

    def poll(self, refs: list[JobRef]) -> dict[str, JobStatus]:
        """State of all given jobs, with one scheduler query; a job the scheduler does not answer for is
        UNKNOWN. Raises SchedulerUnavailable when the scheduler cannot be reached at all."""
        ...

    def cancel(self, ref: JobRef) -> None: ...

    def nodes(self) -> list[str] | None:
        """Node names the scheduler knows (to validate --exclude), or None if unknown."""
        ...

    def find_jobs(self, job_name: str) -> list[JobRef]:
        """Live (pending or running) jobs with this name, for re-attaching after a controller crash."""
        ...

    def render(self, spec: SegmentSpec) -> str:
        """The exact submission, for --dry-run."""
        ...
