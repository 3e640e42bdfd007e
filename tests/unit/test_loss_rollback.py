"""Issue 41: the loss the ranks print, watched live on the fake cluster. A NaN printed (the job trains on) or a spike
cancels the segment; it is judged `loss_anomaly` and rolled back to a checkpoint written before the onset, a bounded
number of times; a checkpoint written at or after the onset is never resumed from."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.model import Action, CancelReason, Cause, RunStatus
from tests.fakes import Fault
from tests.unit.test_controller_fake import make


def _iteration(resumed: str | None) -> int:
    return int(str(resumed).rsplit("iter_", 1)[1]) if resumed else 0


@pytest.mark.parametrize("kind", ["nanloss", "spike"])
def test_a_bad_loss_that_does_not_come_back_is_rolled_back_and_the_run_finishes(tmp_path: Path, kind: str) -> None:
    ctl, cluster, _ = make(tmp_path, {"all": Fault(kind, at=32, sticky=False)})
    state = ctl.run()
    assert state.status == RunStatus.DONE, state.stop_reason
    s1, s2 = state.segments
    assert s1.cancel_reason == CancelReason.LOSS_ANOMALY and s1.cause == Cause.LOSS_ANOMALY
    assert s1.decision_rule == "loss_rollback" and s1.action == Action.RESUBMIT and s1.rollback_below == 32
    assert ("went NaN" if kind == "nanloss" else "spiked") in s1.reason
    assert s1.evidence[0].text.startswith("the loss ") and "iteration 32" in s1.evidence[0].text
    assert _iteration(s2.resumed_from) == 30 and s2.end_iteration == 50
    assert not state.blacklist.entries and not s1.culprit_nodes  # the numerics, not a node
    # the data-skip hint, Megatron's --skip-train-iteration-range form: from the onset to where segment 1 got
    assert dict(cluster.submitted[1].env)["ORCH_SKIP_BATCHES"] == f"32-{s1.end_iteration}"
    assert "ORCH_SKIP_BATCHES" not in dict(cluster.submitted[0].env)


def test_a_spike_that_comes_back_after_each_resume_stops_after_two_rollbacks(tmp_path: Path) -> None:
    """The second and third segments resume from before the onset and meet the spike in their first steps: the
    baseline the segment before ended with judges it at once (no 20 losses to wait for)."""
    ctl, cluster, _ = make(tmp_path, {"all": Fault("spike", at=32)})
    state = ctl.run()
    assert state.status == RunStatus.STOPPED
    assert [s.decision_rule for s in state.segments] == ["loss_rollback", "loss_rollback", "loss_not_finite_again"]
    assert all(s.cause == Cause.LOSS_ANOMALY for s in state.segments)
    last = state.segments[-1]
    assert last.action == Action.STOP_AND_ALERT
    assert "spiked again" in last.reason and "after 2 rollback(s)" in last.reason
    assert all(_iteration(s.resumed_from) < 32 for s in state.segments)
    assert len(cluster.submitted) == 3


def test_no_rollback_when_asked_for_none_or_when_the_loss_is_not_watched(tmp_path: Path) -> None:
    for sub in ("a", "b"):
        (tmp_path / sub).mkdir()
    ctl, _, _ = make(tmp_path / "a", {"all": Fault("nanloss", at=32)}, overrides=["policy.nan_rollbacks=0"])
    state = ctl.run()
    assert state.status == RunStatus.STOPPED and len(state.segments) == 1
    assert state.segments[0].cause == Cause.LOSS_ANOMALY and state.segments[0].action == Action.STOP_AND_ALERT
    ctl, _, _ = make(tmp_path / "b", {"all": Fault("spike", at=32)}, overrides=["loss.watch=false"])
    state = ctl.run()  # nobody reads the loss: the job runs to its end
    assert state.status == RunStatus.DONE and len(state.segments) == 1


def test_no_checkpoint_before_the_onset_stops_with_what_to_change(tmp_path: Path) -> None:
    ctl, _, _ = make(tmp_path, {"all": Fault("nanloss", at=8)})
    state = ctl.run()
    s1 = state.segments[0]
    assert state.status == RunStatus.STOPPED and s1.cause == Cause.LOSS_ANOMALY
    assert s1.action == Action.STOP_AND_ALERT and "learning rate" in s1.reason


def test_a_spike_on_one_nodes_ranks_alone_is_rolled_back_with_a_strike_on_that_node(tmp_path: Path) -> None:
    """node2's ranks print a spiked loss while node1's and node3's stay sound past its onset: the numerics of that
    node (a GPU computing garbage), a strike on it beside the rollback; the second time it is excluded."""
    ctl, cluster, _ = make(tmp_path, {"node2": Fault("spike", at=32)})
    state = ctl.run()
    s1, s2 = state.segments[0], state.segments[1]
    assert s1.cause == Cause.LOSS_ANOMALY and s1.culprit_nodes == ["node2"] and s1.decision_rule == "loss_rollback"
    assert "node2 alone: a strike" in s1.reason and s1.rollback_below == 32
    assert s2.cause == Cause.LOSS_ANOMALY and s2.action == Action.RESUBMIT_EXCLUDE, s2.reason
    assert "node2" in state.segments[2].excluded and state.status == RunStatus.DONE
    entry = state.blacklist.get("node2")
    assert entry is not None and entry.cause == Cause.LOSS_ANOMALY


def test_each_segment_keeps_its_printed_loss_curve_finite_points_only_thinned_when_long(tmp_path: Path) -> None:
    from datetime import UTC, datetime

    from prometheus_client import generate_latest

    from orchestrator.loop.progress import CURVE_POINTS, curve
    from orchestrator.views.metrics import registry
    from orchestrator.views.status import status_json

    ctl, _, _ = make(tmp_path, {"all": Fault("nanloss", at=32, sticky=False)})
    state = ctl.run()
    s1, s2 = state.segments
    steps = [st for st, _ in s1.losses]
    assert steps == sorted(steps) and steps[-1] < 32 and all(0.9 < v < 1.1 for _, v in s1.losses)  # NaN not kept
    assert s2.losses and s2.losses[0][0] > 30 and s2.losses[-1][0] == 50
    now = datetime.now(UTC)
    assert tuple(status_json(state, now)["segments"][1]["losses"][-1]) == s2.losses[-1]
    assert b"orchestrator_loss{" in generate_latest(registry(state, now, None))
    long: list[tuple[int, float]] = []
    for i in range(1, 2000):
        long = curve(long, (i, 1.0 / i))
    assert len(long) <= CURVE_POINTS + 1 and long[-1] == (1999, float(f"{1 / 1999:.6g}"))
    assert [s for s, _ in long] == sorted(s for s, _ in long) and long[0][0] == 1


def test_the_report_draws_the_loss_panel_only_for_a_run_whose_ranks_printed_a_loss(tmp_path: Path) -> None:
    import struct
    from datetime import UTC, datetime

    from orchestrator.views.report import render_png

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with_loss = make(tmp_path / "a", {"all": Fault("nanloss", at=32, sticky=False)})[0].run()
    without = make(tmp_path / "b", {}, overrides=["loss.watch=false"])[0].run()
    assert with_loss.segments[0].losses and not without.segments[0].losses

    def height(png: bytes) -> int:  # the IHDR chunk: width, height
        assert png[:8] == b"\x89PNG\r\n\x1a\n"
        return int(struct.unpack(">II", png[16:24])[1])

    now = datetime.now(UTC)
    assert height(render_png(with_loss, now)) > height(render_png(without, now))
