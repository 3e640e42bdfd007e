"""The whole loop with spare nodes (issue 14) on a FakeClock and a FakeCluster that plays the allocation
supervisor: restarts inside the same job, fallbacks to a new segment, budgets, a controller crash."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from orchestrator.backends.slurm_commands import parse_sacct
from orchestrator.clock import FakeClock
from orchestrator.contract import AllocationPaths, SegmentPaths, StepRecord, StepRequest, read_record, write_record
from orchestrator.loop.controller import Controller
from orchestrator.loop.submission import prepare
from orchestrator.model import Action, Cause, JobState, RunStatus, SegmentSpec
from orchestrator.settings import load_settings, parse_overrides
from orchestrator.state import RunState, StateStore
from tests.conftest import base_config, write_config
from tests.fakes import FakeCluster, Fault

NODES = ["node1", "node2", "node3", "node4"]
SPARES = {"nodes": 2, "spare_nodes": 1}


def make(tmp_path: Path, faults: dict[str, Fault] | None = None, nodes: Sequence[str] = NODES,
         resources: dict[str, Any] | None = None, step_s: float = 1.0,
         **cfg_over: Any) -> tuple[Controller, FakeCluster, FakeClock]:
    cfg = base_config(tmp_path, resources={**SPARES, **(resources or {})}, **cfg_over)
    s = load_settings(write_config(tmp_path, cfg), parse_overrides([]))
    clock = FakeClock()
    cluster = FakeCluster(clock, list(nodes), 50, tmp_path / "ckpt", step_s=step_s, faults=faults)
    return Controller(s, cluster, clock, StateStore(s.run_dir), python="python"), cluster, clock


def run_until(ctl: Controller, state: RunState, iteration: int) -> RunState:
    """Drive the loop until the current segment has reached `iteration` (bounded: never loops forever); the
    ledger then."""
    for _ in range(10_000):
        cur = state.current
        if cur is not None and (cur.end_iteration or 0) >= iteration:
            return state
        state = ctl.step(state)
    raise AssertionError(f"iteration {iteration} never reached")


def job_state(cluster: FakeCluster, job_id: str = "101") -> JobState:
    return cluster.jobs[job_id].state


def step_file(spec: SegmentSpec, segment: int) -> StepRecord | None:
    return read_record(AllocationPaths(Path(spec.allocation_dir)).step(segment), StepRecord)


def test_ecc_restarts_on_the_spare_inside_the_same_job(tmp_path: Path) -> None:
    ctl, cluster, clock = make(tmp_path, {"node2": Fault("ecc", at=35)})
    state = ctl.run()
    assert state.status == RunStatus.DONE
    assert len(cluster.submitted) == 1 and cluster.submitted[0].spares == 1  # one job, no queue wait for the restart
    first = cluster.submitted[0]
    s1, s2 = state.segments
    assert s1.cause == Cause.GPU_ECC and s1.culprit_nodes == ["node2"] and s1.action == Action.RESUBMIT_EXCLUDE
    assert s1.nodes == ["node1", "node2"] and s1.allocation == ["node1", "node2", "node3"]
    assert "restarted inside job 101 (node2 -> node3)" in s1.reason  # status says no new job was submitted
    assert s2.job_id == s1.job_id == "101" and s2.in_job_of == 1 and s2.allocation_dir == s1.allocation_dir
    assert s2.nodes == ["node1", "node3"] and s2.excluded == ["node2"] and s2.spare_count == 0
    assert s2.resumed_from and s2.resumed_from.endswith("iter_0000030") and s2.start_iteration == 30
    assert s2.end_iteration == 50 and s2.cause == Cause.SUCCESS
    job = cluster.jobs["101"]
    assert job.steps == [(1, ["node1", "node2"]), (2, ["node1", "node3"])] and job.state == JobState.COMPLETED
    spec2 = SegmentSpec.model_validate_json(SegmentPaths.of(ctl.s.run_dir, 2).spec.read_text())
    assert spec2.index == 2 and spec2.resume_from == s2.resumed_from and spec2.allocation_dir == first.allocation_dir
    assert "--resume=" + s2.resumed_from in spec2.command
    req = read_record(AllocationPaths(Path(first.allocation_dir)).request, StepRequest)
    assert req is not None and req.segment == 2 and req.nodes == ["node1", "node3"]
    old, new = step_file(first, 1), step_file(first, 2)
    assert old is not None and old.ended and "segment 2" in old.note  # the first step was stopped for the restart
    assert new is not None and new.nodes == ["node1", "node3"] and new.exit_code == 0
    log = SegmentPaths.of(ctl.s.run_dir, 2).log("node3").read_text()
    assert "segment=2 job=101" in log and "iteration       31/" in log  # resumed from 30, in the new segment's logs
    assert [e.node for e in state.blacklist.entries] == ["node2"]
    assert clock.slept < 600


def test_node_crash_inside_the_allocation_restarts_in_the_same_job(tmp_path: Path) -> None:
    ctl, cluster, _ = make(tmp_path)
    state = ctl.load_or_init()
    state = run_until(ctl, state, 22)
    cluster.crash("node2")
    job = cluster.jobs["101"]
    assert job.state == JobState.RUNNING and job.held == ["node1", "node3"]  # --no-kill: the job survives
    rec = step_file(cluster.submitted[0], 1)
    assert rec is not None and rec.ended and rec.lost_nodes == ["node2"]
    state = ctl.run()
    assert state.status == RunStatus.DONE and len(cluster.submitted) == 1
    s1, s2 = state.segments
    assert s1.cause == Cause.NODE_FAIL and s1.culprit_nodes == ["node2"] and s1.job_state == JobState.NODE_FAIL
    assert any("Slurm removed node2" in e.text for e in s1.evidence)
    assert s2.job_id == "101" and s2.nodes == ["node1", "node3"] and s2.start_iteration == 20
    assert job.steps[-1] == (2, ["node1", "node3"]) and job_state(cluster) == JobState.COMPLETED
    entry = state.blacklist.get("node2")
    assert entry is not None and entry.cause == Cause.NODE_FAIL and entry.job_id == "101"
    assert entry.evidence.startswith("Slurm removed node2 from job 101")  # no log file: no ':0:' before it


def test_a_second_fault_with_no_spare_left_falls_back_to_a_new_job(tmp_path: Path) -> None:
    ctl, cluster, _ = make(tmp_path, {"node2": Fault("ecc", at=25), "node3": Fault("ecc", at=40)})
    state = ctl.run()
    assert state.status == RunStatus.DONE
    s1, s2, s3 = state.segments
    assert (s1.job_id, s2.job_id) == ("101", "101") and s2.nodes == ["node1", "node3"]
    assert s2.cause == Cause.GPU_ECC and s2.culprit_nodes == ["node3"]
    assert cluster.jobs["101"].state == JobState.CANCELLED  # not left holding node1 and two broken nodes
    assert len(cluster.jobs["101"].steps) == 2
    assert len(cluster.submitted) == 2 and s3.job_id == "102" and s3.in_job_of is None
    nxt = cluster.submitted[1]
    assert nxt.exclude == ("node2", "node3") and nxt.exclude_hostlist == "node[2-3]"
    assert nxt.spares == 0  # only node1 and node4 are left: no spare without making the job unplaceable
    assert s3.nodes == ["node1", "node4"] and s3.start_iteration == 30 and s3.end_iteration == 50


def test_two_spares_take_two_restarts_in_one_job(tmp_path: Path) -> None:
    ctl, cluster, _ = make(tmp_path, {"node2": Fault("ecc", at=25), "node3": Fault("ecc", at=40)},
                           nodes=NODES + ["node5"], resources={"spare_nodes": 2})
    state = ctl.run()
    assert state.status == RunStatus.DONE and len(cluster.submitted) == 1
    assert cluster.jobs["101"].steps == [(1, ["node1", "node2"]), (2, ["node1", "node3"]), (3, ["node1", "node4"])]
    assert [s.spare_count for s in state.segments] == [2, 1, 0]
    assert [s.in_job_of for s in state.segments] == [None, 1, 1]


def test_batch_host_blamed_is_a_new_job_not_a_restart(tmp_path: Path) -> None:
    ctl, cluster, _ = make(tmp_path, {"node1": Fault("ecc", at=25)})
    state = ctl.run()
    assert state.status == RunStatus.DONE
    s1, s2 = state.segments
    assert s1.culprit_nodes == ["node1"] and s1.action == Action.RESUBMIT_EXCLUDE
    assert cluster.jobs["101"].steps == [(1, ["node1", "node2"])]  # no second step in the first job
    assert cluster.jobs["101"].state == JobState.CANCELLED
    assert len(cluster.submitted) == 2 and s2.job_id == "102" and s2.in_job_of is None
    assert cluster.submitted[1].exclude == ("node1",) and "node1" not in s2.nodes and s2.start_iteration == 20


def test_batch_host_crash_is_a_new_job(tmp_path: Path) -> None:
    ctl, cluster, _ = make(tmp_path)
    state = ctl.load_or_init()
    state = run_until(ctl, state, 22)
    cluster.crash("node1")
    assert cluster.jobs["101"].state == JobState.NODE_FAIL
    state = ctl.run()
    assert state.status == RunStatus.DONE
    s1, s2 = state.segments
    assert s1.job_state == JobState.NODE_FAIL and s1.cause == Cause.NODE_FAIL
    assert len(cluster.submitted) == 2 and s2.job_id == "102" and s2.in_job_of is None
    assert len(cluster.jobs["101"].steps) == 1 and "node1" not in s2.nodes and s2.start_iteration == 20


def test_batch_host_crash_that_slurm_answers_with_a_running_job_is_a_new_job(tmp_path: Path) -> None:
    """Slurm 22.05 keeps a --no-kill job RUNNING when its batch host fails (the supervisor died with it, so no
    step record ends): the step's node leaving the job ends the segment as node_fail, and the job is cancelled."""
    ctl, cluster, _ = make(tmp_path, watch={"poll_interval_s": 1, "stall_timeout_s": 3000})
    state = ctl.load_or_init()
    state = run_until(ctl, state, 22)
    cluster.crash("node1", batch_host_keeps_job=True)
    assert job_state(cluster) == JobState.RUNNING
    state = ctl.run()
    assert state.status == RunStatus.DONE
    s1, s2 = state.segments
    assert s1.cause == Cause.NODE_FAIL and s1.culprit_nodes == ["node1"] and not s1.cancelled_by_controller
    assert job_state(cluster) == JobState.CANCELLED  # not left holding node2 and node3
    assert s2.job_id == "102" and s2.in_job_of is None and "node1" in s2.excluded


