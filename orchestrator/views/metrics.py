"""The run as Prometheus metrics, rebuilt after every poll (`loop/exports.py` writes them to
`run_dir/metrics.prom` for node_exporter's textfile collector, atomically, and serves them over HTTP
when asked)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from prometheus_client import CollectorRegistry, Gauge, write_to_textfile

from orchestrator.model import RunStatus
from orchestrator.state import RunState
from orchestrator.views.ettr import run_metrics
from orchestrator.views.nodes import drain_reason
from orchestrator.views.restarts import restarts, summary

METRICS_FILE = "metrics.prom"


def registry(state: RunState, now: datetime, job_seen_at: datetime | None) -> CollectorRegistry:
    """Every metric of one run, labelled run=<name> (a collector reading several runs' files tells
    them apart)."""
    reg = CollectorRegistry()
    m = run_metrics(state, now)

    def gauge(name: str, doc: str, value: float | None, **labels: str) -> None:
        if value is None:
            return
        g = Gauge(f"orchestrator_{name}", doc, ["run", *labels], registry=reg)
        g.labels(state.run, *labels.values()).set(value)

    gauge("iteration", "Newest training iteration seen.", state.best_iteration())
    gauge("goal_iteration", "The run's goal (goal.target_iteration).", state.target_iteration)
    gauge("running", "1 while the run is running (not done or stopped).",
          float(state.status == RunStatus.RUNNING))
    gauge("iterations_per_hour", "Training rate of the current (or last) segment.",
          m.get("rate_per_h"))
    gauge("effective_training_time_ratio", "Productive time / wall time since the first segment.",
          m.get("ettr"))
    gauge("wall_seconds", "Wall time since the first segment was submitted.", m.get("wall_s"))
    gauge("effective_training_seconds", "Productive training time since the first segment (kept "
                                        "progress).", m.get("productive_s"))
    gauge("eta_seconds", "Estimated time to the goal at the current rate.", m.get("eta_s"))
    cur = state.current or (state.segments[-1] if state.segments else None)
    gauge("loss", "The newest training loss the ranks printed.",
          cur.losses[-1][1] if cur is not None and cur.losses else None)
    gauge("checkpoint_write_seconds", "Median time a checkpoint save blocked the training, timed "
                                      "from the ranks' save lines.", m.get("checkpoint_write_s"))
    lost = Gauge("orchestrator_lost_seconds",
                 "Time lost, by the cause of the segment that lost it.",
                 ["run", "cause"], registry=reg)
    for cause, seconds in sorted((m.get("lost_s_by_cause") or {}).items()):
        lost.labels(state.run, cause).set(seconds)
    gauge("segments", "Segments submitted so far.", len(state.segments))
    kinds = Gauge("orchestrator_restarts", "Restarts after a fault, inside the job (spares) or as "
                                           "a new job.", ["run", "kind"], registry=reg)
    for kind, row in summary(restarts(state)).items():
        kinds.labels(state.run, kind).set(row["count"])
    gauge("blacklisted_nodes", "Nodes on the run's blacklist that have not expired.",
          len(state.blacklist.prune(now).entries))
    _nodes(reg, state, now)
    gauge("last_update_timestamp_seconds", "When this file was written.", now.timestamp())
    if job_seen_at is not None:
        gauge("job_seen_timestamp_seconds", "The last poll that could see the job (the scheduler "
                                            "answered).", job_seen_at.timestamp())
    return reg


def _nodes(reg: CollectorRegistry, state: RunState, now: datetime) -> None:
    """Per node, what an admin acts on (issue 40): its strikes on the run's blacklist with the
    drain-ready reason `scontrol update ... State=DRAIN Reason=` takes, and the nodes of the
    current job Slurm shows drained or down, with the admins' reason."""
    struck = Gauge("orchestrator_node_strikes", "Strikes of a node on the run's blacklist "
                   "(unexpired); hard=true excludes it at once. reason: drain-ready.",
                   ["run", "node", "cause", "hard", "reason"], registry=reg)
    for e in state.blacklist.prune(now).entries:
        struck.labels(state.run, e.node, e.cause.value, str(e.hard).lower(),
                      drain_reason(e, state.run)).set(e.strikes)
    drained = Gauge("orchestrator_node_drained", "A node of the current job that Slurm shows "
                    "drained or down, with the admins' reason.", ["run", "node", "reason"],
                    registry=reg)
    job = state.segments[-1].job_id if state.segments else None  # its steps: spares swapped in
    seen = {n: why for s in state.segments if job and s.job_id == job
            for n, why in s.drained.items()}
    for node, why in sorted(seen.items()):
        drained.labels(state.run, node, why[:200]).set(1)


def write_metrics(path: Path, state: RunState, now: datetime, job_seen_at: datetime | None) -> None:
    """Atomic (a temporary file, then a rename): a reader, or a kill -9, never leaves half a
    file."""
    write_to_textfile(str(path), registry(state, now, job_seen_at))
