"""Issue 41: a loss gone NaN rolls back to a checkpoint written before the onset, a bounded number of times, then
stops with the history; a checkpoint written at or after the onset is never resumed from. The fake cluster's
ranks raise a framework's own check (`FloatingPointError: Loss is NaN at iteration 25`) on every node."""

from __future__ import annotations

from pathlib import Path

from orchestrator import numerics
from orchestrator.model import Action, Cause, Evidence, Role, RunStatus
from tests.fakes import Fault
from tests.unit.test_controller_fake import make


def _iteration(resumed: str | None) -> int:
    return int(str(resumed).rsplit("iter_", 1)[1]) if resumed else 0


def test_a_nan_that_does_not_come_back_is_rolled_back_and_the_run_finishes(tmp_path: Path) -> None:
    ctl, cluster, _ = make(tmp_path, {"all": Fault("nan", at=25, sticky=False)})
    state = ctl.run()
    assert state.status == RunStatus.DONE
    s1, s2 = state.segments
    assert s1.cause == Cause.USER_BUG and s1.decision_rule == "loss_rollback" and s1.action == Action.RESUBMIT
    assert s1.rollback_below == 25 and "rollback 1 of 2" in s1.reason
    assert _iteration(s2.resumed_from) == 20 and s2.end_iteration == 50
    assert not state.blacklist.entries  # the numerics, not a node


def test_a_nan_that_comes_back_stops_after_two_rollbacks_with_its_history(tmp_path: Path) -> None:
    ctl, cluster, _ = make(tmp_path, {"all": Fault("nan", at=25)})
    state = ctl.run()
    assert state.status == RunStatus.STOPPED
    assert [s.decision_rule for s in state.segments] == ["loss_rollback", "loss_rollback", "loss_not_finite_again"]
    last = state.segments[-1]
    assert last.action == Action.STOP_AND_ALERT and "after 2 rollback(s)" in last.reason
    assert "25 (segment 1), 25 (segment 2)" in last.reason
    assert all(_iteration(s.resumed_from) < 25 for s in state.segments)
    assert len(cluster.submitted) == 3


def test_a_checkpoint_written_after_the_onset_is_never_resumed_from(tmp_path: Path) -> None:
    """A check that fires late (the loss printed nan for a few steps first) leaves checkpoints written with a bad
    state; the next segment resumes from the newest one before the onset."""
    ctl, cluster, _ = make(tmp_path, {"all": Fault("nan", at=25, sticky=False)})
    state = ctl.step(ctl.load_or_init())
    while state.current is not None and state.current.action is None:
        state = ctl.step(state)
    poisoned = tmp_path / "ckpt" / "iter_0000030" / "mp_rank_00"
    poisoned.mkdir(parents=True)
    (poisoned / "model_optim_rng.pt").write_text("30")
    (tmp_path / "ckpt" / "latest_checkpointed_iteration.txt").write_text("30")
    state = ctl.step(state)
    assert len(cluster.submitted) == 2 and cluster.submitted[1].start_iteration == 20, cluster.submitted[1]
    assert "iter_0000030" not in (cluster.submitted[1].resume_from or "")


def test_no_rollback_when_asked_for_none_or_when_nothing_was_saved_yet(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    ctl, _, _ = make(tmp_path / "a", {"all": Fault("nan", at=25, sticky=False)}, overrides=["policy.nan_rollbacks=0"])
    state = ctl.run()
    assert state.status == RunStatus.STOPPED and state.segments[-1].decision_rule != "loss_rollback"
    ctl, _, _ = make(tmp_path / "b", {"all": Fault("nan", at=5, sticky=False)})  # the first save is at 10
    state = ctl.run()
    assert state.status == RunStatus.STOPPED and len(state.segments) == 1


def _root(text: str) -> Evidence:
    return Evidence(node="n1", text=text, role=Role.ROOT, cause=Cause.USER_BUG)


def test_the_onset_is_the_iteration_the_check_names_or_the_one_after_the_last_reached() -> None:
    # real spellings: Megatron-LM's NaN check, PyTorch Lightning's `detect_anomaly`/terminate_on_nan, fairseq
    assert numerics.onset([_root("FloatingPointError: Loss is NaN at iteration 25")], 30) == 25
    assert numerics.onset([_root("FloatingPointError: Minimum loss scale reached (0.0001).")], 40) == 41
    assert numerics.onset([_root("ValueError: could not broadcast")], 40) == 41  # the caller checks not_finite
    assert numerics.pending([(1, 25, 25), (2, 25, 24)]) == [(1, 25), (2, 25)]  # reaching 25 is not past it
    assert numerics.pending([(1, 25, 24), (2, None, 90), (3, 500, 499)]) == [(3, 500)]  # trained past 25
    assert numerics.ceiling([(1, 25, 24), (2, None, 90)]) is None
