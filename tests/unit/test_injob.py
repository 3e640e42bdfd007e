"""The pure side of restarts inside an allocation with spare nodes (issue 14): orchestrator/loop/injob.py and
spares.restart_in_allocation as injob uses it. No clock, no files, no cluster."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from orchestrator.contract import StepEnd, StepRecord
from orchestrator.diagnose.finish import lost_node_verdict
from orchestrator.loop.injob import after_step, free_spares, in_allocation, replace, step_status
from orchestrator.model import Action, Cause, Decision, Evidence, JobState, JobStatus, RunStatus, Verdict
from orchestrator.placement import InAllocation, OwnJob
from orchestrator.spares import restart_in_allocation
from orchestrator.state import RunState, SegmentRecord

T0 = datetime(2026, 1, 1, tzinfo=UTC)
ALLOC = ["node1", "node2", "node3", "node4"]  # node1 is the batch host


def seg(nodes: tuple[str, ...] = ("node1", "node2"), allocation: tuple[str, ...] = tuple(ALLOC)) -> SegmentRecord:
    return SegmentRecord(index=1, job_name="t.seg0001", job_id="101", nodes=list(nodes),
                         placement=InAllocation(nodes=allocation, spares=len(allocation) - len(nodes),
                                                dir="/run/segments/0001/allocation"))


def run_state(status: RunStatus = RunStatus.RUNNING) -> RunState:
    return RunState(run="t", status=status, created_at=T0, updated_at=T0, segments=[seg()])


def running(nodes: tuple[str, ...] = tuple(ALLOC)) -> JobStatus:
    return JobStatus(state=JobState.RUNNING, nodes=nodes)


def rec(ended: bool = False, code: int | None = None, lost: tuple[str, ...] = (),
        nodes: tuple[str, ...] = ("node1", "node2")) -> StepRecord:
    return StepRecord(segment=1, job_id="101", nodes=list(nodes), allocation=ALLOC, started="t0",
                      ended="t1" if ended else "", exit_code=code, lost_nodes=list(lost))


def ecc(node: str) -> tuple[Verdict, Decision]:
    v = Verdict(cause=Cause.GPU_ECC, culprit_nodes=(node,), blame=True, confidence=0.9,
                evidence=(Evidence(node=node, text="uncorrectable ECC error encountered", cause=Cause.GPU_ECC),))
    d = Decision(action=Action.RESUBMIT_EXCLUDE, reason=f"gpu_ecc: exclude {node}", blame_nodes=(node,), hard=True)
    return v, d


# ---- in_allocation / step_status ------------------------------------------------------------

def test_in_allocation_is_the_allocation_dir() -> None:
    assert in_allocation(seg())
    assert not in_allocation(SegmentRecord(index=1, job_name="t.seg0001", placement=OwnJob()))


def test_running_step_keeps_the_job_state_with_the_step_nodes() -> None:
    st = step_status(running(), rec())
    assert st.state == JobState.RUNNING and st.nodes == ("node1", "node2")  # not the spares


def test_no_step_record_yet_is_the_job_as_polled() -> None:
    assert step_status(running(), None) == running()


def test_step_ended_zero_is_completed() -> None:
    st = step_status(running(), rec(ended=True, code=0))
    assert st.state == JobState.COMPLETED and st.exit_code == 0 and st.nodes == ("node1", "node2")


@pytest.mark.parametrize("code", [1, 134, 255])
def test_step_ended_non_zero_is_failed_with_its_code(code: int) -> None:
    st = step_status(running(), rec(ended=True, code=code))
    assert st.state == JobState.FAILED and st.exit_code == code and not st.reason


def test_lost_step_node_is_node_fail_with_reason() -> None:
    st = step_status(running(("node1", "node3", "node4")), rec(ended=True, code=1, lost=("node2",)))
    assert st.state == JobState.NODE_FAIL and st.exit_code == 1
    assert "node2" in st.reason and st.nodes == ("node1", "node2")


def test_a_step_stopped_on_a_signal_waits_for_slurm_to_end_the_job() -> None:
    r = rec(ended=True, code=143).model_copy(update={"note": "stopped by a signal", "end": StepEnd.SIGNALLED})
    assert step_status(running(), r).state == JobState.RUNNING


def test_lost_spare_does_not_make_the_step_a_node_failure() -> None:
    st = step_status(running(), rec(ended=True, code=1, lost=("node4",)))  # node4 was a spare, not in the step
    assert st.state == JobState.FAILED and "node4" not in st.reason


@pytest.mark.parametrize("job_state", [JobState.TIMEOUT, JobState.CANCELLED, JobState.NODE_FAIL, JobState.COMPLETED])
def test_a_terminal_job_wins_over_the_step_record(job_state: JobState) -> None:
    job = JobStatus(state=job_state, exit_code=0, nodes=tuple(ALLOC))
    for r in (rec(), rec(ended=True, code=0), rec(ended=True, code=1, lost=("node2",))):
        st = step_status(job, r)
        assert st.state == job_state and st.nodes == ("node1", "node2")


# ---- lost_node_verdict ----------------------------------------------------------------------

def test_lost_node_becomes_the_culprit_of_a_node_failure_with_root_evidence() -> None:
    old = Evidence(node="node1", text="Watchdog caught collective operation timeout", role="secondary",
                   cause=Cause.NCCL_TIMEOUT)
    v = Verdict(cause=Cause.NCCL_TIMEOUT, confidence=0.5, evidence=(old,))
    out = lost_node_verdict(v, ["node2"], "101")
    assert out.cause == Cause.NODE_FAIL and out.culprit_nodes == ("node2",) and out.blame
    first = out.evidence[0]
    assert first.role == "root" and first.node == "node2" and first.cause == Cause.NODE_FAIL
    assert "node2" in first.text and "101" in first.text
    assert old in out.evidence  # what the logs said is kept after the root evidence
    assert "node2" in out.summary


def test_a_verdict_that_already_blames_the_lost_node_is_kept() -> None:
    v, _ = ecc("node2")
    assert lost_node_verdict(v, ["node2"], "101") is v


def test_no_lost_node_keeps_the_verdict() -> None:
    v = Verdict(cause=Cause.UNKNOWN, confidence=0.2)
    assert lost_node_verdict(v, [], "101") is v


def test_a_lost_node_joins_the_culprits_of_a_verdict_that_blames_another_node() -> None:
    v, _ = ecc("node1")  # an ECC on node1, and Slurm saw node2 fail too
    out = lost_node_verdict(v, ["node2"], "101")
    assert out.cause == Cause.GPU_ECC and out.culprit_nodes == ("node1", "node2") and out.blame
    assert any(e.node == "node2" and "Slurm removed node2" in e.text for e in out.evidence)


def test_a_verdict_on_the_code_is_not_turned_into_a_node_failure() -> None:
    v = Verdict(cause=Cause.USER_BUG, confidence=0.9, summary="KeyError on every rank")
    assert lost_node_verdict(v, ["node2"], "101") == v


def test_a_restart_never_asks_for_a_node_that_left_the_job() -> None:
    v, d = ecc("node2")  # node3 failed at the same time but nobody blamed it
    s = seg(("node2", "node3"), ("node1", "node2", "node3", "node4"))
    nxt = after_step(run_state(), s, v, d, ["node4"], job_ended=False, held=["node1", "node2", "node4"])
    assert not nxt.restart.ok and "node3 left the job" in nxt.cancel_job


def test_a_culprit_named_without_blame_is_still_replaced() -> None:
    v = Verdict(cause=Cause.HANG, culprit_nodes=("node2",), blame=False, confidence=0.3)
    out = lost_node_verdict(v, ["node2"], "101")
    assert out.cause == Cause.NODE_FAIL and out.blame


# ---- free_spares / replace -----------------------------------------------------------------

def test_free_spares_are_the_allocation_outside_the_step() -> None:
    assert free_spares(seg(), ALLOC, [], set()) == ["node3", "node4"]


@pytest.mark.parametrize(("held", "lost", "banned", "want"), [
    (["node1", "node2", "node4"], [], set(), ["node4"]),  # node3 is no longer held by the job
    (ALLOC, ["node3"], set(), ["node4"]),  # node3 was lost meanwhile
    (ALLOC, [], {"node4"}, ["node3"]),  # node4 is blacklisted
    (["node1", "node2", "node3"], ["node3"], {"node4"}, []),
])
def test_free_spares_exclude_unheld_lost_and_banned(held: list[str], lost: list[str], banned: set[str],
                                                    want: list[str]) -> None:
    assert free_spares(seg(), held, lost, banned) == want


def test_free_spares_never_offer_a_step_node() -> None:
    s = seg(nodes=("node1", "node3"))
    assert free_spares(s, ALLOC, [], set()) == ["node2", "node4"]


def test_replace_keeps_rank_order() -> None:
    assert replace(["node1", "node2", "node3"], ("node2",), ("node9",)) == ["node1", "node9", "node3"]
    assert replace(["a", "b", "c", "d"], ("b", "d"), ("x", "y")) == ["a", "x", "c", "y"]
    assert replace(["a", "b"], (), ()) == ["a", "b"]


def test_replace_puts_each_promoted_spare_where_its_dropped_node_was() -> None:
    # after an earlier restart the step's node order is not sorted; the blamed nodes arrive sorted
    got = replace(["node1", "node4", "node3"], ("node3", "node4"), ("node5", "node6"))
    assert got == ["node1", "node6", "node5"]  # node3 -> node5, node4 -> node6, as the alert says


# ---- after_step (with restart_in_allocation) -------------------------------------------------

def test_ecc_on_a_non_batch_node_with_a_spare_restarts_on_it() -> None:
    v, d = ecc("node2")
    nxt = after_step(run_state(), seg(), v, d, ["node3", "node4"], job_ended=False)
    assert nxt.restart.ok and nxt.restart.drop == ("node2",) and nxt.restart.promote == ("node3",)
    assert nxt.nodes == ("node1", "node3") and not nxt.cancel_job


def test_a_strike_restarts_too() -> None:
    v = Verdict(cause=Cause.SEGFAULT, culprit_nodes=("node2",), blame=True, confidence=0.7)
    d = Decision(action=Action.RESUBMIT, reason="segfault: strike against node2", blame_nodes=("node2",))
    nxt = after_step(run_state(), seg(), v, d, ["node4"], job_ended=False)
    assert nxt.restart.ok and nxt.nodes == ("node1", "node4")


def test_no_spare_left_cancels_the_job() -> None:
    v, d = ecc("node2")
    nxt = after_step(run_state(), seg(), v, d, [], job_ended=False)
    assert not nxt.restart.ok and not nxt.nodes
    assert "0 spare" in nxt.restart.why_not and "new segment" in nxt.cancel_job


def test_more_blamed_nodes_than_spares_cancels_the_job() -> None:
    v = Verdict(cause=Cause.GPU_ECC, culprit_nodes=("node2", "node3"), blame=True, confidence=0.9)
    d = Decision(action=Action.RESUBMIT_EXCLUDE, reason="x", blame_nodes=("node2", "node3"), hard=True)
    s = seg(nodes=("node1", "node2", "node3"))
    nxt = after_step(run_state(), s, v, d, ["node4"], job_ended=False)
    assert not nxt.restart.ok and "2 node(s) to replace, 1 spare(s)" in nxt.restart.why_not and nxt.cancel_job


def test_batch_host_blamed_cancels_the_job() -> None:
    v, d = ecc("node1")
    nxt = after_step(run_state(), seg(), v, d, ["node3"], job_ended=False)
    assert not nxt.restart.ok and "batch host node1" in nxt.restart.why_not
    assert nxt.cancel_job and not nxt.nodes


@pytest.mark.parametrize("cause", [Cause.USER_BUG, Cause.GPU_ECC])
def test_stop_cancels_the_job(cause: Cause) -> None:
    v = Verdict(cause=cause, culprit_nodes=("node2",), blame=cause != Cause.USER_BUG, confidence=0.9)
    d = Decision(action=Action.STOP_AND_ALERT, reason="user_bug: the same user_bug on every node")
    nxt = after_step(run_state(RunStatus.STOPPED), seg(), v, d, ["node3"], job_ended=False)
    assert not nxt.restart.ok and nxt.cancel_job.startswith("stop_and_alert: user_bug")


def test_a_stopped_run_never_restarts_even_on_a_restartable_action() -> None:
    v, d = ecc("node2")
    nxt = after_step(run_state(RunStatus.STOPPED), seg(), v, d, ["node3"], job_ended=False)
    assert not nxt.restart.ok and nxt.cancel_job


def test_a_wait_is_not_a_restart() -> None:
    v = Verdict(cause=Cause.FILESYSTEM, confidence=0.6)
    d = Decision(action=Action.WAIT_AND_RESUBMIT, reason="shared filesystem trouble", wait_s=300)
    nxt = after_step(run_state(), seg(), v, d, ["node3"], job_ended=False)
    assert not nxt.restart.ok and nxt.cancel_job


def test_a_cause_that_is_not_a_node_s_cancels_the_job() -> None:
    v = Verdict(cause=Cause.TIMELIMIT, confidence=1.0)
    d = Decision(action=Action.RESUBMIT, reason="timelimit: resubmit")
    nxt = after_step(run_state(), seg(), v, d, ["node3"], job_ended=False)
    assert not nxt.restart.ok and "not one node's fault" in nxt.restart.why_not and nxt.cancel_job


def test_done_after_a_clean_step_end_leaves_the_job_to_end_by_itself() -> None:
    v = Verdict(cause=Cause.SUCCESS, confidence=0.95)
    d = Decision(action=Action.DONE, reason="the training command exited 0 on every node")
    nxt = after_step(run_state(RunStatus.DONE), seg(), v, d, ["node3"], job_ended=False, step_ok=True)
    assert not nxt.restart.ok and not nxt.cancel_job and not nxt.nodes


def test_done_while_the_step_still_runs_ends_the_job() -> None:
    """The goal was reached but the step hangs in teardown: nothing else would free the nodes and spares."""
    v = Verdict(cause=Cause.SUCCESS, confidence=0.8)
    d = Decision(action=Action.DONE, reason="iteration 50 >= 50")
    nxt = after_step(run_state(RunStatus.DONE), seg(), v, d, ["node3"], job_ended=False, step_ok=False)
    assert not nxt.restart.ok and nxt.cancel_job.startswith("done")


@pytest.mark.parametrize("action", [Action.RESUBMIT_EXCLUDE, Action.STOP_AND_ALERT])
def test_a_job_that_already_ended_needs_nothing(action: Action) -> None:
    v, d = ecc("node2")
    nxt = after_step(run_state(), seg(), v, d.model_copy(update={"action": action}), ["node3"], job_ended=True)
    assert not nxt.restart.ok and not nxt.cancel_job and not nxt.nodes


def test_restart_in_allocation_ignores_blame_outside_the_step() -> None:
    v, d = ecc("node4")  # a spare was blamed: nothing in the step to replace
    r = restart_in_allocation(v, d, ["node1", "node2"], ["node3"], "node1")
    assert not r.ok and "not one node's fault" in r.why_not


def test_restart_in_allocation_promotes_spares_in_order() -> None:
    v = Verdict(cause=Cause.NODE_FAIL, culprit_nodes=("node2", "node3"), blame=True, confidence=0.95)
    d = Decision(action=Action.RESUBMIT_EXCLUDE, reason="x", blame_nodes=("node2", "node3"), hard=True)
    r = restart_in_allocation(v, d, ["node1", "node2", "node3"], ["node5", "node4", "node6"], "node1")
    assert r.ok and r.drop == ("node2", "node3") and r.promote == ("node5", "node4")
