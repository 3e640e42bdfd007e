"""Issue 15, "hangs and runaway resources" on the local backend: its job table garbled or gone, and PIDs
reused by unrelated processes after a crash."""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from orchestrator.backends.local import LocalBackend
from orchestrator.backends.local_jobs import LocalJobRecord
from orchestrator.backends.procs import proc_stat
from orchestrator.clock import FakeClock
from orchestrator.model import JobRef, JobState


def ref(job_id: str) -> JobRef:
    return JobRef(job_id=job_id, submitted_at=datetime(2026, 1, 1, tzinfo=UTC), backend="local")


def test_a_garbled_job_table_is_kept_aside_and_its_jobs_end(tmp_path: Path) -> None:
    (tmp_path / "jobs.json").write_text('{"jobs": {"1001": {"nonsense": true}}')
    backend = LocalBackend(["node1", "node2"], tmp_path, FakeClock())
    assert (tmp_path / "jobs.json.garbled").exists() and not (tmp_path / "jobs.json").exists()
    status = backend.poll([ref("1001")])["1001"]
    assert status.state == JobState.FAILED and "job table" in status.reason  # terminal: no endless wait
    backend.cancel(ref("1001"))  # nothing to cancel, nothing raised


def test_a_missing_job_table_ends_the_job_instead_of_waiting_forever(tmp_path: Path) -> None:
    backend = LocalBackend(["node1"], tmp_path, FakeClock())
    assert backend.poll([ref("1002")])["1002"].state.terminal


def test_a_reused_pid_is_never_signalled(tmp_path: Path) -> None:
    """After a crash the PID in the table may belong to an unrelated process: its start time differs."""
    other = subprocess.Popen(["sleep", "60"])
    try:
        st = proc_stat(other.pid)
        assert st is not None
        rec = LocalJobRecord(job_id="1003", job_name="j", submitted_at=datetime.now(UTC).isoformat(),
                             spec={"segment_dir": str(tmp_path), "time_limit_min": 60}, nodes=["node1"],
                             pids=[other.pid], pid_starts=[st[1] + 1], started_at=datetime.now(UTC).isoformat())
        (tmp_path / "jobs.json").write_text(json.dumps({"jobs": {"1003": rec.__dict__}}))
        backend = LocalBackend(["node1"], tmp_path, FakeClock())
        backend.cancel(ref("1003"))
        assert other.poll() is None  # still running: not ours, not signalled
    finally:
        other.kill()
        other.wait()


def test_jobs_of_a_garbled_table_are_stopped_and_their_ids_never_given_again(tmp_path: Path) -> None:
    """Issue 21, data loss 3: after a garbled jobs.json the old job was declared failed while its processes kept
    running beside the next segment (sharing its checkpoint directory), and job ids restarted, so two segments
    carried the same id. Now the lost job's agents are stopped before it is called ended, and ids go on."""
    import sys
    import time

    from orchestrator.backends.procs import agents_under
    from orchestrator.loop.submission import prepare
    from orchestrator.settings import load_settings, parse_overrides
    from orchestrator.state import RunState
    from tests.conftest import base_config, write_config

    cfg = base_config(tmp_path, command=[sys.executable, "-c", "import time; time.sleep(300)"],
                      resources={"nodes": 2, "time_limit_min": 60})
    s = load_settings(write_config(tmp_path, cfg), parse_overrides([]))
    clock = FakeClock()
    state_dir = s.run_dir / "local-backend"
    backend = LocalBackend(["node1", "node2"], state_dir, clock)
    state = RunState(run="t", created_at=clock.now(), updated_at=clock.now())
    first = backend.submit(prepare(s, state, backend, clock.now(), sys.executable).spec)
    deadline = time.monotonic() + 60
    while len(agents_under(s.run_dir / "segments")) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    agents = agents_under(s.run_dir / "segments")
    assert len(agents) == 2, "the job's two agents never started"
    (state_dir / "jobs.json").write_text('{"jobs": {"' + first.job_id + '": {"garbled')  # the table is lost
    (state_dir / "last-id").unlink()  # and its counter with it (the re-run found ids repeating then)
    again = LocalBackend(["node1", "node2"], state_dir, clock)  # a restarted controller
    status = again.poll([first])[first.job_id]
    assert status.state == JobState.FAILED and "2 orphaned agent process(es) stopped" in status.reason
    assert not agents_under(s.run_dir / "segments"), "the lost job's agents still run"
    state = state.evolve(segments=[])
    second = again.submit(prepare(s, state, again, clock.now(), sys.executable).spec.model_copy(
        update={"command": ("true",)}))
    assert second.job_id != first.job_id and int(second.job_id) > int(first.job_id)
    again.cancel(second)


