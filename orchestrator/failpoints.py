"""Crash injection for tests: ORCH_FAILPOINT=name:N makes the process die (like kill -9) the N-th time
it passes the named point. Unset (always, in production), every call is a no-op."""

from __future__ import annotations

import os
from collections import Counter

POINTS = ("after_intent", "after_submit", "after_record", "poll", "state_write", "before_decide", "after_blacklist",
          "after_conclude")


class Failpoints:
    """Crash-safety testing: kill the process at a named seam (ORCH_FAILPOINT)."""
    def __init__(self, spec: str | None = None):
        self.name, self.when = "", 0
        if spec:
            name, _, count = spec.partition(":")
            if name not in POINTS:
                raise ValueError(f"ORCH_FAILPOINT: unknown point {name!r}; known: {', '.join(POINTS)}")
            self.name, self.when = name, int(count or "1")
        self.seen: Counter[str] = Counter()

    @classmethod
    def from_env(cls) -> Failpoints:
        return cls(os.environ.get("ORCH_FAILPOINT"))

    def __call__(self, name: str) -> None:
        if not self.name:
            return
        self.seen[name] += 1
        if name == self.name and self.seen[name] == self.when:
            os._exit(137)
