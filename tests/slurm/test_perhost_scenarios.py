"""Issue 36: a per-host launch loop (`for i in "${!HOSTS[@]}"; do srun -N1 -n1 -w "${HOSTS[$i]}" ... & done; wait`,
the pattern of JAX's multi-host examples and MosaicML's per-node composer script), imported as a user would and run
through the real test cluster: every node starts only its own pass of the loop, with the process id the loop gave
it, in a step of its own; a rank of such a step frozen on one node is found by the agent (it is not the agent's
child), named, its node excluded, and the run resumes to the end."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.slurm.conftest import slurm_env
from tests.slurm.test_pyxis_scenarios import freeze_a_rank_on_node2_and_see_the_run_resume, imported_demo_run

pytestmark = pytest.mark.slurm


def _imported(tmp_path: Path) -> Path:
    script = tmp_path / "perhost.sbatch"
    script.write_text(f"""#!/bin/bash
#SBATCH --nodes=3
#SBATCH --ntasks-per-node=1
#SBATCH --time=10
#SBATCH --job-name=perhost
HOSTS=($(scontrol show hostnames "$SLURM_JOB_NODELIST"))
cd {REPO}
for i in "${{!HOSTS[@]}}"; do
  srun --nodes=1 --ntasks=1 -w "${{HOSTS[$i]}}" env ORCH_RANK=$i ORCH_WORLD_SIZE=${{#HOSTS[@]}} \\
    python3 scripts/demo_train.py --iters=600 --ckpt-every=10 --ckpt-dir={tmp_path}/run/checkpoints \\
    --resume="$ORCH_RESUME_FROM" --sync-dir="$ORCH_SEGMENT_DIR/sync" --step-time=0.1 --collective-timeout=600 &
done
wait
""")
    return imported_demo_run(tmp_path, script, "NODES NAMED", 600)[0]


def test_a_per_host_loop_runs_each_pass_on_its_host_and_a_frozen_rank_is_named(cluster: None, tmp_path: Path) -> None:
    cfg = _imported(tmp_path)
    seg1 = tmp_path / "run" / "segments" / "0001"

    def one_rank_per_node() -> None:  # the pass of the loop that named the node, with the loop's index
        started = {p.stem: re.findall(r"> rank (\d+)/(\d+) on (\S+):", p.read_text())
                   for p in sorted((seg1 / "logs").glob("*.log"))}
        hosts = sorted(started)
        assert all(ranks == [(str(hosts.index(n)), "3", n)] for n, ranks in started.items()), started

    freeze_a_rank_on_node2_and_see_the_run_resume(cfg, {**slurm_env(), "PYTHONPATH": str(REPO)},
                                                  tmp_path / "ctl.log", one_rank_per_node)
