"""Issue 15, "Transient scheduler failures": sbatch failing because the scheduler or its configuration cannot
be reached is SchedulerUnavailable (wait and retry), not a rejection that stops the run."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.backends.base import BackendError, SchedulerUnavailable
from orchestrator.backends.slurm import SlurmBackend
from orchestrator.blacklist import ExcludePlan
from orchestrator.clock import FakeClock
from orchestrator.plan import plan
from orchestrator.settings import SlurmBackendCfg, load_settings
from orchestrator.state import RunState
from tests.conftest import base_config, write_config

UNREACHABLE = [
    "sbatch: error: resolve_ctls_from_dns_srv: res_nsearch error: Unknown host\n"
    "sbatch: error: fetch_config: DNS SRV lookup failed\n"
    "sbatch: error: _establish_config_source: failed to fetch config\n"
    "sbatch: fatal: Could not establish a configuration source",
    "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation",
    "sbatch: error: slurm_load_ctl_conf: Temporary failure in name resolution",
    "sbatch: error: Batch job submission failed: Slurm temporarily unable to accept job, sleeping and retrying",
]
REJECTED = [
    "sbatch: error: Batch job submission failed: Invalid account or account/partition combination specified",
    "sbatch: error: invalid partition specified: nope",
    "sbatch: error: Batch job submission failed: Requested node configuration is not available",
]


def submit_with_sbatch_saying(tmp_path: Path, bindir: Path, text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    bindir.mkdir(exist_ok=True)
    (bindir / "msg").write_text(text + "\n")
    sbatch = bindir / "sbatch"
    sbatch.write_text(f"#!/bin/sh\ncat {bindir / 'msg'} >&2\nexit 1\n")
    sbatch.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:/usr/bin:/bin")
    s = load_settings(write_config(tmp_path, base_config(tmp_path, backend={"kind": "slurm"})))
    clock = FakeClock()
    state = RunState(run=s.name, created_at=clock.now(), updated_at=clock.now())
    spec = plan(s, state, None, ExcludePlan(nodes=()), "python")
    backend = SlurmBackend(SlurmBackendCfg(), clock, s.run_dir, runner=lambda argv, t: "")
    backend.submit(spec)


@pytest.mark.parametrize("text", UNREACHABLE, ids=["dns-srv", "socket", "name-resolution", "busy"])
def test_an_unreachable_scheduler_is_not_a_rejection(tmp_path: Path, text: str,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(SchedulerUnavailable):
        submit_with_sbatch_saying(tmp_path, tmp_path / "bin", text, monkeypatch)


@pytest.mark.parametrize("text", REJECTED, ids=["account", "partition", "nodes"])
def test_a_rejected_job_is_still_a_rejection(tmp_path: Path, text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(BackendError, match="rejected"):
        submit_with_sbatch_saying(tmp_path, tmp_path / "bin", text, monkeypatch)
