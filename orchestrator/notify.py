"""Notifications through apprise URLs: de-duplicated, rate-limited, and never able to stop the
controller.

URLs carry tokens: they are never logged.
"""

from __future__ import annotations

import threading
from collections import deque
from datetime import datetime, timedelta

from loguru import logger

from orchestrator.clock import Clock

SEND_TIMEOUT_S = 20.0


class Notifier:
    """Sends alerts through apprise, de-duplicated and rate-limited."""
    def __init__(self, urls: list[str], clock: Clock, max_per_hour: int = 20,
                 dedup_window_s: float = 3600.0):
        self.clock = clock
        self.max_per_hour = max_per_hour
        self.dedup = timedelta(seconds=dedup_window_s)
        self._seen: dict[tuple[str, str], datetime] = {}
        self._sent: deque[datetime] = deque()
        self.suppressed = 0
        self.failures = 0
        self._apprise = None
        if urls:
            import apprise

            ap = apprise.Apprise()
            for url in urls:
                if not ap.add(url):
                    raise ValueError("notify.urls: an entry is not a URL apprise understands "
                                     "(check its scheme)")
            self._apprise = ap

    def __call__(self, title: str, body: str) -> bool:
        """Send unless it repeats a recent message or the hourly budget is spent; True if handed
        over."""
        if self._apprise is None:
            return False
        now = self.clock.now()
        key = (title, body)
        last = self._seen.get(key)
        if last is not None and now - last < self.dedup:
            return False
        while self._sent and now - self._sent[0] > timedelta(hours=1):
            self._sent.popleft()
        if len(self._sent) >= self.max_per_hour:
            self.suppressed += 1
            return False
        self._seen[key] = now
        self._sent.append(now)
        if self.suppressed:
            body += f"\n({self.suppressed} more notifications were suppressed by the rate limit)"
            self.suppressed = 0
        return self._send(title, body)

    def _send(self, title: str, body: str) -> bool:
        result: dict[str, bool] = {}

        def target() -> None:
            try:
                assert self._apprise is not None
                result["ok"] = bool(self._apprise.notify(title=title, body=body))
            # a notification failure never stops the controller
            except Exception as exc:  # noqa: BLE001
                logger.warning("notification failed: {}", type(exc).__name__)
                result["ok"] = False

        t = threading.Thread(target=target, daemon=True)
        t.start()
        t.join(SEND_TIMEOUT_S)
        ok = result.get("ok", False)
        if not ok:
            self.failures += 1
            logger.warning("notification not delivered (title={!r}); the run goes on", title)
        return ok
