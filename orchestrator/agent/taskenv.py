"""What each training rank starts with, as srun would have started it: the per-task SLURM_*
environment (the agent is in srun's place) and the argv, its $VARS expanded from that environment
unless a shell launch expands them itself."""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path
from typing import Any

from orchestrator.flight import FLIGHT_DIR
from orchestrator.shellform import script_indexes


def srun_task_env(node_rank: int, local_rank: int, per_node: int, nnodes: int,
                  outer: Any) -> dict[str, str]:
    """What srun tells each task it starts: the agent is in srun's place, so a launch line written
    for srun (`--node_rank $SLURM_PROCID`, `RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID`) sees the
    same values."""
    world = per_node * nnodes
    rank = node_rank * per_node + local_rank
    env = {"SLURM_PROCID": str(rank), "SLURM_LOCALID": str(local_rank),
           "SLURM_NODEID": str(node_rank), "SLURM_NTASKS": str(world), "SLURM_NPROCS": str(world),
           "SLURM_NTASKS_PER_NODE": str(per_node), "SLURM_STEP_NUM_TASKS": str(world)}
    if not outer.get("SLURM_JOB_NUM_NODES"):  # the local backend: no Slurm around the agent
        env.update({"SLURM_JOB_NUM_NODES": str(nnodes), "SLURM_NNODES": str(nnodes)})
    # each task's share, as srun gives it (the agent asked for them all)
    if per_node > 1 and str(cpus := outer.get("SLURM_CPUS_PER_TASK", "")).isdigit():
        env["SLURM_CPUS_PER_TASK"] = str(max(1, int(cpus) // per_node))
    return env


# PyTorch's flight recorder: the last collectives of every process group, on every backend (Gloo
# included); NCCL writes it on a collective timeout, `orchestrator.flight` on the controller's dump
# request. A user's own setting wins.
FLIGHT_ENTRIES = "2000"


def flight_env(segment_dir: str, node: str, outer: Any) -> dict[str, str]:
    """The flight recorder's variables for one node's ranks (torch appends the rank to the file)."""
    wanted = {"TORCH_FR_BUFFER_SIZE": FLIGHT_ENTRIES,
              "TORCH_NCCL_TRACE_BUFFER_SIZE": FLIGHT_ENTRIES, "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
              "TORCH_FR_DUMP_TEMP_FILE": str(Path(segment_dir) / FLIGHT_DIR / f"{node}.rank-"),
              "ORCH_DUMP_REQUEST": str(Path(segment_dir) / "dump-request")}
    return {k: v for k, v in wanted.items() if not outer.get(k)}


def training_argv(argv: tuple[str, ...], env: dict[str, str]) -> list[str]:
    """The argv the agent starts. A shell launch (`bash -c SCRIPT ...`, what import-sbatch writes)
    goes to bash as written: the shell expands its own variables in SCRIPT (in every spelling,
    `bash -lc`, `env bash -e -c`: a value pasted there would be code); the $VARS of the rank's
    environment in the other words are expanded here."""
    scripts = set(script_indexes(argv))
    expanded = expand_vars(argv, env)
    return [argv[i] if i in scripts else a for i, a in enumerate(expanded)]


ENV_REF = re.compile(r"\$(?:\{(\w+)\}|(\w+))")


def expand_vars(argv: tuple[str, ...], env: dict[str, str]) -> list[str]:
    """$VAR and ${VAR} from the rank's environment (SLURM_*, MASTER_ADDR, RANK, ...), no shell
    involved; a variable that is not set stays as written."""
    return [ENV_REF.sub(lambda m: env.get(m.group(1) or m.group(2), m.group(0)), a) for a in argv]


def node_identity(node_name: str | None, node_rank: int | None) -> tuple[str, int, int]:
    """(node name, node rank, number of nodes) from arguments (local backend) or Slurm's
    environment."""
    name = node_name or os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
    rank = node_rank if node_rank is not None else int(os.environ.get("SLURM_NODEID", "0"))
    # a step inside an allocation with spares runs on fewer nodes than the job holds
    nnodes = int(os.environ.get("SLURM_STEP_NUM_NODES") or os.environ.get("SLURM_JOB_NUM_NODES")
                 or os.environ.get("SLURM_NNODES") or "1")
    return name, rank, nnodes
