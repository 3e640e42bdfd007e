"""Issue 15, "Hangs and runaway resources": a catastrophic user signature is refused (and never compiled into a
run's table), so one crafted 64 KB line cannot hang the controller."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator.diagnose.prefilter import Prefilter
from orchestrator.diagnose.signatures import table_for
from orchestrator.model import Cause
from orchestrator.settings import ConfigError, UserSignature, load_settings
from tests.conftest import REPO, base_config, write_config

CATASTROPHIC = [r"(a+)+$", r"(a*)*b", r"(\w+\s?)*$", r"(a|aa)+$", r"^(([a-z])+.)+[A-Z]([a-z])+$"]
ACCEPTED = [r"a+b", r"CUDA error.*out of memory", r"(?i:NCCL (error|timeout))", r"(ab){2,5}", r"x\s*=\s*\d+"]


def sig(pattern: str) -> dict[str, object]:
    return {"name": "mine", "pattern": pattern, "cause": "user_bug"}


@pytest.mark.parametrize("pattern", CATASTROPHIC)
def test_a_catastrophic_user_signature_is_refused(tmp_path: Path, pattern: str) -> None:
    with pytest.raises(ConfigError, match="signatures.0.pattern: .*exponential time") as err:
        load_settings(write_config(tmp_path, base_config(tmp_path, signatures=[sig(pattern)])))
    assert len(err.value.problems) == 1


@pytest.mark.parametrize("pattern", CATASTROPHIC)
def test_a_catastrophic_pattern_that_skipped_validation_is_left_out_of_the_table(pattern: str) -> None:
    unchecked = UserSignature.model_construct(name="mine", pattern=pattern, cause=Cause.USER_BUG,
                                              blame=False, cascade=False)
    assert "mine" not in {s.name for s in table_for([unchecked])}


def test_accepted_user_signatures_are_bounded_on_crafted_64k_lines(tmp_path: Path) -> None:
    s = load_settings(write_config(tmp_path, base_config(tmp_path, signatures=[sig(p) for p in ACCEPTED])))
    user = [t for t in table_for(s.signatures) if t.source == "config"]
    assert len(user) == len(ACCEPTED)
    prefilter = Prefilter([(t.pattern, t.ignore_case) for t in user])
    lines = [b"a" * 65536 + b"!", b"a" * 65535 + b"b", b"x" + b" " * 65534 + b"=", b"ab" * 32768]
    started = time.monotonic()
    for line in lines:
        for start, end in prefilter.lines(line + b"\n"):
            text = line[start:end].decode()
            for t in user:
                t.regex.search(text)
    assert time.monotonic() - started < 2.0


def test_a_global_inline_flag_is_refused_as_it_would_break_the_joined_prefilter(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"signatures.0.pattern: .*\(\?i:\.\.\.\)"):
        load_settings(write_config(tmp_path, base_config(tmp_path, signatures=[sig("(?i)nccl error")])))


FIFO_PROGRAM = """
import os, re, sys
from datetime import UTC, datetime
from pathlib import Path
from orchestrator.diagnose.signatures import table_for
from orchestrator.watch.segment import SegmentWatch
root = Path(sys.argv[1])
(root / "logs").mkdir(parents=True)
(root / "logs" / "node1.log").write_text("step 1\\n")
os.mkfifo(root / "logs" / "node2.log")
watch = SegmentWatch(root, table_for([]), re.compile(r"step (\\d+)"), 0.5)
watch.poll(datetime.now(UTC), final=True)
watch.close()
print("done", flush=True)
"""


def test_a_fifo_in_the_logs_directory_does_not_keep_the_controller_from_exiting(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-c", FIFO_PROGRAM, str(tmp_path / "seg")], capture_output=True,
                          text=True, timeout=30, cwd=REPO)
    assert proc.returncode == 0 and "done" in proc.stdout, proc.stderr[-2000:]


SLOW = [r"a*a*a*a*a*a*b", r"x+x+x+x+y", r"(?:\w*\s*)*=$"]


@pytest.mark.parametrize("pattern", SLOW)
def test_a_polynomial_user_signature_is_refused_by_timing_not_by_shape(tmp_path: Path, pattern: str) -> None:
    """Issue 21: `a*a*a*a*a*a*b` has no nested quantifier, yet spins for minutes on a 100-byte line; validate
    times every user pattern on long runs of its own characters, in a process it kills at the bound."""
    with pytest.raises(ConfigError, match=r"signatures\.0\.pattern: .*(?:does not finish|exponential)"):
        load_settings(write_config(tmp_path, base_config(tmp_path, signatures=[sig(pattern)])))


@pytest.mark.parametrize("pattern", [r"(?:a|aa)+x(\d+)", r"(\w+\s?)*step (\d+)"])
def test_a_slow_progress_regex_is_refused(tmp_path: Path, pattern: str) -> None:
    """Issue 21: the progress regex meets every line of output (the controller's and the agent's pump)."""
    with pytest.raises(ConfigError, match=r"progress_regex: .*(?:does not finish|exponential)"):
        load_settings(write_config(tmp_path, base_config(tmp_path, progress_regex=pattern)))
    load_settings(write_config(tmp_path, base_config(tmp_path, progress_regex=r"step (\d+)")))


@pytest.mark.parametrize("pattern", [r"(?:a|aa)+x(\d+)", r"a*a*a*a*a*a*b", r"(a+)+$"])
def test_a_configuration_s_patterns_are_matched_in_linear_time_even_past_validation(pattern: str) -> None:
    """The runtime bound (issue 21), not only the validate probe: a config's signatures and a custom progress
    regex run on RE2, so a pattern that backtracks catastrophically on Python's engine costs a linear scan even
    in a config that never went through validate (a Signature built directly, a spec edited by hand)."""
    from orchestrator.diagnose.linear import is_linear, progress_pattern
    from orchestrator.diagnose.signature import Signature
    from orchestrator.settings import PROGRESS_REGEX

    sig = Signature("crafted", pattern, Cause.USER_BUG, source="config", linear=True)
    prog = progress_pattern(pattern.replace("(a+)+$", r"(a+)+(\d+)$"), PROGRESS_REGEX)
    assert is_linear(sig.regex) and is_linear(prog)
    line = "a" * 8192 + "!"  # what a line is cut to before matching, with a failing suffix
    t0 = time.perf_counter()
    assert sig.regex.search(line) is None and prog.search(line) is None
    assert time.perf_counter() - t0 < 0.5
    assert not is_linear(progress_pattern(PROGRESS_REGEX, PROGRESS_REGEX))  # the built-in one: measured, Python


def test_a_pattern_re2_cannot_take_keeps_python_and_the_same_matches() -> None:
    from orchestrator.diagnose.linear import bounded, bytes_twin, is_linear

    back = bounded(r"(\w+) again \1", ignore_case=True)  # a backreference: RE2 refuses it
    assert not is_linear(back) and back.search("Boom again boom")
    rx = bounded(r"step (?P<it>\d+)", ignore_case=True)
    assert is_linear(rx)
    m = rx.search("STEP 42 loss 1.0")
    assert m is not None and m.group(1) == "42" and m.groupdict() == {"it": "42"} and m.groups() == ("42",)
    assert [x.group(1) for x in rx.finditer("step 1 step 2")] == ["1", "2"]
    twin = bytes_twin(rx)
    assert is_linear(twin) and twin.search(b"x step 7").group(1) == b"7"  # type: ignore[union-attr]


LOOKAHEAD_SIG = r"(?:ab)*(?:ab)*(?:ab)*(?:ab)*(?:ab)*c(?=x)"
LOOKAHEAD_PROGRESS = r"(?:ab)*(?:ab)*(?:ab)*step (\d+)(?=x)"


def test_a_lookahead_pattern_with_overlapping_repeats_is_refused_by_validate(tmp_path: Path) -> None:
    """Issue 37: a lookahead sends a pattern to Python's engine, and the timing probe (runs of ONE character)
    never tried `abab...`: five `(?:ab)*` in a row spun for minutes on a 400-byte line, SIGTERM ignored."""
    with pytest.raises(ConfigError, match=r"signatures\.0\.pattern: .*5 unbounded repeats"):
        load_settings(write_config(tmp_path, base_config(tmp_path, signatures=[sig(LOOKAHEAD_SIG)])))
    with pytest.raises(ConfigError, match=r"progress_regex: .*4 unbounded repeats"):
        load_settings(write_config(tmp_path, base_config(tmp_path, progress_regex=LOOKAHEAD_PROGRESS)))
    ok = [sig(r"CUDA error.*(?=out of memory)"), sig(r"(?<!no )NCCL timeout")]  # one unbounded repeat or none
    s = load_settings(write_config(tmp_path, base_config(tmp_path, signatures=ok,
                                                         progress_regex=r"step (\d+)(?= loss)")))
    assert len(s.signatures) == 2


def test_a_lookahead_pattern_that_skipped_validation_is_not_run() -> None:
    from orchestrator.diagnose.linear import progress_pattern
    from orchestrator.settings import PROGRESS_REGEX

    unchecked = UserSignature.model_construct(name="mine", pattern=LOOKAHEAD_SIG, cause=Cause.USER_BUG,
                                              blame=False, cascade=False)
    assert "mine" not in {s.name for s in table_for([unchecked])}
    assert progress_pattern(LOOKAHEAD_PROGRESS, PROGRESS_REGEX).pattern == PROGRESS_REGEX
    line = "ab" * 200  # what hung the agent's pump and the controller
    t0 = time.perf_counter()
    for t in table_for([unchecked]):
        t.regex.search(line)
    progress_pattern(LOOKAHEAD_PROGRESS, PROGRESS_REGEX).search(line)
    assert time.perf_counter() - t0 < 2.0


BOUNDED_SIG = r"(?:ab){0,20}" * 10 + r"c(?=x)"


def test_many_bounded_repeats_before_a_lookahead_are_refused_and_never_run(tmp_path: Path) -> None:
    """Issue 37 re-probe: ten `(?:ab){0,20}` and a lookahead passed validate (no repeat over 64) and then held the
    controller on a 400-byte `abab...` line, SIGTERM ignored: the repeats split a line 21**10 ways."""
    with pytest.raises(ConfigError, match=r"signatures\.0\.pattern: .*bounded repeats can split a line"):
        load_settings(write_config(tmp_path, base_config(tmp_path, signatures=[sig(BOUNDED_SIG)])))
    with pytest.raises(ConfigError, match=r"progress_regex: .*bounded repeats can split a line"):
        load_settings(write_config(tmp_path, base_config(tmp_path, progress_regex=r"(?:ab){0,20}" * 10
                                                         + r"(\d+)(?= loss)")))
    unchecked = UserSignature.model_construct(name="mine", pattern=BOUNDED_SIG, cause=Cause.USER_BUG,
                                              blame=False, cascade=False)
    assert "mine" not in {s.name for s in table_for([unchecked])}
    small = load_settings(write_config(tmp_path, base_config(tmp_path, signatures=[sig(r"x{0,3}y\d+(?=z)")])))
    # one unbounded repeat and a small bounded one still pass (`x{0,3}\d+(?=y)` does not: quadratic on a run of
    # digits, 3.7 s for the probe on the 2-core test machine, and the timing check refuses it, rightly)
    assert len(small.signatures) == 1
