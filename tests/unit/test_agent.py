from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from orchestrator.agent import dump, preflight
from orchestrator.diagnose.classify import Context, classify
from orchestrator.evidence import NodeEvidence
from orchestrator.model import Cause, JobState, JobStatus
from orchestrator.offline.diagnosis import action_without_history
from tests.waiter import waiting_process


def test_gpu_check_without_nvml_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ORCH_FAKE_NVML", raising=False)
    r = preflight.check_gpus("node1", nvml="no_nvml_here")  # as on a machine without the NVIDIA driver
    assert r.ok and r.detail == "skipped: no NVML"


@pytest.mark.parametrize("gpus,ok,words", [
    ([{}, {}], True, "2 GPU(s) healthy"),
    ([{}, {"ecc_uncorrected": 3}], False, "GPU 1: 3 volatile uncorrectable ECC error"),
    ([{"pending_retired": 1}], False, "pending page retirement"),
    ([{"lost": 1}], False, "Unable to determine the device handle"),
])
def test_fake_nvml(tmp_path: Path, gpus: list[dict[str, int]], ok: bool, words: str) -> None:
    f = tmp_path / "nvml.json"
    f.write_text(json.dumps({"node2": gpus, "*": [{}]}))
    r = preflight.check_gpus("node2", {"ORCH_FAKE_NVML": str(f)})
    assert r.ok is ok and words in r.detail
    assert preflight.check_gpus("node9", {"ORCH_FAKE_NVML": str(f)}).ok


def test_fs_probe_reports_an_unusable_dir(tmp_path: Path) -> None:
    assert preflight.probe_dir(tmp_path, 5).ok
    r = preflight.probe_dir(tmp_path / "no" / "such" / "\x00bad", 2)
    assert not r.ok and "ORCH-FS-PROBE FAILED" in r.detail


def test_user_check_commands(tmp_path: Path) -> None:
    assert preflight.run_command(("true",), 5).ok
    bad = preflight.run_command(("sh", "-c", "echo ib0 down; exit 3"), 5)
    assert not bad.ok and "exited 3" in bad.detail and "ib0 down" in bad.detail
    slow = preflight.run_command(("sleep", "30"), 0.5)
    assert not slow.ok and "timed out" in slow.detail


def test_dump_reads_state_and_stack_of_a_live_process() -> None:
    with waiting_process() as p:
        deadline = time.monotonic() + 60
        while True:  # under load py-spy may time out; a dump that got the frames is what we check
            recs = dump.dump_processes([p.pid])
            assert recs and recs[0].pid == p.pid and recs[0].state in "SR"
            if "Thread" in recs[0].stack or "not installed" in recs[0].stack or time.monotonic() > deadline:
                break
        if "not installed" not in recs[0].stack:
            assert recs[0].top_frame.startswith("wait_in_collective ("), recs[0].stack
    assert dump.read_stat(p.pid) is None  # gone: no hang, no exception


def test_top_frame_parsing() -> None:
    text = ('Process 1: python x.py\nPython v3.11.7\n\nThread 1 (idle): "MainThread"\n'
            "    barrier (torch/distributed/distributed_c10d.py:2784)\n    main (train.py:10)\n")
    assert dump.top_frame(text) == "barrier (torch/distributed/distributed_c10d.py)"
    assert dump.top_frame("Error: Failed to suspend process\nReason: EPERM") == ""
    assert dump.fs_suspect("nfs_wait_on_request") and not dump.fs_suspect("do_freezer_trap")


STALL = Context(stalled=True)
CANCELLED = JobStatus(state=JobState.CANCELLED)


def test_rank_outside_the_collective_in_a_device_call_is_the_culprit() -> None:
    coll = "barrier (torch/distributed/distributed_c10d.py)"
    nodes = [NodeEvidence(node=f"n{i}", top_frames=(coll,) * 8) for i in range(1, 8)]
    nodes.append(NodeEvidence(node="n8", top_frames=(coll,) * 7 + ("synchronize (torch/cuda/__init__.py)",)))
    v = classify(CANCELLED, nodes, STALL)
    assert v.cause == Cause.HANG and v.culprit_nodes == ("n8",) and v.blame and v.rule == "outside_collective"
    assert action_without_history(v)[0] == "resubmit_exclude"


