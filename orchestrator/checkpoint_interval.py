"""Pure: how often to checkpoint, from the observed failure rate, and what effective training time
to expect.

- The failure rate is estimated from this run's own history (node-caused failures per node-hour
  run),
  blended with a prior (the field figure of 3.79 failures per 1000 node-days by default) so that a
  young run is not advised from two data points: a Gamma prior worth `prior_node_days` node-days of
  observation.
- The interval is Daly's higher-order optimum (J. T. Daly, "A higher order estimate of the optimum
  checkpoint interval for restart dumps", FGCS 2006), which refines Young's sqrt(2 w M) for a write
  time w that is not small against the mean time between failures M.
- The expected effective training time is Meta's model (CONTEXT.md):
  E[ETTR] ~ (1 - lambda (u0 + dt/2)) / (1 + w/dt), lambda = failures per hour of the job.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from orchestrator.model import HARDWARE_CAUSES, Cause
from orchestrator.state import RunState

NODE_CAUSES = HARDWARE_CAUSES | {Cause.HANG, Cause.SEGFAULT, Cause.BUS_ERROR, Cause.HOST_OOM,
                                 Cause.NETWORK, Cause.NCCL_TIMEOUT}
FIELD_RATE_PER_NODE_DAY = 3.79 / 1000  # Meta research clusters (CONTEXT.md)


@dataclass(frozen=True)
class Observed:
    """What a run has seen so far: node-caused failures and the node-hours its segments ran."""

    failures: int
    node_hours: float


def observed(state: RunState) -> Observed:
    """Node-caused failures and node-hours run, from the run's finished segments."""
    failures, node_hours = 0, 0.0
    for seg in state.segments:
        if seg.ended_at is None or seg.submitted_at is None:
            continue
        began = seg.first_progress_at or seg.submitted_at
        node_hours += max(0.0, (seg.ended_at - began).total_seconds()) / 3600 * max(1, len(
            seg.nodes))
        failures += seg.cause in NODE_CAUSES
    return Observed(failures, node_hours)


def restart_cost_s(state: RunState, default_s: float = 600.0) -> float:
    """Median time from submission to the first progress line of a segment that resumed (queue
    included)."""
    costs = [(s.first_progress_at - s.submitted_at).total_seconds() for s in state.segments
             if s.resumed_from and s.first_progress_at and s.submitted_at]
    return statistics.median(costs) if costs else default_s


def measured_write_s(state: RunState) -> float | None:
    """The median checkpoint write the agents timed over the last 5 segments that saved (from the
    ranks' save lines: what a save blocks the training), or None."""
    timed = [s.checkpoint_write_s for s in state.segments if s.checkpoint_write_s is not None][-5:]
    return statistics.median(timed) if timed else None


def write_time_s(state: RunState, configured_s: float) -> tuple[float, bool]:
    """The checkpoint write time: the measured one (at least 1 s), else the configured one; and
    whether it was measured."""
    timed = measured_write_s(state)
    return (max(1.0, timed), True) if timed is not None else (configured_s, False)


def failure_rate_per_node_hour(obs: Observed, prior_per_node_day: float = FIELD_RATE_PER_NODE_DAY,
                               prior_node_days: float = 1000.0) -> float:
    """Posterior mean of the per-node failure rate (Gamma prior, Poisson failures)."""
    prior_hours = prior_node_days * 24
    return (obs.failures + prior_per_node_day * prior_node_days) / (obs.node_hours + prior_hours)


def daly_interval_h(mtbf_h: float, write_h: float) -> float:
    """Daly's optimum compute time between checkpoints, in hours."""
    if mtbf_h <= 0 or write_h <= 0:
        raise ValueError("the mean time between failures and the checkpoint write time must be "
                         "positive")
    if write_h >= 2 * mtbf_h:
        return mtbf_h
    r = math.sqrt(write_h / (2 * mtbf_h))
    return math.sqrt(2 * write_h * mtbf_h) * (1 + r / 3 + write_h / (18 * mtbf_h)) - write_h


def expected_ettr(job_failures_per_h: float, restart_h: float, interval_h: float,
                  write_h: float) -> float:
    """Meta's closed form; clamped to [0, 1]."""
    value = (1 - job_failures_per_h * (restart_h + interval_h / 2)) / (1 + write_h / interval_h)
    return min(1.0, max(0.0, value))


@dataclass(frozen=True)
class Advice:
    """The advised checkpoint interval, the job's mean time between failures and the expected
    effective training time now and with the advice."""
    interval_s: float
    mtbf_h: float  # of the whole job (all its nodes)
    optimum_s: float  # Daly's optimum; interval_s is lower when a maximum cut it
    ettr_now: float  # with the current interval
    ettr_advised: float  # with the advised interval


def advise(obs: Observed, nodes: int, write_s: float, restart_s: float, current_interval_s: float,
           prior_per_node_day: float = FIELD_RATE_PER_NODE_DAY,
           max_interval_s: float | None = None) -> Advice:
    """The checkpoint interval to hand to the next segment (Daly's optimum, at most
    `max_interval_s`), and the effective training time now vs advised."""
    lam = failure_rate_per_node_hour(obs, prior_per_node_day) * nodes  # job failures per hour
    mtbf_h = 1 / lam
    optimum_h = daly_interval_h(mtbf_h, write_s / 3600)
    dt_h = optimum_h if max_interval_s is None else min(optimum_h, max_interval_s / 3600)
    u0, w = restart_s / 3600, write_s / 3600
    return Advice(interval_s=dt_h * 3600, mtbf_h=mtbf_h, optimum_s=optimum_h * 3600,
                  ettr_now=expected_ettr(lam, u0, current_interval_s / 3600, w),
                  ettr_advised=expected_ettr(lam, u0, dt_h, w))
