"""Issue 37, second re-probe (row 23): a pattern with a lookaround (or a backreference) runs on Python's engine;
with one unbounded repeat `validate` accepts it, but on a whole block or a whole line its time grows with the
square of the length: a 1 MB line held the controller (signature) for ~20 min and a 200 KB line the agent's
output pump (progress_regex) for ~58 s. Such patterns now meet each line's first 8 KB only (LINE_CHARS)."""

from __future__ import annotations

from orchestrator.diagnose.linear import progress_pattern
from orchestrator.diagnose.prefilter import Prefilter
from orchestrator.patterns import LINE_CHARS, backtracking_only, python_unbounded
from orchestrator.settings import PROGRESS_REGEX, last_iteration


def test_a_lookaround_signature_is_matched_on_each_lines_first_8_kb_only() -> None:
    pre = Prefilter([("x(?=y)", False)])
    near, far = b"a" * 100 + b"xy", b"a" * (LINE_CHARS + 10) + b"xy"
    data = b"first line\n" + near + b"\n" + far + b"\n" + near
    got = [data[a:b] for a, b in pre.lines(data)]
    assert got == [near, near]  # the match beyond the first 8 KB of its line is not looked for


def test_a_one_megabyte_line_is_met_in_its_first_8_kb_only() -> None:
    """The re-probe's pattern on its 1 MB line: only the first 8 KB are searched (the bound on the cost, which
    grew with the square of the line), so the `c` at its end is out of reach."""
    pattern = r"(?:ab)*c(?=x)"
    assert python_unbounded(pattern) == "" and backtracking_only(pattern)  # validate accepts it
    assert Prefilter([(pattern, True)]).lines(b"ab" * 500_000 + b"cx\n") == []
    assert Prefilter([(pattern, True)]).lines(b"ab" * 1_000 + b"cx\n") != []  # within the window: found


def test_a_lookaround_progress_regex_reads_a_lines_first_8_kb_only() -> None:
    found = progress_pattern(r"(?:ab)*c(?=x)x(\d)", PROGRESS_REGEX)
    assert last_iteration(found, "abcx7") == 7
    assert last_iteration(found, "z" * (LINE_CHARS + 1) + "abcx7") is None
    assert last_iteration(found, "ab" * 100_000 + "cx7") is None  # the 200 KB line: its first 8 KB only


def test_linear_patterns_are_not_backtracking_only() -> None:
    assert not backtracking_only(r"CUDA error: (\w+)") and backtracking_only(r"(a)\1")