def test_a_starting_job_listed_pending_on_its_batch_host_does_not_set_the_segment_nodes() -> None:
    from datetime import UTC, datetime

    from orchestrator.loop.progress import changes
    from orchestrator.model import JobStatus
    from orchestrator.state import SegmentRecord

    seg = SegmentRecord(index=1, job_name="r.seg0001")
    now = datetime(2026, 1, 1, tzinfo=UTC)
    seg = seg.evolve(**changes(seg, JobStatus(state=JobState.PENDING, nodes=("node1",)), [], [], None, now))
    assert seg.nodes == []
    seg = seg.evolve(**changes(seg, JobStatus(state=JobState.RUNNING, nodes=("node1", "node2")), [], [], None,
                               now))
    assert seg.nodes == ["node1", "node2"]


def test_user_bug_stops_and_cancels_the_job(tmp_path: Path) -> None:
    ctl, cluster, _ = make(tmp_path, {"all": Fault("bug", at=25)})
    state = ctl.run()
    assert state.status == RunStatus.STOPPED and "user_bug" in state.stop_reason
    assert len(state.segments) == 1 and state.segments[0].cause == Cause.USER_BUG and not state.blacklist.entries
    assert len(cluster.submitted) == 1
    job = cluster.jobs["101"]
    assert job.state == JobState.CANCELLED and len(job.steps) == 1  # not left holding three nodes until it times out


