"""Spares and restart inside the allocation, and the adaptive checkpoint interval, in the ETTR simulation.

Policies (on top of scripts/ettr_sim.py's, with the same cluster, faults and product decision code):
- `spares`: each segment allocates nodes + spares (sized by the product's `spares.spares_needed`); a node
  fault that the product's `conclude` blames on a node is handled by `spares.restart_in_allocation`: the
  culprit is dropped, a spare promoted, the training step relaunched from the newest checkpoint in the same
  job: no queue wait, and `Params.step_restart_h` (default: a new job's `restart_h`) until training runs
  again. Out of spares, the batch host failing, or a fault that is not a node's: a new segment with --exclude,
  as before.
- `spares+interval`: the same, and every segment checkpoints at the interval the product's
  `checkpoint_interval.advise` gives from the failures observed so far (Daly's optimum).
- `oracle+spares`: instant detection and perfect exclusion, with the same spares and interval: the bound.
"""

from __future__ import annotations

from orchestrator.checkpoint_interval import Observed, advise
from orchestrator.spares import restart_in_allocation, spares_needed
from scripts.ettr_sim import Params, Result, Run

SPARE_POLICIES = ("spares", "spares+interval", "oracle+spares")


class SparesRun(Run):
    def __init__(self, p: Params, policy: str):
        super().__init__(p, "oracle" if policy.startswith("oracle") else "orchestrator")
        self.name = policy
        self.adaptive = policy in ("spares+interval", "oracle+spares")
        self.dt = p.ckpt_interval_h
        self.seen_failures, self.seen_node_hours = 0, 0.0
        self.n_spares = spares_needed(self.lam, p.nodes, p.time_limit_h)
        self.step_restart_h = p.restart_h if p.step_restart_h is None else p.step_restart_h

    def _useful(self, ran_h: float, lost_tail: bool) -> float:
        dt, w = self.dt, self.p.ckpt_write_h
        return (ran_h // (dt + w)) * dt if lost_tail else ran_h * dt / (dt + w)

    def _advise(self) -> None:
        if self.adaptive:
            a = advise(Observed(self.seen_failures, self.seen_node_hours), self.p.nodes, self.p.ckpt_write_h * 3600,
                       self.step_restart_h * 3600, self.dt * 3600)
            self.dt = a.interval_s / 3600

    def _allocate(self) -> tuple[list[int], list[int]] | None:
        """Nodes and spares; nodes broken at start-up are found by the pre-flight and swapped for spares."""
        from orchestrator.loop.submission import exclude_plan

        if self.policy == "oracle":
            ex = {n for n in range(self.cluster.size) if not self.cluster.healthy(n, self.t)}
        else:
            inventory = [f"node{n}" for n in range(self.cluster.size)]
            plan = exclude_plan(self.state.blacklist, self.policy_cfg, inventory, self.p.nodes + self.n_spares,
                                self.now())
            ex = {int(n[4:]) for n in plan.nodes}
        alloc = [n for n in range(self.cluster.size) if n not in ex][: self.p.nodes + self.n_spares]
        running, spares = alloc[: self.p.nodes], alloc[self.p.nodes:]
        for i, n in enumerate(running):
            if self.cluster.healthy(n, self.t):
                continue
            good = [s for s in spares if self.cluster.healthy(s, self.t)]
            if self.policy != "oracle":
                self._orchestrate(running, n, "sticky", startup=True)  # the pre-flight names it
            if not good:
                return None
            running[i] = good[0]
            spares.remove(good[0])
        return running, spares

    def segment(self) -> None:
        p = self.p
        self.segments += 1
        self.t += p.queue_h
        self._advise()
        alloc = self._allocate()
        if alloc is None:  # out of spares at start-up: the job dies there, as a blind one would
            self.sticky_hits += 1
            self.t += p.restart_h / 2
            return
        running, spares = alloc
        end_limit = min(self.t + p.time_limit_h, p.horizon_h)
        start = self.t + p.restart_h
        while start < end_limit:
            ttf = self.rng.expovariate(self.lam * len(running))
            if start + ttf >= end_limit:
                self.productive += self._useful(end_limit - start, lost_tail=False)
                self.seen_node_hours += (end_limit - start) * len(running)
                break
            failed = self.rng.choice(running)
            kind = self._kind()
            if kind == "sticky":
                self.cluster.broken_until[failed] = start + ttf + p.repair_h
            self.failures += 1
            self.seen_failures += 1
            self.seen_node_hours += ttf * len(running)
            self.productive += self._useful(ttf, lost_tail=True)
            detect = 0.0 if self.policy == "oracle" else (p.orch_hang_h if kind == "hang" else p.orch_detect_h)
            self.t = min(start + ttf + detect, p.horizon_h)
            if not self._restart(running, spares, failed, kind):
                return
            # the step relaunched from the newest checkpoint on warm nodes: no queue wait, no new job's start-up
            start = self.t + self.step_restart_h
        self.t = end_limit

    def _kind(self) -> str:
        u = self.rng.random()
        return "hang" if u < self.p.hang_share else ("sticky" if u < self.p.hang_share + self.p.sticky_share
                                                      else "crash")

    def _restart(self, running: list[int], spares: list[int], failed: int, kind: str) -> bool:
        """The product's conclude on the fault, then its restart-in-allocation decision."""
        if self.policy == "oracle":
            ok = failed != running[0] and bool(spares)
        else:
            out = self._orchestrate(running, failed, "hang" if kind == "hang" else "crash", startup=False)
            r = restart_in_allocation(out.verdict, out.decision, [f"node{n}" for n in running],
                                      [f"node{s}" for s in spares], batch_host=f"node{running[0]}")
            ok = r.ok
        if ok:
            running[running.index(failed)] = spares.pop(0)
        return ok

    def run(self) -> Result:
        res = super().run()
        return Result(self.name, res.ettr, res.segments, res.failures, res.sticky_hits, res.productive_h)


def simulate_spares(p: Params, policy: str) -> Result:
    return SparesRun(p, policy).run()
