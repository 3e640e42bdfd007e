"""Issue 15, "Data loss": each test fails on the code before the fix."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.clock import FakeClock
from orchestrator.loop.controller import Controller
from orchestrator.model import Cause, RunStatus
from orchestrator.requests import BlacklistAdd, write_request
from orchestrator.runlock import RunLock
from orchestrator.settings import load_settings, parse_overrides
from orchestrator.state import REQUESTS_DIR, RunState, StateError, StateStore
from tests.conftest import REPO, base_config, write_config
from tests.fakes import FakeCluster, Fault

NODES = ["node1", "node2", "node3", "node4"]


def make(tmp_path: Path, faults: dict[str, Fault] | None = None, overrides: tuple[str, ...] = (),
         ckpt: str = "ckpt") -> tuple[Controller, FakeCluster, FakeClock]:
    cfg = base_config(tmp_path, checkpoint={"dir": str(tmp_path / ckpt)})
    s = load_settings(write_config(tmp_path, cfg), parse_overrides(list(overrides)))
    clock = FakeClock()
    cluster = FakeCluster(clock, NODES, 50, tmp_path / ckpt, faults=faults)
    return Controller(s, cluster, clock, StateStore(s.run_dir), python="python"), cluster, clock


def test_5_hardware_fault_in_the_last_allowed_segment_is_still_blacklisted(tmp_path: Path) -> None:
    ctl, cluster, _ = make(tmp_path, {"node3": Fault("ecc", at=35)}, ("policy.max_infra_failures=1",))
    state = ctl.run()
    assert state.status == RunStatus.STOPPED and "max_infra_failures" in state.stop_reason
    assert state.segments[0].cause == Cause.GPU_ECC
    entry = state.blacklist.get("node3")
    assert entry is not None and entry.hard and "ECC" in entry.evidence
    assert StateStore(ctl.s.run_dir).load().blacklist.get("node3") is not None  # type: ignore[union-attr]


def test_1_state_deleted_with_backup_present_never_starts_over(tmp_path: Path) -> None:
    ctl, cluster, _ = make(tmp_path, {"node3": Fault("ecc", at=35)})
    assert ctl.run().status == RunStatus.DONE
    run_dir = ctl.s.run_dir
    (run_dir / "state.json").unlink()
    assert (run_dir / "state.json.bak").exists()
    again, cluster2, _ = make(tmp_path)
    with pytest.raises(StateError, match="state.json.bak"):
        again.run()
    assert not cluster2.submitted  # nothing submitted again, node3 not reused
    res = CliRunner().invoke(app, ["status", str(run_dir)])
    assert res.exit_code == 1 and "no run state yet" not in res.output and "state.json.bak" in res.output
    # the way back: restore the backup, and the run's history and blacklist are there
    (run_dir / "state.json.bak").rename(run_dir / "state.json")
    restored = StateStore(run_dir).load()
    assert restored is not None and restored.blacklist.get("node3") is not None


def test_1_segments_without_state_need_an_explicit_start_over(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    (run_dir / "segments" / "0001").mkdir(parents=True)
    with pytest.raises(StateError, match="--start-over"):
        StateStore(run_dir).load()
    assert StateStore(run_dir, start_over=True).load() is None
    assert StateStore(tmp_path / "fresh").load() is None  # a new run directory is a new run


def new_run(run_dir: Path, status: RunStatus = RunStatus.RUNNING) -> StateStore:
    store = StateStore(run_dir)
    now = FakeClock().now()
    store.save(RunState(run="t", status=status, created_at=now, updated_at=now))
    return store


def test_2_concurrent_blacklist_adds_without_a_controller_are_all_applied(tmp_path: Path) -> None:
    store = new_run(tmp_path / "run")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [subprocess.Popen([sys.executable, "-m", "orchestrator", "blacklist", "add", str(store.run_dir),
                               f"node{i}", "--reason", f"probe {i}"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True)
             for i in range(10)]
    outputs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0] * 10, outputs
    state = store.load()
    assert state is not None
    assert sorted(e.node for e in state.blacklist.entries) == sorted(f"node{i}" for i in range(10))
    assert not list((store.run_dir / REQUESTS_DIR).glob("*.json"))  # nothing left waiting


def test_2_an_edit_queued_for_a_controller_that_exited_is_applied_by_the_next_run(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, base_config(tmp_path))
    store = new_run(tmp_path / "run", RunStatus.DONE)
    write_request(store.run_dir, BlacklistAdd(nodes=("node3",), reason="Xid 79"))
    res = CliRunner().invoke(app, ["run", str(cfg)])
    assert res.exit_code == 0, res.output
    state = store.load()
    assert state is not None and state.blacklist.get("node3") is not None


def _controller_applying(tmp_path: Path, store: StateStore) -> Any:
    """A stand-in controller that holds the run and applies the queued edit the way the real loop does."""
    import signal
    import threading

    from orchestrator.loop import operator
    from orchestrator.loop.advance import advance

    controller = RunLock(store.run_dir)
    controller.acquire("controller")  # held by this process: the CLI's wake-up SIGHUP comes here
    signal.signal(signal.SIGHUP, lambda *_: None)

    def apply_queue() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not list((store.run_dir / REQUESTS_DIR).glob("*.json")):
            time.sleep(0.01)
        state = store.load()
        assert state is not None
        settings, now = load_settings(write_config(tmp_path, base_config(tmp_path))), FakeClock().now()
        if (edited := operator.queued_edits(settings.run_dir, state, now)) is not None:
            state = advance(state, edited, None, now).ledger
        store.save(state)

    t = threading.Thread(target=apply_queue, daemon=True)
    t.start()
    return controller, t


def test_2_an_edit_for_a_running_controller_is_handed_over_not_refused(tmp_path: Path) -> None:
    store = new_run(tmp_path / "run")
    controller, t = _controller_applying(tmp_path, store)  # holds the run; applies queued edits like the real loop
    try:
        res = CliRunner().invoke(app, ["blacklist", "add", str(store.run_dir), "node7", "--wait", "30"])
    finally:
        t.join(60)
        controller.release()
    assert res.exit_code == 0 and "by the running controller" in res.output, res.output
    state = store.load()
    assert state is not None and state.blacklist.get("node7") is not None


def test_2_removing_a_node_that_is_not_blacklisted_says_so_through_a_running_controller(tmp_path: Path) -> None:
    """Issue 21 re-run (X6): `removed node77 (by the running controller)` for a node never blacklisted."""
    store = new_run(tmp_path / "run")
    controller, t = _controller_applying(tmp_path, store)
    try:
        res = CliRunner().invoke(app, ["blacklist", "remove", str(store.run_dir), "node77", "--wait", "30"])
    finally:
        t.join(60)
        controller.release()
    assert res.exit_code == 0 and "not blacklisted: node77" in res.output and "removed nothing" in res.output


def test_2_an_edit_too_big_for_the_queue_is_refused_not_acknowledged(tmp_path: Path) -> None:
    """Issue 21 re-run (X4): `blacklist add 'node[1-100000]'` said it was applied by the running controller, which
    then dropped the request (over 1 MiB): the blacklist stayed empty. Now the CLI refuses it, nothing queued."""
    store = new_run(tmp_path / "run")
    controller = RunLock(store.run_dir)
    controller.acquire("controller")
    try:
        res = CliRunner().invoke(app, ["blacklist", "add", str(store.run_dir), "node[1-100000]", "--wait", "1"])
    finally:
        controller.release()
    assert res.exit_code == 2 and "at most 4096 per edit" in res.output, res.output
    assert not list((store.run_dir / REQUESTS_DIR).glob("*.json"))


@pytest.mark.parametrize("hours", ["nan", "inf", "-1", "0", "1e308"])
def test_3_bad_hours_are_refused_on_the_cli_side_and_nothing_is_queued(tmp_path: Path, hours: str) -> None:
    store = new_run(tmp_path / "run")
    controller = RunLock(store.run_dir)
    controller.acquire("controller")
    try:
        res = CliRunner().invoke(app, ["blacklist", "add", str(store.run_dir), "node3", "--hours", hours])
    finally:
        controller.release()
    assert res.exit_code == 2 and "hours must be a number above 0" in res.output and "pydantic" not in res.output
    assert not list((store.run_dir / REQUESTS_DIR).glob("*.json")) if (store.run_dir / REQUESTS_DIR).exists() else True


def test_3_a_bad_queued_request_never_kills_the_controller(tmp_path: Path) -> None:
    ctl, cluster, _ = make(tmp_path)
    state = ctl.load_or_init()
    queue = ctl.s.run_dir / REQUESTS_DIR
    queue.mkdir(mode=0o700)
    (queue / "0-nan.json").write_text(json.dumps({"op": "add", "nodes": ["node1"], "hours": float("nan")}))
    (queue / "1-dir.json").mkdir()
    (queue / "2-deep.json").write_text("[" * 200_000 + "]" * 200_000)
    (queue / "3-latin1.json").write_bytes(b'{"op": "clear", "x": "\xff\xfe"}\xff')
    (queue / "4-dash.json").write_text(json.dumps({"op": "add", "nodes": ["-rf"]}))
    (queue / "5-good.json").write_text(json.dumps({"op": "add", "nodes": ["node2"], "reason": "Xid 79"}))
    state = ctl.apply_requests(state)
    assert [e.node for e in state.blacklist.entries] == ["node2"]
    assert not list(queue.glob("*.json"))  # each bad one consumed once, not re-read every poll
    state = ctl.step(state)  # and the loop goes on
    assert cluster.submitted and cluster.submitted[0].exclude == ("node2",)


def run_until_first_segment_ends(ctl: Controller) -> RunState:
    state = ctl.load_or_init()
    for _ in range(10_000):
        seg = state.current
        if seg is not None and seg.action is not None:
            return state
        state = ctl.step(state)
    raise AssertionError("the first segment never ended")


@pytest.mark.parametrize("how", ["deleted", "emptied"])
def test_4_checkpoints_gone_after_progress_wait_never_start_from_scratch(tmp_path: Path, how: str) -> None:
    import shutil

    ctl, cluster, clock = make(tmp_path, {"node3": Fault("ecc", at=35)})
    state = run_until_first_segment_ends(ctl)
    state = ctl.step(state)  # segment 2 resumes from iteration 30
    assert len(cluster.submitted) == 2 and cluster.submitted[1].start_iteration == 30
    ctl.backend.cancel(cluster.jobs["102"].ref)
    while state.current is not None and state.current.action is None:
        state = ctl.step(state)
    shutil.rmtree(tmp_path / "ckpt")
    if how == "emptied":  # an empty mount point
        (tmp_path / "ckpt").mkdir()
    for _ in range(5):
        state = ctl.step(state)
    assert len(cluster.submitted) == 2  # waited: nothing submitted from iteration 0
    res = CliRunner().invoke(app, ["run", str(tmp_path / "run.yaml"), "--dry-run"])
    assert res.exit_code == 1 and "not starting from scratch" in res.output


def test_4_checkpoint_filesystem_unmounted_after_first_segment_progress_waits(tmp_path: Path) -> None:
    import shutil

    ctl, cluster, _ = make(tmp_path, {"node3": Fault("ecc", at=35)}, ckpt="mnt/run1/ckpt")
    state = run_until_first_segment_ends(ctl)
    assert state.best_iteration() > 0
    shutil.rmtree(tmp_path / "mnt" / "run1")  # the file system under mnt/ is gone
    state = ctl.step(state)
    assert len(cluster.submitted) == 1
    (tmp_path / "mnt" / "run1" / "ckpt").mkdir(parents=True)  # a mount point again, empty: still lost
    state = ctl.step(state)
    assert len(cluster.submitted) == 1
    from orchestrator.cli.run import _from_scratch

    res = CliRunner().invoke(app, ["run", str(tmp_path / "run.yaml"), "--dry-run", "--from-scratch"])
    assert res.exit_code == 0 and "--from-scratch" in res.output and "iteration 0)" in res.output, res.output
    _from_scratch(ctl.store, ctl.clock)  # `run --from-scratch`: the operator gives the checkpoints up on purpose
    again = ctl.store.load()
    assert again is not None
    again = ctl.step(again)
    assert len(cluster.submitted) == 2 and cluster.submitted[1].start_iteration == 0
    assert [e.node for e in again.blacklist.entries] == ["node3"]  # the blacklist is kept


@pytest.mark.parametrize("how", ["emptied", "moved"])
def test_4_checkpoints_emptied_after_the_first_segment_saved_wait_never_start_from_scratch(tmp_path: Path,
                                                                                          how: str) -> None:
    """Issue 21, data loss 1: the first segment saved checkpoints, then its directory was emptied or moved away
    (an unmounted mount point: the directory and the run dir still there) before a segment resumed from one.
    The controller saw the checkpoint when the segment ended, so "none now" is a lost filesystem."""
    import shutil

    ctl, cluster, _ = make(tmp_path, {"node3": Fault("ecc", at=35)})
    state = run_until_first_segment_ends(ctl)
    assert state.checkpoint_seen and state.checkpoint_seen.endswith("iter_0000030")
    if how == "emptied":
        for child in (tmp_path / "ckpt").iterdir():
            shutil.rmtree(child) if child.is_dir() else child.unlink()
    else:
        (tmp_path / "ckpt").rename(tmp_path / "ckpt.moved")
        (tmp_path / "ckpt").mkdir()
    for _ in range(3):
        state = ctl.step(state)
    assert len(cluster.submitted) == 1, "submitted from iteration 0 although a checkpoint had been there"
    res = CliRunner().invoke(app, ["run", str(tmp_path / "run.yaml"), "--dry-run"])
    assert res.exit_code == 1 and "not starting from scratch" in res.output and "iter_0000030" in res.output


def test_4_checkpoints_emptied_while_the_first_segment_still_runs_wait(tmp_path: Path) -> None:
    """The re-run of issue 21 found the window: emptied two seconds after the save, before the segment ended.
    The controller looks for the newest checkpoint whenever progress advances, not only at a segment's end."""
    import shutil

    ctl, cluster, _ = make(tmp_path, {"node3": Fault("ecc", at=35)})
    state = ctl.load_or_init()
    for _ in range(10_000):
        if (state.current and state.current.end_iteration or 0) >= 31:
            break
        state = ctl.step(state)
    assert state.checkpoint_seen and state.checkpoint_seen.endswith("iter_0000030")
    shutil.rmtree(tmp_path / "ckpt")
    (tmp_path / "ckpt").mkdir()
    for _ in range(200):
        state = ctl.step(state)
    assert state.segments[0].action is not None  # the segment ended and was judged
    assert len(cluster.submitted) == 1, "submitted from iteration 0 although a checkpoint had been there"


