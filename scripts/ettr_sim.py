"""Discrete-event simulation of a long training run on a failing cluster, for ETTR comparisons.

The orchestrator policy runs the product's own pure functions, the ones the controller calls:
`loop.conclude.conclude` (classify, decide, blacklist and hardware-history edits) on per-node evidence the
simulator makes for each fault, `loop.advance.judged`, and `loop.submission.exclude_plan` (the
exclude list, capped so the job stays placeable). Nothing of the controller is copied here. The other
policies are baselines: a blind job array (same spec every time, waits for the job to die), resubmit
without exclusion (detects like the orchestrator, never excludes), and an oracle (instant detection,
perfect exclusion of broken nodes).

Slurm places a job on the lowest-numbered idle nodes, so a node that stays broken ("sticky") is
picked again and again unless it is excluded.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from orchestrator.evidence import Match, NodeEvidence
from orchestrator.loop.advance import judged
from orchestrator.loop.conclude import Outcome
from orchestrator.loop.observations import Ended
from orchestrator.loop.submission import exclude_plan
from orchestrator.model import CancelReason, Cause, JobState, JobStatus, RunStatus
from orchestrator.settings import Goal, Policy
from orchestrator.state import RunState, SegmentRecord

H = 3600.0
T0 = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass
class Params:
    nodes: int = 512                    # nodes the job needs
    spare_frac: float = 0.05            # idle nodes beyond the job's size
    rate_per_1000_node_days: float = 3.79
    sticky_share: float = 0.3           # faults after which the node stays broken until repaired
    hang_share: float = 0.1             # faults that hang the job without an error line
    repair_h: float = 72.0              # a sticky node is repaired (by admins) after this long
    horizon_h: float = 24 * 30
    time_limit_h: float = 24.0
    ckpt_interval_h: float = 1.0        # dt
    ckpt_write_h: float = 2 / 60        # w
    restart_h: float = 10 / 60          # u0: start-up until training runs again (load, compile)
    step_restart_h: float | None = None  # u0 of a relaunch inside the allocation (None: restart_h)
    queue_h: float = 5 / 60             # wait in the queue per submission
    # the wait of a submission that follows a failure, when it differs (Slurm 25.11's expedited requeue
    # puts the job back at the front of the queue: ~0); None: queue_h
    requeue_queue_h: float | None = None
    nccl_timeout_h: float = 10 / 60     # peers notice a dead rank (blind array, resubmit-only)
    orch_detect_h: float = 1 / 60       # poll + cascade grace
    stall_timeout_h: float = 20 / 60
    # the orchestrator's onset-to-verdict time for a hang (bench_hang.py measures it; the fixed stall
    # limit when not given)
    orch_hang_h: float = 20 / 60
    seed: int = 1


@dataclass
class Result:
    policy: str
    ettr: float
    segments: int
    failures: int
    sticky_hits: int
    productive_h: float


@dataclass
class Cluster:
    p: Params
    rng: random.Random
    broken_until: dict[int, float] = field(default_factory=dict)  # node -> time its repair is done

    @property
    def size(self) -> int:
        return self.p.nodes + max(1, int(self.p.nodes * self.p.spare_frac))

    def healthy(self, node: int, t: float) -> bool:
        return self.broken_until.get(node, -1.0) <= t


def _evidence(nodes: list[int], failed: int, kind: str, startup: bool) -> tuple[JobStatus, list[NodeEvidence]]:
    """What the logs of a segment look like after a fault: the culprit's error, cascades elsewhere."""
    name = f"node{failed}"
    if kind == "hang":
        ev = [NodeEvidence(node=f"node{n}", last_iteration=100, top_frames=("barrier (c10d.py)",)) for n in nodes]
        ev[nodes.index(failed)] = NodeEvidence(node=name, last_iteration=100, stuck_detail="pid 1 state D")
        return JobStatus(state=JobState.CANCELLED), ev
    text, sig, cause = (("RuntimeError: CUDA error: out of memory", "cuda_oom", Cause.USER_OOM) if startup else
                        ("CUDA error: uncorrectable ECC error encountered", "cuda_ecc", Cause.GPU_ECC))
    root = Match(1, text, sig, cause, sig != "cuda_oom", False)
    cascade = Match(2, "Watchdog caught collective operation timeout", "nccl_timeout", Cause.NCCL_TIMEOUT, False,
                    True)
    it = None if startup else 100
    ev = [NodeEvidence(node=f"node{n}", matches=(cascade,), last_iteration=it) for n in nodes if n != failed]
    ev.append(NodeEvidence(node=name, matches=(root,), last_iteration=it, exit_code=1))
    return JobStatus(state=JobState.FAILED), ev