def test_a_job_table_that_cannot_be_written_holds_the_submission_instead_of_a_traceback(tmp_path: Path) -> None:
    """Issue 21: the local registry's save on a full disk was a traceback out of `run`; now a submission waits
    like one to an unreachable scheduler (the controller retries it), and nothing half-recorded is left."""
    import sys

    from orchestrator.backends.base import SchedulerUnavailable
    from orchestrator.loop.submission import prepare
    from orchestrator.settings import load_settings, parse_overrides
    from orchestrator.state import RunState
    from tests.conftest import base_config, write_config

    def full(path: Path, data: str) -> None:  # every file of the job table, written as on a full disk
        with open("/dev/full", "wb", buffering=0) as dev:
            dev.write(data.encode())  # ENOSPC, from the kernel

    s = load_settings(write_config(tmp_path, base_config(tmp_path)), parse_overrides([]))
    clock = FakeClock()
    backend = LocalBackend(["node1", "node2", "node3"], s.run_dir / "local-backend", clock, write=full)
    spec = prepare(s, RunState(run="t", created_at=clock.now(), updated_at=clock.now()), backend, clock.now(),
                   sys.executable).spec
    with pytest.raises(SchedulerUnavailable, match="No space left on device"):
        backend.submit(spec)
    assert backend.find_jobs(spec.job_name) == [] and not backend._records


def test_a_disk_that_fills_while_the_agents_start_leaves_none_running(tmp_path: Path) -> None:
    """Issue 21 re-run (F10): with a few KB free, the second agent's submitit pickle failed: `run` exited rc 1
    with agents of the first nodes left running unwatched and a segment without a job id. Now the started agents
    are stopped and the submission waits like one to an unreachable scheduler."""
    import errno
    import sys
    import time

    import submitit

    from orchestrator.backends.base import SchedulerUnavailable
    from orchestrator.backends.procs import agents_under
    from orchestrator.loop.submission import prepare
    from orchestrator.settings import load_settings, parse_overrides
    from orchestrator.state import RunState
    from tests.conftest import base_config, write_config

    cfg = base_config(tmp_path, command=[sys.executable, "-c", "import time; time.sleep(300)"],
                      resources={"nodes": 2, "time_limit_min": 60})
    s = load_settings(write_config(tmp_path, cfg), parse_overrides([]))
    calls: list[int] = []

    class FillsUp(submitit.LocalExecutor):
        """The second node's executor finds the disk full when it pickles the agent."""

        def submit(self, *args: Any, **kw: Any) -> Any:
            calls.append(1)
            if len(calls) == 2:
                raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "x.pkl"))
            return super().submit(*args, **kw)

    clock = FakeClock()
    backend = LocalBackend(["node1", "node2"], s.run_dir / "local-backend", clock, executor=FillsUp)
    state = RunState(run="t", created_at=clock.now(), updated_at=clock.now())
    with pytest.raises(SchedulerUnavailable, match="No space left on device"):
        backend.submit(prepare(s, state, backend, clock.now(), sys.executable).spec)
    deadline = time.monotonic() + 10
    while agents_under(s.run_dir / "segments") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not agents_under(s.run_dir / "segments"), "the first node's agent was left running"
    assert backend.poll([ref("1001")])["1001"].state.terminal  # no half-started job in the table
