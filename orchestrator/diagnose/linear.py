"""A time bound by construction for the patterns a configuration brings (its own signatures, a
custom `progress_regex`): they are compiled with RE2, whose matching time grows linearly with the
line whatever the pattern, so no pattern can stop the controller's loop or the agent's output pump.
A pattern RE2 cannot take (a backreference, a lookaround) keeps Python's engine only if it has at
most one unbounded repeat (patterns.py `python_unbounded`; `validate` refuses the others,
the runtime leaves them out); `validate` has also timed it on crafted worst-case input, and lines
are matched on their first 8 KB only."""

from __future__ import annotations

import re
from typing import cast

from orchestrator.patterns import linear, python_unbounded

__all__ = ["bounded", "bytes_twin", "is_linear", "linear", "progress_pattern"]


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
    custom one bounded like the configuration's signatures. A custom one that settings would refuse
    (a config that skipped validation) is not run: the built-in one stands in."""
    if pattern == default or python_unbounded(pattern):
        return re.compile(default)
    return bounded(pattern)
