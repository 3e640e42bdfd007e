"""The whole loop on a FakeClock and a FakeCluster: no real sleeping, no real processes."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from orchestrator.backends.base import Backend
from orchestrator.backends.local import LocalBackend
from orchestrator.backends.slurm import SlurmBackend
from orchestrator.clock import FakeClock
from orchestrator.loop.advance import intent
from orchestrator.loop.controller import Controller
from orchestrator.loop.submission import Preparer, prepare
from orchestrator.loop.supervise import STALL_DUMP_WAIT_S
from orchestrator.model import Action, Cause, JobState, RunStatus
from orchestrator.settings import SlurmBackendCfg, load_settings, parse_overrides
from orchestrator.state import StateStore
from tests.conftest import base_config, write_config
from tests.fakes import FakeCluster, Fault

NODES = ["node1", "node2", "node3", "node4"]


def make(tmp_path: Path, faults: dict[str, Fault] | None = None, target: int = 50,
         overrides: Sequence[str] = (), nodes: list[str] = NODES, prepare: Preparer = prepare,
         **cfg_over: Any) -> tuple[Controller, FakeCluster, FakeClock]:
    s = load_settings(write_config(tmp_path, base_config(tmp_path, **cfg_over)), parse_overrides(list(overrides)))
    clock = FakeClock()
    cluster = FakeCluster(clock, nodes, target, tmp_path / "ckpt", faults=faults)
    ctl = Controller(s, cluster, clock, StateStore(s.run_dir), python="python", prepare=prepare)
    return ctl, cluster, clock


def test_sticky_ecc_excluded_and_resumed(tmp_path: Path) -> None:
    ctl, cluster, clock = make(tmp_path, {"node3": Fault("ecc", at=35)})
    state = ctl.run()
    assert state.status == RunStatus.DONE
    s1, s2 = state.segments
    assert s1.cause == Cause.GPU_ECC and s1.culprit_nodes == ["node3"] and s1.action == Action.RESUBMIT_EXCLUDE
    assert s1.nodes == ["node1", "node2", "node3"]
    assert s2.excluded == ["node3"] and "node3" not in s2.nodes
    assert s2.resumed_from and s2.start_iteration == 30 and s2.end_iteration == 50
    assert cluster.submitted[1].exclude_hostlist == "node3"
    assert "--resume=" + s2.resumed_from in cluster.submitted[1].command
    assert ("ORCH_RESUME_FROM", s2.resumed_from) in cluster.submitted[1].env
    assert [e.node for e in state.blacklist.entries] == ["node3"]
    assert "ECC" in state.blacklist.entries[0].evidence and state.blacklist.entries[0].job_id == "101"
    assert clock.slept < 600  # the whole run took minutes of fake time, milliseconds of real time


def test_user_bug_stops_without_blaming(tmp_path: Path) -> None:
    ctl, cluster, _ = make(tmp_path, {"all": Fault("bug", at=25)})
    state = ctl.run()
    assert state.status == RunStatus.STOPPED and len(cluster.submitted) == 1
    assert state.segments[0].cause == Cause.USER_BUG and not state.blacklist.entries


def test_timelimit_resubmits_and_resumes(tmp_path: Path) -> None:
    ctl, cluster, _ = make(tmp_path, target=300, resources={"nodes": 2, "time_limit_min": 2},
                           watch={"poll_interval_s": 5})
    state = ctl.run()
    assert state.status == RunStatus.DONE
    assert state.segments[0].cause == Cause.TIMELIMIT and not state.blacklist.entries
    assert all(s.job_state == JobState.TIMEOUT for s in state.segments[:-1])
    assert [s.start_iteration for s in state.segments][:3] == [0, 120, 240]


def test_hang_is_detected_cancelled_and_resubmitted(tmp_path: Path) -> None:
    ctl, cluster, clock = make(tmp_path, {"node2": Fault("hang", at=20, sticky=False)},
                               watch={"stall_timeout_s": 30, "poll_interval_s": 2})
    state = ctl.run()
    assert state.status == RunStatus.DONE
    s1 = state.segments[0]
    assert s1.cancelled_by_controller.startswith("stall") and s1.cause == Cause.HANG
    assert s1.job_state == JobState.CANCELLED and state.segments[1].start_iteration == 10
    # from the last progress seen to the cancel: the stall limit, or the bound on waiting for the dumps
    # asked for half the limit before it (the hung node never answers), plus one poll interval
    assert s1.cancelled_at and s1.last_progress_at
    assert (s1.cancelled_at - s1.last_progress_at).total_seconds() <= max(30, 15 + STALL_DUMP_WAIT_S) + 2


def test_no_progress_breaker(tmp_path: Path) -> None:
    ctl, cluster, _ = make(tmp_path, {"node1": Fault("segfault", at=1), "node2": Fault("segfault", at=1),
                                      "node3": Fault("segfault", at=1), "node4": Fault("segfault", at=1)},
                           policy={"max_no_progress_segments": 2, "strike_threshold": 5})
    state = ctl.run()
    assert state.status == RunStatus.STOPPED and len(cluster.submitted) == 2
    assert "no progress" in state.stop_reason


def test_exclude_cap_keeps_job_placeable(tmp_path: Path) -> None:
    faults = {n: Fault("ecc", at=5 * (i + 1)) for i, n in enumerate(NODES)}
    ctl, cluster, _ = make(tmp_path, faults, resources={"nodes": 3}, policy={"max_infra_failures": 6})
    state = ctl.run()
    for spec in cluster.submitted:
        assert len(spec.exclude) <= len(NODES) - 3  # never unplaceable
    # every node ends up broken: the run keeps placing jobs until the infrastructure budget (issue 38: node
    # faults do not spend the user's max_segments), then stops for a human
    assert state.status == RunStatus.STOPPED and "max_infra_failures" in state.stop_reason
    assert len(cluster.submitted) == 6 and any(spec.exclude for spec in cluster.submitted[1:])


def test_scheduler_outage_is_not_a_failure(tmp_path: Path) -> None:
    ctl, cluster, clock = make(tmp_path)
    cluster.unavailable_until = clock.now() + timedelta(seconds=120)
    state = ctl.run()
    assert state.status == RunStatus.DONE and len(cluster.submitted) == 1


def test_restart_reattaches_without_duplicate(tmp_path: Path) -> None:
    from loguru import logger

    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m).rstrip()), format="{message}")
    try:
        ctl, cluster, clock = make(tmp_path)
        state = ctl.load_or_init()
        for _ in range(5):
            state = ctl.step(state)  # submit, then a few polls
        assert len(cluster.submitted) == 1 and state.current is not None and state.current.job_id
        assert state.current.job_state == JobState.RUNNING  # the scheduler's state, seen by the poll
        assert any("job=101 running on" in line for line in lines) and not any("re-attached" in x for x in lines)
        lines.clear()
        # a new controller on the same run directory (the old one died)
        ctl2 = Controller(ctl.s, cluster, clock, StateStore(ctl.s.run_dir), python="python")
        state2 = ctl2.run()
    finally:
        logger.remove(sink)
    assert state2.status == RunStatus.DONE and len(cluster.submitted) == 1
    assert any("segment 1 still running on" in x and "(re-attached)" in x for x in lines)
    assert not any("in the queue" in line for line in lines)


def test_crash_between_submit_and_record_does_not_duplicate(tmp_path: Path) -> None:
    ctl, cluster, clock = make(tmp_path)
    state = ctl.load_or_init()
    spec = prepare(ctl.s, state, cluster, clock.now(), "python").spec
    state = state.evolve(segments=[*state.segments, intent(spec, cluster.name)])
    ctl.save(state)
    cluster.submit(spec)  # the job exists, but the controller "died" before recording its id
    state2 = Controller(ctl.s, cluster, clock, StateStore(ctl.s.run_dir), python="python").run()
    assert state2.status == RunStatus.DONE and len(cluster.submitted) == 1


def test_state_file_is_private(tmp_path: Path) -> None:
    ctl, _, _ = make(tmp_path)
    ctl.run()
    st = (ctl.s.run_dir / "state.json").stat()
    assert st.st_mode & 0o777 == 0o600
    assert ctl.s.run_dir.stat().st_mode & 0o777 == 0o700


@pytest.mark.parametrize("poll", [1, 7])
def test_poll_interval_is_respected(tmp_path: Path, poll: int) -> None:
    ctl, cluster, clock = make(tmp_path, watch={"poll_interval_s": poll})
    ctl.run()
    assert cluster.polls <= clock.slept / poll + 3


def test_shared_blacklist_and_drain_across_runs(tmp_path: Path) -> None:
    shared = str(tmp_path / "cluster-blacklist.json")
    a_dir, b_dir = tmp_path / "a", tmp_path / "b"
    a_dir.mkdir()
    b_dir.mkdir()
    ctl_a, cluster_a, _ = make(a_dir, {"node3": Fault("ecc", at=35)},
                               policy={"shared_blacklist": shared, "drain_blacklisted": True})
    assert ctl_a.run().status == RunStatus.DONE
    drained = cluster_a.drained
    assert drained and drained[0][0] == "node3" and "gpu_ecc" in drained[0][1]
    assert drained[0][1].startswith("[node_problem] ")  # whose problem it is, first in sinfo -R (issue 23)
    ctl_b, cluster_b, _ = make(b_dir, policy={"shared_blacklist": shared}, name="b")  # another run
    assert ctl_b.run().status == RunStatus.DONE
    assert cluster_b.submitted[0].exclude == ("node3",)  # learned from run A before its first segment


def test_checkpoint_that_fails_to_load_twice_falls_back_to_the_previous(tmp_path: Path) -> None:
    ctl, cluster, _ = make(tmp_path, {"node3": Fault("ecc", at=35)}, policy={"max_no_progress_segments": 5})
    cluster.corrupt = {30}
    state = ctl.run()
    assert state.status == RunStatus.DONE
    starts = [s.start_iteration for s in state.segments]
    assert starts == [0, 30, 30, 20]  # twice the bad iteration-30 checkpoint, then the one before it
    assert state.segments[1].cause == Cause.USER_BUG and state.segments[1].action == Action.RESUBMIT
    assert "failed to load twice" in state.segments[2].reason


def test_no_older_checkpoint_stops_instead_of_starting_over(tmp_path: Path) -> None:
    ctl, cluster, _ = make(tmp_path, {"node3": Fault("ecc", at=15)}, policy={"max_no_progress_segments": 5})
    cluster.corrupt = {10}
    state = ctl.run()
    assert state.status == RunStatus.STOPPED and "starting from scratch would lose the run" in state.stop_reason
    assert [s.start_iteration for s in state.segments] == [0, 10, 10]


def test_hung_checkpoint_directory_blocks_submission_not_the_loop(tmp_path: Path) -> None:
    import functools
    import threading

    from orchestrator import checkpoint as ckpt_mod
    from orchestrator.settings import CheckpointCfg

    gate = threading.Event()

    def hung(cfg: CheckpointCfg, skip: frozenset[str]) -> ckpt_mod.Checkpoint | None:
        gate.wait()  # the checkpoint directory answers once the gate opens
        return ckpt_mod.find_latest(cfg, skip)

    ctl, cluster, clock = make(tmp_path, watch={"read_timeout_s": 0.2}, prepare=functools.partial(prepare, find=hung))
    state = ctl.load_or_init()
    for _ in range(3):
        state = ctl.step(state)  # each step returns although the checkpoint directory never answers
    assert cluster.submitted == [] and clock.slept >= 3  # waited a poll each time, submitted nothing
    gate.set()
    assert ctl.run().status == RunStatus.DONE and len(cluster.submitted) == 1


def test_fake_cluster_and_real_backends_satisfy_the_backend_protocol(tmp_path: Path) -> None:
    # mypy --strict (scripts/test.sh) checks these assignments against the Backend protocol, method by method:
    # a fake that drifts from the protocol fails the type check, not only a scenario.
    clock = FakeClock()
    fake: Backend = FakeCluster(clock, NODES, 10, tmp_path / "ckpt")
    local: Backend = LocalBackend(NODES, tmp_path / "local", clock)
    slurm: Backend = SlurmBackend(SlurmBackendCfg(), clock, tmp_path / "run", runner=lambda argv, t: "node1\n")
    assert [b.name for b in (fake, local, slurm)] == ["fake", "local", "slurm"]
    assert fake.nodes() == NODES and fake.find_jobs("t.seg0001") == [] and fake.poll([]) == {}


def test_a_node_struck_once_in_each_of_two_runs_is_excluded_from_a_third_runs_first_segment(tmp_path: Path) -> None:
    """Issue 40 item 4: weak evidence (one rank's crash: a strike, the node kept) adds up across runs."""
    shared = str(tmp_path / "cluster-blacklist.json")
    firsts = []
    for name in ("a", "b", "c"):
        (tmp_path / name).mkdir()
        faults = {"node2": Fault("segfault", at=25, sticky=False)} if name != "c" else {}
        ctl, cluster, _ = make(tmp_path / name, faults, policy={"shared_blacklist": shared}, name=name)
        state = ctl.run()
        assert state.status == RunStatus.DONE, state.stop_reason
        firsts.append(cluster.submitted[0].exclude)
        if name != "c":  # run A: a strike, not an exclusion; run B: its strike and A's exclude node2 at once
            assert state.segments[0].culprit_nodes == ["node2"]
            assert ("node2" in cluster.submitted[1].exclude) == (name == "b")
    assert firsts == [(), (), ("node2",)]
