"""A node that holds no part of the launch (`resources.launch_nodes: first`): the batch script ran
its launch without srun, so under sbatch it ran on the first node only and the job's other nodes
waited (their helper steps, `srun -w NODE ray start ...`, are started from the first node, as the
batch script started them). The agent on such a node starts nothing, writes no log and no record
(the watch and the verdict see the first node alone, as a one-node job), and waits until the first
node's agent has written its exit record, or until it is stopped."""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Any

from orchestrator.contract import EXIT_SUFFIX, SegmentPaths
from orchestrator.model import SegmentSpec

POLL_S = 1.0


def idles(spec: SegmentSpec, node_rank: int) -> bool:
    """Whether this node runs nothing of the launch."""
    return spec.launch_nodes == "first" and node_rank != 0


def _launch_ended(nodes_dir: Path) -> bool:
    try:
        return any(p.name.endswith(EXIT_SUFFIX) for p in nodes_dir.iterdir())
    except OSError:  # not created yet: the first node's agent has not started
        return False


def hold(spec: SegmentSpec, node: str, poll_s: float = POLL_S) -> int:
    """Wait, idle, until the first node's launch ends or a signal stops the job (exit 0: nothing
    of this node failed). Said once on the agent's own output (submitit's log), not in logs/."""
    stop = threading.Event()

    def _stop(_signum: int, _frame: Any) -> None:
        stop.set()

    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR2)}
    for sig, handler in before.items():
        if handler != signal.SIG_IGN:
            signal.signal(sig, _stop)
    print(f"ORCH-AGENT {node}: idle: the launch runs on the first node only "
          "(resources.launch_nodes: first, as the batch script ran it without srun)", flush=True)
    nodes_dir = SegmentPaths(Path(spec.segment_dir)).nodes
    try:
        while not stop.is_set() and not _launch_ended(nodes_dir):
            stop.wait(poll_s)
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
    return 0
