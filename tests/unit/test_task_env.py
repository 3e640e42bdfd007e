"""What each rank sees when the agent starts tasks_per_node copies in srun's place: the values srun gives each
task (issue 23: SLURM_CPUS_PER_TASK was the whole agent's allocation in every rank)."""

from __future__ import annotations

import pytest

from orchestrator.agent.taskenv import srun_task_env


@pytest.mark.parametrize(("per_node", "agent_cpus", "rank_cpus"), [(8, "96", "12"), (1, "16", None), (4, "2", "1")])
def test_each_rank_gets_its_share_of_the_agents_cpus(per_node: int, agent_cpus: str, rank_cpus: str | None) -> None:
    """import-sbatch asks for --cpus-per-task x --ntasks-per-node CPUs for the one agent task per node."""
    env = srun_task_env(1, 3 % per_node, per_node, 2, {"SLURM_CPUS_PER_TASK": agent_cpus, "SLURM_JOB_NUM_NODES": "2"})
    assert env.get("SLURM_CPUS_PER_TASK") == rank_cpus  # one task: the agent's own value is already right
    assert env["SLURM_PROCID"] == str(per_node + 3 % per_node) and env["SLURM_NTASKS"] == str(2 * per_node)


def test_no_cpu_count_from_slurm_sets_none() -> None:
    assert "SLURM_CPUS_PER_TASK" not in srun_task_env(0, 0, 4, 1, {})