def test_restarts_count_against_the_infrastructure_budget(tmp_path: Path) -> None:
    ctl, cluster, _ = make(tmp_path, {"node2": Fault("ecc", at=25), "node3": Fault("ecc", at=40)},
                           nodes=NODES + ["node5"], resources={"spare_nodes": 2}, policy={"max_infra_failures": 2})
    state = ctl.run()
    assert state.status == RunStatus.STOPPED and "max_infra_failures=2" in state.stop_reason
    assert len(state.segments) == 2 and len(cluster.submitted) == 1  # a spare was left: the budget stopped it
    assert state.segments[1].in_job_of == 1 and state.segments[1].action == Action.STOP_AND_ALERT
    assert cluster.jobs["101"].state == JobState.CANCELLED and len(cluster.jobs["101"].steps) == 2
    assert {e.node for e in state.blacklist.entries} == {"node2", "node3"}  # the last fault is still blamed


def test_max_infra_failures_1_never_restarts(tmp_path: Path) -> None:
    ctl, cluster, _ = make(tmp_path, {"node2": Fault("ecc", at=25)}, policy={"max_infra_failures": 1})
    state = ctl.run()
    assert state.status == RunStatus.STOPPED and len(state.segments) == 1
    assert cluster.jobs["101"].state == JobState.CANCELLED and len(cluster.jobs["101"].steps) == 1


