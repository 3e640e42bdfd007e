"""The local backend's job table entries and the small rules around them: a job's record (its spec,
virtual nodes and agent processes), the file that numbers jobs, node names in natural order, and
secret-looking variables masked in what is printed."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from orchestrator.redact import masked_text

SECRET = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|HOOK|DSN|COOKIE|PRIVATE",
                    re.IGNORECASE)


def masked(env: dict[str, str]) -> dict[str, str]:
    """Values of variables that look like secrets are not printed (a webhook's URL holds its
    token in the path), and no URL's password or query values in any other (issue 37)."""
    return {k: ("***" if SECRET.search(k) else masked_text(v)) for k, v in env.items()}


def natural_key(name: str) -> list[Any]:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


@dataclass
class LocalJobRecord:
    """One local job: its spec, the virtual nodes it runs on and the agent processes."""
    job_id: str
    job_name: str
    submitted_at: str
    spec: dict[str, Any]
    nodes: list[str] = field(default_factory=list)
    pids: list[int] = field(default_factory=list)
    # /proc start times: a reused PID is not ours
    pid_starts: list[int] = field(default_factory=list)
    started_at: str | None = None
    end_state: str | None = None
    ended_at: str | None = None


LAST_ID = "last-id"
