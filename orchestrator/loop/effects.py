"""Side effects the loop's pure functions ask for, as values (`runner.EffectRunner` carries them
out).

Notifications, publishing blacklist entries to the shared blacklist, draining nodes, cancelling
jobs.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.model import BlacklistEntry, JobRef


@dataclass(frozen=True)
class Alert:
    """A notification to send (title, body)."""
    title: str
    body: str


@dataclass(frozen=True)
class Publish:
    """Write a new blacklist entry to the cluster-wide shared blacklist (if configured)."""

    entry: BlacklistEntry


@dataclass(frozen=True)
class Drain:
    """Ask the scheduler to take a node out of service (best effort)."""
    node: str
    reason: str


@dataclass(frozen=True)
class Cancel:
    """Cancel a job, with the reason logged."""
    ref: JobRef
    reason: str


Effect = Alert | Publish | Drain | Cancel
