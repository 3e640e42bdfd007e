from __future__ import annotations

import multiprocessing as mp
from datetime import UTC, datetime, timedelta
from pathlib import Path

from orchestrator.blacklist import Blacklist
from orchestrator.model import BlacklistEntry, Cause
from orchestrator.shared_blacklist import SharedBlacklist

T = datetime(2026, 1, 1, tzinfo=UTC)


def entry(node: str, minutes: int = 0) -> BlacklistEntry:
    return BlacklistEntry(node=node, cause=Cause.GPU_ECC, evidence="x", job_id="1",
                          since=T + timedelta(minutes=minutes), expires=T + timedelta(days=1))


def writer(path: str, run: int, n: int) -> None:
    sb = SharedBlacklist(Path(path))
    for i in range(n):
        sb.publish([entry(f"r{run}-node{i}")])


def test_concurrent_writers_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "shared" / "blacklist.json"
    procs = [mp.get_context("fork").Process(target=writer, args=(str(path), r, 25)) for r in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    nodes = {e.node for e in SharedBlacklist(path).merge_into(Blacklist()).entries}
    assert nodes == {f"r{r}-node{i}" for r in range(4) for i in range(25)}


def test_newest_entry_wins_both_ways(tmp_path: Path) -> None:
    sb = SharedBlacklist(tmp_path / "bl.json")
    sb.publish([entry("a", 10)])
    sb.publish([entry("a", 5)])  # older news does not overwrite
    got = SharedBlacklist(tmp_path / "bl.json").merge_into(Blacklist()).get("a")
    assert got is not None and got.since == T + timedelta(minutes=10)
    own = Blacklist(entries=(entry("a", 20), entry("b", 0)))
    merged = sb.merge_into(own)
    got = merged.get("a")
    assert got is not None and got.since == T + timedelta(minutes=20) and merged.get("b") is not None


def soft(node: str, run: str, minutes: int = 0, days: float = 1.0) -> BlacklistEntry:
    return BlacklistEntry(node=node, cause=Cause.SEGFAULT, evidence=f"a crash in {run}", job_id="1", hard=False,
                          since=T + timedelta(minutes=minutes), expires=T + timedelta(days=days), run=run,
                          run_created=T)


def test_strikes_of_different_runs_add_up_to_an_exclusion(tmp_path: Path) -> None:
    """A lemon node: one strike in run A, one in run B; run C excludes it before its first segment (threshold 2)."""
    sb = SharedBlacklist(tmp_path / "bl.json")
    sb.publish([soft("gx-7", "run-a"), soft("gx-9", "run-a")])
    sb.publish([soft("gx-7", "run-b", 30)])
    merged = sb.merge_into(Blacklist(), ("run-c", T), T + timedelta(hours=1))
    assert [e.node for e in merged.excluding(T + timedelta(hours=1), 2)] == ["gx-7"]
    got = merged.get("gx-7")
    assert got is not None and got.strikes == 2 and "also struck in run-a" in got.evidence


def test_a_runs_own_entry_in_the_file_counts_once_and_expired_strikes_not_at_all(tmp_path: Path) -> None:
    sb = SharedBlacklist(tmp_path / "bl.json")
    sb.publish([soft("gx-7", "run-a")])  # run A's own ledger entry, published
    own = Blacklist(entries=(soft("gx-7", ""),))
    got = sb.merge_into(own, ("run-a", T), T + timedelta(hours=1)).get("gx-7")
    assert got is not None and got.strikes == 1
    sb.publish([soft("gx-7", "run-old", days=-1)])  # run-old's strike has expired
    got = sb.merge_into(own, ("run-a", T), T + timedelta(hours=1)).get("gx-7")
    assert got is not None and got.strikes == 1
    sb.publish([soft("gx-7", "run-b", days=0.5)])  # two strikes while run B's lasts, then one
    got = sb.merge_into(own, ("run-a", T), T + timedelta(hours=1)).get("gx-7")
    assert got is not None and got.strikes == 2 and got.expires == T + timedelta(days=0.5)
    assert len(sb.entries()) == 3  # the file keeps each run's newest entry per node