def test_4_a_run_that_never_saved_where_it_is_told_still_starts(tmp_path: Path) -> None:
    """The other side: a checkpoint directory the controller never saw a checkpoint in (the training saves
    elsewhere, or not yet) is no lost filesystem: the next segment starts (and the no-progress rules judge it)."""
    ctl, cluster, _ = make(tmp_path, {"node3": Fault("ecc", at=5)})
    state = run_until_first_segment_ends(ctl)
    assert state.checkpoint_seen is None and state.best_iteration() > 0
    state = ctl.step(state)
    assert len(cluster.submitted) == 2 and cluster.submitted[1].start_iteration == 0


def test_2b_a_queued_edit_is_acknowledged_only_after_the_state_that_holds_it_is_saved(tmp_path: Path) -> None:
    """Issue 21, data loss 2: the request file used to be deleted before the state was saved, so a failed save
    (or a kill -9 in between) lost an edit the CLI had reported as applied."""
    from datetime import UTC, datetime

    from orchestrator.loop.advance import advance
    from orchestrator.loop.observations import BlacklistEdited
    from orchestrator.requests import apply_request, take_requests
    from orchestrator.state import RunState, StateError, StateStore

    now = datetime(2026, 1, 1, tzinfo=UTC)
    queued = write_request(tmp_path, BlacklistAdd(nodes=("node4",), hours=24.0))

    def full_disk(name: str) -> None:
        raise OSError(28, "No space left on device")

    state = RunState(run="r", created_at=now, updated_at=now)
    reqs, _, names = take_requests(tmp_path, state)
    edited = BlacklistEdited(apply_request(state.blacklist, reqs[0], now), tuple(names))
    state = advance(state, edited, None, now).ledger
    with pytest.raises(StateError):
        StateStore(tmp_path, failpoint=full_disk).save(state)
    assert queued.exists()  # not acknowledged: the CLI still waits, a restart still sees it
    store = StateStore(tmp_path)
    store.save(state)
    assert not queued.exists()
    again, _, _ = take_requests(tmp_path, store.load() or state)
    assert again == []  # applied once, never twice
    assert (store.load() or state).blacklist.get("node4") is not None


