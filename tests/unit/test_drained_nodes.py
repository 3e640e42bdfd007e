"""Issue 40 item 1: the admins' drains of the running step's nodes. Slurm's answer parsed (unknown is never "none
drained"); a drain is named in the segment (status), swapped for a free spare once a complete checkpoint newer than
the drain is seen, and is the culprit of a segment that fails naming nobody."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from orchestrator.backends.slurm_commands import drained_reasons
from orchestrator.loop import observations as o
from orchestrator.loop.conclude import drained_culprit
from orchestrator.loop.drains import DRAIN_EVERY_S, Drains
from orchestrator.model import Action, CancelReason, Cause, RunStatus, Verdict
from orchestrator.state import SegmentRecord
from orchestrator.views.metrics import registry
from orchestrator.views.status import status_json
from tests.unit.test_controller_spares import make, run_until

T = datetime(2026, 12, 7, tzinfo=UTC)
NHC = "NHC: check_gpu_ecc: GPU 3 uncorrectable ECC errors"


def test_sinfo_reasons_of_drained_draining_and_failing_nodes_only() -> None:
    text = ("node1|alloc|none\nnode2|drng|NHC: check_gpu_ecc failed | dbe=2\nnode3|drain|Kill task failed\n"
            "node4|fail|Not responding\nnode5|drain|\nother9|drain|maintenance\n")
    nodes = frozenset({"node1", "node2", "node3", "node4", "node5"})
    assert drained_reasons(text, nodes) == {"node2": "NHC: check_gpu_ecc failed | dbe=2", "node3": "Kill task failed",
                                            "node4": "Not responding", "node5": "drain"}


@pytest.mark.parametrize("text", ["", "slurm_load_node: Unable to contact slurm controller", "node1 alloc\n"])
def test_a_garbled_or_empty_sinfo_is_unknown_never_none_drained(text: str) -> None:
    assert drained_reasons(text, frozenset({"node1"})) is None


class Source:
    def __init__(self, found: dict[str, str] | None) -> None:
        self.found, self.asked = found, 0

    def drained_reasons(self, nodes: frozenset[str]) -> dict[str, str] | None:
        self.asked += 1
        return None if self.found is None else {n: r for n, r in self.found.items() if n in nodes}


def test_a_drain_is_observed_once_and_swapped_only_after_a_newer_checkpoint() -> None:
    src, nodes = Source({"node2": NHC}), frozenset({"node1", "node2"})
    d = Drains(src)
    first = d.step(nodes, T, "iter_100", lambda: (1, "node1"))
    assert first.observations == (o.NodeDrained("node2", NHC),) and not first.swap
    again = d.step(nodes, T + timedelta(seconds=DRAIN_EVERY_S / 2), "iter_100", lambda: (1, "node1"))
    assert again.observations == () and not again.swap and src.asked == 1  # at most every DRAIN_EVERY_S
    later = d.step(nodes, T + timedelta(seconds=DRAIN_EVERY_S), "iter_110", lambda: (1, "node1"))
    assert later.node == "node2" and later.swap.startswith("node2 drained in Slurm (NHC: ") and not later.observations


@pytest.mark.parametrize(("terms", "swap"), [((0, "node1"), False), ((1, "node2"), False), ((1, "node1"), True)])
def test_no_swap_without_a_free_spare_nor_of_the_batch_host(terms: tuple[int, str], swap: bool) -> None:
    d = Drains(Source({"node2": NHC}))
    d.step(frozenset({"node1", "node2"}), T, None, lambda: terms)
    assert bool(d.step(frozenset({"node1", "node2"}), T + timedelta(minutes=1), "iter_10", lambda: terms).swap) == swap


def test_unknown_answers_and_the_setting_off_swap_nothing() -> None:
    unknown = Drains(Source(None))
    assert unknown.step(frozenset({"node2"}), T, "c1", lambda: (1, "node1")) == unknown.step(
        frozenset({"node2"}), T + timedelta(minutes=5), "c2", lambda: (1, "node1"))
    off = Drains(Source({"node2": NHC}), swap=False)
    off.step(frozenset({"node2"}), T, "c1", lambda: (1, "node1"))
    assert not off.step(frozenset({"node2"}), T + timedelta(minutes=5), "c2", lambda: (1, "node1")).swap


def _seg(**kw: object) -> SegmentRecord:
    return SegmentRecord.model_validate({"index": 1, "job_name": "r.seg0001", "nodes": ["node1", "node2"], **kw})


def test_a_failure_naming_nobody_beside_a_drained_node_names_it() -> None:
    nobody = Verdict(cause=Cause.NCCL_TIMEOUT, confidence=0.5, summary="only cascade errors")
    v = drained_culprit(nobody, _seg(drained={"node2": NHC}))
    assert v.culprit_nodes == ("node2",) and v.blame and v.rule == "drained_in_slurm" and NHC in v.summary
    job = Verdict(cause=Cause.USER_BUG, confidence=0.9)
    assert drained_culprit(job, _seg(drained={"node2": NHC})) == job  # the job's own bug stays the job's
    assert drained_culprit(nobody, _seg(drained={"node9": NHC})) == nobody  # not a node of the step


def test_an_admin_drains_a_running_node_it_is_named_and_swapped_for_the_spare(tmp_path: Path) -> None:
    ctl, cluster, clock = make(tmp_path)
    state = run_until(ctl, ctl.load_or_init(), 12)
    assert state.current is not None and state.current.nodes == ["node1", "node2"]
    cluster.admin_drained.add("node2")
    cluster.drain_reasons["node2"] = NHC
    state = run_until(ctl, state, 12 + int(DRAIN_EVERY_S) + 1)  # sinfo is asked at most every DRAIN_EVERY_S
    assert state.segments[0].drained == {"node2": NHC}
    assert status_json(state, clock.now())["segments"][0]["drained"] == {"node2": NHC}
    prom = [s for fam in text_string_to_metric_families(generate_latest(registry(state, clock.now(), None)).decode())
            for s in fam.samples if s.name == "orchestrator_node_drained"]
    assert [(s.labels["node"], s.labels["reason"], s.value) for s in prom] == [("node2", NHC[:200], 1.0)]
    state = ctl.run()
    assert state.status == RunStatus.DONE
    s1, s2 = state.segments[:2]
    assert s1.cancel_reason == CancelReason.DRAINED and s1.cause == Cause.NODE_FAIL and s1.culprit_nodes == ["node2"]
    assert s1.rule == "drained_in_slurm" and s1.action == Action.RESUBMIT_EXCLUDE
    assert s2.job_id == s1.job_id and s2.nodes == ["node1", "node3"], s2  # the spare, in the same job
    assert s2.start_iteration > 30  # from the checkpoint written after the drain was seen: no work lost
    events = [json.loads(line) for line in (ctl.s.run_dir / "events.jsonl").read_text().splitlines()]
    drained = [e for e in events if e["event"] == "node_drained"]
    assert [(e["node"], e["reason"]) for e in drained] == [("node2", NHC)], drained
    listed = next(e for e in events if e["event"] == "node_blacklisted" and e["node"] == "node2")
    assert listed["drain_reason"].startswith("[node_problem] orchestrator ") and "node_fail" in listed["drain_reason"]


def test_with_the_setting_off_the_drained_node_is_only_named(tmp_path: Path) -> None:
    ctl, cluster, _ = make(tmp_path, watch={"swap_drained": False})
    state = run_until(ctl, ctl.load_or_init(), 12)
    cluster.admin_drained.add("node2")
    state = ctl.run()
    assert state.status == RunStatus.DONE and len(state.segments) == 1 and state.segments[0].drained == {
        "node2": "drained"}
