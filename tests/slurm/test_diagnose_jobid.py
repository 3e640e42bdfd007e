"""Issue 38 on the real test cluster: `orchestrator diagnose JOBID` of a plain sbatch job (not one of ours) finds
its output through Slurm and names the cause."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.slurm.conftest import orch, sh, wait_until

pytestmark = pytest.mark.slurm

SCRIPT = """#!/bin/bash
#SBATCH --job-name=keyerr
#SBATCH --nodes=1
#SBATCH --time=5
#SBATCH --output={out}/%x-%j.log
srun python3 -c '
for i in range(1, 6): print(f"iteration {{i}}/ 100 | loss 2.{{i}}", flush=True)
batch = {{}}
batch["input_ids"]
'
"""


def test_diagnose_a_job_id_reads_the_output_slurm_names(cluster: None, tmp_path: Path) -> None:
    script = tmp_path / "job.sh"
    script.write_text(SCRIPT.format(out=tmp_path))
    job = sh("sbatch", "--parsable", f"--chdir={tmp_path}", str(script)).stdout.strip().split(";")[0]

    def ended() -> bool:
        state = sh("sacct", "-X", "-n", "-P", "-j", job, "--format=State", check=False).stdout.strip()
        return state.startswith(("FAILED", "COMPLETED", "CANCELLED", "TIMEOUT"))

    wait_until(ended, 120, f"job {job} to end")
    res = orch("diagnose", job, "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    got = json.loads(res.stdout)
    assert got["cause"] == "user_bug" and got["action"] == "stop_and_alert", got
    assert f"keyerr-{job}.log" in res.stderr and "node" in res.stderr  # it says what it read
    assert orch("diagnose", "99999999").returncode == 1
