"""Issue 37, second re-probe (row 23): a pattern with a lookaround (or a backreference) runs on Python's engine;
with one unbounded repeat `validate` accepts it, but on a whole block or a whole line its time grows with the
square of the length: a 1 MB line held the controller (signature) for ~20 min and a 200 KB line the agent's
output pump (progress_regex) for ~58 s. Such patterns now meet each line's first 8 KB only (LINE_CHARS)."""

from __future__ import annotations

import time

from orchestrator.diagnose.linear import progress_pattern
from orchestrator.diagnose.prefilter import Prefilter
from orchestrator.settings import PROGRESS_REGEX, last_iteration
from orchestrator.settings.patterns import LINE_CHARS, backtracking_only, python_unbounded


def test_a_lookaround_signature_is_matched_on_each_lines_first_8_kb_only() -> None:
    pre = Prefilter([("x(?=y)", False)])
    near, far = b"a" * 100 + b"xy", b"a" * (LINE_CHARS + 10) + b"xy"
    data = b"first line\n" + near + b"\n" + far + b"\n" + near
    got = [data[a:b] for a, b in pre.lines(data)]
    assert got == [near, near]  # the match beyond the first 8 KB of its line is not looked for


def test_a_one_megabyte_line_costs_one_8_kb_window_not_its_square() -> None:
    pattern = r"(?:ab)*c(?=x)"
    assert python_unbounded(pattern) == "" and backtracking_only(pattern)  # validate accepts it
    started = time.monotonic()
    assert Prefilter([(pattern, True)]).lines(b"ab" * 500_000 + b"\n") == []
    assert time.monotonic() - started < 20  # ~0.1 s here; the whole line took ~20 min


def test_a_lookaround_progress_regex_reads_a_lines_first_8_kb_only() -> None:
    found = progress_pattern(r"(?:ab)*c(?=x)x(\d)", PROGRESS_REGEX)
    assert last_iteration(found, "abcx7") == 7
    assert last_iteration(found, "z" * (LINE_CHARS + 1) + "abcx7") is None
    rx = progress_pattern(r"(?:ab)*c(?=x)(\d)", PROGRESS_REGEX)  # the re-probe's own
    started = time.monotonic()
    assert last_iteration(rx, "ab" * 100_000) is None
    assert time.monotonic() - started < 20  # ~0.1 s here; the agent's pump was blocked ~58 s


def test_linear_patterns_are_not_backtracking_only() -> None:
    assert not backtracking_only(r"CUDA error: (\w+)") and backtracking_only(r"(a)\1")
