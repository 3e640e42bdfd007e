"""Notification URLs checked at validate (not at the first alert, hours into a run)."""

from __future__ import annotations

import logging

from orchestrator.redact import shown_url


def apprise_urls(v: list[str]) -> list[str]:
    """Every URL is one apprise understands."""
    if not v:
        return v
    import apprise  # only when there are URLs: the import costs a few tenths of a second

    quiet = logging.getLogger("apprise")
    # its own "Unsupported URL" line: we say it once
    level, quiet.level = quiet.level, logging.CRITICAL
    try:
        bad = [(i, u) for i, u in enumerate(v, 1) if not apprise.Apprise().add(u)]
    finally:
        quiet.setLevel(level)
    if bad:  # by place and scheme and host: the rest of a URL is its token (issue 37)
        shown = ", ".join(f"entry {i} {shown_url(u)}" for i, u in bad[:5])
        raise ValueError(f"not a URL apprise can send to: {shown} (see the list of services "
                         "apprise supports)")
    return v
