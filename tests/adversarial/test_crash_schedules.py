"""Crash points by enumeration (issue 21): every persistent side effect of the controller passes a named
failpoint (orchestrator/failpoints.py). Here the controller "dies" at those points, in-process on the fake
cluster (the cluster, like Slurm, outlives it), and a new controller takes over the same run directory:

- the enumeration kills it at the first, second, ... passage of every point, one point at a time;
- the randomized test runs ORCH_CRASH_SCHEDULES schedules (1,000 by default; fixed seeds, ORCH_CRASH_SEED
  shifts them) of several deaths each, with faults, spares and queued blacklist edits drawn at random.

After every death and at the end the invariants hold: never two live jobs for the run; a segment never
starts from iteration 0 while a complete checkpoint exists; no blacklist entry and no acknowledged edit is
lost; no recorded segment is lost; every job the cluster ran is in the ledger and none is left running;
no segment is submitted twice; the run finishes at its goal."""

from __future__ import annotations

import os
import random
import shutil
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from orchestrator import failpoints
from orchestrator.checkpoint import find_latest
from orchestrator.clock import FakeClock
from orchestrator.loop.controller import Controller
from orchestrator.model import JobRef, RunStatus, SegmentSpec
from orchestrator.requests import BlacklistAdd, write_request
from orchestrator.settings import Settings, load_settings, parse_overrides
from orchestrator.state import StateStore
from tests.conftest import base_config, write_config
from tests.fakes import FakeCluster, Fault

NODES = [f"node{i}" for i in range(1, 7)]
SCHEDULES = int(os.environ.get("ORCH_CRASH_SCHEDULES", "1000"))
SEED = int(os.environ.get("ORCH_CRASH_SEED", "0"))
BATCH = 50


class Killed(BaseException):
    """The controller process died here (kill -9): nothing below the failpoint runs, no handler sees it."""


class Deaths:
    """The failpoint hook: raises Killed at the chosen passages (by point and count, or by overall count)."""
    def __init__(self) -> None:
        self.point, self.at_count, self.at_hit = "", 0, 0
        self.hits = 0
        self.per_point: dict[str, int] = {}

    def __call__(self, name: str) -> None:
        self.hits += 1
        self.per_point[name] = self.per_point.get(name, 0) + 1
        if (name == self.point and self.per_point[name] == self.at_count) or self.hits == self.at_hit:
            self.point, self.at_hit = "", 0
            raise Killed(name)


@dataclass
class World:
    """One run: the settings, the cluster and clock that outlive every controller, and what was promised."""
    s: Settings
    cluster: FakeCluster
    clock: FakeClock
    queued: dict[Path, str] = field(default_factory=dict)  # request file -> node it blacklists
    recorded: set[str] = field(default_factory=set)  # job ids the ledger held after some death
    banned: set[str] = field(default_factory=set)  # nodes the saved blacklist held after some death
    problems: list[str] = field(default_factory=list)

    def queue_edit(self, node: str) -> None:
        self.queued[write_request(self.s.run_dir, BlacklistAdd(nodes=(node,), hours=1000))] = node


def world(tmp: Path, rng: random.Random) -> World:
    tmp.mkdir(parents=True, exist_ok=True)
    spares = rng.choice([0, 0, 1])
    cfg = base_config(tmp, resources={"nodes": 3, "spare_nodes": spares, "time_limit_min": 60},
                      watch={"poll_interval_s": 5, "stall_timeout_s": 30, "startup_timeout_s": 60,
                             "cascade_grace_s": 2}, goal={"target_iteration": 40})
    s = load_settings(write_config(tmp, cfg), parse_overrides([]))
    clock = FakeClock()
    kind = rng.choice(["ecc", "ecc", "hang", "segfault", "crash", "none"])
    node, at = rng.choice(NODES[:4]), rng.randint(5, 35)
    faults = {node: Fault(kind, at=at, sticky=kind != "hang")} if kind in ("ecc", "hang", "segfault") else {}
    cluster = FakeCluster(clock, list(NODES), 40, tmp / "ckpt", step_s=2.0, ckpt_every=10, faults=faults)
    w = World(s, cluster, clock)
    guard_submissions(w)
    crash_at = clock.now() + timedelta(seconds=rng.randint(10, 70)) if kind == "crash" else None
    edit_at = clock.now() + timedelta(seconds=rng.randint(1, 90)) if rng.random() < 0.5 else None
    extra = f"spare{rng.randint(1, 9)}"  # an operator's edit that arrives while a controller runs

    def on_advance(now: datetime) -> None:
        nonlocal crash_at, edit_at
        if crash_at and now >= crash_at:
            crash_at = None
            cluster.crash(node)
        if edit_at and now >= edit_at:
            edit_at = None
            w.queue_edit(extra)

    clock.on_advance.append(on_advance)
    return w


def guard_submissions(w: World) -> None:
    """Every submission: a new segment name, and iteration 0 only while no complete checkpoint exists."""
    submit = w.cluster.submit

    def checked(spec: SegmentSpec) -> JobRef:
        if spec.job_name in {x.job_name for x in w.cluster.submitted}:
            w.problems.append(f"{spec.job_name} submitted twice")
        if spec.start_iteration == 0 and find_latest(w.s.checkpoint) is not None:
            w.problems.append(f"segment {spec.index} starts from 0 beside {find_latest(w.s.checkpoint)}")
        return submit(spec)

    w.cluster.submit = checked  # type: ignore[method-assign]


