"""Checkpoint-interval advice (Young/Daly) and spare sizing (issue 14): closed forms checked by hand."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.checkpoint_interval import (
    Observed,
    advise,
    daly_interval_h,
    expected_ettr,
    failure_rate_per_node_hour,
)
from orchestrator.model import Action, Cause, Decision, Verdict
from orchestrator.spares import poisson_tail, restart_in_allocation, spares_needed


def test_daly_is_young_for_cheap_checkpoints_and_below_it_otherwise() -> None:
    young = math.sqrt(2 * (1 / 60) * 3.0)  # w = 1 min, M = 3 h
    assert daly_interval_h(3.0, 1 / 60) == pytest.approx(young, rel=0.05)
    assert daly_interval_h(3.0, 0.5) < math.sqrt(2 * 0.5 * 3.0)
    assert daly_interval_h(1.0, 5.0) == 1.0  # writes longer than 2M: checkpoint once per M
    with pytest.raises(ValueError):
        daly_interval_h(0, 0.1)


@given(st.floats(0.2, 100), st.floats(0.001, 0.5))
def test_daly_beats_neighbouring_intervals(mtbf_h: float, write_h: float) -> None:
    lam, dt = 1 / mtbf_h, daly_interval_h(mtbf_h, write_h)
    best = expected_ettr(lam, 0.0, dt, write_h)
    assert best >= expected_ettr(lam, 0.0, dt * 2, write_h) - 1e-9
    assert best >= expected_ettr(lam, 0.0, dt / 2, write_h) - 1e-9


def test_rate_blends_the_run_with_the_prior() -> None:
    prior = failure_rate_per_node_hour(Observed(0, 0.0))
    assert prior == pytest.approx(3.79 / 1000 / 24)
    lots = failure_rate_per_node_hour(Observed(100, 1000 * 24.0), prior_node_days=1.0)
    assert lots == pytest.approx(100 / (1000 * 24), rel=0.01)  # a long run speaks for itself


def test_advice_at_2048_nodes_shortens_the_hour_long_interval() -> None:
    a = advise(Observed(0, 0.0), nodes=2048, write_s=120, restart_s=600, current_interval_s=3600)
    assert 2.8 < a.mtbf_h < 3.3  # about 3 h between failures of the whole job
    assert 900 < a.interval_s < 2400 and a.ettr_advised > a.ettr_now
    assert a.optimum_s == a.interval_s  # no maximum given
    cut = advise(Observed(0, 0.0), nodes=2048, write_s=120, restart_s=600, current_interval_s=3600,
                 max_interval_s=600)
    assert cut.interval_s == 600 and cut.optimum_s == a.interval_s
    assert cut.ettr_advised == pytest.approx(expected_ettr(1 / cut.mtbf_h, 600 / 3600, 600 / 3600, 120 / 3600))


def test_spares_poisson_tail() -> None:
    assert poisson_tail(1.0, 0) == pytest.approx(1 - math.exp(-1))
    assert poisson_tail(2.0, 3) == pytest.approx(1 - math.exp(-2) * (1 + 2 + 2 + 4 / 3))
    assert spares_needed(0.0, 512, 24) == 0
    k = spares_needed(3.79 / 1000 / 24, 2048, 24)  # about 7.8 failures expected in a day
    assert poisson_tail(7.76, k) < 0.01 <= poisson_tail(7.76, k - 1)


@pytest.mark.parametrize(("nodes", "hours"), [(3, 0.5), (512, 24), (2048, 24)])
def test_auto_sizing_says_the_rate_and_the_chance_of_running_out(nodes: int, hours: float) -> None:
    from orchestrator.spares import sizing_text

    rate = 3.79 / 1000 / 24
    text = sizing_text(rate, nodes, hours, "prior")
    k, mean = spares_needed(rate, nodes, hours), rate * nodes * hours
    assert f"with {k} spare" in text and f"{poisson_tail(mean, k):.2%}" in text and "3.79 failures" in text
    assert ("set a number to hold spares anyway" in text) == (k == 0)


@pytest.mark.parametrize(("nodes", "time_limit_min", "capped"), [(2, 10, True), (2, 24 * 60, True),
                                                                (2048, 24 * 60, False), (2048, 10, True)])
def test_the_advised_interval_is_at_most_half_the_time_limit(tmp_path: Path, nodes: int, time_limit_min: int,
                                                             capped: bool) -> None:
    """A small job's optimum is many hours: a segment must still save before its time limit ends it."""
    from datetime import UTC, datetime

    from orchestrator.blacklist import ExcludePlan
    from orchestrator.plan import plan
    from orchestrator.settings import load_settings, parse_overrides
    from orchestrator.state import RunState
    from tests.conftest import base_config, write_config

    cfg = base_config(tmp_path, resources={"nodes": nodes, "time_limit_min": time_limit_min},
                      checkpoint={"dir": str(tmp_path / "c"), "write_time_s": 120, "interval_s": 1800},
                      backend={"kind": "slurm"})
    s = load_settings(write_config(tmp_path, cfg), parse_overrides([]))
    now = datetime.now(UTC)
    spec = plan(s, RunState(run="r", created_at=now, updated_at=now), None, ExcludePlan(nodes=()), "python")
    every = int(dict(spec.env)["ORCH_CHECKPOINT_INTERVAL_S"])
    assert (every == time_limit_min * 30) == capped and every <= time_limit_min * 30
    assert ("half the" in spec.interval_advice) == capped and "the configured 30 min" in spec.interval_advice