class FullDisk(StateStore):
    """A run directory that is full from `full_from` (fake time) until `freed_at`."""
    def __init__(self, run_dir: Path, clock: FakeClock):
        super().__init__(run_dir)
        self.clock = clock
        self.full_from = self.freed_at = clock.now() + timedelta(days=3650)
        self.refused = 0

    def save(self, state: RunState) -> None:
        now = self.clock.now()
        if self.full_from <= now < self.freed_at:
            self.refused += 1
            raise StateError(f"{self.path}: cannot write the run state ([Errno 28] No space left on device); "
                             "the previous state is intact")
        super().save(state)


def test_5_a_full_run_directory_is_waited_out_and_the_decision_is_saved_once_space_is_back(tmp_path: Path) -> None:
    """Issue 21, data loss 5: the disk filled during training; the controller decided, could not save, and
    exited, so the decision was lost and a later `run` judged the segment again. Now it waits (said once),
    and once space is freed the decision is saved and the run goes on: node3 excluded, the goal reached."""
    from loguru import logger

    ctl, cluster, clock = make(tmp_path, {"node3": Fault("ecc", at=35)})
    store = FullDisk(ctl.s.run_dir, clock)
    ctl.store = store
    store.full_from, store.freed_at = clock.now() + timedelta(seconds=20), clock.now() + timedelta(seconds=300)
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m)), format="{message}")
    try:
        state = ctl.run()
    finally:
        logger.remove(sink)
    assert store.refused > 1 and state.status == RunStatus.DONE
    assert len([x for x in lines if "waiting for the run directory" in x]) == 1
    saved = StateStore(ctl.s.run_dir).load()
    assert saved is not None and saved.status == RunStatus.DONE
    assert [e.node for e in saved.blacklist.entries] == ["node3"] and len(cluster.submitted) == 2


