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


def fresh(monkeypatch: pytest.MonkeyPatch, cache: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    monkeypatch.setattr(prefilter, "_COMPILED", {})


def test_a_second_process_loads_the_database_instead_of_compiling(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    fresh(monkeypatch, tmp_path)
    first = Prefilter(PATTERNS)
    files = list((tmp_path / "orchestrator").glob("hs-*.db"))
    assert first.engine == "hyperscan" and len(files) == 1
    fresh(monkeypatch, tmp_path)  # a new process: nothing in memory
    monkeypatch.setattr(prefilter, "_compile", lambda: pytest.fail("compiled again"))
    again = Prefilter(PATTERNS)
    assert again.engine == "hyperscan" and again.lines(LINE) == first.lines(LINE) == [(3, 52)]


def test_a_damaged_or_unwritable_cache_only_costs_the_compile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fresh(monkeypatch, tmp_path)
    Prefilter(PATTERNS)
    for f in (tmp_path / "orchestrator").glob("hs-*.db"):
        f.write_bytes(b"garbage")
    fresh(monkeypatch, tmp_path)
    assert Prefilter(PATTERNS).lines(LINE) == [(3, 52)]
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    fresh(monkeypatch, blocked)
    pf = Prefilter(PATTERNS)
    assert pf.engine == "hyperscan" and pf.lines(LINE) == [(3, 52)]
