"""One contract, every backend (issue 24): the same tests run over the fake cluster of the unit tests, the local
backend (real processes) and the Slurm backend (submitit's real sbatch path to a stand-in sbatch, and a small
simulated Slurm answering sinfo/sacct/squeue/scancel through the runner seam), as APScheduler runs one suite
over every datastore. A backend that passes is one the controller can drive.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from orchestrator.backends.base import Backend
from orchestrator.backends.local import LocalBackend
from orchestrator.backends.slurm import SlurmBackend
from orchestrator.backends.slurm_commands import CommandFailed
from orchestrator.clock import Clock, FakeClock
from orchestrator.loop.submission import prepare
from orchestrator.model import JobRef, JobState, SegmentSpec
from orchestrator.settings import SlurmBackendCfg, load_settings, parse_overrides
from orchestrator.state import RunState
from tests.conftest import base_config, write_config
from tests.fakes import FakeCluster

NODES = ["node1", "node2", "node3", "node4"]


class SimSlurm:
    """The Slurm commands the backend runs, answered from a table of jobs (sbatch is the stand-in's 4242)."""

    def __init__(self, rec: Path, clock: Clock):
        self.rec, self.clock = rec, clock
        self.state: dict[str, str] = {}
        self.calls: list[list[str]] = []

    def _jobs(self) -> dict[str, str]:
        if (self.rec / "script.sh").exists() and "4242" not in self.state:
            self.state["4242"] = "RUNNING"
        return self.state

    def _name(self) -> str:
        text = (self.rec / "script.sh").read_text()
        return next(ln.split("=", 1)[1] for ln in text.splitlines() if ln.startswith("#SBATCH --job-name="))

    def __call__(self, argv: list[str], timeout: float) -> str:
        self.calls.append(argv)
        jobs, now = self._jobs(), self.clock.now().strftime("%Y-%m-%dT%H:%M:%S")
        if argv[0] == "sinfo":
            return "".join(f"{n} idle\n" if "%t" in argv[-1] else f"{n}\n" for n in NODES)
        if argv[0] == "scancel":
            jobs[argv[1]] = "CANCELLED"
            return ""
        if argv[0] == "sacct":
            ids = argv[argv.index("-j") + 1].split(",")
            row = "{}|{}|{}|0:0|node[1-3]|{}|{}|Unknown\n"
            return "".join(row.format(j, self._name(), jobs[j], now, now) for j in ids if j in jobs)
        if argv[0] == "squeue" and "-n" in argv:
            name = argv[argv.index("-n") + 1]
            live = [j for j, st in jobs.items() if st in ("PENDING", "RUNNING") and self._name() == name]
            return "".join(f"{j}|{now}|{jobs[j]}\n" for j in live)
        if argv[0] == "squeue":
            return ""
        if argv[0] == "scontrol":
            return ""
        raise CommandFailed(argv, "not simulated")


Made = tuple[Backend, SegmentSpec, Callable[[JobRef], None]]


def _spec(tmp_path: Path, backend: Backend, **cfg: object) -> SegmentSpec:
    s = load_settings(write_config(tmp_path, base_config(tmp_path, **cfg)), parse_overrides([]))
    clock = FakeClock()
    return prepare(s, RunState.begin(s.name, clock.now()), backend, clock.now(), sys.executable).spec


@pytest.fixture(params=["fake", "local", "slurm"])
def made(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Made]:
    """(backend, a spec for it, how to end a submitted job as the scheduler would after a cancel)."""
    clock = FakeClock()
    if request.param == "fake":
        fake = FakeCluster(clock, NODES, 50, tmp_path / "ckpt")
        yield fake, _spec(tmp_path, fake), lambda ref: None
    elif request.param == "local":
        local = LocalBackend(NODES, tmp_path / "local", clock)
        yield local, _spec(tmp_path, local, resources={"nodes": 2}), lambda ref: None
        for ref in list(local.find_jobs("")):
            local.cancel(ref)
    else:
        rec = request.getfixturevalue("fake_slurm_bin")
        sim = SimSlurm(rec, clock)
        slurm = SlurmBackend(SlurmBackendCfg(), clock, tmp_path / "run", runner=sim)
        yield slurm, _spec(tmp_path, slurm), lambda ref: None


def _until_terminal(backend: Backend, ref: JobRef) -> JobState:
    deadline = time.monotonic() + 30  # a local job ends within seconds of its cancel
    while (state := backend.poll([ref])[ref.job_id].state) and not state.terminal and time.monotonic() < deadline:
        time.sleep(0.05)
    return state


def test_a_submitted_job_is_named_polled_found_by_name_and_cancelled(made: Made) -> None:
    backend, spec, _ = made
    ref = backend.submit(spec)
    assert ref.job_id and ref.backend == backend.name
    assert set(backend.poll([ref])) == {ref.job_id}
    assert backend.poll([ref])[ref.job_id].state in (JobState.PENDING, JobState.RUNNING, JobState.COMPLETED)
    assert ref.job_id in [r.job_id for r in backend.find_jobs(spec.job_name)]
    backend.cancel(ref)
    assert _until_terminal(backend, ref) in (JobState.CANCELLED, JobState.COMPLETED)
    assert ref.job_id not in [r.job_id for r in backend.find_jobs(spec.job_name)]  # only live jobs are found


def test_poll_answers_for_every_ref_and_nothing_for_none(made: Made) -> None:
    backend, _, _ = made
    unknown = JobRef(job_id="999999", submitted_at=FakeClock().now() - timedelta(hours=1), backend=backend.name)
    assert backend.poll([]) == {}
    # never a missing key; a scheduler may not list it yet (UNKNOWN: wait), a backend whose own table is the
    # only record of its jobs (local) calls a job it does not know ended
    state = backend.poll([unknown])[unknown.job_id].state
    assert state == JobState.UNKNOWN or state.terminal


def test_the_inventory_and_the_usable_nodes_agree(made: Made) -> None:
    backend, _, _ = made
    known, usable = backend.nodes(), backend.usable_nodes()
    assert known is None or set(known) >= set(NODES[:2])
    assert usable is None or known is None or set(usable) <= set(known)


def test_render_shows_what_submit_would_run_and_the_optional_features_answer(made: Made) -> None:
    backend, spec, _ = made
    text = backend.render(spec)
    assert isinstance(text, str) and text.strip()
    assert isinstance(backend.queue_position(JobRef(job_id="1", submitted_at=FakeClock().now(),
                                                    backend=backend.name)), str)
    backend.drain("node1", "contract test")  # best effort: never raises for a known node
    assert backend.name
