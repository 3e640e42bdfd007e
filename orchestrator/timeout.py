"""The one call-with-timeout helper: a call that may hang (a frozen filesystem, a stuck /proc read)
runs in a daemon thread; the caller gets (finished, result-or-exception) and a hung call is
abandoned."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


def call_with_timeout(fn: Callable[[], Any], timeout: float) -> tuple[bool, Any]:
    """Run fn in a daemon thread; (finished, result-or-exception). A hung call is abandoned, not
    joined."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller as the result
            box["value"] = exc

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(timeout)
    return (not t.is_alive()), box.get("value")
