"""A time bound by construction for the patterns a configuration brings (its own signatures, a
custom `progress_regex`): they are compiled with RE2, whose matching time grows linearly with the
line whatever the pattern, so no pattern can stop the controller's loop or the agent's output pump.
A pattern RE2 cannot take (a backreference, a lookaround) keeps Python's engine; `validate` has
timed those on crafted worst-case input (settings/patterns.py), and lines are matched on their first
8 KB only."""

from __future__ import annotations

import re
from typing import Any, cast

try:  # google-re2; without it every pattern stays on Python's engine
    import re2
except ImportError:  # pragma: no cover - depends on the platform
    re2 = None


def linear(pattern: str | bytes, ignore_case: bool = False) -> Any:
    """The pattern compiled with RE2 (a `re.Pattern` look-alike), or None if RE2 is missing or
    refuses it."""
    if re2 is None:
        return None
    opts = re2.Options()
    opts.log_errors, opts.case_sensitive = False, not ignore_case
    try:
        return re2.compile(pattern, opts)
    except re2.error:
        return None


def bounded(pattern: str, ignore_case: bool = False) -> re.Pattern[str]:
    """RE2 where it takes the pattern, else Python's `re` (the same groups and match objects either
    way)."""
    rx = linear(pattern, ignore_case)
    return (cast(re.Pattern[str], rx) if rx is not None
            else re.compile(pattern, re.IGNORECASE if ignore_case else 0))


def is_linear(rx: object) -> bool:
    return not isinstance(rx, re.Pattern)


def bytes_twin(rx: re.Pattern[str]) -> re.Pattern[bytes]:
    """The same pattern for raw bytes, on the same engine."""
    if is_linear(rx):
        twin = linear(rx.pattern.encode())
        if twin is not None:
            return cast(re.Pattern[bytes], twin)
        return re.compile(rx.pattern.encode())
    return re.compile(rx.pattern.encode(), rx.flags & ~re.UNICODE)


def progress_pattern(pattern: str, default: str) -> re.Pattern[str]:
    """The run's progress pattern: the built-in `default` on Python's engine (measured, known), a
    custom one bounded like the configuration's signatures."""
    return re.compile(pattern) if pattern == default else bounded(pattern)
