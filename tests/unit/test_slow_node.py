"""The slow node: named from where each rank spends its time (real py-spy profiles of the torch job), nobody
named when the profiles are incomplete or do not single one out, swapped for a spare only when the time saved
exceeds a restart, else struck; the ledger, status, events and the verdict of a swap (issue 25)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest

from orchestrator.agent.profile import count, rank_counts
from orchestrator.contract import DumpRecord, ExitRecord, ProcessDump, SegmentPaths, write_record
from orchestrator.diagnose.classify import classify
from orchestrator.diagnose.verdicts import Context
from orchestrator.loop import observations as o
from orchestrator.loop.advance import advance
from orchestrator.loop.effects import Alert
from orchestrator.loop.vigil import SwapTerms, Vigil
from orchestrator.model import CancelReason, Cause, JobRef, JobState, JobStatus, Owner
from orchestrator.settings import Watch
from orchestrator.spares import swap_gain_s, worth_swapping
from orchestrator.watch.slownode import ANSWER_WAIT_S, Profiles, localize
from tests.unit import test_controller_fake as plain
from tests.unit.test_classify import node

DATA = Path(__file__).parent.parent / "data" / "pyspy"
T0 = datetime(2026, 1, 1, tzinfo=UTC)
NODES = frozenset({"node1", "node2", "node3"})


def at(s: float) -> datetime:
    return T0 + timedelta(seconds=s)


def profile(node: str, *ranks: tuple[int, int], request: str = "r") -> DumpRecord:
    return DumpRecord(node=node, request=request,
                      processes=[ProcessDump(pid=100 + i, state="S", samples=s, waiting=w)
                                 for i, (s, w) in enumerate(ranks)])


def test_real_profiles_count_the_main_threads_waiting_samples_and_leave_the_launcher_out() -> None:
    healthy, slow, launcher = (count((DATA / f).read_text()) for f in (
        "record-ddp-healthy-rank.txt", "record-ddp-slow-rank.txt", "record-torchrun-launcher.txt"))
    assert healthy[0] == slow[0] == 149 and not healthy[2] and not slow[2]
    assert healthy[1] > 2 * slow[1] > 0  # the healthy rank waits for the slow one inside backward
    assert launcher[1] == 0 and launcher[2]  # torchrun's agent: no rank, whatever it waits in
    other_thread = "thread (77): pin_memory;<module> (t.py:1);all_reduce (torch/distributed/distributed_c10d.py:9) 500"
    assert count((DATA / "record-ddp-slow-rank.txt").read_text() + other_thread + "\n")[:2] == slow[:2]


def test_launchers_and_workers_are_no_ranks_but_a_rank_wrapped_in_record_or_accelerate_is() -> None:
    worker = count((DATA / "record-dataloader-worker.txt").read_text())  # real: a DataLoader worker
    assert worker[0] > 0 and worker[1] == 0  # never in a collective: left out (profile_processes needs waiting)
    # the frame names of the real torchrun capture and of torch's @record wrapper around a rank's main()
    record = ("thread (7): MainThread;<module> (train.py:9);record.<locals>.wrap.<locals>.wrapper "
              "(torch/distributed/elastic/multiprocessing/errors/__init__.py:367);main (train.py:5);Tensor.backward "
              "(torch/_tensor.py:623);backward (torch/autograd/__init__.py:395);_engine_run_backward "
              "(torch/autograd/graph.py:979) 40\n")
    accelerate = ("thread (7): MainThread;<module> (train.py:9);main (train.py:5);Accelerator.backward "
                  "(accelerate/accelerator.py:2000);backward (torch/autograd/__init__.py:395) 40\n")
    assert count(record) == (40, 40, False) and count(accelerate) == (40, 40, False)
    loader = ("thread (9): MainThread;<module> (<string>:1);spawn_main (multiprocessing/spawn.py:122);_main "
              "(multiprocessing/spawn.py:135);_bootstrap (multiprocessing/process.py:314);run "
              "(multiprocessing/process.py:108);_worker_loop (torch/utils/data/_utils/worker.py:300);get "
              "(multiprocessing/queues.py:113);_recv_bytes (multiprocessing/connection.py:430) 200\n")
    assert count(loader)[2]  # a spawned worker waiting on its queue ("recv") is still no rank


def test_a_much_slowed_rank_that_never_waited_in_the_profile_is_still_a_rank() -> None:
    """CI, 2026-12-02: the 6x slowed rank waited in no collective in its 5 s profile (its peers waited for it),
    was left out as no rank, and nobody was named."""
    real = (DATA / "record-ddp-slow-rank.txt").read_text().splitlines()
    never_waited = "\n".join(r for r in real if "_engine_run_backward" not in r and "distributed_c10d" not in r)
    got = rank_counts(never_waited)
    assert got is not None and got[0] > 0 and got[1] == 0  # forward and backward are torch's: a rank
    assert rank_counts((DATA / "record-dataloader-worker.txt").read_text()) is None
    assert rank_counts((DATA / "record-torchrun-launcher.txt").read_text()) is None
    assert rank_counts("thread (5): MainThread;<module> (tools/log_shipper.py:40);sleep (time) 250") is None


def test_the_node_whose_ranks_wait_least_is_named_from_the_real_profiles() -> None:
    healthy, slow = (count((DATA / f).read_text()) for f in ("record-ddp-healthy-rank.txt", "record-ddp-slow-rank.txt"))
    recs = {"node1": profile("node1", healthy[:2], healthy[:2]), "node2": profile("node2", healthy[:2], slow[:2]),
            "node3": profile("node3", healthy[:2])}
    found = localize(recs, NODES)
    assert found.node == "node2" and found.share < found.others
    assert "node2's ranks wait 7% of the time in collectives" in found.evidence  # its slowest rank counts


@pytest.mark.parametrize(("shares", "why"), [
    ({"node1": 0.30, "node2": 0.28, "node3": 0.31}, "no node stands apart"),
    ({"node1": 0.05, "node2": 0.06, "node3": 0.40}, "both wait little"),
    ({"node1": 0.04, "node2": 0.30}, ""),  # two nodes: the one that waits least
])
def test_nobody_is_named_unless_one_node_stands_apart(shares: dict[str, float], why: str) -> None:
    recs = {n: profile(n, (200, round(200 * s))) for n, s in shares.items()}
    found = localize(recs, frozenset(shares))
    assert (found.node == "") == bool(why) and why in found.evidence
    if not why:
        assert found.node == "node1"


def test_a_node_without_a_profile_or_with_too_few_samples_means_nobody_is_named() -> None:
    recs = {"node1": profile("node1", (200, 60)), "node2": profile("node2", (200, 5))}
    assert localize(recs, NODES).node == "" and "no profile from node3" in localize(recs, NODES).evidence
    recs["node3"] = profile("node3", (20, 0))  # py-spy caught it for a moment only
    assert localize(recs, NODES).node == ""


def test_profiles_are_asked_for_and_judged_once_every_node_answered_or_the_wait_ran_out(tmp_path: Path) -> None:
    paths = SegmentPaths(tmp_path)
    paths.nodes.mkdir()
    pr = Profiles(tmp_path, 2.0)
    assert pr.verdict(NODES, at(0)) is None  # nothing asked
    pr.request(at(0))
    rid = paths.profile_request.read_text().strip()
    write_record(paths.profile("node1"), profile("node1", (200, 60), request=rid))
    write_record(paths.profile("node2"), profile("node2", (200, 4), request=rid))
    write_record(paths.profile("node3"), profile("node3", (200, 60), request="an older request"))
    assert pr.verdict(NODES, at(5)) is None  # node3's answer is not to this request: wait
    late = pr.verdict(NODES, at(ANSWER_WAIT_S))
    assert late is not None and late.node == "" and "node3" in late.evidence
    assert pr.verdict(NODES, at(ANSWER_WAIT_S + 1)) is None  # a verdict closes the request
    pr.request(at(100))
    rid = paths.profile_request.read_text().strip()
    for n, w in (("node1", 60), ("node2", 4), ("node3", 58)):
        write_record(paths.profile(n), profile(n, (200, w), request=rid))
    found = pr.verdict(NODES, at(101))
    assert found is not None and found.node == "node2"


def test_a_swap_is_worth_it_only_when_the_time_saved_exceeds_the_restart() -> None:
    assert swap_gain_s(1.25, 3600) == pytest.approx(720)
    assert swap_gain_s(1.0, 3600) == 0 and swap_gain_s(0.9, 3600) == 0
    assert worth_swapping(4.0, 600, 300) and not worth_swapping(1.25, 600, 300)
    assert not worth_swapping(1.25, 3600, 720) and worth_swapping(1.25, 3600, 719)


def test_no_swap_while_the_job_is_cancelled_for_another_reason(tmp_path: Path) -> None:
    vigil, watch = slowed_vigil(tmp_path)
    terms = SwapTerms(spares=1, remaining_s=3000, startup_s=60)
    vigil.slow(watch, at(160), "c1", lambda: terms)  # type: ignore[arg-type]
    answer(tmp_path, {"node1": 100, "node2": 95, "node3": 3})
    step = vigil.slow(watch, at(170), "c1", lambda: terms)  # type: ignore[arg-type]
    assert step.swap and step.unless("") is step
    other = step.unless("hang: no progress for 25s")
    found = other.observations[-1]
    assert not other.swap and isinstance(found, o.SlowNodeFound) and not found.swap  # struck instead


def slowed_vigil(tmp_path: Path) -> tuple[Vigil, SimpleNamespace]:
    """A vigil whose pace fell 4x at t=100 (one node slower), and a watch of three live nodes."""
    (tmp_path / "nodes").mkdir(exist_ok=True)
    vigil = Vigil(tmp_path / "ckpt", Watch(pace_window_s=20, read_timeout_s=2), tmp_path)
    t, it = 0.0, 0
    while t < 100:
        t, it = t + 5, it + 50
        vigil.pace.see(at(t), it)
    while t < 160:
        t, it = t + 5, it + 12
        vigil.pace.see(at(t), it)
    live = SimpleNamespace(exit_record=None, losses=None)
    done = SimpleNamespace(exit_record=ExitRecord(node="node4", exit_code=0), losses=None)
    return vigil, SimpleNamespace(nodes={"node1": live, "node2": live, "node3": live, "node4": done})


def answer(tmp_path: Path, waits: dict[str, int]) -> None:
    rid = SegmentPaths(tmp_path).profile_request.read_text().strip()
    for n, w in waits.items():
        write_record(SegmentPaths(tmp_path).profile(n), profile(n, (250, w), request=rid))


@pytest.mark.parametrize(("terms", "swapped"), [
    (SwapTerms(spares=1, remaining_s=3000, startup_s=60), True),
    (SwapTerms(spares=0, remaining_s=3000, startup_s=60), False),  # no spare: a strike
    (SwapTerms(spares=1, remaining_s=3000, iterations_left=20, startup_s=60), False),  # near the goal
    (SwapTerms(spares=1, remaining_s=60, startup_s=60), False),  # the time limit is near
    # a start-up measured as nothing (the controller saw the job run late) still costs MIN_STARTUP_S
    (SwapTerms(spares=1, remaining_s=40, startup_s=0), False),
    # the batch host runs the step's supervisor: no restart inside the job without it (a new job would follow)
    (SwapTerms(spares=1, remaining_s=3000, startup_s=60, batch_host="node3"), False),
])
def test_the_vigil_asks_for_profiles_names_the_node_and_swaps_only_when_it_pays(
        tmp_path: Path, terms: SwapTerms, swapped: bool) -> None:
    vigil, watch = slowed_vigil(tmp_path)
    first = vigil.slow(watch, at(160), "c1", lambda: terms)  # type: ignore[arg-type]
    assert [type(x) for x in first.observations] == [o.SlowedDown] and not first.swap
    assert first.notes[0].startswith("the job runs 4.")  # the line bench_hang and people read
    assert SegmentPaths(tmp_path).profile_request.is_file()
    assert vigil.slow(watch, at(165), "c1", lambda: terms).observations == ()  # type: ignore[arg-type]  # answers still out
    answer(tmp_path, {"node1": 100, "node2": 95, "node3": 3})  # node4 exited: not waited for
    step = vigil.slow(watch, at(170), "c1", lambda: terms)  # type: ignore[arg-type]
    found = step.observations[-1]
    assert isinstance(found, o.SlowNodeFound) and found.node == "node3" and found.swap is swapped
    assert bool(step.swap) is swapped and "a swap saves" in found.evidence and "node3" in step.notes[-1]


def test_a_slow_node_is_struck_without_a_swap_and_recorded_for_status_events_and_the_verdict(tmp_path: Path) -> None:
    from orchestrator.loop.events import events
    from orchestrator.loop.submission import prepare
    from orchestrator.views.status import status_json

    ctl, cluster, clock = plain.make(tmp_path)
    state = ctl.load_or_init()
    prepared = prepare(ctl.s, state, cluster, clock.now(), "python")
    for obs in (o.Planned(prepared.spec, "fake", prepared.blacklist),
                o.Submitted(JobRef(job_id="7", submitted_at=clock.now(), backend="fake"))):
        state = advance(state, obs, ctl.s, clock.now()).ledger
    struck = advance(state, o.SlowNodeFound("node2", 4.0, clock.now(), "node2's ranks wait 2%", False), ctl.s,
                     clock.now())
    entry = struck.ledger.blacklist.get("node2")
    assert entry is not None and entry.strikes == 1 and entry.cause == Cause.SLOW_NODE
    assert isinstance(struck.effects[0], Alert) and "node2 slows the job" in struck.effects[0].title
    sj = status_json(struck.ledger, clock.now())
    assert [(s["node"], s["slowdown"], s["action"]) for s in sj["slow_nodes"]] == [("node2", 4.0, "struck")]
    assert [e[3]["node"] for e in events(struck.ledger, clock.now()) if e[1] == "slow_node"] == ["node2"]
    again = advance(struck.ledger, o.SlowNodeFound("node2", 6.0, clock.now(), "node2's ranks wait 1%", False), ctl.s,
                    clock.now())  # the slowdown grew by half: profiled again, the same segment
    entry = again.ledger.blacklist.get("node2")
    assert entry is not None and entry.strikes == 1  # one segment's evidence: one strike
    assert [e[0] for e in events(again.ledger, clock.now()) if e[1] == "slow_node"] == [
        "segment:1:slow_node:0:node2", "segment:1:slow_node:1:node2"]
    swapped = advance(state, o.SlowNodeFound("node2", 4.0, clock.now(), "node2's ranks wait 2%", True), ctl.s,
                      clock.now())
    assert swapped.ledger.blacklist.get("node2") is None  # the verdict of the cancelled step blames it
    cancelled = advance(swapped.ledger, o.Cancelling(CancelReason.SLOW_NODE, "slow node node2"), ctl.s,
                        clock.now())
    ended = advance(cancelled.ledger, o.Ended(JobStatus(state=JobState.CANCELLED, nodes=("node1", "node2")), (), (),
                                              ()), ctl.s, clock.now())
    seg = ended.ledger.segments[-1]
    assert seg.cause == Cause.SLOW_NODE and seg.culprit_nodes == ["node2"] and seg.rule == "slow_node"


def test_a_hardware_error_outranks_the_slow_node_in_the_verdict_of_a_swap() -> None:
    nodes = [node("node1", ["iteration 10"]),
             node("node2", ["NVRM: Xid (PCI:0000:3b:00): 48, pid=1234, name=python, An uncorrectable double bit error "
                            "(DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0."])]
    ctx = Context(cancel_reason=CancelReason.SLOW_NODE, slow_node="node2", slow_evidence="waits 2%")
    v = classify(JobStatus(state=JobState.CANCELLED, nodes=("node1", "node2")), nodes, ctx)
    assert v.cause == Cause.GPU_ECC
    v = classify(JobStatus(state=JobState.CANCELLED, nodes=("node1", "node2")), nodes[:1], ctx)
    assert (v.cause, v.culprit_nodes, v.owner) == (Cause.SLOW_NODE, ("node2",), Owner.NODE)


def ranks_code(compute_s: float, wait_s: float) -> str:
    return (f"import time\ndef all_reduce():\n    time.sleep({wait_s})\ndef compute():\n    t = time.monotonic()\n"
            f"    while time.monotonic() - t < {compute_s}:\n        pass\nprint('ready', flush=True)\nwhile True:\n"
            "    compute()\n    all_reduce()\n")


def test_the_agent_profiles_live_ranks_at_once_and_counts_their_waits_in_collectives() -> None:
    """Two real processes under py-spy: one waits three quarters of each step in `all_reduce`, one a quarter."""
    import subprocess
    import sys

    from orchestrator.agent.profile import profile_processes

    procs = [subprocess.Popen([sys.executable, "-c", ranks_code(c, w)], stdout=subprocess.PIPE, text=True)
             for c, w in ((0.01, 0.03), (0.03, 0.01))]
    try:
        for p in procs:
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        recs = {r.pid: r for r in profile_processes([p.pid for p in procs], duration_s=2)[0]}
    finally:
        for p in procs:
            p.kill()
            p.wait()
    waits, busy = (recs[p.pid] for p in procs)
    assert waits.samples >= 50 and busy.samples >= 50
    assert waits.waiting / waits.samples > 0.5 > busy.waiting / busy.samples > 0.1
