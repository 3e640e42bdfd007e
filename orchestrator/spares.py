"""Pure: spare nodes for restarts inside the allocation.

A segment that allocates `nodes + spares` (with `--no-kill`) can replace a failed node by a spare
and relaunch the training step in the same job, without a new queue wait. `spares_needed` sizes the
pool so that the chance of running out before the segment's time limit is below a target;
`restart_in_allocation` says whether a verdict can be handled inside the allocation or needs a new
segment.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from orchestrator.model import HARDWARE_CAUSES, Cause, Decision, Verdict

IN_ALLOCATION = HARDWARE_CAUSES | {Cause.HANG, Cause.SEGFAULT, Cause.BUS_ERROR, Cause.HOST_OOM,
                                   Cause.NETWORK, Cause.SLOW_NODE}
MAX_SPARES = 64


def poisson_tail(mean: float, k: int) -> float:
    """P(N > k) for N ~ Poisson(mean)."""
    term = math.exp(-mean)
    cdf = term
    for i in range(1, k + 1):
        term *= mean / i
        cdf += term
    return max(0.0, 1.0 - cdf)


def swap_gain_s(factor: float, remaining_s: float) -> float:
    """Seconds a swap saves: at `factor` times slower, that share of the time left is waiting for
    the slow node (the spare is assumed to keep the healthy pace)."""
    return max(0.0, remaining_s * (1.0 - 1.0 / factor)) if factor > 1 else 0.0


def worth_swapping(factor: float, remaining_s: float, restart_cost_s: float) -> bool:
    """Swap a slow node for a spare when the time saved over the rest of the segment is more than a
    restart costs (the start-up and the work since the last checkpoint)."""
    return swap_gain_s(factor, remaining_s) > restart_cost_s


def spares_needed(rate_per_node_hour: float, nodes: int, hours: float, target: float = 0.01) -> int:
    """The smallest number of spares with P(more node failures than spares within `hours`) <
    target."""
    mean = rate_per_node_hour * nodes * hours
    for k in range(MAX_SPARES + 1):
        if poisson_tail(mean, k) < target:
            return k
    return MAX_SPARES


def sizing_text(rate_per_node_hour: float, nodes: int, hours: float, basis: str,
                target: float = 0.01) -> str:
    """Why `spares_needed` gives what it gives: the expected failures and the chance of running
    out."""
    k = spares_needed(rate_per_node_hour, nodes, hours, target)
    mean = rate_per_node_hour * nodes * hours
    span = f"{hours * 60:.0f} min" if hours < 1 else f"{hours:.3g} h"
    text = (f"{nodes} nodes x {span} (the time limit) at {rate_per_node_hour * 24000:.2f} failures "
            f"per 1000 node-days ({basis}): "
            f"{mean:.3g} node failures expected; with {k} spare{'' if k == 1 else 's'} the chance "
            f"of running out is {poisson_tail(mean, k):.2%} (target < {target:.0%})")
    return text + ("; set a number to hold spares anyway" if k == 0 else "")


@dataclass(frozen=True)
class Restart:
    """Relaunch inside the allocation: the nodes to drop and the spares to promote, or why not."""

    ok: bool
    drop: tuple[str, ...] = ()
    promote: tuple[str, ...] = ()
    why_not: str = ""


def restart_in_allocation(verdict: Verdict, decision: Decision, running: list[str],
                          spares: list[str], batch_host: str) -> Restart:
    """A node's fault with spares left is handled inside the job; anything else needs a new
    segment."""
    blamed = [n for n in decision.blame_nodes if n in running]
    if verdict.cause not in IN_ALLOCATION or not blamed:
        return Restart(False, why_not=f"{verdict.cause.value} is not one node's fault")
    if batch_host in blamed:
        return Restart(False, why_not=f"the batch host {batch_host} failed")
    if len(blamed) > len(spares):
        return Restart(False, why_not=f"{len(blamed)} node(s) to replace, {len(spares)} spare(s) "
                                      "left")
    return Restart(True, drop=tuple(blamed), promote=tuple(spares[: len(blamed)]))
