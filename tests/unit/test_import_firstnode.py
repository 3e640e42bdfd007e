"""Issue 36: a launch the batch script runs without srun, in a job of several nodes, ran once, on the first node,
under sbatch; the job's other nodes ran nothing of it (a Ray driver beside `srun -w NODE ray start ...` steps,
Lightning's minimal multi-node demo). It was refused; it now imports with `resources.launch_nodes: first`: the
per-node script runs on the first node alone, whole (nothing is split out to run once: it runs once), and its helper
steps on named nodes start from there, as the batch script started them. The agents of the other nodes idle."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from orchestrator.agent.idle import hold, idles
from orchestrator.contract import SegmentPaths
from orchestrator.importer import import_sbatch
from orchestrator.model import SegmentSpec
from tests.sbatch_launch import SCONTROL
from tests.unit.test_import_perhost import SRUN

RAY = """#!/bin/bash
#SBATCH --nodes=3
#SBATCH --tasks-per-node=1
#SBATCH --time=60
nodes=$(scontrol show hostnames "$SLURM_JOB_NODELIST")
nodes_array=($nodes)
head_node=${nodes_array[0]}
echo "Starting HEAD at $head_node"
srun --nodes=1 --ntasks=1 -w "$head_node" ray start --head --port=6379 --block &
worker_num=$((SLURM_JOB_NUM_NODES - 1))
for ((i = 1; i <= worker_num; i++)); do
    node_i=${nodes_array[$i]}
    srun --nodes=1 --ntasks=1 -w "$node_i" ray start --address "$head_node:6379" --block &
done
python -u train.py --num-workers 3
"""


def test_a_launch_without_srun_in_a_multinode_job_runs_on_the_first_node_only() -> None:
    cfg, notes = import_sbatch(RAY, "ray")
    assert cfg["resources"]["launch_nodes"] == "first"
    assert cfg["resources"]["nodes"] == 3 and cfg["resources"]["tasks_per_node"] == 1
    said = [n for n in notes if n.startswith("FIRST NODE")]
    assert said and "`python` (line 15)" in said[0] and "2 other node(s)" in said[0]
    # the script runs once, where it ran: nothing is moved to a setup, nothing is gated to task 0
    assert not any("RUN ONCE" in n for n in notes), notes
    assert "setup" not in cfg.get("backend", {}).get("slurm", {})
    # `for ((i = 1; ...))` sets i
    assert not any("does not set" in n for n in notes), notes


def test_srun_and_a_multinode_job_keep_their_every_node_launch() -> None:
    cfg, _ = import_sbatch(RAY.replace("python -u train.py", "srun python -u train.py"), "ray")
    assert cfg["resources"].get("launch_nodes", "all") == "all"
    one, _ = import_sbatch(RAY.replace("--nodes=3", "--nodes=1"), "ray")
    assert one["resources"].get("launch_nodes", "all") == "all"


def test_the_first_node_starts_every_named_helper_step_as_the_batch_script_did(tmp_path: Path) -> None:
    cfg, _ = import_sbatch(RAY, "ray", workdir=str(tmp_path))
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name, text in (("srun", SRUN), ("scontrol", SCONTROL), ("ray", '#!/bin/sh\necho "RAY $*" >> "$RAN_LOG"\n'),
                       ("python", '#!/bin/sh\necho "PY $*" >> "$RAN_LOG"\n')):
        (bindir / name).write_text(text)
        (bindir / name).chmod(0o755)
    log, ran = tmp_path / "srun.log", tmp_path / "ran.log"
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "ORCH_NODE_NAME": "vn1", "ORCH_NODE_RANK": "0",
           "SLURM_JOB_NODELIST": "vn1,vn2,vn3", "SLURM_JOB_NUM_NODES": "3", "SLURM_NNODES": "3",
           "SLURM_JOB_ID": "4242", "SRUN_LOG": str(log), "RAN_LOG": str(ran)}
    subprocess.run(cfg["command"][:3], cwd=tmp_path, env=env, timeout=20, check=True, capture_output=True)
    steps = sorted(line.split(":", 1)[1] for line in log.read_text().splitlines())
    # the head on vn1 and one worker on each of vn2 and vn3, all started from the first node
    assert [s.split("|-w|")[1].split("|")[0] for s in steps] == ["vn1", "vn2", "vn3"], steps
    lines = ran.read_text().splitlines()
    assert lines.count("PY -u train.py --num-workers 3") == 1, lines
    assert sum(line.startswith("RAY start") for line in lines) == 3, lines


def _spec(tmp_path: Path, launch_nodes: str) -> SegmentSpec:
    return SegmentSpec(run_name="t", index=1, job_name="t.seg0001", nodes=3, tasks_per_node=1, gpus_per_node=0,
                       time_limit_min=5, command=("true",), workdir=str(tmp_path), run_dir=str(tmp_path),
                       segment_dir=str(tmp_path / "seg"), progress_regex="x", launch_nodes=launch_nodes)


def test_an_idle_node_runs_nothing_writes_nothing_and_ends_with_the_first_node(tmp_path: Path) -> None:
    spec = _spec(tmp_path, "first")
    assert idles(spec, 1) and idles(spec, 2) and not idles(spec, 0)
    assert not idles(_spec(tmp_path, "all"), 1)
    paths = SegmentPaths(Path(spec.segment_dir))
    paths.nodes.mkdir(parents=True)
    (paths.exit("vn1")).write_text("{}")  # the first node's launch has ended
    assert hold(spec, "vn2", poll_s=0.01) == 0
    assert sorted(p.name for p in paths.nodes.iterdir()) == [paths.exit("vn1").name]
    assert not paths.logs.exists()
    # the dry run says so
    from orchestrator.cli.dryrun import launch_lines

    assert "first node only, the other agents idle" in launch_lines(spec)[0]
    assert "idle" not in launch_lines(_spec(tmp_path, "all"))[0]


@pytest.mark.parametrize("key,first_only,node", [
    ("/r/submitit/77/77_0_log.out", False, "n1"), ("/r/submitit/77/77_2_log.out", False, "n3"),
    ("/r/submitit/77/77_2_log.out", True, None), ("/r/submitit/77/77_0_log.out", True, "n1"),
    # the local backend: one folder per node, task 0 in each
    ("/r/submitit/n2/4711_0_log.out", False, "n2"), ("/r/submitit/n2/4711_0_log.out", True, None),
    ("/r/submitit/77/77_9_log.out", False, None), ("/r/submitit/77/notes.out", False, None),
])
def test_submitit_logs_are_read_as_their_own_nodes_and_idle_nodes_are_not(key: str, first_only: bool,
                                                                           node: str | None) -> None:
    from orchestrator.watch.reader import scheduler_log_node

    assert scheduler_log_node(key, ["n1", "n2", "n3"], first_only) == node