def test_auto_sizing_names_what_it_observed(tmp_path: Path) -> None:
    from datetime import UTC, datetime, timedelta

    from orchestrator.plan import spares_reason
    from orchestrator.settings import load_settings, parse_overrides
    from orchestrator.state import RunState, SegmentRecord
    from tests.conftest import base_config, write_config

    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    cfg = base_config(tmp_path, resources={"nodes": 4, "spare_nodes": "auto"}, backend={"kind": "slurm"})
    s = load_settings(write_config(tmp_path, cfg), parse_overrides([]))
    state = RunState(run="r", created_at=t0, updated_at=t0)
    assert "no failure observed yet" in spares_reason(s, state)
    state = state.evolve(segments=[*state.segments, SegmentRecord(
        index=1, job_name="s1", submitted_at=t0, first_progress_at=t0, ended_at=t0 + timedelta(hours=5),
        nodes=["a", "b", "c", "d"], cause=Cause.GPU_ECC)])
    assert "1 node failure(s) in 20 node-hours observed" in spares_reason(s, state)
    fixed = load_settings(write_config(tmp_path, {**cfg, "resources": {"nodes": 4, "spare_nodes": 2}}),
                          parse_overrides([]))
    assert spares_reason(fixed, state) == ""


def verdict(cause: Cause, nodes: tuple[str, ...]) -> tuple[Verdict, Decision]:
    return (Verdict(cause=cause, culprit_nodes=nodes, blame=bool(nodes), confidence=0.9),
            Decision(action=Action.RESUBMIT_EXCLUDE, reason="x", blame_nodes=nodes, hard=True))


def test_restart_in_allocation_only_for_a_node_fault_with_spares_left() -> None:
    running, spares = ["n1", "n2", "n3"], ["n4"]
    r = restart_in_allocation(*verdict(Cause.GPU_ECC, ("n2",)), running, spares, batch_host="n1")
    assert r.ok and r.drop == ("n2",) and r.promote == ("n4",)
    assert not restart_in_allocation(*verdict(Cause.GPU_ECC, ("n2", "n3")), running, spares, "n1").ok
    assert not restart_in_allocation(*verdict(Cause.NODE_FAIL, ("n1",)), running, spares, "n1").ok  # batch host
    assert not restart_in_allocation(*verdict(Cause.USER_BUG, ()), running, spares, "n1").ok