def test_rank_outside_the_collective_in_program_code_is_the_jobs() -> None:
    """DECISIONS.md: a hang whose stuck rank waits in the program's own code (a queue, a lock), with no node-side
    evidence, stops; an unknown frame is not that evidence: the stuck rank's node is the culprit."""
    coll = "barrier (torch/distributed/distributed_c10d.py)"
    nodes = [NodeEvidence(node=f"n{i}", top_frames=(coll,) * 8) for i in range(1, 8)]
    nodes.append(NodeEvidence(node="n8", top_frames=(coll,) * 7 + ("get (queue.py)",)))
    v = classify(CANCELLED, nodes, STALL)
    assert v.cause == Cause.HANG and v.culprit_nodes == () and not v.blame and v.rule == "hang_in_program_code"
    assert action_without_history(v)[0] == "stop_and_alert"
    nodes[-1] = NodeEvidence(node="n8", top_frames=(coll,) * 7 + ("_do_batch (engine.py)",))  # an unknown frame
    v = classify(CANCELLED, nodes, STALL)
    assert v.culprit_nodes == ("n8",) and v.rule == "outside_collective"
    assert action_without_history(v)[0] == "resubmit_exclude"


def test_d_state_on_filesystem_is_not_the_nodes_fault() -> None:
    nodes = [NodeEvidence(node="n1"), NodeEvidence(node="n2", stuck_detail="pid 7 state D wchan=nfs_wait",
                                                   fs_suspect=True)]
    v = classify(CANCELLED, nodes, STALL)
    assert v.cause == Cause.FILESYSTEM and not v.blame and action_without_history(v)[0] == "wait_and_resubmit"


def test_stall_with_nobody_standing_out_blames_nobody() -> None:
    nodes = [NodeEvidence(node="n1", top_frames=("a (x.py)",)), NodeEvidence(node="n2", top_frames=("a (x.py)",))]
    v = classify(CANCELLED, nodes, STALL)
    assert v.cause == Cause.HANG and not v.blame


def test_agent_sets_rank_environment(tmp_path: Path) -> None:
    from orchestrator.agent.main import NodeAgent
    from orchestrator.model import SegmentSpec

    spec = SegmentSpec(run_name="r", index=1, job_name="r.seg0001", nodes=2, tasks_per_node=4, gpus_per_node=0,
                       time_limit_min=5, command=("true",), workdir=str(tmp_path), run_dir=str(tmp_path),
                       segment_dir=str(tmp_path / "s"), progress_regex=r"it (\d+)", env=(("A", "1"),))
    env = NodeAgent(spec, "node7", 1, 2, "9")._env(2)
    assert (env["RANK"], env["LOCAL_RANK"], env["WORLD_SIZE"], env["ORCH_NODE_NAME"]) == ("6", "2", "8", "node7")
    assert env["A"] == "1" and env["SLURMD_NODENAME"] == "node7" and os.environ.get("A") != "1"


def test_a_cancel_during_the_agents_start_up_is_not_lost(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """CI, 2026-12-02: the local backend's SIGTERM came during the preflight, before the agent's handler was in;
    submitit dropped it ("Bypassing signal SIGTERM") and the agent trained on after the cancel. Now the handler
    is in from the start, and a signal before the launch starts no rank."""
    import signal

    from orchestrator.agent.main import NodeAgent
    from orchestrator.contract import ExitRecord, SegmentPaths
    from orchestrator.model import SegmentSpec

    spec = SegmentSpec(run_name="r", index=1, job_name="r.seg0001", nodes=1, tasks_per_node=1, gpus_per_node=0,
                       time_limit_min=5, command=("sleep", "60"), workdir=str(tmp_path), run_dir=str(tmp_path),
                       segment_dir=str(tmp_path / "s"), progress_regex=r"it (\d+)")
    agent = NodeAgent(spec, "node1", 0, 1, "9")
    monkeypatch.setattr(agent.facts, "baseline", lambda: os.kill(os.getpid(), signal.SIGTERM))
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR2)}
    try:
        code = agent.run()
        for _ in range(20):  # the handler's thread writes its line
            if "got signal SIGTERM" in SegmentPaths(tmp_path / "s").log("node1").read_text():
                break
            time.sleep(0.05)
    finally:
        for s, h in saved.items():
            signal.signal(s, h)
    record = ExitRecord.model_validate_json(SegmentPaths(tmp_path / "s").exit("node1").read_text())
    assert code == 128 + signal.SIGTERM and agent.procs == [] and record.stopped_by_signal
    assert "got signal SIGTERM" in SegmentPaths(tmp_path / "s").log("node1").read_text()
