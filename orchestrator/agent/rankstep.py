"""The ranks of a launch that kept its own srun (a pyxis/enroot container: import-sbatch's
`__orch_rank_step`): they run in a step of their own on this node, children of that step's
slurmstepd, not of the agent. Each carries the agent's mark in its environment (ORCH_AGENT_PID,
ORCH_RANK_STEP=1, set by the wrapper inside the image), so the agent's dumps, profiles and stop find
them. enroot shares the host's process namespace: the host's /proc shows their real state.

Each environment is read with a timeout (a read can block on a process stuck in the kernel), and
only for processes of the agent's own user that are outside its own tree."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from orchestrator.timeout import call_with_timeout

READ_TIMEOUT_S = 2.0
RANK_STEP_CALL = "__orch_rank_step "  # the per-node script's call (importer/script.py)


def _environ(pid: int) -> bytes | None:
    done, raw = call_with_timeout(lambda: Path(f"/proc/{pid}/environ").read_bytes(),
                                  READ_TIMEOUT_S)
    return raw if done and isinstance(raw, bytes) else None


def marked(agent_pid: int, exclude: set[int], proc: Path = Path("/proc"),
           environ: Callable[[int], bytes | None] = _environ) -> list[int]:
    """The live processes that carry `agent_pid`'s rank-step mark, outside `exclude` (the agent's
    own tree)."""
    mark = f"ORCH_AGENT_PID={agent_pid}\0".encode()
    uid = os.getuid()
    found = []
    for d in proc.iterdir():
        if not d.name.isdigit() or int(d.name) in exclude:
            continue
        try:
            if d.stat().st_uid != uid:
                continue
        except OSError:
            continue
        env = b"\0" + (environ(int(d.name)) or b"")
        if b"\0ORCH_RANK_STEP=1\0" in env and b"\0" + mark in env:
            found.append(int(d.name))
    return sorted(found)


def uses_rank_step(command: tuple[str, ...]) -> bool:
    """The command launches its ranks in a step of their own (`__orch_rank_step` in its script)."""
    return any(RANK_STEP_CALL in word for word in command)


def outside_ranks() -> list[int]:
    """This agent's ranks in the launch's own step (none for a launch the agent started itself)."""
    from orchestrator.agent.dump import descendants

    me = os.getpid()
    return marked(me, set(descendants([me])))