def restarted(tmp_path: Path) -> tuple[Controller, FakeCluster, FakeClock, Path]:
    """A controller that has just recorded the restart (state saved, request written) and then died."""
    ctl, cluster, clock = make(tmp_path, {"node2": Fault("ecc", at=35)})
    state = ctl.load_or_init()
    for _ in range(10_000):
        if len(state.segments) == 2:
            break
        state = ctl.step(state)
    assert len(state.segments) == 2 and cluster.jobs["101"].steps == [(1, ["node1", "node2"])]
    saved = StateStore(ctl.s.run_dir).load()
    assert saved is not None and len(saved.segments) == 2 and saved.segments[1].in_job_of == 1
    return ctl, cluster, clock, AllocationPaths(Path(cluster.submitted[0].allocation_dir)).request


def test_controller_crash_before_the_request_is_written_asks_again(tmp_path: Path) -> None:
    ctl, cluster, clock, request = restarted(tmp_path)
    request.unlink()  # the controller died after saving the restart, before writing the request
    ctl2 = Controller(ctl.s, cluster, clock, StateStore(ctl.s.run_dir), python="python")
    state = ctl2.load_or_init()
    state = ctl2.step(state)
    req = read_record(request, StepRequest)
    assert req is not None and req.segment == 2 and req.nodes == ["node1", "node3"]
    assert req.spec_file == str(SegmentPaths.of(ctl.s.run_dir, 2).spec)
    state = ctl2.run()
    assert state.status == RunStatus.DONE and len(state.segments) == 2 and len(cluster.submitted) == 1
    assert cluster.jobs["101"].steps == [(1, ["node1", "node2"]), (2, ["node1", "node3"])]
    assert state.segments[1].start_iteration == 30 and state.segments[1].end_iteration == 50


def test_controller_crash_after_the_request_neither_asks_twice_nor_resubmits(tmp_path: Path) -> None:
    ctl, cluster, clock, request = restarted(tmp_path)
    before = request.read_text()
    ctl2 = Controller(ctl.s, cluster, clock, StateStore(ctl.s.run_dir), python="python")
    state = ctl2.load_or_init()
    state = ctl2.step(state)
    assert request.read_text() == before  # the supervisor's request is left as it was
    state = ctl2.run()
    assert state.status == RunStatus.DONE and len(state.segments) == 2 and len(cluster.submitted) == 1
    assert len(cluster.jobs["101"].steps) == 2


def test_without_spares_nothing_changes(tmp_path: Path) -> None:
    ctl, cluster, _ = make(tmp_path, {"node2": Fault("ecc", at=35)}, resources={"spare_nodes": 0})
    state = ctl.run()
    assert state.status == RunStatus.DONE and len(cluster.submitted) == 2
    assert all(not s.allocation_dir and s.in_job_of is None for s in state.segments)
    assert not (SegmentPaths.of(ctl.s.run_dir, 1).allocation).exists()
    assert cluster.jobs["101"].held == ["node1", "node2"] and cluster.submitted[1].exclude == ("node2",)


