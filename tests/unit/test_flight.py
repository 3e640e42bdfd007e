"""PyTorch's flight recorder as a second source on a hang (issue 25): the agent turns it on for the ranks, the
training's `orchestrator.flight` hook writes it on the dump request, the controller reads who enqueued fewer
collectives (real dumps of the torch job in tests/data/flight), and two sources that disagree name nobody."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator.agent.taskenv import flight_env
from orchestrator.diagnose.endings import who_stalled
from orchestrator.evidence import NodeEvidence
from orchestrator.model import Cause, Owner
from orchestrator.watch.flight import TIMEOUT, RankTrace, behind, parse, read_flight

DATA = Path(__file__).parent.parent / "data" / "flight"
REQUEST = "2026-12-02T04:20:00+00:00"  # the request the fixtures answered
WAIT = "_engine_run_backward (torch/autograd/graph.py)"


def test_the_real_dumps_name_the_rank_that_never_enqueued_the_all_reduce(tmp_path: Path) -> None:
    traces = [parse(f.name, f.read_bytes()) for f in sorted(DATA.glob("*.json"))]
    assert [(t.node, t.rank, t.enqueued, t.collective) for t in traces if t] == [
        ("node1", 0, 66, "gloo:all_reduce"), ("node2", 1, 65, "gloo:all_reduce"), ("node3", 2, 66, "gloo:all_reduce")]
    late = read_flight(shutil.copytree(DATA, tmp_path / "flight"), REQUEST)
    assert list(late) == ["node2"]
    assert late["node2"] == ("flight recorder: rank 1 enqueued collective 65, the others 66 (gloo:all_reduce), "
                             "where they wait")
    assert read_flight(tmp_path / "flight", "another request") == {}  # answers to an older request say nothing


def t(node: str, enqueued: int, request: str = "r") -> RankTrace:
    return RankTrace(node, int(node[-1]), enqueued, "nccl:all_reduce", request)


def test_behind_is_a_minority_of_the_answers_to_one_request_or_to_the_timeout() -> None:
    assert behind([t("node1", 9), t("node2", 9), t("node3", 9)], "r") == {}  # all level
    assert behind([t("node1", 9), t("node2", 8), t("node3", 8)], "r") == {}  # most behind: the ahead one is odd
    assert list(behind([t("node1", 9), t("node2", 8)], "r")) == ["node2"]
    assert list(behind([t("node1", 9, TIMEOUT), t("node2", 7, TIMEOUT), t("node3", 9, TIMEOUT)], "")) == ["node2"]
    assert behind([t("node1", 9, "old"), t("node2", 7, "old")], "new") == {}


def test_a_nccl_timeout_dump_is_read_as_plain_data_and_a_pickle_with_code_is_refused() -> None:
    real = json.loads((DATA / "node2.rank-1.json").read_text())["trace"]
    got = parse("node2.rank-1", pickle.dumps(real))  # NCCL's dump: the same dict, pickled
    assert got is not None and (got.enqueued, got.request) == (65, TIMEOUT)
    evil = pickle.dumps({"pg_status": {"0": {"last_enqueued_collective": Reduced()}}})
    assert pickle.loads(evil)["pg_status"]["0"]["last_enqueued_collective"] == 65  # a plain unpickler would run it
    assert parse("node2.rank-1", evil) is None  # a callable in the pickle: refused, never called
    body = (DATA / "node2.rank-1.json").read_bytes()
    assert parse("node2.rank-1.json", body) is not None
    assert parse("../x.rank-1.json", body) is None and parse("node2.rank-x.json", body) is None
    assert parse("node2.rank-1.json", b"not json") is None


class Reduced:
    """Unpickles by calling a function (here int("65")): what a pickle that runs code looks like."""

    def __reduce__(self) -> tuple[type, tuple[str]]:
        return (int, ("65",))


def test_malformed_recorder_files_are_skipped_not_fatal(tmp_path: Path) -> None:
    d = shutil.copytree(DATA, tmp_path / "flight")
    (d / "node4.rank-3.json").write_text(json.dumps(
        {"request": REQUEST, "trace": {"entries": 5, "pg_status": {"0": {"last_enqueued_collective": "1"}}}}))
    (d / "node5.rank-4.json").write_text("[" * 100_000 + "]" * 100_000)  # nesting past the recursion limit
    (d / "node6.rank-5").write_bytes(b"\x80\x04\x95" + bytes(range(256)))  # a mangled pickle
    assert list(read_flight(d, REQUEST)) == ["node2"]


def node(name: str, frame: str, flight: str = "") -> NodeEvidence:
    return NodeEvidence(node=name, top_frames=(frame,), flight_detail=flight)


@pytest.mark.parametrize(("nodes", "rule", "culprits"), [
    # the stacks and the recorders agree: named, more sure
    ([node("node1", WAIT), node("node2", "inject (train.py)", "behind"), node("node3", WAIT)],
     "outside_collective", ("node2",)),
    # they disagree: nobody
    ([node("node1", WAIT, "behind"), node("node2", "inject (train.py)"), node("node3", WAIT)],
     "sources_disagree", ()),
    # the stacks alike (a rank asleep in the same frame), the recorders know
    ([node("node1", WAIT), node("node2", WAIT, "behind"), node("node3", WAIT)], "behind_in_collectives", ("node2",)),
])
def test_the_stall_verdict_fuses_stacks_and_flight_recorders(nodes: list[NodeEvidence], rule: str,
                                                              culprits: tuple[str, ...]) -> None:
    v = who_stalled(nodes, [])
    assert v is not None and v.cause == Cause.HANG and v.rule == rule and v.culprit_nodes == culprits
    assert (v.owner == Owner.NOBODY) == (not culprits)
    if rule == "outside_collective":
        assert v.confidence == 0.9 and "flight recorders agree" in v.summary


def test_the_agent_turns_the_recorder_on_unless_the_user_set_it() -> None:
    env = flight_env("/runs/r/segments/0003", "node7", {})
    assert env["TORCH_FR_DUMP_TEMP_FILE"] == "/runs/r/segments/0003/flight/node7.rank-"
    assert env["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1" and int(env["TORCH_FR_BUFFER_SIZE"]) > 0
    assert env["ORCH_DUMP_REQUEST"] == "/runs/r/segments/0003/dump-request"
    assert "TORCH_FR_BUFFER_SIZE" not in flight_env("/s", "n", {"TORCH_FR_BUFFER_SIZE": "50"})


HOOKED = """
import datetime as dt, os, time, torch, torch.distributed as dist
from orchestrator.flight import dump_on_request
dist.init_process_group("gloo", store=dist.FileStore(os.environ["STORE"], 1), rank=0, world_size=1,
                        timeout=dt.timedelta(seconds=30))
