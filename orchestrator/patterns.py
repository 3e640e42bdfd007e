"""User regular expressions that could make Python's backtracking `re` run for minutes on one line:
a quantifier inside a repeated group (`(a+)+`, `(a*)*`, `(\\w+\\s?)*`) or an alternation under an
unbounded repeat (`(a|aa)+`). Such patterns are refused; every other user pattern only meets lines
the linear-time prefilter already matched.

Shapes are not the whole story (`a*a*a*a*a*a*b` is polynomial, not exponential), so a pattern is
also timed, in a separate process that is killed at the bound, on inputs built from its own
characters: long runs of each literal with a suffix that fails the match, the worst case of a
backtracking engine.

Timing on runs of one character misses what needs two (`(?:ab)*(?:ab)*c(?=x)` on `abab...`), so a
pattern that will run on Python's engine (RE2, linear in the line, refuses lookarounds and
backreferences) must also be bounded by its shape: at most one unbounded repeat, as two in a row
that can match the same text take time polynomial in the line (`python_unbounded`)."""

from __future__ import annotations

import functools
import re._constants as _c  # Python >= 3.11
import re._parser as _p
import subprocess
import sys
from typing import Any

try:  # google-re2; without it every pattern stays on Python's engine
    import re2
except ImportError:  # pragma: no cover - depends on the platform
    re2 = None

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
    return any(op == _c.BRANCH or any(_has_branch(c) for c in _children(op, av)) for op,
               av in items)


def _walk(items: Any, repeated: bool) -> str:
    for op, av in items:
        if op in REPEATS:
            _lo, hi, body = av
            many = hi > 1
            if repeated and many:
                return "a quantifier inside a repeated group (e.g. (a+)+) can take exponential time"
            if many and hi == _c.MAXREPEAT and _has_branch(body):
                return ("an alternation under an unbounded repeat (e.g. (a|aa)+) can take "
                        "exponential time")
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


PROBE_BOUND_S = 3.0  # the whole probe of one pattern (a process start included)
_PROBE = """
import re, sys, time
rx = re.compile(sys.argv[1])
chars = sys.argv[2]
for n in (64, 2048, 8192):  # the scanner matches at most the first 8 KiB of a line
    for c in chars:
        for tail in ("", "\\x00", "!", " "):
            rx.search(c * n + tail)
"""


def _chars(items: Any, out: set[str]) -> None:
    for op, av in items:
        if op == _c.LITERAL:
            out.add(chr(av))
        elif op == _c.IN:
            lit = next((chr(a) for o, a in av if o == _c.LITERAL), None)
            out.add(lit if lit is not None else "a")
        elif op in REPEATS:
            _chars(av[2], out)
        else:
            for child in _children(op, av):
                _chars(child, out)


@functools.lru_cache(maxsize=256)
def too_slow(pattern: str) -> str:
    """Why `pattern` is too slow on crafted worst-case input (it did not finish the probe within the
    bound), or "". Runs in a separate process, so a pattern that never returns is killed, not waited
    on."""
    try:
        found: set[str] = set()
        _chars(_p.parse(pattern), found)
    except Exception:  # noqa: BLE001 - a pattern that does not parse is reported by re.compile
        return ""
    chars = "".join(sorted(c for c in found | {"a", "0", " "} if c.isprintable()))[:40]
    try:
        subprocess.run([sys.executable, "-I", "-c", _PROBE, pattern, chars],
                       capture_output=True,  # noqa: S603
                       timeout=PROBE_BOUND_S, check=False)
    except subprocess.TimeoutExpired:
        return (f"it does not finish within {PROBE_BOUND_S:.0f} s on a long run of one of its own "
                "characters (backtracking): simplify it (no repeated groups or overlapping repeats "
                "such as a*a*b)")
    return ""


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


BIG_REPEAT = 64  # a repeat allowing more than this many is counted as unbounded
LINE_CHARS = 8192  # signatures look at a line's first 8 KB: an unbounded repeat spans at most this
# ways a Python-engine pattern may split a line, per start position: one unbounded repeat and a few
# small bounded ones (`x{0,3}\d+(?=y)`); two unbounded, or many bounded ones in a row, are over
COST_BUDGET = 4 * (LINE_CHARS + 1)


def _unbounded(items: Any) -> int:
    count = 0
    for op, av in items:
        if op in REPEATS:
            count += (av[1] > BIG_REPEAT) + _unbounded(av[2])
        else:
            count += sum(_unbounded(child) for child in _children(op, av))
    return count


def _cost(items: Any) -> int:
    """The ways the repeats of `items` can split a line: each repeat of up to N multiplies by
    N + 1 (unbounded: LINE_CHARS + 1), nested repeats multiply, alternatives add. Capped."""
    cost = 1
    for op, av in items:
        if op in REPEATS:
            factor = min(av[1], LINE_CHARS) + 1 if av[1] > 1 else 1
            cost *= factor * _cost(av[2])
        elif op == _c.BRANCH:
            cost *= sum(_cost(alt) for alt in av[1])
        else:
            for child in _children(op, av):
                cost *= _cost(child)
        cost = min(cost, 10**15)
    return cost


def python_unbounded(pattern: str) -> str:
    """Why `pattern`, which RE2 refuses (a lookaround, a backreference) and so runs on Python's
    backtracking engine, cannot be proven fast, or "": more than one unbounded repeat. Two such
    repeats that can match the same text (`(?:ab)*(?:ab)*`) make every failing line cost a power of
    its length; telling which pairs overlap is not attempted, so any second one is refused."""
    if linear(pattern) is not None:
        return ""
    try:
        parsed = _p.parse(pattern)
        n, cost = _unbounded(parsed), _cost(parsed)
    except Exception:  # noqa: BLE001 - a pattern that does not parse is reported by re.compile
        return ""
    if n <= 1 and cost <= COST_BUDGET:
        return ""
    what = (f"it has {n} unbounded repeats (*, +, {{n,}})" if n > 1 else
            f"its bounded repeats can split a line {cost:.3g} ways")
    return (f"{what} and it runs on Python's backtracking engine (a lookaround or backreference): "
            "repeats matching the same text take polynomial time; keep one repeat, make the others "
            "small ({0,3}), or drop the lookaround/backreference")



_BACKTRACKING = {_c.ASSERT, _c.ASSERT_NOT, _c.GROUPREF, _c.GROUPREF_EXISTS}


def _needs_backtracking(items: Any) -> bool:
    return any(op in _BACKTRACKING or (op in REPEATS and _needs_backtracking(av[2]))
               or any(_needs_backtracking(c) for c in _children(op, av)) for op, av in items)


def backtracking_only(pattern: str) -> bool:
    """Whether `pattern` holds a lookaround or a backreference: no linear engine (RE2, Hyperscan)
    runs it, so it is matched on Python's engine and on a line's first LINE_CHARS only."""
    try:
        return _needs_backtracking(_p.parse(pattern))
    except Exception:  # noqa: BLE001 - a pattern that does not parse is reported by re.compile
        return False
