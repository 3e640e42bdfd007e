"""Issue 36: a batch script whose training runs without srun in a job of several nodes, beside helper steps it
starts on named nodes (Ray's pattern: `srun -w NODE ray start --block &` per node, then the driver on the batch
host), imported as a user would and run through the real test cluster. Under sbatch the script ran once, on the
first node, and its helper steps ran on the nodes they named; so here: the first node's agent runs the script, its
helper steps start from there on node2 and node3 (real `srun -w` inside the job), the other agents idle and write
no log, and the run reaches its goal with the helpers stopped when the training ends."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.slurm.conftest import slurm_env, status
from tests.slurm.test_pyxis_scenarios import imported_demo_run

pytestmark = pytest.mark.slurm


def test_a_driver_on_the_first_node_with_helper_steps_on_the_others_runs_as_under_sbatch(
        cluster: None, tmp_path: Path) -> None:
    script = tmp_path / "driver.sbatch"
    marks = tmp_path / "marks"
    marks.mkdir()
    script.write_text(f"""#!/bin/bash
#SBATCH --nodes=3
#SBATCH --ntasks-per-node=1
#SBATCH --time=10
#SBATCH --job-name=driver
HOSTS=($(scontrol show hostnames "$SLURM_JOB_NODELIST"))
cd {REPO}
for i in 1 2; do
  srun --nodes=1 --ntasks=1 -w "${{HOSTS[$i]}}" \\
    bash -c 'echo "$SLURM_JOB_ID" > "$0/helper.$SLURMD_NODENAME"; exec sleep 900' {marks} &
done
python3 scripts/demo_train.py --iters=60 --ckpt-every=10 --ckpt-dir={tmp_path}/run/checkpoints \\
    --resume="$ORCH_RESUME_FROM" --sync-dir="$ORCH_SEGMENT_DIR/sync" --step-time=0.1
""")
    cfg = imported_demo_run(tmp_path, script, "FIRST NODE", 60)[0]
    log = tmp_path / "ctl.log"
    res = subprocess.run([sys.executable, "-m", "orchestrator", "run", str(cfg)], stdout=log.open("ab"),
                         stderr=subprocess.STDOUT, env={**slurm_env(), "PYTHONPATH": str(REPO)}, cwd=REPO,
                         timeout=420, check=False)
    assert res.returncode == 0, log.read_text()[-3000:]
    st = status(cfg)
    assert st["state"] == "done" and len(st["segments"]) == 1, st
    seg = st["segments"][0]
    # the helper steps ran on the nodes they named, inside the segment's job, started from the first node
    helpers = {p.name.split(".", 1)[1]: p.read_text().strip() for p in marks.iterdir()}
    first, *others = seg["nodes"]
    assert sorted(helpers) == sorted(others) and set(helpers.values()) == {seg["job_id"]}, (helpers, seg)
    # the training ran once, on the first node; the idle nodes wrote no log
    logs = sorted(p.stem for p in (tmp_path / "run" / "segments" / "0001" / "logs").glob("*.log"))
    assert logs == [first], logs
    text = (tmp_path / "run" / "segments" / "0001" / "logs" / f"{first}.log").read_text()
    assert text.count("> rank 0/1 on ") == 1, text[-2000:]
    # nothing of the job is left: the helpers ended with it
    left = subprocess.run(["squeue", "-h", "-j", seg["job_id"]], capture_output=True, text=True, env=slurm_env(),
                          check=False)
    assert not left.stdout.strip(), left.stdout
