"""One signature: a pattern and what a line it matches means (cause, blame, cascade, or an event
kind)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from orchestrator.diagnose.linear import bounded
from orchestrator.model import Cause


@dataclass(frozen=True)
class Signature:
    """One pattern and what a matching line means: cause, blame, cascade, or its kind (info,
    done)."""
    name: str
    pattern: str
    cause: Cause
    blame: bool = False
    cascade: bool = False
    node_group: str | None = None  # named group holding the culprit host, if the line names it
    # named group holding a peer IP address (mapped to a host via NCCL INFO)
    peer_group: str | None = None
    source: str = ""
    ignore_case: bool = True
    # "" (evidence), "info" (informational: not a failure), "done" (training reached its end)
    kind: str = ""
    # a configuration's own pattern: matched with RE2 where it takes it (diagnose/linear.py)
    linear: bool = False
    regex: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        rx = bounded(self.pattern, self.ignore_case) if self.linear else re.compile(
            self.pattern, re.IGNORECASE if self.ignore_case else 0)
        object.__setattr__(self, "regex", rx)