assert dump_on_request(poll_s=0.1) is not None
t = torch.ones(2)
for _ in range(5):
    dist.all_reduce(t)
print("ready", flush=True)
time.sleep(60)
"""


def test_the_hook_writes_the_real_recorder_on_the_dump_request(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    (tmp_path / "flight").mkdir()
    env = {**flight_env(str(tmp_path), "node1", {}), "RANK": "0", "STORE": str(tmp_path / "store"),
           "GLOO_SOCKET_IFNAME": "lo", "PATH": "/usr/bin:/bin", "PYTHONPATH": str(Path(__file__).parents[2])}
    (tmp_path / "dump-request").write_text("before the process\n")  # an older request: not answered
    p = subprocess.Popen([sys.executable, "-c", HOOKED], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        (tmp_path / "dump-request").write_text("req-1\n")
        out, deadline = tmp_path / "flight" / "node1.rank-0.json", time.monotonic() + 30
        while not out.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        got = parse(out.name, out.read_bytes())
    finally:
        p.kill()
        p.wait()
    assert got is not None and got.request == "req-1" and got.enqueued == 5 and got.collective == "gloo:all_reduce"


def test_a_refused_py_spy_says_why_and_what_to_do(tmp_path: Path) -> None:
    from orchestrator.agent.dump import ptrace_hint
    from orchestrator.flight import allow_tracing

    scope = tmp_path / "ptrace_scope"
    scope.write_text("1\n")
    # py-spy 0.3/0.4's own words (benfred/py-spy#804, #459)
    refused = "Error: Failed to open process - check if it is running.\nReason: Operation not permitted (os error 1)"
    hint = ptrace_hint(refused, scope)
    assert "kernel.yama.ptrace_scope=1" in hint and "dump_on_request()" in hint and "cap_sys_ptrace" in hint
    assert ptrace_hint("Permission Denied: Try running again with elevated permissions", tmp_path / "none").count(
        "ptrace_scope=?") == 1
    assert ptrace_hint("Thread 0x7F (idle): \"MainThread\"\n    wait (x.py:1)", scope) == ""
    yama = Path("/proc/sys/kernel/yama/ptrace_scope").exists()
    assert allow_tracing(os.getpid()) is yama  # the prctl takes where Yama is, refused harmlessly where not