def test_a_restart_polls_the_job_with_its_own_submission_time(tmp_path: Path) -> None:
    ctl, cluster, _ = make(tmp_path, {"node2": Fault("ecc", at=35)}, step_s=30.0,
                           watch={"poll_interval_s": 10, "stall_timeout_s": 300})
    state = ctl.run()
    assert state.status == RunStatus.DONE and len(cluster.submitted) == 1 and len(state.segments) == 2
    job = cluster.jobs["101"]
    submit = job.ref.submitted_at.astimezone().strftime("%Y-%m-%dT%H:%M:%S")  # sacct prints local time
    row = f"101|t.seg0001|RUNNING|0:0|node[1-3]|{submit}|{submit}|Unknown"
    s1 = state.segments[0]
    assert s1.ended_at and (s1.ended_at - job.ref.submitted_at).total_seconds() > 600  # a restart 10+ min in
    refs = [r for r in cluster.polled if r.job_id == "101"]
    assert all("101" in parse_sacct(row, [r]) for r in refs)  # every poll of the job finds its sacct row


# ---- the fake allocation itself ----------------------------------------------------------------

def submitted_with_spares(tmp_path: Path) -> tuple[Controller, FakeCluster, FakeClock, SegmentSpec]:
    ctl, cluster, clock = make(tmp_path)
    spec = prepare(ctl.s, ctl.load_or_init(), cluster, clock.now(), "python").spec
    cluster.submit(spec)
    return ctl, cluster, clock, spec


def test_fake_allocation_holds_nodes_plus_spares_and_records_the_step(tmp_path: Path) -> None:
    _, cluster, clock, spec = submitted_with_spares(tmp_path)
    job = cluster.jobs["101"]
    assert spec.spares == 1 and job.allocation == ["node1", "node2", "node3"] and job.nodes == ["node1", "node2"]
    assert cluster.poll([job.ref])["101"].nodes == ("node1", "node2", "node3")
    rec = step_file(spec, 1)
    assert rec is not None and rec.started and not rec.ended and rec.nodes == ["node1", "node2"]
    assert rec.allocation == ["node1", "node2", "node3"]
    clock.advance(10)
    assert job.iteration == 10 and not (SegmentPaths(Path(spec.segment_dir)).logs / "node3.log").exists()


def test_fake_allocation_refuses_a_request_for_nodes_it_does_not_hold(tmp_path: Path) -> None:
    ctl, cluster, clock, spec = submitted_with_spares(tmp_path)
    nxt = spec.model_copy(update={"index": 2, "job_name": "t.seg0002",
                                  "segment_dir": str(SegmentPaths.of(ctl.s.run_dir, 2).root)})
    spec_file = SegmentPaths(Path(nxt.segment_dir)).spec
    spec_file.parent.mkdir(parents=True)
    spec_file.write_text(nxt.model_dump_json())
    write_record(AllocationPaths(Path(spec.allocation_dir)).request,
                 StepRequest(segment=2, nodes=["node1", "node4"], spec_file=str(spec_file)))
    clock.advance(1)
    assert cluster.jobs["101"].state == JobState.FAILED and cluster.rejected
    assert cluster.jobs["101"].steps == [(1, ["node1", "node2"])]


def test_fake_allocation_ends_a_failed_step_s_job_when_no_request_comes(tmp_path: Path) -> None:
    _, cluster, clock, spec = submitted_with_spares(tmp_path)
    clock.advance(5)
    cluster.crash("node2")
    job = cluster.jobs["101"]
    assert job.state == JobState.RUNNING and job.held == ["node1", "node3"] and "node2" in cluster.down
    clock.advance(cluster.request_wait_s - 1)
    assert job.state == JobState.RUNNING and job.iteration == 5  # the step is over: no training meanwhile
    clock.advance(2)
    assert job_state(cluster) == JobState.FAILED


def test_fake_crash_of_a_spare_keeps_the_step_running(tmp_path: Path) -> None:
    _, cluster, clock, spec = submitted_with_spares(tmp_path)
    cluster.crash("node3")
    clock.advance(5)
    job = cluster.jobs["101"]
    assert job.state == JobState.RUNNING and job.iteration == 5 and job.held == ["node1", "node2"]
    rec = step_file(spec, 1)
    assert rec is not None and not rec.ended


