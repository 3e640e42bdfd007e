"""The compiled signature database is kept between processes (issue 22: `diagnose` spent 0.17 s compiling it
on every run); a damaged or unwritable cache only costs the compile, never the engine or a match."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.diagnose import prefilter
from orchestrator.diagnose.prefilter import Prefilter

PATTERNS = [(r"uncorrectable ECC error", True), (r"srun: error: Node failure on (?P<node>[\w.-]+)", False)]
LINE = b"ok\nRuntimeError: uncorrectable ECC error encountered\nok\n"

pytestmark = pytest.mark.skipif(prefilter.ENGINE_AVAILABLE is False, reason="Hyperscan is not installed here")


def fresh(monkeypatch: pytest.MonkeyPatch, cache: Path) -> prefilter.Compiled:
    """A process with `cache` as its cache directory and nothing in memory yet: the memory it starts with."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    return {}


def test_a_second_process_loads_the_database_instead_of_compiling(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    first = Prefilter(PATTERNS, fresh(monkeypatch, tmp_path))
    files = list((tmp_path / "orchestrator").glob("hs-*.db"))
    assert first.engine == "hyperscan" and len(files) == 1
    memory = fresh(monkeypatch, tmp_path)  # a new process: nothing in memory
    again = Prefilter(PATTERNS, memory, compiler=lambda patterns: pytest.fail("compiled again"))
    assert again.engine == "hyperscan" and again.lines(LINE) == first.lines(LINE) == [(3, 52)]


def test_a_damaged_or_unwritable_cache_only_costs_the_compile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    Prefilter(PATTERNS, fresh(monkeypatch, tmp_path))
    for f in (tmp_path / "orchestrator").glob("hs-*.db"):
        f.write_bytes(b"garbage")
    assert Prefilter(PATTERNS, fresh(monkeypatch, tmp_path)).lines(LINE) == [(3, 52)]
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    pf = Prefilter(PATTERNS, fresh(monkeypatch, blocked))
    assert pf.engine == "hyperscan" and pf.lines(LINE) == [(3, 52)]
