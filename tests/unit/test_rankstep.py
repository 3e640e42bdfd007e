"""Issue 36: the ranks of a pyxis launch run in a step of their own, children of its slurmstepd, not of the agent.
The wrapper marks them (ORCH_AGENT_PID, ORCH_RANK_STEP=1); the agent's dumps, profiles and stop find them by the
mark, only its own, only outside its own tree. Real processes, real /proc."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.agent.rankstep import marked


@pytest.fixture
def sleepers() -> Iterator[dict[str, int]]:
    """Three processes: one marked for agent 4242, one marked for another agent, one with no rank-step mark."""
    envs = {"mine": {"ORCH_AGENT_PID": "4242", "ORCH_RANK_STEP": "1"},
            "other": {"ORCH_AGENT_PID": "4243", "ORCH_RANK_STEP": "1"},
            "unmarked": {"ORCH_AGENT_PID": "4242"}}
    procs = {k: subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                                 env={**os.environ, **v}) for k, v in envs.items()}
    try:
        yield {k: p.pid for k, p in procs.items()}
    finally:
        for p in procs.values():
            p.kill()
            p.wait()


def test_the_agents_own_marked_ranks_are_found_and_no_other(sleepers: dict[str, int]) -> None:
    found = marked(4242, exclude=set())
    assert sleepers["mine"] in found
    assert sleepers["other"] not in found and sleepers["unmarked"] not in found
    assert sleepers["mine"] not in marked(4242, exclude={sleepers["mine"]})  # already in the agent's tree


def test_a_mark_that_only_begins_like_the_agents_pid_is_not_its_own(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    for pid, env in {"10": b"ORCH_AGENT_PID=42420\0ORCH_RANK_STEP=1\0", "11": b"X=1\0ORCH_AGENT_PID=4242\0"
                     b"ORCH_RANK_STEP=1\0", "12": b"XORCH_AGENT_PID=4242\0ORCH_RANK_STEP=1\0"}.items():
        (proc / pid).mkdir(parents=True)
        (proc / pid / "environ").write_bytes(env)
    (proc / "self").mkdir()
    got = marked(4242, set(), proc=proc, environ=lambda pid: (proc / str(pid) / "environ").read_bytes())
    assert got == [11]


def test_only_a_command_with_the_launchs_own_step_looks_for_its_ranks() -> None:
    """Every other run reads no other process's environment."""
    from orchestrator.agent.rankstep import uses_rank_step

    assert uses_rank_step(("bash", "-c", "x=1\n__orch_rank_step 8 --container-image=$IMG -- python t.py\n"))
    assert not uses_rank_step(("bash", "-c", "srun python t.py\n")) and not uses_rank_step(("python", "t.py"))