def check(w: World, final: bool = False) -> None:
    """The invariants, read from what is on disk and what the cluster runs."""
    state = StateStore(w.s.run_dir).load()
    if state is None:  # killed before the first save: nothing may have happened yet
        assert not final and not w.recorded and not w.cluster.jobs, "the ledger is gone"
        return
    live = [j for j, job in w.cluster.jobs.items() if not job.state.terminal]
    assert len(live) <= 1, f"two live jobs: {live}"
    ids = {seg.job_id for seg in state.segments if seg.job_id}
    assert w.recorded <= ids, f"recorded segments lost: {w.recorded - ids}"
    banned = {e.node for e in state.blacklist.entries}
    assert w.banned <= banned, f"blacklist entries lost: {w.banned - banned}"
    acked = {node for path, node in w.queued.items() if not path.exists()}
    assert acked <= banned, f"acknowledged edits lost: {acked - banned}"
    assert not w.problems, w.problems
    w.recorded, w.banned = ids, banned
    if final:
        assert state.status == RunStatus.DONE, (state.status, state.stop_reason)
        assert not live, f"left running: {live}"
        assert set(w.cluster.jobs) <= ids, f"jobs the ledger does not know: {set(w.cluster.jobs) - ids}"
        assert max(seg.end_iteration or 0 for seg in state.segments) == 40


def controller(w: World) -> Controller:
    return Controller(w.s, w.cluster, w.clock, StateStore(w.s.run_dir), python="python")


def live_through(w: World, deaths: Deaths, arm: Any, lives: int = 12) -> int:
    """Run controllers until one finishes; `arm(deaths, life)` chooses the next death. Returns the deaths."""
    died = 0
    for life in range(lives):
        arm(deaths, life)
        ctl = controller(w)
        try:
            ctl.run()
        except Killed:
            died += 1
            if ctl._watch:
                ctl._watch.close()  # the process is gone: its reader threads with it
            check(w)
            continue
        check(w, final=True)
        return died
    raise AssertionError(f"the run did not finish in {lives} controller lives")


@pytest.fixture(autouse=True)
def _hooked() -> Any:
    yield
    failpoints.install(None)


def enumeration_cases() -> list[tuple[str, int]]:
    return [(p, n) for p in failpoints.POINTS for n in (1, 2, 3)]


@pytest.mark.parametrize("point,n", enumeration_cases(), ids=[f"{p}-{n}" for p, n in enumeration_cases()])
def test_a_death_at_each_failpoint(tmp_path: Path, point: str, n: int) -> None:
    """Each point, killed at its n-th passage, in a run that passes every kind of side effect: an ECC (a
    blacklist entry, a drain, a publish) restarted on the spare (a step's spec and request), then a hang with no
    spare left (a cancel), and a queued edit."""
    rng = random.Random(0)
    w = world(tmp_path, rng)
    policy = w.s.policy.model_copy(update={"shared_blacklist": tmp_path / "shared.json", "drain_blacklisted": True})
    w.s = w.s.model_copy(update={"resources": w.s.resources.model_copy(update={"spare_nodes": 1}), "policy": policy})
    w.cluster.faults = {"node2": Fault("ecc", at=17), "node3": Fault("hang", at=30, sticky=False)}
    w.queue_edit("spare1")
    deaths = Deaths()
    failpoints.install(deaths)

    def arm(d: Deaths, life: int) -> None:
        d.point, d.at_count, d.per_point = (point, n, {}) if life == 0 else ("", 0, d.per_point)

    died = live_through(w, deaths, arm)
    passed = deaths.per_point.get(point, 0)
    assert died or n > 1, f"the run never passed {point}: the enumeration does not reach it"
    if died == 0:  # only points a run passes fewer than n times survive unkilled
        assert passed < n, f"{point} passed {passed} times and never killed"


@pytest.mark.parametrize("batch", range(max(1, -(-SCHEDULES // BATCH))))
def test_random_kill_schedules(tmp_path: Path, batch: int) -> None:
    seeds = range(SEED + batch * BATCH, SEED + min(SCHEDULES, (batch + 1) * BATCH))
    for seed in seeds:
        rng = random.Random(seed)
        w = world(tmp_path / str(seed), rng)
        if rng.random() < 0.5:
            w.queue_edit(f"spare{rng.randint(1, 9)}")
        kills = rng.randint(1, 4)
        deaths = Deaths()
        failpoints.install(deaths)

        def arm(d: Deaths, life: int, rng: random.Random = rng, kills: int = kills, w: World = w) -> None:
            if life < kills:
                d.at_hit = d.hits + rng.randint(1, 40)
                if rng.random() < 0.2:
                    w.queue_edit(f"spare{rng.randint(1, 9)}")
        try:
            live_through(w, deaths, arm)
        except AssertionError as exc:
            raise AssertionError(f"seed {seed}: {exc}") from None
        shutil.rmtree(tmp_path / str(seed))