@pytest.mark.parametrize("saved", [True, False])
def test_4_checkpoints_emptied_while_no_controller_saw_them_wait_if_the_training_said_it_saved(
        tmp_path: Path, saved: bool) -> None:
    """Issue 37 re-probe (a): the controller was killed before it saw any checkpoint, the directory came back empty
    (a login-node reboot, a late mount) and the segment was judged by the restarted controller from the node logs.
    The training's own "successfully saved checkpoint" lines (the agent times them: `checkpoint_write_s`) say
    there were checkpoints: waiting, not iteration 0. Without them (no save yet) the run still starts."""
    import shutil

    ctl, cluster, _ = make(tmp_path, {"node3": Fault("ecc", at=35)})
    state = run_until_first_segment_ends(ctl)
    seg = state.segments[0].evolve(checkpoint_write_s=0.4 if saved else None)
    state = state.evolve(segments=[seg], checkpoint_seen=None)  # as a controller that never saw one
    ctl.store.save(state)
    shutil.rmtree(tmp_path / "ckpt")
    (tmp_path / "ckpt").mkdir()
    for _ in range(3):
        state = ctl.step(state)
    if saved:
        assert len(cluster.submitted) == 1, "submitted from iteration 0 although the training had saved"
        res = CliRunner().invoke(app, ["run", str(tmp_path / "run.yaml"), "--dry-run"])
        assert res.exit_code == 1 and "reported saving checkpoints" in res.output, res.output
    else:
        assert len(cluster.submitted) == 2 and cluster.submitted[1].start_iteration == 0


