"""A hang cancelled at the run's own cadence once two stack samples confirm it; the fixed limit stays
the bound (no clock, no sleeps: times are arguments)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from orchestrator.agent import dump
from orchestrator.contract import DumpRecord, ExitRecord, ProcessDump
from orchestrator.diagnose.rules import COLLECTIVE
from orchestrator.loop.supervise import (
    DUMP_WAIT_S,
    EARLY_FLOOR_S,
    RESAMPLE_S,
    STALL_DUMP_WAIT_S,
    Seen,
    early_limit,
    supervise,
)
from orchestrator.model import CancelReason
from orchestrator.settings import Watch
from orchestrator.watch.cadence import Cadence, written_since
from orchestrator.watch.stuck import SILENT_AFTER_S, hang_confirmed
from tests.waiter import waiting_process

T0 = datetime(2026, 1, 1, tzinfo=UTC)
W = Watch(poll_interval_s=1, stall_timeout_s=1200, startup_timeout_s=3600, cascade_grace_s=5)
NODES = frozenset({"node1", "node2", "node3"})
ALLREDUCE = "all_reduce (torch/distributed/distributed_c10d.py)"


def at(s: float) -> datetime:
    return T0 + timedelta(seconds=s)


def quiet_since_0(**kw: object) -> Seen:
    base = Seen(last_progress=at(0), running_since=at(-600), nodes=NODES, cadence_s=2.0)
    return replace(base, **kw)  # type: ignore[arg-type]


def test_the_early_limit_follows_the_cadence_with_a_floor_and_under_the_fixed_limit() -> None:
    assert early_limit(quiet_since_0(), W) == EARLY_FLOOR_S  # 4 x 2 s is under the floor
    assert early_limit(quiet_since_0(cadence_s=30.0), W) == 120.0
    assert early_limit(quiet_since_0(cadence_s=400.0), W) is None  # the fixed limit is shorter
    assert early_limit(quiet_since_0(cadence_s=None), W) is None  # too few gaps yet
    assert early_limit(quiet_since_0(pausing=True), W) is None  # a checkpoint is being written


def test_stacks_asked_at_half_the_early_limit_and_a_confirmed_hang_cancelled_at_it() -> None:
    assert supervise(quiet_since_0(), at(9), W).request_dumps is False
    ask = supervise(quiet_since_0(), at(10), W)
    assert ask.request_dumps and not ask.cancel and "step cadence" in ask.note
    asked = quiet_since_0(dumps_requested_at=at(10), dumps_in=NODES)
    assert supervise(asked, at(19), W) == supervise(asked, at(12), W)  # waiting
    assert not supervise(asked, at(25), W).cancel  # the stacks show no hang: nothing cancelled
    hang = replace(asked, confirmed="node2: pid 7 stopped (state T, wchan=do_signal_stop)")
    assert not supervise(hang, at(19), W).cancel  # not before the early limit
    sv = supervise(hang, at(20), W)
    assert sv.reason == CancelReason.STALL and sv.cancel.startswith("hang: no progress for 20s")
    assert "node2" in sv.cancel


def test_stacks_that_show_no_hang_are_sampled_again_and_the_fixed_limit_still_cancels() -> None:
    asked = quiet_since_0(dumps_requested_at=at(10), dumps_in=NODES)
    assert not supervise(asked, at(10 + RESAMPLE_S - 1), W).request_dumps
    assert supervise(asked, at(10 + RESAMPLE_S), W).request_dumps
    late = quiet_since_0(dumps_requested_at=at(1190), dumps_in=NODES)
    assert supervise(late, at(1200), W).cancel.startswith("stall: no progress for 1200s")


def test_at_the_fixed_limit_dumps_still_out_are_waited_for_within_a_bound() -> None:
    """The CI failure of 2026-12-01: under load the stacks came in after the cancel and the hang was
    named without its culprit."""
    seen = Seen(last_progress=at(0), running_since=at(-60), nodes=NODES, dumps_requested_at=at(1195),
                dumps_in=frozenset({"node1"}))
    assert supervise(seen, at(1200), W).cancel == ""
    assert supervise(replace(seen, dumps_in=NODES), at(1200), W).cancel
    assert supervise(seen, at(1195 + STALL_DUMP_WAIT_S), W).cancel  # a frozen node never answers
    # an agent that still beats is at work on its stacks (py-spy under load): waited for, bounded
    busy = replace(seen, answering=frozenset({"node2"}))
    assert supervise(busy, at(1195 + STALL_DUMP_WAIT_S), W).cancel == ""
    assert supervise(busy, at(1195 + DUMP_WAIT_S), W).cancel
    jumped = supervise(Seen(last_progress=at(0), running_since=at(-60), nodes=NODES), at(1300), W)
    assert jumped.request_dumps and not jumped.cancel  # past the limit unasked: ask first


@dataclass
class Node:
    """A node's watch as the judgement reads it."""
    dump: DumpRecord | None = None
    exit_record: ExitRecord | None = None
    losses: None = None  # no loss printed
    heartbeat_seen_at: datetime | None = None


