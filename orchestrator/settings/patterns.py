"""User regular expressions that could make Python's backtracking `re` run for minutes on one line: a
quantifier inside a repeated group (`(a+)+`, `(a*)*`, `(\\w+\\s?)*`) or an alternation under an unbounded
repeat (`(a|aa)+`). Such patterns are refused; every other user pattern only meets lines the linear-time
prefilter already matched."""

from __future__ import annotations

import re._constants as _c  # Python >= 3.11
import re._parser as _p
from typing import Any

REPEATS = {_c.MAX_REPEAT, _c.MIN_REPEAT, getattr(_c, "POSSESSIVE_REPEAT", _c.MAX_REPEAT)}


def _children(op: Any, av: Any) -> list[Any]:
    if op == _c.SUBPATTERN:
        return [av[-1]]
    if op == _c.BRANCH:
        return list(av[1])
    if op in (_c.ASSERT, _c.ASSERT_NOT):
        return [av[1]]
    if op == getattr(_c, "ATOMIC_GROUP", None):
        return [av]
    if op == _c.GROUPREF_EXISTS:
        return [x for x in av[1:] if x is not None]
    return []


def _has_branch(items: Any) -> bool:
    return any(op == _c.BRANCH or any(_has_branch(c) for c in _children(op, av)) for op, av in items)


def _walk(items: Any, repeated: bool) -> str:
    for op, av in items:
        if op in REPEATS:
            _lo, hi, body = av
            many = hi > 1
            if repeated and many:
                return "a quantifier inside a repeated group (e.g. (a+)+) can take exponential time"
            if many and hi == _c.MAXREPEAT and _has_branch(body):
                return "an alternation under an unbounded repeat (e.g. (a|aa)+) can take exponential time"
            if why := _walk(body, repeated or many):
                return why
        else:
            for child in _children(op, av):
                if why := _walk(child, repeated):
                    return why
    return ""


def catastrophic(pattern: str) -> str:
    """Why `pattern` may backtrack catastrophically, or "" if it may not (or does not parse)."""
    try:
        return _walk(_p.parse(pattern), False)
    except Exception:  # noqa: BLE001 - a pattern that does not parse is reported by re.compile
        return ""