@pytest.mark.parametrize("named", ["ckpt", "ckpt/iter_0000030", "elsewhere"])
def test_4_a_removed_checkpoint_directory_a_save_named_is_lost_one_never_named_is_elsewhere(
        tmp_path: Path, named: str) -> None:
    """Issue 37 second re-probe, row 16: the controller never saw a checkpoint and checkpoint.dir was then REMOVED
    (its filesystem unmounted). The nodes' exit records name where each save went ("... to DIR"): into
    checkpoint.dir, the run waits; elsewhere (the training does not save where it is told), it starts."""
    import shutil

    from orchestrator.contract import ExitRecord, SegmentPaths, write_record

    ctl, cluster, _ = make(tmp_path, {"node3": Fault("ecc", at=35)})
    state = run_until_first_segment_ends(ctl)
    seg = state.segments[0].evolve(checkpoint_write_s=0.4)
    state = state.evolve(segments=[seg], checkpoint_seen=None)  # as a controller that never saw one
    ctl.store.save(state)
    write_record(SegmentPaths.of(ctl.s.run_dir, 1).exit("node1"), ExitRecord(
        node="node1", exit_code=0, checkpoint_write_s=[0.4], checkpoint_dirs=[str(tmp_path / named)]))
    shutil.rmtree(tmp_path / "ckpt")
    for _ in range(3):
        state = ctl.step(state)
    res = CliRunner().invoke(app, ["run", str(tmp_path / "run.yaml"), "--dry-run"])
    if named != "elsewhere":
        assert len(cluster.submitted) == 1, "submitted from iteration 0 although the training saved there"
        assert res.exit_code == 1 and "reported saving checkpoints" in res.output, res.output
    else:
        assert len(cluster.submitted) == 2 and cluster.submitted[1].start_iteration == 0