def test_a_spare_on_the_shared_blacklist_is_not_promoted(tmp_path: Path) -> None:
    """Another run blacklisted the spare after this job started: the restart falls back to a new job."""
    from datetime import timedelta

    from orchestrator.model import BlacklistEntry
    from orchestrator.shared_blacklist import SharedBlacklist

    shared = tmp_path / "shared-blacklist.json"
    ctl, cluster, clock = make(tmp_path, {"node2": Fault("ecc", at=35)}, policy={"shared_blacklist": str(shared)})
    state = ctl.load_or_init()
    state = run_until(ctl, state, 22)
    assert cluster.jobs["101"].allocation == ["node1", "node2", "node3"]
    now = clock.now()
    SharedBlacklist(shared).publish([BlacklistEntry(node="node3", cause=Cause.GPU_ECC, evidence="other run",
                                                    job_id="9", since=now, expires=now + timedelta(days=1))])
    state = ctl.run()
    assert state.status == RunStatus.DONE
    assert all("node3" not in s.nodes for s in state.segments[1:])
    assert state.segments[1].job_id != "101" and job_state(cluster) == JobState.CANCELLED


def test_a_step_record_of_an_earlier_job_is_not_this_segment_s_end(tmp_path: Path) -> None:
    """A segment number reused after a lost submission: the earlier job's ended record must not conclude it."""
    from orchestrator.loop.steps import Steps

    ctl, cluster, _ = make(tmp_path)
    state = ctl.load_or_init()
    state = ctl.step(state)  # submits segment 1 (job 101)
    seg = state.segments[0]
    paths = AllocationPaths(Path(seg.allocation_dir))
    write_record(paths.step(1), StepRecord(segment=1, job_id="77", nodes=["node1", "node2"], ended="x",
                                           exit_code=1, lost_nodes=["node2"]))
    steps = Steps(ctl)
    from orchestrator.model import JobStatus
    got = steps.observe(seg, JobStatus(state=JobState.PENDING))
    assert got.state == JobState.PENDING and steps.record is None


def test_a_spare_an_admin_drained_mid_run_is_never_promoted(tmp_path: Path) -> None:
    """Issue 40: an admin (or a health check) drains the free spare while segment 1 trains, then a node fails:
    the drained spare is not promoted; a new job follows, on nodes Slurm still gives."""
    ctl, cluster, _ = make(tmp_path, {"node2": Fault("ecc", at=35)})
    state = run_until(ctl, ctl.load_or_init(), 20)
    assert state.current is not None and state.current.allocation == ["node1", "node2", "node3"]
    cluster.admin_drained.add("node3")
    state = ctl.run()
    assert state.status == RunStatus.DONE
    s1, s2 = state.segments[:2]
    assert s1.cause == Cause.GPU_ECC and s1.culprit_nodes == ["node2"]
    assert s2.job_id != s1.job_id and s2.in_job_of is None, s2  # a new job, not a restart on node3
    assert "node3" not in s2.nodes and "node2" not in s2.nodes
    assert all(j.steps[-1][1] != ["node1", "node3"] for j in cluster.jobs.values())


def test_a_spare_is_still_promoted_when_sinfo_does_not_answer(tmp_path: Path) -> None:
    """The drained set is unknown when sinfo fails: that is never taken as "drained" (nor as "none drained"
    beyond what was asked): the free spare is promoted as before."""
    ctl, cluster, _ = make(tmp_path, {"node2": Fault("ecc", at=35)})
    cluster.sinfo_fails = True
    state = ctl.run()
    assert state.status == RunStatus.DONE
    s1, s2 = state.segments[:2]
    assert s2.job_id == s1.job_id and s2.nodes == ["node1", "node3"], s2


