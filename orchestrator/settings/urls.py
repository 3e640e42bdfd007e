"""Notification URLs checked at validate (not at the first alert, hours into a run)."""

from __future__ import annotations

import logging


def apprise_urls(v: list[str]) -> list[str]:
    """Every URL is one apprise understands."""
    if not v:
        return v
    import apprise  # only when there are URLs: the import costs a few tenths of a second

    quiet = logging.getLogger("apprise")
    # its own "Unsupported URL" line: we say it once
    level, quiet.level = quiet.level, logging.CRITICAL
    try:
        bad = [u for u in v if not apprise.Apprise().add(u)]
    finally:
        quiet.setLevel(level)
    if bad:
        shown = ", ".join(repr(u[:60]) for u in bad[:5])
        raise ValueError(f"not a URL apprise can send to: {shown} (see the list of services "
                         "apprise supports)")
    return v
