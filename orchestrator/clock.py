"""Time is injected: the real clock sleeps interruptibly; the fake clock advances instantly."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    """Time for the loop: now, sleep (interruptible by wake) - injected so tests never sleep."""
    def now(self) -> datetime: ...

    def sleep(self, seconds: float) -> bool:
        """Sleep up to `seconds`; return False if woken early by `wake()`."""
        ...

    def wake(self) -> None: ...


class RealClock:
    """The wall clock; sleep returns early when woken (a signal, a stop request)."""
    def __init__(self) -> None:
        self._event = threading.Event()

    def now(self) -> datetime:
        return datetime.now(UTC)

    def sleep(self, seconds: float) -> bool:
        woken = self._event.wait(max(0.0, seconds))
        self._event.clear()
        return not woken

    def wake(self) -> None:
        self._event.set()


class FakeClock:
    """Advances time only when asked to sleep; callbacks let fakes react to the passage of time."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 1, 1, tzinfo=UTC)
        self.on_advance: list[Callable[[datetime], None]] = []
        self.slept = 0.0

    def now(self) -> datetime:
        return self._now

    def sleep(self, seconds: float) -> bool:
        self.advance(seconds)
        return True

    def advance(self, seconds: float) -> None:
        self._now += timedelta(seconds=max(0.0, seconds))
        self.slept += max(0.0, seconds)
        for cb in list(self.on_advance):
            cb(self._now)

    def wake(self) -> None:
        return None
