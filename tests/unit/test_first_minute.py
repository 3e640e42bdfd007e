"""The cadence from the first minute (issue 39): a hang 10 s into a segment's progress is named as fast
as one later, from a seed (the previous segment's cadence, or the step time the training prints);
a slow first step is no hang; a new segment's detector starts bare but for the seed. Fake clock."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest

from orchestrator.contract import DumpRecord, ProcessDump
from orchestrator.diagnose.classify import classify
from orchestrator.diagnose.linear import progress_pattern
from orchestrator.diagnose.verdicts import Context
from orchestrator.loop.supervise import CADENCE_MULTIPLE, EARLY_FLOOR_S, Seen, Supervision, supervise
from orchestrator.loop.vigil import REACH_EVERY_S, Vigil, prior_cadence
from orchestrator.model import CancelReason, Cause, JobState, JobStatus, Owner
from orchestrator.settings import PROGRESS_REGEX, Watch
from orchestrator.state import RunState, SegmentRecord
from orchestrator.watch.steptime import line_period_s, printed_step_s
from orchestrator.watch.stuck import SILENT_AFTER_S
from tests.unit.test_classify import node as scanned

T0 = datetime(2026, 1, 1, tzinfo=UTC)
POLL = 5.0
W = Watch(poll_interval_s=POLL, stall_timeout_s=1200, startup_timeout_s=3600, read_timeout_s=2)
PROGRESS = progress_pattern(PROGRESS_REGEX, PROGRESS_REGEX)
ALLREDUCE = "all_reduce (torch/distributed/distributed_c10d.py)"
COMPILING = "compile_fx_inner (torch/_inductor/compile_fx.py)"
# what the bound allows: the early limit (4x a cadence of one poll, never under the floor), the
# poll that sees it, and the poll after the dumps came in
BOUND_S = max(EARLY_FLOOR_S, CADENCE_MULTIPLE * POLL) + 2 * POLL


def at(s: float) -> datetime:
    return T0 + timedelta(seconds=s)


@dataclass
class Node:
    """A node as the vigil and the confirmation read it: its log's last lines and its dump."""
    tail: deque[tuple[int, str]] = field(default_factory=lambda: deque(maxlen=40))
    dump: DumpRecord | None = None
    exit_record: None = None
    losses: None = None  # no loss printed
    heartbeat_seen_at: datetime | None = None

    @property
    def scan(self) -> SimpleNamespace:
        return SimpleNamespace(tail=self.tail, progress=PROGRESS)


def megatron(it: int, ms: float) -> str:
    return (f" [2025-04-13 23:41:12] iteration {it:8d}/    1000 | consumed samples: {16 * it:12d} | "
            f"elapsed time per iteration (ms): {ms:.1f} | learning rate: 1.0E-04 | global batch size:    16 |")


def run(vigil: Vigil, *, step_s: float, first_step_s: float, hang_after_s: float | None,
        line: str = "", until: float = 400.0, silent: bool = False,
        cancels: list[Supervision] | None = None) -> tuple[float | None, float]:
    """Polls every POLL s; progress from t=0 (the first line), the next after `first_step_s`, then one
    per `step_s`; node2 freezes (state D) `hang_after_s` into progress, or (`silent`) its agent falls
    silent with it. The cancel's time (None: none by `until`) and the onset."""
    nodes = {n: Node() for n in ("node1", "node2", "node3")}
    watch = SimpleNamespace(nodes=nodes, dumps_requested_at=None, max_iteration=lambda: None)
    onset = hang_after_s if hang_after_s is not None else float("inf")
    times = [0.0] + [first_step_s + i * step_s for i in range(int(until / step_s) + 1)]
    t = 0.0
    while t <= until:
        shown = [x for x in times if x <= min(t, onset)]
        for node in nodes.values():
            node.tail.clear()
            for j in range(max(0, len(shown) - 3), len(shown)):
                node.tail.append((j, line.format(it=j + 1) if line else f"step: {j + 1}"))
        base = Seen(last_progress=at(shown[-1]), running_since=at(-60), nodes=frozenset(nodes),
                    dumps_requested_at=watch.dumps_requested_at,
                    dumps_in=frozenset(n for n, nw in nodes.items() if nw.dump is not None))
        sv = supervise(vigil.seen(watch, base, at(t)), at(t), W)  # type: ignore[arg-type]
        if sv.cancel:
            (cancels if cancels is not None else []).append(sv)
            return t, onset
        if sv.request_dumps:
            watch.dumps_requested_at = at(t)
            for n, nw in nodes.items():
                state = "D" if n == "node2" and t >= onset else "S"
                # the first step: node2's rank still compiles while the others wait in the all-reduce
                frame = COMPILING if n == "node2" and t < first_step_s else ALLREDUCE
                nw.dump = DumpRecord(node=n, processes=[ProcessDump(pid=1, state=state, top_frame=frame,
                                                                    top_frame_again=frame)])
                if silent and n == "node2" and t >= onset:
                    nw.dump, nw.heartbeat_seen_at = None, at(onset)
        if sv.clear_dumps:
            watch.dumps_requested_at = None
            for nw in nodes.values():
                nw.dump = None
        t += POLL
    return None, onset