def test_observed_failures_and_restart_cost_from_the_run_ledger() -> None:
    from datetime import UTC, datetime, timedelta

    from orchestrator.checkpoint_interval import observed, restart_cost_s
    from orchestrator.state import RunState, SegmentRecord

    t0 = datetime(2026, 1, 1, tzinfo=UTC)

    def seg(i: int, cause: Cause, hours: float, resumed: str | None) -> SegmentRecord:
        sub = t0 + timedelta(hours=10 * i)
        return SegmentRecord(index=i, job_name=f"s{i}", submitted_at=sub, first_progress_at=sub + timedelta(minutes=12),
                             ended_at=sub + timedelta(minutes=12, hours=hours), nodes=["a", "b"], cause=cause,
                             resumed_from=resumed)

    state = RunState(run="r", created_at=t0, updated_at=t0, segments=[
        seg(1, Cause.GPU_ECC, 2.0, None), seg(2, Cause.TIMELIMIT, 3.0, "iter_1"), seg(3, Cause.HANG, 1.0, "iter_2")])
    obs = observed(state)
    assert obs.failures == 2 and obs.node_hours == pytest.approx(2 * (2.0 + 3.0 + 1.0))
    assert restart_cost_s(state) == pytest.approx(12 * 60)
    assert restart_cost_s(RunState(run="r", created_at=t0, updated_at=t0)) == 600.0


def test_the_next_segment_gets_the_advised_interval(tmp_path: Path) -> None:
    """{checkpoint_interval} and ORCH_CHECKPOINT_INTERVAL_S carry the advice; status shows it."""
    from datetime import UTC, datetime

    from orchestrator.blacklist import ExcludePlan
    from orchestrator.plan import plan
    from orchestrator.settings import load_settings, parse_overrides
    from orchestrator.state import RunState
    from orchestrator.views.status import summary_table
    from tests.conftest import base_config, write_config

    cfg = base_config(tmp_path, command=["python", "train.py", "--save-interval-s={checkpoint_interval}"],
                      resources={"nodes": 2048}, checkpoint={"dir": str(tmp_path / "c"), "write_time_s": 120},
                      backend={"kind": "slurm"})
    s = load_settings(write_config(tmp_path, cfg), parse_overrides([]))
    now = datetime.now(UTC)
    state = RunState(run="r", created_at=now, updated_at=now)
    spec = plan(s, state, None, ExcludePlan(nodes=()), "python")
    every = int(dict(spec.env)["ORCH_CHECKPOINT_INTERVAL_S"])
    assert 900 < every < 2400 and spec.command[-1] == f"--save-interval-s={every}"
    from orchestrator.plan import fmt_min

    assert spec.interval_advice.startswith(f"every {fmt_min(every)} (the best for the failure rate)")
    assert "the default 60 min would give" in spec.interval_advice and "job MTBF of" in spec.interval_advice
    from orchestrator.loop.advance import intent

    state = state.evolve(segments=[*state.segments, intent(spec, "local")])
    from rich.console import Console

    console = Console(width=200, record=True)
    console.print(summary_table(state, now))
    text = console.export_text()
    assert "checkpoint interval" in text and "expected effective training time" in text


def test_a_capped_interval_says_why_and_that_a_longer_one_would_never_save(tmp_path: Path) -> None:
    """Issue 23: the row read `checkpoint every 5 min (half the 10 min time limit; the optimum is 632 min) (job
    MTBF ...): expected effective training time 71.4%, 96.7% at the default 60 min`: the 96.7% was for an
    interval that never saves within a 10-minute segment."""
    from datetime import UTC, datetime

    from orchestrator.blacklist import ExcludePlan
    from orchestrator.plan import plan
    from orchestrator.settings import load_settings, parse_overrides
    from orchestrator.state import RunState
    from tests.conftest import base_config, write_config

    cfg = base_config(tmp_path, resources={"nodes": 3, "time_limit_min": 10}, checkpoint={"dir": str(tmp_path / "c")})
    s = load_settings(write_config(tmp_path, cfg), parse_overrides([]))
    now = datetime.now(UTC)
    advice = plan(s, RunState(run="r", created_at=now, updated_at=now), None, ExcludePlan(nodes=()), "py") \
        .interval_advice
    assert advice.startswith("every 5 min (half the 10 min time limit; the failure rate alone would give")
    assert "the default 60 min would not save before the time limit" in advice and "96.7%" not in advice
