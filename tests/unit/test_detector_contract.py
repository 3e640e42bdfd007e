"""The detectors' contract (issue 39, docs/CAUSES.md): randomised schedules of phases (steady progress, an eval
where every rank waits in the same frame, a save where rank 0 writes while the others wait in a barrier, quick
saves while progress goes on),
restarts, spare swaps, failed probes (a dump or profile that never comes while the agent beats), slow polls and
late heartbeats, driven through the hang watchdog (supervise + the vigil's confirmation) and the slow-node
survey on the fake clock of a healthy job: no verdict, ever. Hypothesis, derandomised (the same 1,000
schedules every run)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.contract import DumpRecord, ProcessDump
from orchestrator.loop import observations as o
from orchestrator.loop.supervise import Seen, supervise
from orchestrator.loop.vigil import SwapTerms, Vigil
from orchestrator.settings import Watch
from tests.unit.test_slow_start import Asker

T0 = datetime(2026, 1, 1, tzinfo=UTC)
POLL = 5.0
W = Watch(poll_interval_s=POLL, stall_timeout_s=1200, startup_timeout_s=3600, read_timeout_s=2,
          survey_every_s=30, survey_after_s=15)
BARRIER, BACKWARD = "barrier (torch/distributed/distributed_c10d.py)", "_engine_run_backward (torch/autograd/graph.py)"
EVAL, SAVE = "evaluate (train.py)", "_save (torch/serialization.py)"


@dataclass
class Reach:
    """The scheduler reaches every node (slurmd alive), within its ping window."""
    asked: list[frozenset[str]] = field(default_factory=list)

    def unreachable(self, nodes: frozenset[str]) -> frozenset[str] | None:
        self.asked.append(nodes)
        return frozenset()

    def ping_window_s(self) -> float:
        return 50.0

    def drained_reasons(self, nodes: frozenset[str]) -> dict[str, str] | None:
        return {}  # nobody drains a node of this healthy job


@dataclass
class Node:
    dump: DumpRecord | None = None
    exit_record: None = None
    losses: None = None  # no loss printed
    heartbeat_seen_at: datetime | None = None
    scan: SimpleNamespace = field(default_factory=lambda: SimpleNamespace(tail=[], progress=None))


def dump(frame: str) -> DumpRecord:
    return DumpRecord(node="n", processes=[ProcessDump(pid=9, state="S", top_frame=frame, top_frame_again=frame)])


EVENTS = st.one_of(
    st.tuples(st.just("steady"), st.integers(1, 6)), st.tuples(st.just("eval"), st.integers(1, 16)),
    st.tuples(st.just("save"), st.integers(1, 6)), st.tuples(st.just("quick_save"), st.integers(1, 6)),
    st.tuples(st.just("restart"), st.just(0)),
    st.tuples(st.just("swap"), st.just(0)), st.tuples(st.just("probe_fail"), st.integers(0, 3)),
    st.tuples(st.just("slow_poll"), st.integers(2, 4)), st.tuples(st.just("late_hb"), st.integers(0, 3)))


class Job:
    """A healthy 4-node job as the controller sees it, one poll at a time."""

    def __init__(self, seed: int) -> None:
        self.names = ["node1", "node2", "node3", "node4"]
        self.spare = 5
        self.t, self.it, self.last = 0.0, 0, T0
        self.rng = random.Random(seed)
        self.lost: set[str] = set()  # the next answers (dump, profile) of these nodes never come
        self.late: dict[str, float] = {}  # node -> its heartbeat is late until then
        self.verdicts: list[str] = []
        self.new_vigil()

    def new_vigil(self) -> None:
        self.asker = Asker({n: 0.30 for n in self.names}, rng=self.rng)
        self.vigil = Vigil(Path("/nonexistent"), W, reach=Reach(), asker=self.asker)
        self.nodes = {n: Node(heartbeat_seen_at=self.now) for n in self.names}
        self.asked: datetime | None = None

    @property
    def now(self) -> datetime:
        return T0 + timedelta(seconds=self.t)

    def poll(self, phase: str, dt: float = POLL) -> None:
        self.t += dt
        if phase in ("steady", "quick_save"):  # a quick save: progress goes on, rank 0 saves every step
            self.it, self.last = self.it + int(dt * 10), self.now
        self.asker.drop = frozenset(self.lost)
        saving = phase in ("save", "quick_save")
        self.asker.paused = frozenset({self.names[0]}) if saving else frozenset()
        if saving:  # rank 0 writes: it waits least, and its profile says it is saving
            self.asker.wait[self.names[0]] = 0.05
        else:
            self.asker.wait = {n: 0.30 for n in self.names}
        for n, nw in self.nodes.items():
            if self.late.get(n, 0.0) <= self.t:
                nw.heartbeat_seen_at = self.now
            if self.asked is not None and nw.dump is None and n not in self.lost:
                frame = BACKWARD if phase in ("steady", "quick_save") else EVAL if phase == "eval" else (
                    SAVE if n == self.names[0] else BARRIER)
                nw.dump = dump(frame)
        watch = SimpleNamespace(nodes=self.nodes, dumps_requested_at=self.asked, max_iteration=lambda: self.it)
        seen = self.vigil.seen(watch, Seen(  # type: ignore[arg-type]
            last_progress=self.last, running_since=T0, nodes=frozenset(self.nodes), dumps_requested_at=self.asked,
            dumps_in=frozenset(n for n, nw in self.nodes.items() if nw.dump is not None)), self.now)
        step = self.vigil.slow(watch, self.now, None, lambda: SwapTerms(spares=1, remaining_s=3600))  # type: ignore[arg-type]
        self.verdicts += [f"slow {ob.node}" for ob in step.observations if isinstance(ob, o.SlowNodeFound)]
        sv = supervise(seen, self.now, W)
        if sv.cancel:
            self.verdicts.append(f"cancel: {sv.cancel}")
        if sv.clear_dumps:
            self.asked = None
            for nw in self.nodes.values():
                nw.dump = None
        if sv.request_dumps:
            self.asked = self.now

    def event(self, kind: str, arg: int) -> None:
        if kind in ("steady", "eval", "save", "quick_save"):
            for _ in range(arg):
                self.poll(kind)
        elif kind == "restart":  # the step restarts from an earlier checkpoint, or a new segment
            self.it = max(0, self.it - 200)
            if self.rng.random() < 0.5:
                self.new_vigil()
        elif kind == "swap":  # a spare takes a node's place: a new step, a new vigil
            self.names[self.rng.randrange(4)] = f"node{self.spare}"
            self.spare += 1
            self.new_vigil()
        elif kind == "probe_fail":
            self.lost = {self.names[arg]}
        elif kind == "slow_poll":
            self.poll("steady", POLL * arg)
        elif kind == "late_hb":  # the agent is busy: a late heartbeat, under the scheduler's ping window
            self.late[self.names[arg]] = self.t + 40.0
        if kind != "probe_fail":
            self.lost = set()


@settings(max_examples=1000, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(st.lists(EVENTS, min_size=1, max_size=10), st.integers(0, 2**16))
def test_no_schedule_of_a_healthy_job_gives_a_verdict(schedule: list[tuple[str, int]], seed: int) -> None:
    job = Job(seed)
    for _ in range(4):  # the segment starts: progress, the cadence learned
        job.poll("steady")
    for kind, arg in schedule:
        job.event(kind, arg)
    for _ in range(10):  # and runs on steadily: every profile, dump and wait closes
        job.poll("steady")
    assert job.verdicts == [], (schedule, job.verdicts)


def test_the_same_driver_names_a_slow_node_and_a_stopped_rank() -> None:
    """The driver is no blind one: a node 4x slow from the start is named, and so is a stopped rank."""
    job = Job(1)
    for _ in range(30):
        job.asker.wait = {n: 0.01 if n == "node3" else 0.75 for n in job.names}
        job.vigil.survey._asker.wait = job.asker.wait  # type: ignore[union-attr]
        job.t += POLL
        job.it, job.last = job.it + 50, job.now
        watch = SimpleNamespace(nodes=job.nodes, dumps_requested_at=None, max_iteration=lambda: job.it)
        job.vigil.seen(watch, Seen(last_progress=job.last, running_since=T0, nodes=frozenset(job.nodes)), job.now)  # type: ignore[arg-type]
        step = job.vigil.slow(watch, job.now, None, lambda: SwapTerms())  # type: ignore[arg-type]
        job.verdicts += [ob.node for ob in step.observations if isinstance(ob, o.SlowNodeFound)]
    assert job.verdicts == ["node3"]
    job = Job(2)
    for _ in range(8):
        job.poll("steady")
    for _ in range(12):  # node2's rank stopped (state T): no progress, its dump says so
        job.poll("hang")
        if job.asked is not None and job.nodes["node2"].dump is not None:
            job.nodes["node2"].dump = DumpRecord(node="node2", processes=[ProcessDump(pid=9, state="T")])
    assert any("node2" in v and v.startswith("cancel") for v in job.verdicts)
