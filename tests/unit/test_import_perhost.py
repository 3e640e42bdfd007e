"""Issue 36: launches on nodes the script names run as under sbatch. A per-host loop (`for h in $hosts; do srun -N1
-n1 -w $h ... & done; wait`, JAX's and MosaicML's pattern), a job split between a training step and a server on its
last node, a loop of trials, and MLPerf's `--container-name` steps were refused (or, before that, ran whole on every
node). The per-node script now runs everywhere and each node starts only its own part of each named step; the
script's shell evaluates the step's options there, as the batch script's shell did.

Each test runs the imported per-node script under bash for every node of a 2-node job, with an `srun` on PATH that
records its arguments, as the agent would run it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from orchestrator.importer import Refused, import_sbatch
from orchestrator.importer.names import undefined
from tests.sbatch_launch import SCONTROL

HEAD = "#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=1\n#SBATCH --time=10\n"
# a step's srun: one line per call (the arguments joined by `|`), then its program runs with the step's ranks
SRUN = """#!/bin/bash
( IFS='|'; line="$ORCH_NODE_NAME:$*"; printf '%s\\n' "${line//$'\\n'/ }" ) >> "$SRUN_LOG"
while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do
  case $1 in -w|-N|-n|-o|-e|--nodelist|--ntasks|--nodes|--container-name) shift ;; esac; shift
