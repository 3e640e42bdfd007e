"""The one place that carries out the loop's effects (`effects`): notifications, publishing
blacklist entries to the shared blacklist, draining nodes, cancelling jobs. Every effect is best
effort except a cancel: a failed notification or drain never stops a run.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from loguru import logger

from orchestrator import failpoints
from orchestrator.backends.base import Backend
from orchestrator.loop.effects import Alert, Drain, Effect, Publish
from orchestrator.shared_blacklist import SharedBlacklist

Notify = Callable[[str, str], object]


class EffectRunner:
    """Carries out effects against the backend, the notifier and the shared blacklist file."""

    def __init__(self, backend: Backend, notify: Notify, shared: Path | None):
        self.backend, self.notify, self.shared = backend, notify, shared

    def run(self, effects: tuple[Effect, ...] | list[Effect]) -> None:
        for e in effects:
            self.one(e)

    def one(self, e: Effect) -> None:
        if isinstance(e, Alert):
            self.notify(e.title, e.body)
        elif isinstance(e, Publish):
            if self.shared is not None:
                try:
                    SharedBlacklist(self.shared).publish([e.entry])
                except (OSError, ValueError) as exc:  # never overwrite a file we cannot read
                    logger.warning("could not write the shared blacklist: {}", exc)
                failpoints.hit("after_publish")
        elif isinstance(e, Drain):
            self._drain(e)
            failpoints.hit("after_drain")
        else:
            logger.warning("cancel job={} reason={}", e.ref.job_id, e.reason)
            self.backend.cancel(e.ref)
            failpoints.hit("after_cancel")

    def _drain(self, e: Drain) -> None:
        try:
            self.backend.drain(e.node, e.reason)
        except Exception as exc:  # noqa: BLE001 - draining is a courtesy; the run goes on
            logger.warning("drain of {} failed: {}", e.node, exc)