def test_a_hang_10s_into_progress_is_named_within_the_bound_from_the_previous_segments_cadence(
        tmp_path: Path) -> None:
    vigil = Vigil(tmp_path, W, prior=5.1)
    named, onset = run(vigil, step_s=1.0, first_step_s=1.0, hang_after_s=10.0)
    assert named is not None and named - onset <= BOUND_S, (named, onset)


def test_a_hang_10s_into_progress_is_named_within_the_bound_from_a_printed_step_time(tmp_path: Path) -> None:
    vigil = Vigil(tmp_path, W)  # no previous segment: Megatron's printed step time seeds the cadence
    named, onset = run(vigil, step_s=1.0, first_step_s=1.0, hang_after_s=10.0,
                       line=megatron(0, 1000.0).replace("       0/", "{it:8d}/"))
    assert named is not None and named - onset <= BOUND_S, (named, onset)
    assert vigil.cadence.value() == POLL  # 1 s per line, one sighting per poll at best


def test_without_a_seed_the_hang_waits_for_six_gaps(tmp_path: Path) -> None:
    named, onset = run(Vigil(tmp_path, W), step_s=1.0, first_step_s=1.0, hang_after_s=10.0)
    assert named is None or named - onset > BOUND_S  # the floor this change lifts


class Scheduler:
    """The backend as the vigil asks it about silent nodes: the nodes it cannot reach, its ping
    window, and the nodes it was asked about."""

    def __init__(self, down: frozenset[str] | None, window_s: float = 0.0) -> None:
        self.down, self.window_s = down, window_s
        self.asked: list[frozenset[str]] = []

    def unreachable(self, nodes: frozenset[str]) -> frozenset[str] | None:
        self.asked.append(nodes)
        return None if self.down is None else self.down & nodes

    def ping_window_s(self) -> float:
        return self.window_s

    def drained_reasons(self, nodes: frozenset[str]) -> dict[str, str] | None:
        return None if self.down is None else {}


def silent_run(tmp_path: Path, sched: Scheduler) -> tuple[float | None, float, Supervision | None]:
    cancels: list[Supervision] = []
    named, onset = run(Vigil(tmp_path, W, prior=5.1, reach=sched), step_s=1.0, first_step_s=1.0,
                       hang_after_s=10.0, silent=True, cancels=cancels)
    return named, onset, (cancels[0] if cancels else None)


SILENT_BOUND_S = BOUND_S + SILENT_AFTER_S + POLL  # the early bound, and 12 s for an agent to answer


def test_a_silent_node_the_scheduler_cannot_reach_is_a_node_failure(tmp_path: Path) -> None:
    """A crashed node: its agent is silent and slurmctld cannot reach it either (alloc*, down*): the
    job is cancelled as a node failure (the verdict node_fail, not hang), as fast as a hang; the
    scheduler is asked only about the silent node."""
    sched = Scheduler(frozenset({"node2"}), window_s=23.0)
    named, onset, sv = silent_run(tmp_path, sched)
    assert named is not None and named - onset <= SILENT_BOUND_S, (named, onset)
    assert sv is not None and sv.reason == CancelReason.NODE_DOWN and "node2" in sv.cancel
    assert set(sched.asked) == {frozenset({"node2"})}


