"""Fail-open (issue 21): outages of the scheduler (sacct, squeue, slurmctld: every call fails) and stalls of
the run directory's filesystem (every read of the node logs hangs), injected at random into whole runs on the
fake cluster. Whatever the outage, the controller never cancels a job nor submits one while it cannot see the
live one; it keeps reading node logs while the scheduler is down; it says once per outage that it is blind;
and the run still finishes (a hang is judged once it can see again)."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from loguru import logger

from orchestrator.backends.base import SchedulerUnavailable
from orchestrator.clock import FakeClock
from orchestrator.loop.controller import Controller
from orchestrator.model import JobRef, RunStatus, SegmentSpec
from orchestrator.settings import load_settings, parse_overrides
from orchestrator.state import StateStore
from orchestrator.watch.reader import Listing, scan_dir
from tests.conftest import base_config, write_config
from tests.fakes import FakeCluster, Fault

NODES = [f"node{i}" for i in range(1, 6)]
SEEDS = range(30)


@dataclass
class Window:
    kind: str  # scheduler | filesystem
    start: datetime
    end: datetime
    polled: bool = False  # the controller asked the scheduler during it
    progress_at_start: int | None = None
    progress_at_end: int | None = None

    def holds(self, now: datetime) -> bool:
        return self.start <= now < self.end


@dataclass
class Outages:
    clock: FakeClock
    windows: list[Window] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    answered: threading.Event = field(default_factory=threading.Event)
    faultless: bool = False

    def now_in(self, kind: str) -> Window | None:
        return next((w for w in self.windows if w.kind == kind and w.holds(self.clock.now())), None)


def scenario(tmp: Path, seed: int) -> tuple[Controller, FakeCluster, Outages]:
    tmp.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    cfg = base_config(tmp, resources={"nodes": 3, "time_limit_min": 60}, goal={"target_iteration": 60},
                      watch={"poll_interval_s": 5, "stall_timeout_s": 40, "startup_timeout_s": 60,
                             "cascade_grace_s": 2, "read_timeout_s": 0.05})
    s = load_settings(write_config(tmp, cfg), parse_overrides([]))
    clock = FakeClock()
    kind = rng.choice(["hang", "ecc", "none"])
    faults = {rng.choice(NODES[:3]): Fault(kind, at=rng.randint(10, 40), sticky=kind == "ecc")} \
        if kind != "none" else {}
    cluster = FakeCluster(clock, list(NODES), 60, tmp / "ckpt", step_s=2.0, faults=faults)
    out = Outages(clock, faultless=not faults)
    t = clock.now() + timedelta(seconds=rng.randint(5, 30))
    for _ in range(4):
        length = timedelta(seconds=rng.choice([8, 30, 60, 150, 400]))  # shorter and longer than the stall limit
        out.windows.append(Window(rng.choice(["scheduler", "filesystem"]), t, t + length))
        t += length + timedelta(seconds=rng.randint(10, 60))
    ctl = Controller(s, cluster, clock, StateStore(s.run_dir), python="python", listing=hanging_listing(out))
    return ctl, cluster, out


def hanging_listing(out: Outages) -> Callable[[Path], Listing]:
    """The run directory's listings, hung inside the filesystem's windows."""
    def listing(directory: Path) -> Listing:
        while out.now_in("filesystem"):
            out.answered.wait(0.5)  # a hung read: returns once the filesystem answers again
        return scan_dir(directory)
    return listing


def inject(ctl: Controller, cluster: FakeCluster, out: Outages) -> None:
    """The scheduler's calls fail inside its windows; node-log reads hang inside the filesystem's (the
    controller's listing, given by `scenario`)."""
    def live() -> list[str]:
        return [j for j, job in cluster.jobs.items() if not job.state.terminal]

    def down(name: str, fn: Any) -> Any:
        def call(*args: Any) -> Any:
            if w := out.now_in("scheduler"):
                w.polled = w.polled or name == "poll"
                raise SchedulerUnavailable("slurm_load_jobs error: Unable to contact slurm controller")
            return fn(*args)
        return call

    submit, cancel = cluster.submit, cluster.cancel

    def watched_submit(spec: SegmentSpec) -> JobRef:
        if live():
            out.violations.append(f"{out.clock.now()}: submitted segment {spec.index} beside live job {live()}")
        return submit(spec)

    def watched_cancel(ref: JobRef) -> None:
        if w := out.now_in("scheduler") or out.now_in("filesystem"):
            out.violations.append(f"{out.clock.now()}: cancelled {ref.job_id} during a {w.kind} outage")
        cancel(ref)

    cluster.poll = down("poll", cluster.poll)  # type: ignore[method-assign]
    cluster.submit = down("submit", watched_submit)  # type: ignore[method-assign]
    cluster.cancel = down("cancel", watched_cancel)  # type: ignore[method-assign]
    cluster.find_jobs = down("find_jobs", cluster.find_jobs)  # type: ignore[method-assign]

    def on_advance(now: datetime) -> None:
        if not out.now_in("filesystem"):
            out.answered.set()
            out.answered.clear()
        for w in out.windows:
            it = ctl._watch.max_iteration() if ctl._watch else None
            if w.progress_at_start is None and w.holds(now):
                w.progress_at_start = it or 0
            elif w.holds(now):
                w.progress_at_end = it or 0

    out.clock.on_advance.insert(0, on_advance)


@pytest.mark.parametrize("seed", SEEDS)
def test_outages_never_cancel_or_resubmit_blind_and_are_said_once(tmp_path: Path, seed: int) -> None:
    ctl, cluster, out = scenario(tmp_path, seed)
    inject(ctl, cluster, out)
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m)), format="{message}", level="INFO")
    try:
        state = ctl.run()
    finally:
        logger.remove(sink)
        out.answered.set()
    assert not out.violations, out.violations
    assert state.status == RunStatus.DONE, state.stop_reason
    sched = [w for w in out.windows if w.kind == "scheduler" and w.polled]
    said = [x for x in lines if x.startswith("scheduler unreachable") and "blind to the job" in x]
    assert len(said) == len(sched), said  # once per outage the controller ran into
    for w in sched:  # the node logs were read while the scheduler was down: progress kept being seen
        if (w.end - w.start).total_seconds() >= 30 and w.progress_at_start is not None \
                and w.progress_at_start < 50 and out.faultless:
            assert (w.progress_at_end or 0) > w.progress_at_start, w
    fs = [x for x in lines if x.startswith("the run directory's filesystem does not answer")]
    assert len(fs) <= sum(w.kind == "filesystem" for w in out.windows), fs
    held = [x for x in lines if "not submitting until it answers" in x]
    assert len(held) <= len(out.windows), held  # a submission held by an outage is said once too


def test_the_fail_open_runs_count_at_least_100_outages(tmp_path: Path) -> None:
    total = sum(len(scenario(tmp_path / str(s), s)[2].windows) for s in SEEDS)
    assert total >= 100
