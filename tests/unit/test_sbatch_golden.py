"""Golden test of the batch script the Slurm backend submits.

The real submission path (submitit's public `SlurmExecutor.submit`) runs against stand-in sbatch/srun/sinfo
executables first on PATH; sbatch records the script it was given. That script must equal what `render()`
shows in the dry run, and, with the test's paths normalised, the golden file. A run directory with a space
and a quote shows that every path reaches the shell as one word.

After an intended change of the script: ORCH_UPDATE_GOLDEN=1 pytest tests/unit/test_sbatch_golden.py
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

from orchestrator.backends.slurm import SlurmBackend
from orchestrator.blacklist import ExcludePlan
from orchestrator.clock import FakeClock
from orchestrator.plan import plan
from orchestrator.settings import SlurmBackendCfg, load_settings
from orchestrator.state import RunState
from tests.conftest import REPO, base_config, write_config

GOLDEN = REPO / "tests" / "data" / "golden" / "sbatch_segment.sh"


def test_submitted_script_matches_render_and_golden(tmp_path: Path, fake_slurm_bin: Path) -> None:
    run_dir = tmp_path / "my run's dir"
    cfg = base_config(tmp_path, run_dir=str(run_dir), name="gpt",
                      resources={"nodes": 2, "gpus_per_node": 8, "cpus_per_task": 16, "partition": "gpu",
                                 "account": "proj", "qos": "high", "time_limit_min": 240,
                                 "sbatch_extra": {"constraint": "h100", "mail-type": "FAIL"}},
                      backend={"kind": "slurm"})
    s = load_settings(write_config(tmp_path, cfg))
    clock = FakeClock()
    state = RunState(run=s.name, created_at=clock.now(), updated_at=clock.now())
    spec = plan(s, state, None, ExcludePlan(nodes=("node3", "node4")), "python")
    slurm_cfg = SlurmBackendCfg(setup=["module load cuda/12.4", "export NCCL_DEBUG=WARN"],
                                srun_args=["--cpu-bind=none"])
    backend = SlurmBackend(slurm_cfg, clock, s.run_dir, runner=lambda argv, t: "node1\nnode2\nnode3\nnode4\n")

    shown = backend.render(spec)
    assert backend.submit(spec).job_id == "4242"
    submitted = (fake_slurm_bin / "script.sh").read_text()
    assert submitted == shown  # the dry run shows exactly what sbatch gets
    assert subprocess.run(["bash", "-n", fake_slurm_bin / "script.sh"]).returncode == 0

    normalised = submitted.replace(shlex.quote(sys.executable), "PYTHON")
    normalised = normalised.replace(str(tmp_path), "TMP")
    if os.environ.get("ORCH_UPDATE_GOLDEN") == "1":
        GOLDEN.write_text(normalised)
    assert normalised == GOLDEN.read_text(), f"the batch script changed; see {GOLDEN}"
    quoted = shlex.quote(str(run_dir / "segments" / "0001" / "submitit" / "%j"))
    assert submitted.rstrip("\n").endswith(f"-u -m submitit.core._submit {quoted}")
