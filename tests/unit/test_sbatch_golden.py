"""Golden test of the batch script the Slurm backend submits.

The real submission path (submitit's public `SlurmExecutor.submit`) runs against stand-in sbatch/srun/sinfo
executables first on PATH; sbatch records the script it was given. That script must equal what `render()`
shows in the dry run, and, with the test's paths normalised, the golden file. A run directory with a space
and a quote shows that every path reaches the shell as one word.

A segment with spare nodes (issue 14) has its own golden file: the job asks for nodes + spares with --no-kill,
and submitit runs the allocation supervisor on the batch host instead of its own srun.

After an intended change of the script: ORCH_UPDATE_GOLDEN=1 pytest tests/unit/test_sbatch_golden.py
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

from submitit.core.utils import DelayedSubmission

from orchestrator.agent.allocation import run_allocation
from orchestrator.agent.main import run_node
from orchestrator.backends.slurm import SlurmBackend
from orchestrator.blacklist import ExcludePlan
from orchestrator.clock import FakeClock
from orchestrator.model import SegmentSpec
from orchestrator.plan import plan
from orchestrator.settings import SlurmBackendCfg, load_settings
from orchestrator.state import RunState
from tests.conftest import REPO, base_config, write_config

GOLDEN = REPO / "tests" / "data" / "golden" / "sbatch_segment.sh"
GOLDEN_SPARES = REPO / "tests" / "data" / "golden" / "sbatch_spares.sh"
SRUN_ARGS = ("--cpu-bind=none",)


def _spec_and_backend(tmp_path: Path, spares: int) -> tuple[SegmentSpec, SlurmBackend, Path]:
    run_dir = tmp_path / "my run's dir"
    cfg = base_config(tmp_path, run_dir=str(run_dir), name="gpt",
                      resources={"nodes": 2, "gpus_per_node": 8, "cpus_per_task": 16, "partition": "gpu",
                                 "account": "proj", "qos": "high", "time_limit_min": 240, "spare_nodes": spares,
                                 "sbatch_extra": {"constraint": "h100", "mail-type": "FAIL"}},
                      backend={"kind": "slurm"})
    s = load_settings(write_config(tmp_path, cfg))
    clock = FakeClock()
    state = RunState(run=s.name, created_at=clock.now(), updated_at=clock.now())
    spec = plan(s, state, None, ExcludePlan(nodes=("node3", "node4")), "python")
    slurm_cfg = SlurmBackendCfg(setup=["module load cuda/12.4", "export NCCL_DEBUG=WARN"], srun_args=list(SRUN_ARGS))
    backend = SlurmBackend(slurm_cfg, clock, s.run_dir, runner=lambda argv, t: "node1\nnode2\nnode3\nnode4\n")
    return spec, backend, run_dir


def _submitted(spec: SegmentSpec, backend: SlurmBackend, rec: Path, tmp_path: Path, golden: Path) -> str:
    """Submit through submitit to the stand-in sbatch: the script must be the dry run's and the golden file."""
    shown = backend.render(spec)
    assert backend.submit(spec).job_id == "4242"
    submitted = (rec / "script.sh").read_text()
    assert submitted == shown  # the dry run shows exactly what sbatch gets
    assert subprocess.run(["bash", "-n", rec / "script.sh"]).returncode == 0
    normalised = submitted.replace(shlex.quote(sys.executable), "PYTHON")
    normalised = normalised.replace(str(tmp_path), "TMP")
    if os.environ.get("ORCH_UPDATE_GOLDEN") == "1":
        golden.write_text(normalised)
    assert normalised == golden.read_text(), f"the batch script changed; see {golden}"
    return submitted


def _pickled(run_dir: Path) -> DelayedSubmission:
    """What submitit pickled for job 4242: the function the batch script runs, and its arguments."""
    return DelayedSubmission.load(run_dir / "segments" / "0001" / "submitit" / "4242" / "4242_submitted.pkl")


def test_submitted_script_matches_render_and_golden(tmp_path: Path, fake_slurm_bin: Path) -> None:
    spec, backend, run_dir = _spec_and_backend(tmp_path, 0)
    submitted = _submitted(spec, backend, fake_slurm_bin, tmp_path, GOLDEN)
    quoted = shlex.quote(str(run_dir / "segments" / "0001" / "submitit" / "%j"))
    assert submitted.rstrip("\n").endswith(f"-u -m submitit.core._submit {quoted}")
    assert "\nsrun " in submitted and "--no-kill" not in submitted
    assert _pickled(run_dir).function is run_node


def test_a_segment_with_spares_asks_for_them_with_no_kill_and_runs_the_supervisor(
        tmp_path: Path, fake_slurm_bin: Path) -> None:
    spec, backend, run_dir = _spec_and_backend(tmp_path, 2)
    assert (spec.nodes, spec.spares) == (2, 2) and spec.allocation_dir
    submitted = _submitted(spec, backend, fake_slurm_bin, tmp_path, GOLDEN_SPARES)
    params = [line for line in submitted.splitlines() if line.startswith("#SBATCH")]
    assert "#SBATCH --nodes=4" in params and "#SBATCH --no-kill" in params and "#SBATCH --no-requeue" in params
    assert "#SBATCH --exclude='node[3-4]'" in params  # the blacklist still keeps the job off bad nodes
    # no srun from submitit: the batch host itself runs the pickled supervisor, which starts the job steps
    assert not any(line.lstrip().startswith("srun") for line in submitted.splitlines())
    quoted = shlex.quote(str(run_dir / "segments" / "0001" / "submitit" / "%j"))
    assert submitted.rstrip("\n").endswith(f"{shlex.quote(sys.executable)} -u -m submitit.core._submit {quoted}")
    job = _pickled(run_dir)
    assert job.function is run_allocation
    assert job.args == (spec, SRUN_ARGS)  # the supervisor gets srun_args for its steps, not the batch script


def test_the_agents_interpreter_is_the_configured_one_and_a_shell_word_is_refused(tmp_path: Path) -> None:
    """Issue 36: submitit's `python=`: where the orchestrator lives on the compute nodes when it differs from the
    controller's interpreter; a value with shell characters never reaches the batch script."""
    import pydantic
    import pytest

    spec, backend, _ = _spec_and_backend(tmp_path, 0)
    backend.cfg = SlurmBackendCfg(python="/opt/orch venv/bin/python".replace(" ", "_"))
    shown = backend.render(spec)
    assert "\nsrun" in shown and "/opt/orch_venv/bin/python -u -m submitit.core._submit" in shown
    assert shlex.quote(sys.executable) + " -u -m submitit" not in shown
    for bad in ("python; rm -rf ~", "$(id)", "py thon"):
        with pytest.raises(pydantic.ValidationError):
            SlurmBackendCfg(python=bad)
