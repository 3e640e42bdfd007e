from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator import budget
from orchestrator.blacklist import Blacklist
from orchestrator.model import Action, Cause, Verdict
from orchestrator.policy import decide
from orchestrator.settings import Goal, Policy
from orchestrator.state import RunState, SegmentRecord

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def seg(i: int, start: int, end: int | None, cause: Cause | None = None,
        nodes: tuple[str, ...] = ("n1", "n2")) -> SegmentRecord:
    return SegmentRecord(index=i, job_name=f"t.seg{i}", start_iteration=start, end_iteration=end, cause=cause,
                         nodes=list(nodes))


def state(*segs: SegmentRecord, bl: Blacklist | None = None) -> RunState:
    return RunState(run="t", created_at=NOW, updated_at=NOW, segments=list(segs), blacklist=bl or Blacklist())


def v(cause: Cause, culprits: tuple[str, ...] = (), blame: bool = False) -> Verdict:
    return Verdict(cause=cause, culprit_nodes=culprits, blame=blame, confidence=0.9)


P = Policy(max_segments=10, max_no_progress_segments=2, strike_threshold=2, max_infra_failures=4)
G = Goal(target_iteration=100)

CASES = [
    # (label, state, verdict, expected action, expected blame nodes)
    ("success at goal", state(seg(1, 0, 100)), v(Cause.SUCCESS), Action.DONE, ()),
    ("exit 0 before goal", state(seg(1, 0, 50)), v(Cause.SUCCESS), Action.RESUBMIT, ()),
    ("ecc excludes culprit", state(seg(1, 0, 35)), v(Cause.GPU_ECC, ("n3",), True), Action.RESUBMIT_EXCLUDE, ("n3",)),
    ("poisoned gpu excludes", state(seg(1, 30, 30)), v(Cause.GPU_OOM_STARTUP, ("n3",), True),
     Action.RESUBMIT_EXCLUDE, ("n3",)),
    ("node_fail excludes", state(seg(1, 0, 20)), v(Cause.NODE_FAIL, ("n2",), True), Action.RESUBMIT_EXCLUDE, ("n2",)),
    ("first soft strike resubmits", state(seg(1, 0, 20)), v(Cause.SEGFAULT, ("n2",), True), Action.RESUBMIT, ("n2",)),
    ("user bug stops", state(seg(1, 0, 20)), v(Cause.USER_BUG), Action.STOP_AND_ALERT, ()),
    ("user oom stops", state(seg(1, 0, 20)), v(Cause.USER_OOM), Action.STOP_AND_ALERT, ()),
    ("timelimit resubmits without blame", state(seg(1, 0, 40)), v(Cause.TIMELIMIT), Action.RESUBMIT, ()),
    ("preempted resubmits", state(seg(1, 0, 40)), v(Cause.PREEMPTED), Action.RESUBMIT, ()),
    ("filesystem waits", state(seg(1, 0, 40)), v(Cause.FILESYSTEM), Action.WAIT_AND_RESUBMIT, ()),
    ("nccl timeout no culprit", state(seg(1, 0, 40)), v(Cause.NCCL_TIMEOUT), Action.RESUBMIT, ()),
    ("no progress twice stops", state(seg(1, 40, 40), seg(2, 40, 40)), v(Cause.UNKNOWN), Action.STOP_AND_ALERT, ()),
    ("no progress once goes on", state(seg(1, 0, 40), seg(2, 40, 40)), v(Cause.UNKNOWN), Action.RESUBMIT, ()),
    ("same failure same iteration elsewhere", state(seg(1, 0, 57, Cause.SEGFAULT, ("n1", "n2")),
                                                    seg(2, 50, 57, Cause.SEGFAULT, ("n3", "n4"))),
     v(Cause.SEGFAULT, ("n3",), True), Action.STOP_AND_ALERT, ()),
    ("max segments", state(*[seg(i, i * 10, i * 10 + 5) for i in range(1, 11)]), v(Cause.NCCL_TIMEOUT),
     Action.STOP_AND_ALERT, ()),  # a segment nobody is blamed for spends the user's budget
]


@pytest.mark.parametrize("label,st_,verdict,action,blame", CASES, ids=[c[0] for c in CASES])
def test_decide_table(label: str, st_: RunState, verdict: Verdict, action: Action, blame: tuple[str, ...]) -> None:
    d = decide(st_, verdict, P, G, NOW)
    assert d.action == action, d.reason
    assert d.blame_nodes == blame


def test_second_soft_strike_excludes() -> None:
    bl = Blacklist().record("n2", Cause.SEGFAULT, "x", "1", NOW, hard=False, expiry=timedelta(hours=1))
    d = decide(state(seg(1, 0, 20), bl=bl), v(Cause.SEGFAULT, ("n2",), True), P, G, NOW)
    assert d.action == Action.RESUBMIT_EXCLUDE and not d.hard


