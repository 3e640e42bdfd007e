"""Notifications through apprise URLs: de-duplicated, rate-limited, and never able to stop the
controller.

URLs carry tokens: they are never logged.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from datetime import datetime, timedelta
from typing import Any

from loguru import logger

from orchestrator.clock import Clock
from orchestrator.redact import redacted, shown_url

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
        # one apprise object per URL: each URL's own result, said with its scheme and host only
        self._targets: list[tuple[str, str, Any]] = []
        if urls:
            import apprise

            for url in urls:
                ap = apprise.Apprise()
                if not ap.add(url):
                    raise ValueError(f"notify.urls: {shown_url(url)} is not a URL apprise "
                                     "understands (check its scheme)")
                self._targets.append((url, shown_url(url), ap))

    def __call__(self, title: str, body: str) -> bool:
        """Send unless it repeats a recent message or the hourly budget is spent; True if handed
        over."""
        if not self._targets:
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
        failed = [(shown, why) for shown, why in self.send_each(title, body) if why is not None]
        for shown, why in failed:
            logger.warning("notification to {} not delivered ({}); title={!r}; the run goes on",
                           shown, why, title)
        if failed:
            self.failures += 1
        return not failed

    def send_each(self, title: str, body: str) -> list[tuple[str, str | None]]:
        """Send through every URL at once, each within SEND_TIMEOUT_S: (the URL as shown, None
        when delivered or why not), the why cut of every token of the URL."""
        threads = [_Send(ap, title, body) for _, _, ap in self._targets]
        for t in threads:
            t.start()
        deadline = time.monotonic() + SEND_TIMEOUT_S
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        return [(shown, _why(t, url))
                for (url, shown, _), t in zip(self._targets, threads, strict=True)]


class _Send(threading.Thread):
    """One URL's send; `ok` None while it runs, `why` apprise's last warning or the exception's
    type when it did not deliver."""

    def __init__(self, ap: Any, title: str, body: str):
        super().__init__(daemon=True, name="notify")
        self.ap, self.title, self.body = ap, title, body
        self.ok: bool | None = None
        self.why = "not delivered"

    def run(self) -> None:
        try:
            result = self.ap.notify(title=self.title, body=self.body)
            # apprise 2 keeps its warnings with the result; older ones only log them
            said = [str(e.message) for e in getattr(result, "logs", list)()]
            self.why = said[-1] if said else self.why
            self.ok = bool(result)
        # a notification failure never stops the controller
        except Exception as exc:  # noqa: BLE001
            self.ok, self.why = False, type(exc).__name__


def _why(t: _Send, url: str) -> str | None:
    if t.ok:
        return None
    if t.ok is None:
        return f"no answer within {SEND_TIMEOUT_S:.0f} s"
    return redacted(t.why, (url,))[:200]
