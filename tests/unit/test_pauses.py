"""An eval or a checkpoint save the logs announce: one rank busy outside the collective the others wait in
is then no early hang. The lines are the ones the stacks print (sources beside each)."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from orchestrator.contract import DumpRecord, Heartbeat, ProcessDump, SegmentPaths, write_record
from orchestrator.diagnose.linear import progress_pattern
from orchestrator.diagnose.scan import NodeScan
from orchestrator.diagnose.signatures import table_for
from orchestrator.loop.supervise import Seen
from orchestrator.loop.vigil import Vigil
from orchestrator.settings import PROGRESS_REGEX, Watch
from orchestrator.watch.pauses import pause_line, pausing
from orchestrator.watch.segment import SegmentWatch
from orchestrator.watch.stuck import hang_confirmed
from tests.unit.test_early_hang import ALLREDUCE, waiting

T0 = datetime(2026, 1, 1, tzinfo=UTC)
# Megatron-LM's training_log line (the progress every stack below is judged against)
PROGRESS = (" iteration      100/   10000 | consumed samples:        12800 | elapsed time per iteration (ms): 412.3 |"
            " learning rate: 2.999E-04 | lm loss: 6.132041E+00 |")
BEGINS = [
    # transformers Trainer.evaluation_loop: logger.info(f"***** Running {description} *****")
    "[INFO|trainer.py:3158] 2024-05-02 10:01:02,345 >> ***** Running Evaluation *****",
    # Megatron-LM evaluate(): print_rank_0('Evaluating iter {}/{}'.format(iteration, args.eval_iters))
    "Evaluating iter 10/100",
    # Megatron-LM save_checkpoint(): print_rank_0('saving checkpoint at iteration {:7d} to {} in {} format')
    "saving checkpoint at iteration     100 to /ckpt/gpt in torch_dist format",
    # transformers Trainer._save: logger.info(f"Saving model checkpoint to {output_dir}")
    "[INFO|trainer.py:3478] 2024-05-02 10:05:00,001 >> Saving model checkpoint to out/checkpoint-500",
    # DeepSpeed TorchCheckpointEngine.create, as printed in a public HelloDeepSpeed run log
    "[2023-07-24 13:21:33,261] [INFO] [logging.py:96:log_dist] [Rank 0] [Torch] Checkpoint global_step10 is about to"
    " be saved!",
    # torchtitan CheckpointManager.save
    "[rank0]:2025-04-01 00:25:47,084 - root - INFO - Saving the checkpoint (or staging if async is enabled).",
    # Lightning's TQDM bar on a log file: the epoch bar, then the validation bar redrawn with carriage returns
    "Epoch 3:  100%|##########| 50/50 [00:10<00:00,  4.9it/s, v_num=1]\rValidation DataLoader 0:   0%|  | 0/20"
    "\rValidation DataLoader 0:  40%|####      | 8/20 [00:01<00:02,  6.1it/s]",
]
ENDS = [
    "  successfully saved checkpoint from iteration     100 to /ckpt/gpt [ t 1/1, p 1/1 ]",  # Megatron-LM
    "[2023-07-24 13:21:35,002] [INFO] [torch_checkpoint_engine.py:33:commit] [Torch] Checkpoint global_step10 is "
    "ready now!",  # DeepSpeed
    "[rank0]:2025-04-01 00:25:59,616 - root - INFO - Finished saving the checkpoint (or staging if async is "
    "enabled)in 5.53 seconds.",  # torchtitan
    " validation loss at iteration 100 | lm loss value: 6.101E+00 | lm loss PPL: 4.463E+02 |",  # Megatron-LM
]


def scan(*lines: str) -> NodeScan:
    s = NodeScan("node2", "node2.log", table_for([]), progress_pattern(PROGRESS_REGEX, PROGRESS_REGEX))
    s.feed([(i + 1, f"2026-01-01T00:00:{i:02d}+00:00 {line}") for i, line in enumerate(lines)])
    return s


@pytest.mark.parametrize("line", BEGINS)
def test_a_pause_begun_after_the_last_progress_line_is_running(line: str) -> None:
    said = pause_line(scan(PROGRESS, line, "  Num examples = 2000", "  Batch size = 8"))
    assert said and said in f"2026-01-01T00:00:01+00:00 {line}".strip()
    assert pause_line(scan(line, PROGRESS)) == ""  # the training went on after it


@pytest.mark.parametrize("end", ENDS)
def test_a_pause_that_ended_is_over(end: str) -> None:
    begin = "saving checkpoint at iteration     100 to /ckpt/gpt in torch format"
    assert pause_line(scan(PROGRESS, begin, end)) == ""


def test_plain_training_output_is_no_pause() -> None:
    for text in (PROGRESS, "[rank1]:[W reducer.cpp:1389] Warning: find_unused_parameters=True was specified",
                 "evaluation metrics will be logged to wandb", "checkpoint dir: /ckpt (exists)"):
        assert pause_line(scan(PROGRESS, text)) == "", text
    assert pausing([scan(PROGRESS), scan(PROGRESS, BEGINS[0])]).endswith("***** Running Evaluation *****")
    assert pausing([scan(PROGRESS), scan(PROGRESS, *ENDS[:1])]) == ""


def test_a_rank_outside_the_collective_during_an_announced_pause_is_no_hang_but_a_stuck_one_still_is() -> None:
    asked, now = T0 + timedelta(seconds=10), T0 + timedelta(seconds=12)
    evaluating = {"node1": waiting("node1"), "node2": waiting("node2", "forward (model.py)"), "node3": waiting("node3")}
    assert hang_confirmed(evaluating, asked, now).startswith("node2 outside")  # without the log line: a hang
    assert hang_confirmed(evaluating, asked, now, paused=BEGINS[0]) == ""
    stuck = {**evaluating, "node2": waiting("node2", "read (fuse.py)", state="D")}
    assert "state D" in hang_confirmed(stuck, asked, now, paused=BEGINS[0])  # a process in the kernel is not evaluating


@pytest.mark.parametrize(("last_line", "confirmed"), [(PROGRESS, True), (BEGINS[3], False), (ENDS[0], True)])
def test_the_vigil_reads_the_pause_from_the_node_logs(tmp_path: Path, last_line: str, confirmed: bool) -> None:
    """Rank 0 (node1) alone outside the all-reduce, with the same frame in both samples: a hang, unless its log's
    last lines say it is saving the model."""
    paths = SegmentPaths(tmp_path)
    paths.logs.mkdir(parents=True)
    paths.nodes.mkdir()
    for n in ("node1", "node2", "node3"):
        paths.log(n).write_text(f"{PROGRESS}\n" + (f"{last_line}\n" if n == "node1" else ""))
        write_record(paths.heartbeat(n), Heartbeat(node=n))
    watch = SegmentWatch(tmp_path, table_for([]), progress_pattern(PROGRESS_REGEX, PROGRESS_REGEX), 5.0)
    vigil = Vigil(tmp_path / "ckpt", Watch(), tmp_path)
    try:
        watch.poll(T0)
        watch.request_dumps(T0 + timedelta(seconds=1))
        for n in ("node1", "node2", "node3"):
            frame = "forward (model.py)" if n == "node1" else ALLREDUCE
            write_record(paths.dump(n), DumpRecord(node=n, request=watch.dump_request_id, processes=[
                ProcessDump(pid=7, state="S", top_frame=frame, top_frame_again=frame)]))
        watch.poll(T0 + timedelta(seconds=3))
        seen = vigil.seen(watch, Seen(nodes=frozenset(watch.nodes)), T0 + timedelta(seconds=4))
    finally:
        watch.close()
    assert bool(seen.confirmed) == confirmed, seen.confirmed


def test_the_vigil_tells_an_agent_at_work_on_its_stacks_from_a_silent_one(tmp_path: Path) -> None:
    """After a dump request: node1 answered, node2's heartbeat went on (its py-spy is slow under load), node3's
    stopped (frozen). Only node2 is worth waiting for past the short bound."""
    paths = SegmentPaths(tmp_path)
    paths.logs.mkdir(parents=True)
    paths.nodes.mkdir()
    for n in ("node1", "node2", "node3"):
        paths.log(n).write_text(f"{PROGRESS}\n")
        write_record(paths.heartbeat(n), Heartbeat(node=n))
        os.utime(paths.heartbeat(n), (1_000, 1_000))
    watch = SegmentWatch(tmp_path, table_for([]), progress_pattern(PROGRESS_REGEX, PROGRESS_REGEX), 5.0)
    vigil = Vigil(tmp_path / "ckpt", Watch(), tmp_path)
    try:
        watch.poll(T0)
        seen = vigil.seen(watch, Seen(nodes=frozenset(watch.nodes)), T0)
        assert seen.answering == frozenset()  # nothing asked: nobody is answering
        watch.request_dumps(T0 + timedelta(seconds=1))
        write_record(paths.dump("node1"), DumpRecord(node="node1", request=watch.dump_request_id, processes=[]))
        os.utime(paths.heartbeat("node2"), (2_000, 2_000))
        watch.poll(T0 + timedelta(seconds=3))
        seen = vigil.seen(watch, Seen(nodes=frozenset(watch.nodes)), T0 + timedelta(seconds=3))
    finally:
        watch.close()
    assert watch.dumps_in() == frozenset({"node1"}) and seen.answering == frozenset({"node2"})
