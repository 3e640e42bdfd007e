from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.blacklist import Blacklist, compress, expand
from orchestrator.model import Cause

T0 = datetime(2026, 1, 1, tzinfo=UTC)
DAY = timedelta(hours=24)


def rec(bl: Blacklist, node: str, hard: bool, at: datetime = T0, cause: Cause = Cause.GPU_ECC) -> Blacklist:
    return bl.record(node, cause, "evidence line", "42", at, hard=hard, expiry=DAY)


@pytest.mark.parametrize("strikes,hard,threshold,excluded", [
    (1, True, 2, True),    # hardware: out at once
    (1, False, 2, False),  # one soft strike: still used
    (2, False, 2, True),   # threshold reached
    (3, False, 3, True),
    (2, False, 3, False),
])
def test_strikes(strikes: int, hard: bool, threshold: int, excluded: bool) -> None:
    bl = Blacklist()
    for i in range(strikes):
        bl = rec(bl, "node7", hard, T0 + timedelta(minutes=i), Cause.SEGFAULT)
    entry = bl.get("node7")
    assert entry is not None and entry.strikes == strikes
    assert (bl.exclude_plan(T0 + timedelta(hours=1), threshold, cap=10).nodes == ("node7",)) is excluded


def test_expiry_drops_entry_and_resets_strikes() -> None:
    bl = rec(Blacklist(), "node1", hard=True)
    assert bl.exclude_plan(T0 + DAY - timedelta(seconds=1), 2, 10).nodes == ("node1",)
    assert bl.exclude_plan(T0 + DAY, 2, 10).nodes == ()
    assert bl.prune(T0 + DAY).entries == ()
    soft = rec(rec(Blacklist(), "n2", False), "n2", False, T0 + 2 * DAY)  # first strike expired
    entry = soft.get("n2")
    assert entry is not None and entry.strikes == 1


def test_cap_keeps_strongest_and_most_recent() -> None:
    bl = Blacklist()
    bl = rec(bl, "n1", hard=False)
    bl = rec(bl, "n1", hard=False, at=T0 + timedelta(minutes=1))  # 2 soft strikes
    bl = rec(bl, "n2", hard=True, at=T0 + timedelta(minutes=2))
    bl = rec(bl, "n3", hard=True, at=T0 + timedelta(minutes=3))
    plan = bl.exclude_plan(T0 + timedelta(hours=1), 2, cap=2)
    assert plan.nodes == ("n2", "n3")
    assert plan.dropped == ("n1",)
    assert "capped at 2" in plan.note and "n1" in plan.note
    assert bl.exclude_plan(T0 + timedelta(hours=1), 2, cap=0).nodes == ()


def test_unknown_nodes_are_not_passed_to_exclude() -> None:
    bl = rec(rec(Blacklist(), "gone9", True), "node2", True)
    plan = bl.exclude_plan(T0, 2, 10, known={"node1", "node2"})
    assert plan.nodes == ("node2",) and "gone9" in plan.note


def test_manual_remove() -> None:
    bl = rec(rec(Blacklist(), "a1", True), "a2", True).remove("a1")
    assert [e.node for e in bl.entries] == ["a2"]


@pytest.mark.parametrize("nodes,expr", [
    (["node3", "node7", "node8", "node9"], "node[3,7-9]"),
    (["gpu-a012", "gpu-a013"], "gpu-a[012-013]"),
    (["login"], "login"),
    ([], ""),
])
def test_compress(nodes: list[str], expr: str) -> None:
    assert compress(nodes) == expr
    assert sorted(expand(expr)) == sorted(nodes)


def test_bad_hostlist_is_named() -> None:
    with pytest.raises(ValueError, match="node\\[3-"):
        expand("node[3-")


@given(st.sets(st.tuples(st.sampled_from(["node", "gpu-a", "jean-zay-iam"]), st.integers(0, 2000)), max_size=40))
def test_hostlist_round_trip(pairs: set[tuple[str, int]]) -> None:
    nodes = sorted({f"{p}{i:02d}" for p, i in pairs})
    assert sorted(expand(compress(nodes))) == nodes


@given(st.lists(st.tuples(st.integers(1, 30), st.booleans(), st.integers(0, 100)), max_size=30),
       st.integers(0, 12))
def test_exclude_never_exceeds_cap(events: list[tuple[int, bool, int]], cap: int) -> None:
    bl = Blacklist()
    for n, hard, minute in events:
        bl = rec(bl, f"node{n}", hard, T0 + timedelta(minutes=minute))
    plan = bl.exclude_plan(T0 + timedelta(hours=2), 2, cap)
    assert len(plan.nodes) <= cap
    assert set(plan.nodes) | set(plan.dropped) == {e.node for e in bl.excluding(T0 + timedelta(hours=2), 2)}