@pytest.mark.parametrize("down", [frozenset(), frozenset({"node3"})])
def test_a_silent_node_the_scheduler_still_reaches_is_a_hang_once_its_ping_window_passed(
        tmp_path: Path, down: frozenset[str]) -> None:
    """Its processes frozen, slurmd alive: a late heartbeat alone is no verdict until slurmctld had
    its chance to ping the node (the window); then the silence confirms the hang. The scheduler is
    asked at most once per REACH_EVERY_S, and once more when the window ends."""
    sched = Scheduler(down, window_s=90.0)
    named, onset, sv = silent_run(tmp_path, sched)
    assert named is not None and 90.0 <= named - onset <= 90.0 + SILENT_BOUND_S, (named, onset)
    assert sv is not None and sv.reason == CancelReason.STALL
    assert len(sched.asked) <= (named - onset) / REACH_EVERY_S + 2


def test_an_unknown_answer_never_means_down_nor_holds_the_verdict(tmp_path: Path) -> None:
    """sinfo did not answer: unknown is neither "down" nor "up": the silence confirms the hang."""
    named, onset, sv = silent_run(tmp_path, Scheduler(None, window_s=90.0))
    assert named is not None and named - onset <= SILENT_BOUND_S, (named, onset)
    assert sv is not None and sv.reason == CancelReason.STALL


@pytest.mark.parametrize("prior", [None, 1.0])
def test_a_60s_first_step_with_a_1s_printed_step_time_is_no_hang(tmp_path: Path, prior: float | None) -> None:
    vigil = Vigil(tmp_path, W, prior=prior)
    named, _ = run(vigil, step_s=1.0, first_step_s=60.0, hang_after_s=None, until=200.0,
                   line="{it}/500 [00:10<04:01,  1.00it/s]".replace("{it}", "| {it}"))
    assert named is None
    assert vigil.cadence.value() == POLL  # the first step is not the rhythm


def test_the_seed_is_a_prior_the_gaps_seen_correct_upward(tmp_path: Path) -> None:
    vigil = Vigil(tmp_path, W, prior=5.0)
    for s in (0, 5, 35, 65):  # the first gap is the first step; then two 30 s gaps
        vigil.cadence.see(at(s))
    assert vigil.cadence.value() == 30.0
    for i in range(1, 30):
        vigil.cadence.see(at(65 + 5 * i))
    assert vigil.cadence.value() == 30.0  # learned: the observed 95th percentile


def test_the_seed_is_the_newest_earlier_segments_cadence_and_a_new_detector_starts_bare(tmp_path: Path) -> None:
    segs = [SegmentRecord(index=1, job_name="a", step_cadence_s=5.2), SegmentRecord(index=2, job_name="b"),
            SegmentRecord(index=3, job_name="c", step_cadence_s=9.0)]
    state = RunState(run="r", created_at=T0, updated_at=T0, segments=segs)
    assert prior_cadence(state, segs[1]) == 5.2
    assert prior_cadence(state, segs[2]) == 5.2  # its own cadence is not its seed
    assert prior_cadence(RunState(run="r", created_at=T0, updated_at=T0, segments=segs[1:2]), segs[1]) is None
    old = Vigil(tmp_path, W, prior=5.2)
    old.cadence.see(at(0))
    fresh = Vigil(tmp_path, W, prior=prior_cadence(state, segs[2]))  # the next segment, a spare swap
    assert not fresh.cadence.first_step and fresh.cadence.value() == 5.2  # no last progress carried


MEGATRON_LINES = [  # Megatron-LM core (2025) and Megatron-DeepSpeed (BigScience) formats
    (megatron(10, 1147.6), 1.1476),
    ("iteration      199/  317892 | consumed samples:       152832 | consumed tokens:    625999872 | "
     "elapsed time per iteration (ms): 14287.5 | learning rate: 2.407E-04 | global batch size:   768 |", 14.2875),
]
TQDM_LINES = [  # HF Trainer / accelerate, a slow HF step, Lightning's bar (its last redraw)
    ("  4%|▍         | 20/500 [00:10<04:01,  1.99it/s]", 1 / 1.99),
    (" 12%|█▏        | 3/25 [01:07<3:42:17, 26.77s/it]", 26.77),
    ("Epoch 0:  44%|████▍     | 44/100 [00:10<00:12,  4.40it/s, v_num=0]\r"
     "Epoch 0:  45%|████▌     | 45/100 [00:10<00:12,  4.42it/s, v_num=0, loss=1.23]", 1 / 4.42),
]
PIPE_LINES = [  # DeepSpeed's pipeline engine, two releases
    ("steps: 10 loss: 0.5123 iter time (s): 0.512 samples/sec: 31.250", 0.512),
    ("step:    20 /   100 loss: 2.1000 iter time (s): 1.250 samples/sec: 12.800 eta: 0:01:40 ", 1.25),
]