def test_wait_duration_comes_from_policy() -> None:
    d = decide(state(seg(1, 0, 40)), v(Cause.FILESYSTEM), Policy(wait_before_resubmit_s=123), G, NOW)
    assert d.wait_s == 123


@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5), st.booleans()), min_size=1, max_size=16),
       st.sampled_from(list(Cause)), st.booleans())
def test_decide_is_pure_and_bounded(progress: list[tuple[int, int, bool]], cause: Cause, blame: bool) -> None:
    segs, it = [], 0
    for i, (a, b, infra) in enumerate(progress, 1):  # infra: a node's or the environment's end (budget.py)
        segs.append(seg(i, it, it + a * b).evolve(infra=infra))
        it += a * b
    s = state(*segs)
    verdict = v(cause, ("n1",) if blame else (), blame)
    before = s.model_dump_json()
    d1 = decide(s, verdict, P, G, NOW)
    assert s.model_dump_json() == before  # the run state is not touched: edits are the caller's
    assert set(d1.blame_nodes) <= set(verdict.culprit_nodes)  # never blames a node the verdict did not name
    # restarts are bounded: the user's segments by max_segments, those nodes or the environment ended by
    # max_infra_failures (whichever the segment being judged counts against)
    infra = budget.infra_verdict(verdict)
    spent = sum(s.infra == infra for s in segs[:-1]) + 1
    if spent >= (P.max_infra_failures if infra else P.max_segments) and d1.action != Action.DONE:
        assert d1.action == Action.STOP_AND_ALERT
    if cause == Cause.USER_BUG:
        assert d1.action in (Action.STOP_AND_ALERT,) and not d1.blame_nodes


def _resumed(i: int, start: int, nodes: tuple[str, ...] = ("n1", "n2")) -> SegmentRecord:
    return seg(i, start, start, nodes=nodes).evolve(resumed_from=f"/ckpt/iter_{start:07d}")


def test_one_node_failing_right_after_a_resume_is_that_node_s_strike_not_the_checkpoint_s() -> None:
    """Found by the randomized crash schedules: a sticky segfault on one node at the first iteration after a
    resume was read as a checkpoint that fails to load, fell back to older checkpoints and stopped the run; it is
    the node's strike (the second one excludes it), unless the error names the load."""
    bl = Blacklist().record("n2", Cause.SEGFAULT, "x", "1", NOW, hard=False, expiry=timedelta(hours=1))
    d = decide(state(seg(1, 0, 10), _resumed(2, 10), bl=bl), v(Cause.SEGFAULT, ("n2",), True), P, G, NOW)
    assert d.action == Action.RESUBMIT_EXCLUDE and d.blame_nodes == ("n2",) and not d.checkpoint_failed
    loading = Verdict(cause=Cause.SEGFAULT, culprit_nodes=("n2",), blame=True, confidence=0.9,
                      summary="segfault in torch.load while reading the checkpoint")
    d = decide(state(seg(1, 0, 10), _resumed(2, 10)), loading, P, G, NOW)
    assert d.checkpoint_failed == "/ckpt/iter_0000010", d.reason
    d = decide(state(seg(1, 0, 10), _resumed(2, 10)), v(Cause.UNKNOWN), P, G, NOW)  # nobody named: the checkpoint
    assert d.checkpoint_failed == "/ckpt/iter_0000010", d.reason


def test_exit_0_short_of_the_goal_after_a_resume_is_no_progress_not_a_bad_checkpoint() -> None:
    """Issue 21 re-run (S9): a training whose own count stops at 150 (goal 200) exits 0 at once after each resume;
    that was read as iter_150 failing to load, good checkpoints were marked bad and the run fell back through them.
    A clean exit marks nothing bad; the no-progress rule stops the run and says why."""
    goal = Goal(target_iteration=200)
    first = seg(1, 0, 150)
    second = seg(2, 150, 150).evolve(resumed_from="/ck/iter_150")
    d = decide(state(first, second), v(Cause.SUCCESS), P, goal, NOW)
    assert d.action == Action.RESUBMIT and d.checkpoint_failed is None
    third = seg(3, 150, 150).evolve(resumed_from="/ck/iter_150")
    d = decide(state(first, second, third), v(Cause.SUCCESS), P, goal, NOW)
    assert d.action == Action.STOP_AND_ALERT and d.rule == "no_progress" and d.checkpoint_failed is None
    assert "exited 0 on every node at iteration 150, short of the goal 200" in d.reason


def test_done_because_the_training_printed_its_end_does_not_claim_every_node_exited_0() -> None:
    """Issue 21 re-run (W10b): node2 exited 1 after the goal, the reason said `exited 0 on every node`."""
    printed = v(Cause.SUCCESS).model_copy(update={"rule": "printed_its_end"})
    d = decide(state(seg(1, 0, 100)), printed, P, G, NOW)
    assert d.action == Action.DONE and "printed its end" in d.reason and "exited 0" not in d.reason