class Run:
    def __init__(self, p: Params, policy: str):
        self.p, self.policy = p, policy
        self.rng = random.Random(p.seed)
        self.cluster = Cluster(p, self.rng)
        self.t = 0.0
        self.productive = 0.0
        self.segments = self.failures = self.sticky_hits = 0
        self.after_failure = False  # the next submission follows a failure (requeue_queue_h)
        self.state = RunState(run="sim", created_at=T0, updated_at=T0)
        self.policy_cfg = Policy(max_segments=10**6, max_no_progress_segments=10**6, strike_threshold=2,
                                 max_excluded_nodes=max(1, int(p.nodes * p.spare_frac)), blacklist_expiry_h=p.repair_h)
        self.lam = p.rate_per_1000_node_days / 1000 / 24  # per node-hour

    def now(self) -> datetime:
        return T0 + timedelta(hours=self.t)

    def exclude(self) -> set[int]:
        if self.policy == "oracle":
            return {n for n in range(self.cluster.size) if not self.cluster.healthy(n, self.t)}
        if self.policy != "orchestrator":
            return set()
        inventory = [f"node{n}" for n in range(self.cluster.size)]
        plan = exclude_plan(self.state.blacklist, self.policy_cfg, inventory, self.p.nodes, self.now())
        return {int(n[4:]) for n in plan.nodes}

    def place(self) -> list[int]:
        ex = self.exclude()
        return [n for n in range(self.cluster.size) if n not in ex][: self.p.nodes]

    def segment(self) -> None:
        p = self.p
        self.segments += 1
        after_failure, self.after_failure = self.after_failure, False
        self.t += p.requeue_queue_h if after_failure and p.requeue_queue_h is not None else p.queue_h
        nodes = self.place()
        bad = [n for n in nodes if not self.cluster.healthy(n, self.t)]
        if bad:  # a sticky node kills the job at start-up (CUDA OOM in the first collective)
            self.sticky_hits += 1
            self._fail(nodes, bad[0], "sticky", at=self.t + p.restart_h / 2, run_start=None)
            return
        start = self.t + p.restart_h
        # time to the first fault among the allocated nodes
        ttf = self.rng.expovariate(self.lam * len(nodes))
        end_limit = self.t + p.time_limit_h
        if start + ttf >= end_limit or start + ttf >= p.horizon_h:
            stop = min(end_limit, p.horizon_h)
            self.productive += self._useful(max(0.0, stop - start), lost_tail=False)
            self.t = stop
            return
        failed = self.rng.choice(nodes)
        u = self.rng.random()
        kind = "hang" if u < p.hang_share else ("sticky" if u < p.hang_share + p.sticky_share else "crash")
        if kind == "sticky":
            self.cluster.broken_until[failed] = start + ttf + p.repair_h
        self._fail(nodes, failed, kind, at=start + ttf, run_start=start)

    def _useful(self, ran_h: float, lost_tail: bool) -> float:
        """Training hours that survive: whole checkpoint intervals, minus checkpoint writes."""
        dt, w = self.p.ckpt_interval_h, self.p.ckpt_write_h
        kept = math.floor(ran_h / (dt + w)) * dt if lost_tail else ran_h * dt / (dt + w)
        return kept

    def _fail(self, nodes: list[int], failed: int, kind: str, at: float, run_start: float | None) -> None:
        p = self.p
        self.failures += 1
        self.after_failure = True
        if run_start is not None:
            self.productive += self._useful(at - run_start, lost_tail=True)
        detect = {
            "oracle": 0.0,
            "orchestrator": p.orch_hang_h if kind == "hang" else p.orch_detect_h,
            "resubmit": p.stall_timeout_h if kind == "hang" else p.nccl_timeout_h,
            "blind": (self.t + p.time_limit_h - at) if kind == "hang" else p.nccl_timeout_h,
        }[self.policy]
        self.t = min(at + max(detect, 0.0), p.horizon_h)
        if self.policy == "orchestrator":
            self._orchestrate(nodes, failed, kind, startup=run_start is None)

    def _orchestrate(self, nodes: list[int], failed: int, kind: str, startup: bool) -> Outcome:
        """The product's own conclude (classify -> decide -> ledger edits) on the evidence of this fault."""
        status, ev = _evidence(nodes, failed, "hang" if kind == "hang" else "crash", startup)
        seg = SegmentRecord(index=len(self.state.segments) + 1, job_name="s", job_id=f"sim{self.segments}",
                            start_iteration=0, end_iteration=1, nodes=[f"node{n}" for n in nodes],
                            cancelled_by_controller="stall: simulated" if kind == "hang" else "",
                            cancel_reason=CancelReason.STALL if kind == "hang" else None)
        t = judged(self.state.evolve(segments=[*self.state.segments, seg]), Ended(status, tuple(ev)), self.policy_cfg,
                   Goal(), "", self.now())
        assert t.outcome is not None
        # the simulation runs to its horizon whatever the policy says
        self.state = t.ledger.evolve(status=RunStatus.RUNNING, segments=t.ledger.segments[-3:])
        return t.outcome

    def run(self) -> Result:
        while self.t < self.p.horizon_h:
            self.segment()
        return Result(self.policy, self.productive / self.p.horizon_h, self.segments, self.failures,
                      self.sticky_hits, self.productive)


def simulate(p: Params, policy: str) -> Result:
    return Run(p, policy).run()


def closed_form(p: Params) -> float:
    """Meta's model: E[ETTR] ~ (1 - lambda (u0 + dt/2)) / (1 + w/dt), lambda = failures per hour of the job."""
    lam = p.nodes * p.rate_per_1000_node_days / 1000 / 24
    return (1 - lam * (p.restart_h + p.ckpt_interval_h / 2)) / (1 + p.ckpt_write_h / p.ckpt_interval_h)