@pytest.mark.parametrize(("line", "seconds"), MEGATRON_LINES + TQDM_LINES + PIPE_LINES)
def test_the_real_printed_step_times_are_read(line: str, seconds: float) -> None:
    assert printed_step_s(line) == pytest.approx(seconds)


def test_no_step_time_is_read_where_none_is_printed() -> None:
    for line in ("  0%|          | 0/500 [00:00<?, ?it/s]", "loss 0.5 lr 1e-4", "step 7 took 0 ms"):
        assert printed_step_s(line) is None


def test_the_period_of_progress_lines_counts_the_iterations_between_them() -> None:
    tail = [(1, megatron(10, 1147.6)), (2, "some other line"), (3, megatron(20, 1200.0))]
    assert line_period_s(tail, PROGRESS) == pytest.approx(12.0)  # 10 iterations of 1.2 s per line


@pytest.mark.parametrize(("first", "second", "seconds"), [
    ("[rank0]:[titan] 2025-06-04 08:51:48,074 - root - INFO - step:  1  loss: 12.2254  memory: 27.34GiB(28.78%)"
     "  tps: 375  tflops: 21.73  mfu: 2.20%",
     "[rank0]:[titan] 2025-06-04 08:51:58,557 - root - INFO - step: 10  loss: 10.7069  memory: 30.99GiB(32.62%)"
     "  tps: 7,021  tflops: 406.5  mfu: 41.10%", 10.483),
    ("[2023-12-29 13:02:49,654] [INFO] [timer.py:260:stop] epoch=0/micro_step=10/global_step=10, "
     "RunningAvgSamplesPerSec=110.8, CurrSamplesPerSec=111.3, MemAllocated=1.87GB, MaxMemAllocated=6.12GB",
     "[2023-12-29 13:02:51,115] [INFO] [timer.py:260:stop] epoch=0/micro_step=20/global_step=20, "
     "RunningAvgSamplesPerSec=111.0, CurrSamplesPerSec=110.9, MemAllocated=1.87GB, MaxMemAllocated=6.12GB", 1.461),
])
def test_lines_without_a_step_time_give_the_time_between_them(first: str, second: str, seconds: float) -> None:
    assert line_period_s([(1, first), (2, second)], PROGRESS) == pytest.approx(seconds)
    assert line_period_s([(1, first)], PROGRESS) is None  # one line: no period


def test_a_node_down_cancel_is_judged_node_fail_on_the_silent_node_and_a_frozen_one_a_hang() -> None:
    """The verdict of the two cancels of a silent node: slurmctld could not reach it (node_fail,
    excluded as such), or it could (hang). A hardware error the node printed first outranks both."""
    silent = "the agent did not answer the stack-dump request; its heartbeat stopped at 2026-01-01T00:00:10"
    nodes = [scanned("node1", [" iteration       10/     100 | lm loss: 1.0"]),
             replace(scanned("node2", [" iteration       10/     100 | lm loss: 1.0"]), stuck_detail=silent)]
    job = JobStatus(state=JobState.CANCELLED, nodes=("node1", "node2"))
    v = classify(job, nodes, Context(cancel_reason=CancelReason.NODE_DOWN, stalled=False))
    assert (v.cause, v.culprit_nodes, v.owner, v.rule) == (Cause.NODE_FAIL, ("node2",), Owner.NODE, "node_unreachable")
    v = classify(job, nodes, Context(cancel_reason=CancelReason.STALL, stalled=True))
    assert (v.cause, v.culprit_nodes) == (Cause.HANG, ("node2",))
    xid = scanned("node2", ["NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the "
                         "bus."])
    xid = replace(xid, stuck_detail=silent)
    v = classify(job, [nodes[0], xid], Context(cancel_reason=CancelReason.NODE_DOWN))
    assert v.cause == Cause.GPU_LOST and v.culprit_nodes == ("node2",)
