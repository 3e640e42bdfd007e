"""The checkpoint write time, timed by the agent from the training's own save lines (issue 14).

The lines are Megatron-LM's (megatron/training/checkpointing.py prints `saving checkpoint at iteration
{:7d} to {} in {} format` before a save and `  successfully saved checkpoint from iteration {:7d} to {}`
after it; releases before 2024 print `successfully saved checkpoint at iteration {:7d} to {}`), as shown in
NVIDIA/Megatron-LM#1134 and the stacks built on it (ms-swift, NeMo)."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from orchestrator.checkpoint_interval import write_time_s
from orchestrator.contract import ExitRecord, SegmentPaths, read_record
from orchestrator.model import SegmentSpec
from orchestrator.saves import CheckpointTimer
from orchestrator.state import RunState, SegmentRecord

START = "saving checkpoint at iteration     100 to /lustre/ckpt/gpt in torch_dist format"
END = "  successfully saved checkpoint from iteration     100 to /lustre/ckpt/gpt [ t 1/4, p 1/1 ]"
OLD_END = "  successfully saved checkpoint at iteration     100 to /lustre/ckpt/gpt"


@pytest.mark.parametrize("end", [END, OLD_END])
def test_a_save_is_timed_from_its_start_and_end_lines(end: str) -> None:
    t = CheckpointTimer()
    assert not t.feed("[2024-05-01 10:00:00] " + START, 10.0)
    assert t.feed(end, 52.5)
    assert t.durations == [42.5]


def test_lines_that_do_not_pair_are_not_a_write_time() -> None:
    t = CheckpointTimer()
    assert not t.feed(END, 5.0)  # an end with no start
    t.feed(START, 10.0)
    assert not t.feed(END.replace("100", "200"), 11.0)  # another iteration's end
    assert not t.feed("loading checkpoint from /lustre/ckpt/gpt at iteration 100", 12.0)
    assert t.durations == []


def test_only_the_last_saves_are_kept() -> None:
    t = CheckpointTimer()
    for i in range(30):
        t.feed(START, float(i * 10))
        t.feed(END, float(i * 10 + i))
    assert len(t.durations) == 20 and t.durations[-1] == 29.0


def _seg(i: int, write: float | None) -> SegmentRecord:
    return SegmentRecord(index=i, job_name=f"r.seg{i:04d}", checkpoint_write_s=write)


def test_the_interval_advice_uses_the_timed_write_time_else_the_configured_one() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    state = RunState(run="r", created_at=now, updated_at=now)
    assert write_time_s(state, 120.0) == (120.0, False)
    state = state.evolve(segments=[_seg(1, 30.0), _seg(2, None), _seg(3, 50.0), _seg(4, 40.0)])
    assert write_time_s(state, 120.0) == (40.0, True)
    state = state.evolve(segments=[_seg(1, 0.01)])
    assert write_time_s(state, 120.0) == (1.0, True)  # never zero (Daly's formula needs a positive write time)


def test_the_agent_writes_the_timed_saves_into_its_exit_record(tmp_path: Path) -> None:
    from orchestrator.agent.main import NodeAgent

    code = ("import time; print('saving checkpoint at iteration 10 to /c in torch format', flush=True); "
            "time.sleep(0.3); print('  successfully saved checkpoint from iteration 10 to /c', flush=True)")
    spec = SegmentSpec(run_name="r", index=1, job_name="r.seg0001", nodes=1, tasks_per_node=1, gpus_per_node=0,
                       time_limit_min=5, command=(sys.executable, "-c", code), workdir=str(tmp_path),
                       run_dir=str(tmp_path), segment_dir=str(tmp_path / "s"), progress_regex=r"it (\d+)")
    assert NodeAgent(spec, "node1", 0, 1, "7").run() == 0
    rec = read_record(SegmentPaths(tmp_path / "s").exit("node1"), ExitRecord)
    assert rec is not None and len(rec.checkpoint_write_s) == 1 and 0.25 <= rec.checkpoint_write_s[0] < 10
    assert rec.checkpoint_dirs == ["/c"]  # where the save went (issue 37: a removed checkpoint.dir)


def test_the_directories_the_saves_named_are_kept_once_each() -> None:
    t = CheckpointTimer()
    for end in (END, OLD_END, END.replace("/gpt", "/b"), "successfully saved checkpoint at iteration 5"):
        t.feed(START, 1.0)
        t.feed(end, 2.0)
    assert t.dirs == ["/lustre/ckpt/gpt", "/lustre/ckpt/b"]


def test_a_node_whose_agent_was_killed_reports_the_saves_its_log_shows(tmp_path: Path) -> None:
    """Issue 37 (B4): an agent killed with its job writes no exit record; its log, stamped by the agent line by
    line, still holds the save lines: the same write times and directories the record would have held."""
    from orchestrator.contract import write_record
    from orchestrator.saves import reported_saves

    paths = SegmentPaths(tmp_path / "segments" / "0001")
    paths.logs.mkdir(parents=True)
    paths.nodes.mkdir(parents=True)
    paths.log("gpu-a").write_text("\n".join([
        "2026-12-05T14:35:14.000Z agent: ORCH-AGENT start segment=1 job=7 node=gpu-a",
        "2026-12-05T14:35:20.000Z 0: iteration 100/ 4000 | lm loss 2.1",
        f"2026-12-05T14:35:21.000Z 0: {START}",
        f"2026-12-05T14:35:24.500Z 0: {END}",
        f"2026-12-05T14:35:30.000Z 0: {START.replace('100', '200')}",  # cut by the kill: no end line
    ]) + "\n")
    paths.log("gpu-b").write_text(f"{START}\n{END}\n")  # not stamped by an agent: not the agent's log
    paths.log("gpu-c").write_text(f"2026-12-05T14:35:21.000Z 0: {START}\n2026-12-05T14:35:22.000Z 0: {END}\n")
    write_record(paths.exit("gpu-c"), ExitRecord(node="gpu-c", exit_code=0, checkpoint_write_s=[9.0],
                                                 checkpoint_dirs=["/other"]))
    got = {x.node: x for x in reported_saves(paths.root)}
    assert set(got) == {"gpu-a", "gpu-c"}
    assert got["gpu-a"].durations == (3.5,) and got["gpu-a"].dirs == ("/lustre/ckpt/gpt",)
    assert got["gpu-a"].iteration == 100
    assert got["gpu-c"].durations == (9.0,) and got["gpu-c"].dirs == ("/other",)  # the record, where there is one