done
[ "$1" = /bin/sh ] && shift 11  # the launch's own step: /bin/sh -c WRAPPER orch-rank and its 7 values
[ $# -gt 0 ] && exec "$@"
"""


def _run_nodes(tmp_path: Path, script: str, nodes: tuple[str, ...] = ("vn1", "vn2")) -> dict[str, list[str]]:
    """{node: the srun calls its per-node script made}; the program each step runs prints `RAN <args>`."""
    cfg, _ = import_sbatch(script, "job", workdir=str(tmp_path))
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    (bindir / "srun").write_text(SRUN)
    (bindir / "scontrol").write_text(SCONTROL)
    for name in ("train", "train.py"):
        (bindir / name).write_text('#!/bin/sh\necho "RAN $*" >> "$RAN_LOG"\n')
    for p in bindir.iterdir():
        p.chmod(0o755)
    calls: dict[str, list[str]] = {}
    for rank, node in enumerate(nodes):
        log = tmp_path / f"{node}.srun"
        log.write_text("")
        env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "ORCH_NODE_NAME": node, "ORCH_NNODES": "2",
               "ORCH_NODE_RANK": str(rank), "SLURM_JOB_NODELIST": ",".join(nodes), "SLURM_JOB_NUM_NODES": "2",
               "SLURM_NNODES": "2", "SLURM_JOB_ID": "4242", "SRUN_LOG": str(log), "RAN_LOG": str(tmp_path / node)}
        subprocess.run(cfg["command"][:3], cwd=tmp_path, env=env, timeout=20, check=False, capture_output=True)
        calls[node] = log.read_text().splitlines()
    return calls


def _ran(tmp_path: Path, node: str) -> list[str]:
    p = tmp_path / node
    return p.read_text().splitlines() if p.exists() else []


def test_a_per_host_loop_starts_each_hosts_pass_on_that_host_only(tmp_path: Path) -> None:
    script = HEAD + (
        'HOSTS=($(scontrol show hostnames "$SLURM_JOB_NODELIST"))\nPORT=$((RANDOM + 10000))\n'
        'for i in "${!HOSTS[@]}"; do\n'
        '  srun -N1 -n1 -w "${HOSTS[$i]}" train --process_id=$i --num_processes=${#HOSTS[@]} --port=$PORT &\n'
        'done\nwait\n')
    calls = _run_nodes(tmp_path, script)
    # each node started one step, on itself, for its own pass; none for the other node's
    assert [c.split("|")[0] for c in calls["vn1"]] == ["vn1:-N1"] and len(calls["vn2"]) == 1, calls
    assert "--nodelist=vn1" in calls["vn1"][0] and "--nodelist=vn2" in calls["vn2"][0], calls
    one, two = _ran(tmp_path, "vn1"), _ran(tmp_path, "vn2")
    assert len(one) == len(two) == 1, (one, two)
    assert "--process_id=0 --num_processes=2" in one[0] and "--process_id=1 --num_processes=2" in two[0]
    # $RANDOM was drawn once by the batch script: every node draws the same rendezvous port
    assert one[0].rsplit("--port=", 1)[1] == two[0].rsplit("--port=", 1)[1]


def test_a_server_on_the_last_node_beside_training_on_the_others_runs_once_there(tmp_path: Path) -> None:
    """TRL's GRPO script: `srun --nodes=N-1 --nodelist=$TRAIN accelerate ... &` beside `srun --nodes=1
    --nodelist=$LAST trl vllm-serve &`, then `wait`."""
    script = HEAD.replace("--nodes=2", "--nodes=2\n#SBATCH --ntasks-per-node 1") + (
        'NODELIST=($(scontrol show hostnames $SLURM_JOB_NODELIST))\nN=$((SLURM_NNODES - 1))\n'
        'TRAIN="${NODELIST[@]:0:$N}"\nLAST="${NODELIST[$N]}"\n'
        'srun --nodes=$N --ntasks=$N --nodelist="$TRAIN" train.py --role=trainer &\n'
        'srun --nodes=1 --ntasks=1 --nodelist="$LAST" train --role=server &\nwait\n')
    _run_nodes(tmp_path, script)
    assert _ran(tmp_path, "vn1") == ["RAN --role=trainer"] and _ran(tmp_path, "vn2") == ["RAN --role=server"]


def test_a_loop_of_trials_runs_each_trial_on_every_node_in_turn(tmp_path: Path) -> None:
    script = HEAD + "for t in 1 2 3; do\n  srun train --trial $t\ndone\n"
    cfg, notes = import_sbatch(script, "job")
    assert any("inside a `for` loop (line 5): every node runs the loop" in n for n in notes)
    assert "for t in 1 2 3" in cfg["command"][2]


def test_mlperf_steps_into_a_named_container_and_a_python_snippet_are_read_as_sbatch_reads_them(
        tmp_path: Path) -> None:
    """MLPerf BERT: the image is made by one step (`--container-image ... --container-name=X true`) and entered by
    the next by name only; a `srun ... python -c "import mlperf_logger ..."` log line is a helper, not the launch;
    the launch's tasks a node come from its own `--ntasks-per-node=${DGXNGPU}`, evaluated on the node."""
    script = HEAD + (
        'srun --ntasks=2 --container-image=nvcr.io/bert --container-name=lm true\n'
        'for e in 1 2; do\n'
        '  srun --ntasks=2 --container-name=lm python -c "import mlperf_logger; mlperf_logger.log_event(1)"\n'
        '  srun -l --ntasks="$(( SLURM_JOB_NUM_NODES * DGXNGPU ))" --ntasks-per-node="${DGXNGPU}" '
        '--container-name=lm sh -c "./run_and_time.sh $e"\n'
        'done\n')
    cfg, notes = import_sbatch(script, "bert", workdir=str(tmp_path))
    assert "__orch_rank_step 1 -l" in cfg["command"][2], cfg["command"][2]
    assert any(n.startswith("training launch found: sh -c") for n in notes), notes
    calls = _run_nodes(tmp_path, script.replace("${DGXNGPU}", "4").replace("DGXNGPU", "4"))
    steps = [c for c in calls["vn2"] if "orch-rank" in c]
    assert len(steps) == 2 and all("--ntasks=4" in c.split("|") and "--nodelist=vn2" in c.split("|")
                                   for c in steps), calls


def test_a_step_on_every_node_sent_to_the_background_per_item_is_still_refused() -> None:
    with pytest.raises(Refused, match="sent to the background without the nodes it runs on"):
        import_sbatch(HEAD + "for c in a b; do\n  srun train --cfg $c &\ndone\nwait\n", "job")


def test_an_echo_of_a_name_is_not_its_assignment_from_the_environment() -> None:
    """pax-pile: `echo "Using default BASE_SCRIPT=$BASE_SCRIPT"` after its default was read as `X=$X` (a value the
    environment must give), so users were told to set BASE_SCRIPT and the script's default was lost."""
    text = ('if [[ -z "${BASE:-}" ]]; then\n  export BASE=/opt/run.sh\n  echo "Using default BASE=$BASE"\nfi\n'
            'PREC=${PREC}\nA=$A B=$B bash "$BASE"\n')
    assert undefined(text) == ["PREC", "A", "B"]