def waiting(node: str, frame: str = ALLREDUCE, again: str | None = None, state: str = "S") -> Node:
    p = ProcessDump(pid=100, state=state, top_frame=frame, top_frame_again=frame if again is None else again)
    return Node(dump=DumpRecord(node=node, processes=[p]), heartbeat_seen_at=at(11))


def test_a_rank_outside_the_collective_in_both_samples_confirms_the_hang() -> None:
    nodes = {"node1": waiting("node1"), "node2": waiting("node2", "main (train.py)"), "node3": waiting("node3")}
    said = hang_confirmed(nodes, at(10), at(12))
    assert said.startswith("node2 outside all_reduce") and "main (train.py)" in said
    moved = {**nodes, "node2": waiting("node2", "main (train.py)", again="forward (model.py)")}
    assert hang_confirmed(moved, at(10), at(12)) == ""  # it moved between the samples: working
    saving = {**nodes, "node2": waiting("node2", "save (torch/serialization.py)")}
    assert hang_confirmed(saving, at(10), at(12)) == ""  # rank 0 writing a checkpoint
    for frame in ("get (queue.py)", "_next_data (torch/utils/data/dataloader.py)", "read (fsspec/spec.py)"):
        slow_data = {**nodes, "node2": waiting("node2", frame)}
        assert hang_confirmed(slow_data, at(10), at(12)) == "", frame  # the fixed limit judges those
    same = {n: waiting(n, "evaluate (train.py)") for n in NODES}
    assert hang_confirmed(same, at(10), at(12)) == ""  # everyone in the same place: an eval


def test_a_stuck_stopped_or_silent_node_confirms_the_hang() -> None:
    base = {"node1": waiting("node1"), "node3": waiting("node3")}
    d_state = {**base, "node2": waiting("node2", "read (fuse.py)", state="D")}
    assert "state D" in hang_confirmed(d_state, at(10), at(12))
    stopped = {**base, "node2": waiting("node2", "", state="T")}
    assert hang_confirmed(stopped, at(10), at(12)).startswith("node2: pid 100 stopped (state T")
    silent = {**base, "node2": Node(heartbeat_seen_at=at(3))}
    assert hang_confirmed(silent, at(10), at(11)) == ""  # it may still answer
    assert "did not answer" in hang_confirmed(silent, at(10), at(10 + SILENT_AFTER_S))
    assert hang_confirmed(base | {"node2": waiting("node2")}, None, at(12)) == ""  # nothing asked
    everyone = {n: waiting(n, "", state="T") for n in NODES}
    assert hang_confirmed(everyone, at(10), at(12)) == ""  # all stopped: the job, not a node


def test_cadence_is_a_high_percentile_of_recent_gaps() -> None:
    c = Cadence(least=4)
    for s in (0, 2, 4, 6):
        c.see(at(s))
        c.see(at(s))  # the same sighting again closes no gap
    assert c.value() is None  # three gaps
    c.see(at(16))
    assert c.value() == 10.0
    for i in range(30):
        c.see(at(17 + 2 * i))
    assert c.value() == 2.0  # one slow gap in 35 is under the 95th percentile


def test_written_since_sees_a_file_growing_inside_the_newest_checkpoint(tmp_path: Path) -> None:
    old, new = tmp_path / "step_100", tmp_path / "step_200"
    for d in (old, new):
        d.mkdir()
        (d / "model.pt").write_bytes(b"x")
    past = at(0).timestamp()
    for p in (old, new, old / "model.pt", new / "model.pt"):
        os.utime(p, (past, past))
    os.utime(new, (past + 1, past + 1))
    assert not written_since(tmp_path, at(5), 5.0)
    os.utime(new / "model.pt", (past + 10, past + 10))  # the save writes into it
    assert written_since(tmp_path, at(5), 5.0)
    assert not written_since(tmp_path / "missing", at(5), 5.0)


def test_top_frame_prefers_the_main_thread_and_the_second_sample_is_taken() -> None:
    text = ('Thread 0x7F01 (idle): "pt_elastic"\n    _wait (threading.py:320)\n'
            'Thread 0x7F00 (idle): "MainThread"\n    all_reduce (torch/distributed/distributed_c10d.py:2501)\n')
    assert dump.top_frame(text) == ALLREDUCE
    with waiting_process() as child:
        deadline = time.monotonic() + 60
        while True:  # under load py-spy may time out: try again until a sample has the frame
            slept: list[float] = []
            recs = dump.dump_processes([child.pid], again_after_s=0.5, sleep=slept.append)
            if (recs and recs[0].top_frame and recs[0].top_frame_again) or time.monotonic() > deadline:
                break
        assert slept == [0.5]  # one pause between the two samples, through the injected sleep
        assert recs[0].top_frame == recs[0].top_frame_again == "wait_in_collective (<string>)", recs[0].stack