def test_spares_are_drawn_only_from_nodes_that_are_up(tmp_path: Path) -> None:
    """A down node must not be asked for as a spare: the job would wait in the queue for it."""
    from orchestrator.backends.slurm import SlurmBackend
    from orchestrator.settings import SlurmBackendCfg

    sinfo = {"-o %N": "node1\nnode2\nnode3\nnode4\n",
             "-o %N %t": "node1 idle\nnode2 down*\nnode3 mix\nnode4 drain\n"}

    def runner(argv: list[str], timeout: float) -> str:
        return sinfo["-o " + " ".join(argv[argv.index("-o") + 1:])]

    clock = FakeClock()
    backend = SlurmBackend(SlurmBackendCfg(), clock, tmp_path, runner=runner)
    assert backend.usable_nodes() == ["node1", "node3"]
    ctl, _, _ = make(tmp_path, resources={"nodes": 1, "spare_nodes": 3})
    state = RunState(run="t", created_at=clock.now(), updated_at=clock.now())
    spec = prepare(ctl.s, state, backend, clock.now(), "python").spec
    assert spec.spares == 1  # node1 and node3 are up: one runs, one is the spare


def test_a_dead_node_s_silence_is_a_node_failure_not_a_hang() -> None:
    from orchestrator.diagnose.finish import lost_node_verdict
    from orchestrator.model import Verdict

    hang = Verdict(cause=Cause.HANG, culprit_nodes=("node1",), blame=True, confidence=0.6,
                   summary="the agent did not answer the stack-dump request")
    out = lost_node_verdict(hang, ["node1"], "395")
    assert out.cause == Cause.NODE_FAIL and out.culprit_nodes == ("node1",)
    assert out.evidence[0].text.startswith("Slurm removed node1 from job 395")


def test_a_node_blamed_in_the_job_is_not_promoted_back_even_below_the_strike_threshold(tmp_path: Path) -> None:
    """A one-off segfault blames node2 (one strike: not blacklisted); node3 replaces it. When node3 fails in
    turn, node2 is still held by the job and not blacklisted, but it is not a spare again: a new segment follows."""
    ctl, cluster, _ = make(tmp_path, {"node2": Fault("segfault", at=20, sticky=False)})
    state = ctl.load_or_init()
    state = run_until(ctl, state, 10)
    for _ in range(10_000):
        if len(state.segments) == 2 and (state.segments[1].end_iteration or 0) >= 25:
            break
        state = ctl.step(state)
    s1, s2 = state.segments
    assert s1.cause == Cause.SEGFAULT and s1.culprit_nodes == ["node2"]
    entry = state.blacklist.get("node2")
    assert entry is not None and entry.strikes == 1 and s1.ended_at is not None
    assert not state.blacklist.excluding(s1.ended_at, ctl.s.policy.strike_threshold)  # a strike, not an exclusion
    assert s2.in_job_of == 1 and s2.nodes == ["node1", "node3"]
    cluster.crash("node3")
    state = ctl.run()
    assert state.status == RunStatus.DONE
    s3 = state.segments[2]
    assert s3.in_job_of is None and s3.job_id != "101"  # not node1,node2 inside job 101
    assert "node2" not in cluster.jobs["101"].steps[-1][1]


def test_the_segment_s_nodes_never_narrow_to_a_partial_list() -> None:
    """Issue 21: a Slurm segment was recorded on ['node1'] while sacct said node[1-2,4]: a partial list (the
    agents' logs seen so far, squeue's nodes still busy while completing) never replaces a fuller one."""
    from datetime import UTC, datetime

    from orchestrator.loop.progress import changes
    from orchestrator.model import JobStatus
    from orchestrator.state import SegmentRecord

    seg = SegmentRecord(index=1, job_name="r.seg0001")
    now = datetime(2026, 1, 1, tzinfo=UTC)
    seg = seg.evolve(**changes(seg, JobStatus(state=JobState.RUNNING, nodes=("node1", "node2", "node4")), [],
                               ["node1"], None, now))
    assert seg.nodes == ["node1", "node2", "node4"]
    completing = JobStatus(state=JobState.RUNNING, nodes=("node1",), nodes_final=False)
    seg = seg.evolve(**changes(seg, completing, [], ["node1"], None, now))
    assert seg.nodes == ["node1", "node2", "node4"]
    fresh = SegmentRecord(index=2, job_name="r.seg0002")  # no scheduler list yet: the logs, growing
    fresh = fresh.evolve(**changes(fresh, completing, [], ["node1"], None, now))
    fresh = fresh.evolve(**changes(fresh, completing, [], ["node2"], None, now))
    assert fresh.nodes == ["node1", "node2"]
