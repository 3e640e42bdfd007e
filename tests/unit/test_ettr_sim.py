"""The ETTR simulator against Meta's closed-form model, and the policies' order."""

from __future__ import annotations

from scripts.ettr_sim import Params, closed_form, simulate


def test_blind_array_matches_closed_form_where_it_applies() -> None:
    # the model's assumptions: every fault transient, detected at once, no queue, no time limit
    p = Params(nodes=512, sticky_share=0, hang_share=0, queue_h=0, nccl_timeout_h=0, time_limit_h=1e9,
               horizon_h=24 * 365, seed=3)
    sim = simulate(p, "blind").ettr
    assert abs(sim - closed_form(p)) < 0.01, (sim, closed_form(p))  # within 1 percentage point


def test_policies_order_on_a_cluster_with_sticky_faults() -> None:
    p = Params(nodes=256, horizon_h=24 * 20, seed=5)
    e = {pol: simulate(p, pol) for pol in ("blind", "resubmit", "orchestrator", "oracle")}
    assert e["blind"].ettr < e["orchestrator"].ettr <= e["oracle"].ettr + 1e-9
    assert e["blind"].sticky_hits > 10 * max(1, e["orchestrator"].sticky_hits)  # the same broken node, again
    assert e["oracle"].ettr - e["orchestrator"].ettr < 0.02


def test_spares_and_the_adaptive_interval_pay_off_when_the_queue_is_long() -> None:
    """Restart inside the allocation saves the queue wait; the product's interval advice saves lost work;
    an oracle with the same spares bounds both (scripts/ettr_spares.py drives the product's functions)."""
    from scripts.ettr_spares import simulate_spares

    p = Params(nodes=512, rate_per_1000_node_days=6.5, horizon_h=24 * 15, queue_h=1.0, seed=2)
    orch = simulate(p, "orchestrator")
    spares, adaptive = simulate_spares(p, "spares"), simulate_spares(p, "spares+interval")
    bound = simulate_spares(p, "oracle+spares")
    assert spares.segments < orch.segments / 2  # most faults handled inside the allocation
    assert orch.ettr < spares.ettr < adaptive.ettr <= bound.ettr + 0.005


def test_a_cheaper_relaunch_inside_the_allocation_counts_once_per_restart() -> None:
    """step_restart_h prices only the relaunches inside the job: None is the new job's restart_h; the saving per
    relaunch is about (restart_h - step_restart_h) for every failure handled in the allocation."""
    from scripts.ettr_spares import simulate_spares

    p = Params(nodes=512, rate_per_1000_node_days=6.5, horizon_h=24 * 15, queue_h=1.0, seed=2)
    same = simulate_spares(p, "spares")
    assert simulate_spares(Params(**{**p.__dict__, "step_restart_h": p.restart_h}), "spares") == same
    cheap = simulate_spares(Params(**{**p.__dict__, "step_restart_h": 1 / 60}), "spares")
    assert cheap.ettr > same.ettr
    in_job = same.failures - (same.segments - 15)  # failures not followed by a new segment (15 time limits)
    saved_h = (cheap.productive_h - same.productive_h)
    assert 0.3 * in_job * (p.restart_h - 1 / 60) < saved_h < 1.5 * in_job * (p.restart_h - 1 / 60)
