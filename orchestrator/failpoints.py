"""Crash injection for tests: ORCH_FAILPOINT=name:N makes the process die (like kill -9) the N-th
time it passes the named point. Unset (always, in production), every call is a no-op.

Every persistent side effect of the controller passes a named point (`hit(name)`): the state write
(after the new file is synced, before the rename), the submission, the record of the job id, a
cancel, a drain, the shared blacklist, a step's spec and request, the acknowledgement of a queued
edit. `install` puts a hook behind them: `Failpoints` from the environment in `orchestrator run`, an
exception in the in-process crash tests."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable

POINTS = ("after_intent", "after_submit", "after_record", "poll", "state_write", "before_decide",
          "after_blacklist",
          "after_conclude", "after_backup", "after_cancel", "after_drain", "after_publish",
          "after_spec_write", "after_step_request", "after_take_requests", "after_ack")

_hooks: list[Callable[[str], None]] = []


def install(hook: Callable[[str], None] | None) -> None:
    """Put `hook` behind every point (None: no hook)."""
    _hooks[:] = [hook] if hook else []


def hit(name: str) -> None:
    """A persistent side effect just happened (or is about to): the installed hook may end the
    process here."""
    for hook in _hooks:
        hook(name)


class Failpoints:
    """Crash-safety testing: kill the process at a named seam (ORCH_FAILPOINT)."""
    def __init__(self, spec: str | None = None):
        self.name, self.when = "", 0
        if spec:
            name, _, count = spec.partition(":")
            if name not in POINTS:
                raise ValueError(f"ORCH_FAILPOINT: unknown point {name!r}; known: "
                                 f"{', '.join(POINTS)}")
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