def test_real_ddp_gloo_stacks_confirm_the_rank_that_never_reached_the_all_reduce() -> None:
    """py-spy dumps of the real torch job (tests/data/pyspy): DDP ranks wait inside backward."""
    data = Path(__file__).parent.parent / "data" / "pyspy"
    wait, stuck = (dump.top_frame((data / f).read_text()) for f in ("ddp_gloo_waiting.txt", "ddp_gloo_stuck_rank.txt"))
    assert wait == "_engine_run_backward (torch/autograd/graph.py)" and stuck == "inject (scripts/torch_train.py)"
    nodes = {"node1": waiting("node1", wait), "node2": waiting("node2", stuck), "node3": waiting("node3", wait)}
    assert hang_confirmed(nodes, at(10), at(12)).startswith("node2 outside _engine_run_backward")


def test_pace_finds_a_slowdown_and_when_it_began() -> None:
    from orchestrator.watch.pace import Pace

    pace, it, t = Pace(window_s=20), 0, 0.0
    for _ in range(40):  # 10 it/s, polled every 5 s
        t, it = t + 5, it + 50
        pace.see(at(t), it)
    assert pace.slowdown() is None
    onset = t
    for _ in range(12):  # one node 25% slower: the lock-step job at 8 it/s
        t, it = t + 5, it + 40
        pace.see(at(t), it)
    sd = pace.slowdown()
    assert sd is not None and 1.2 <= sd.factor <= 1.3
    assert abs((sd.since - at(onset)).total_seconds()) <= 20  # within one window of the change
    assert sd.baseline_s == pytest.approx(0.1)


def test_pace_ignores_jitter_a_pause_that_resumes_and_a_restart() -> None:
    from orchestrator.watch.pace import Pace

    pace, it, t = Pace(window_s=20), 0, 0.0
    for i in range(60):
        t, it = t + 5, it + (45 if i % 3 == 0 else 52)  # +-8% jitter
        pace.see(at(t), it)
    assert pace.slowdown() is None
    t += 40  # a 40 s checkpoint save, then the same pace
    for _ in range(20):
        t, it = t + 5, it + 50
        pace.see(at(t), it)
    assert pace.slowdown() is None
    pace.see(at(t + 5), 10)  # a restart from an earlier checkpoint: a new first sighting, no negative rate
    pace.see(at(t + 30), 260)
    assert pace.slowdown() is None


def test_pace_drops_windows_with_an_eval_or_a_save_pause_as_in_the_healthy_bench_run() -> None:
    """bench_hang's healthy run (2026-12-02): a 45 s eval then a 30 s save in a row made two slow windows, a false
    '6.32x slower'. A window holding a gap of 3x the usual one is a pause, not the pace."""
    from orchestrator.watch.pace import Pace

    pace, it, t = Pace(window_s=20), 0, 0.0
    for cycle in range(6):
        for _ in range(12):
            t, it = t + 5, it + 50
            pace.see(at(t), it)
        t += 45  # every rank evaluates: no progress line
        pace.see(at(t), it + 1)
        it += 1
        t += 30  # rank 0 writes a checkpoint, the others wait in a barrier
        pace.see(at(t), it + 1)
        it += 1
        assert pace.slowdown() is None, cycle
    for _ in range(12):  # then a node really slows the job down 25%
        t, it = t + 5, it + 40
        pace.see(at(t), it)
    sd = pace.slowdown()
    assert sd is not None and 1.2 <= sd.factor <= 1.3


# where ranks of other stacks wait for a peer, as py-spy prints the innermost frame: a lock-step job synchronised
# through files (issue 39's independent cluster), JAX's blocking transfer (jax/_src/array.py `_value` under
# `block_until_ready`), mpi4py's `Barrier` and Horovod's `synchronize`
OTHER_WAITS = ["wait_for_peers (sync.py)", "_value (jax/_src/array.py)", "Barrier (mpi4py/MPI.pyx)",
               "synchronize (horovod/torch/mpi_ops.py)"]


@pytest.mark.parametrize("frame", OTHER_WAITS)
def test_one_node_outside_the_frame_every_other_rank_waits_in_confirms_it_whatever_the_frame(frame: str) -> None:
    """Issue 39: the confirmation expected torch's collective frames; a job of another stack waits elsewhere."""
    four = {"node1": waiting("node1", frame), "node2": waiting("node2", "step (train.py)"),
            "node3": waiting("node3", frame), "node4": waiting("node4", frame)}
    said = hang_confirmed(four, at(10), at(12))
    assert said.startswith(f"node2 outside {frame}") and "step (train.py)" in said
    # what must stay no verdict: two nodes (which one waits?), two nodes elsewhere, a waiter that moved, the odd
    # one saving or in its own data wait
    if not COLLECTIVE.search(frame):  # a known collective is a wait as it is, between two nodes, on a moving peer
        assert hang_confirmed({"node1": four["node1"], "node2": four["node2"]}, at(10), at(12)) == ""
        two_odd = {**four, "node3": waiting("node3", "step (train.py)")}
        assert hang_confirmed(two_odd, at(10), at(12)) == ""
        moving = {**four, "node4": waiting("node4", frame, again="forward (model.py)")}
        assert hang_confirmed(moving, at(10), at(12)) == ""
    for busy in ("save_checkpoint (train.py)", "get (queue.py)"):
        assert hang_confirmed({**four, "node2": waiting("node2", busy)}, at(10), at(12)) == "", busy
