from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from orchestrator.diagnose.classify import Context, classify
from orchestrator.diagnose.nodes import node_evidence
from orchestrator.diagnose.prefilter import Prefilter
from orchestrator.diagnose.scan import NodeScan
from orchestrator.diagnose.signatures import build_table
from orchestrator.evidence import NodeEvidence
from orchestrator.model import CancelReason, Cause, JobState, JobStatus, Owner
from orchestrator.offline.diagnosis import action_without_history
from orchestrator.settings import PROGRESS_REGEX, last_iteration

SIGS = build_table()
PROG = re.compile(r"iteration\s+(\d+)\s*/\s*\d+")
PREFILTER = Prefilter([(s.pattern, s.ignore_case) for s in SIGS])


def node(name: str, lines: list[str], exit_code: int | None = None) -> NodeEvidence:
    s = NodeScan(name, f"{name}.log", SIGS, PROG)
    s.feed(list(enumerate(lines, 1)))
    return node_evidence(s, exit_code=exit_code)


def progress(n: int) -> list[str]:
    return [f" iteration {i:8d}/     100 | lm loss: 1.0" for i in range(1, n + 1)]


ECC = "RuntimeError: transform: failed to synchronize: cudaErrorECCUncorrectable: uncorrectable ECC error encountered"
NCCL = ("[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, "
        "Timeout(ms)=600000) ran for 600023 milliseconds before timing out.")
FAILED = JobStatus(state=JobState.FAILED)
CANCELLED = JobStatus(state=JobState.CANCELLED)


def test_ecc_culprit_over_louder_cascade() -> None:
    nodes = [node("n1", progress(35) + [NCCL] * 20), node("n2", progress(35) + ["0: " + NCCL] * 5),
             node("n3", progress(34) + [f"2: {ECC}", "terminate called after throwing an instance of 'c10::Error'"])]
    v = classify(CANCELLED, nodes, Context())
    assert v.cause == Cause.GPU_ECC and v.culprit_nodes == ("n3",) and v.blame
    assert any(e.role == "secondary" and e.node == "n1" for e in v.evidence)


@pytest.mark.parametrize("line", [
    "RuntimeError: CUDA error: uncorrectable ECC error encountered",
    "[rank5]: torch.cuda: CUDA_ERROR_ECC_UNCORRECTABLE",
    "NVRM: Xid (PCI:0000:3b:00): 48, pid=1234, DBE (double bit error) ECC Error",
    "[Mon Aug  9 10:11:12 2021] NVRM: Xid (PCI:0000:b1:00): 94, pid=999, Contained: CE User Channel",
])
def test_ecc_variants(line: str) -> None:
    v = classify(FAILED, [node("a", [line]), node("b", progress(3))], Context())
    assert v.cause == Cause.GPU_ECC and v.culprit_nodes == ("a",)


@pytest.mark.parametrize("line", [
    "NVRM: Xid (PCI:0000:07:00): 79, pid=2961, GPU has fallen off the bus.",
    "Unable to determine the device handle for GPU 0000:3B:00.0: Unknown Error",
])
def test_gpu_lost(line: str) -> None:
    v = classify(FAILED, [node("a", progress(2)), node("b", progress(2) + [line])], Context())
    assert v.cause == Cause.GPU_LOST and v.culprit_nodes == ("b",) and v.blame


def test_oom_after_hardware_fault_is_poisoned_gpu() -> None:
    oom = "RuntimeError: CUDA error: out of memory"
    nodes = [node("n3", [oom], 1), node("n1", []), node("n2", [])]
    v = classify(FAILED, nodes, Context(recent_hardware=frozenset({"n3"}), start_iteration=30))
    assert v.cause == Cause.GPU_OOM_STARTUP and v.culprit_nodes == ("n3",) and v.blame


def test_oom_everywhere_after_progress_is_user_oom() -> None:
    oom = "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    nodes = [node(n, progress(500) + [oom], 1) for n in ("n1", "n2", "n3")]
    v = classify(FAILED, nodes, Context(start_iteration=0))
    assert v.cause == Cause.USER_OOM and not v.blame


def test_timelimit_blames_nobody() -> None:
    nodes = [node("n1", progress(10) + ["slurmstepd-n1: error: *** JOB 77 ON n1 CANCELLED AT 2026-01-01T00:00:00 "
                                        "DUE TO TIME LIMIT ***"]), node("n2", progress(10))]
    v = classify(JobStatus(state=JobState.TIMEOUT), nodes, Context())
    assert v.cause == Cause.TIMELIMIT and not v.blame and v.culprit_nodes == ()


def test_node_failure_names_the_failed_node_not_the_printer() -> None:
    nodes = [node("n1", progress(10) + ["srun: error: Node failure on n4",
                                        "slurmstepd: error: *** JOB 9 ON n1 CANCELLED AT 2026-01-01T00:00:00 DUE TO "
                                        "NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***"]),
             node("n4", progress(8))]
    v = classify(JobStatus(state=JobState.NODE_FAIL), nodes, Context())
    assert v.cause == Cause.NODE_FAIL and v.culprit_nodes == ("n4",) and v.blame


def test_user_bug_blames_nobody() -> None:
    tb = ["Traceback (most recent call last):", '  File "train.py", line 3, in <module>',
          "ValueError: could not broadcast input array from shape (8,32) into shape (8,33)"]
    v = classify(FAILED, [node(n, progress(25) + tb, 1) for n in ("n1", "n2")], Context())
    assert v.cause == Cause.USER_BUG and not v.blame and v.culprit_nodes == ()
    assert {e.node for e in v.evidence} == {"n1", "n2"}  # where it was printed stays in the evidence


def test_nan_is_user_bug() -> None:
    v = classify(FAILED, [node("n1", progress(5) + ["FloatingPointError: Loss is NaN at iteration 6"], 1)], Context())
    assert v.cause == Cause.USER_BUG and not v.blame


def test_silent_node_behind_cascading_peers_is_the_hang() -> None:
    """The peers' watchdog fired; the node they waited for printed nothing: it is the culprit."""
    nodes = [node("n1", progress(40) + [NCCL]), node("n2", progress(40) + [NCCL]), node("n3", progress(37))]
    v = classify(CANCELLED, nodes, Context())
    assert v.cause == Cause.HANG and v.culprit_nodes == ("n3",) and v.blame


def test_silent_node_with_abrupt_end_is_a_node_failure() -> None:
    s = NodeScan("n3", "n3.log", SIGS, PROG)
    s.feed_bytes(1, b"".join(p.encode() + b"\n" for p in progress(37)) + b"\x00" * 64 + b"\n", PREFILTER)
    nodes = [node("n1", progress(40) + [NCCL]), node("n2", progress(40) + [NCCL]), node_evidence(s)]
    v = classify(CANCELLED, nodes, Context())
    assert v.cause == Cause.NODE_FAIL and v.culprit_nodes == ("n3",) and v.blame


def test_only_cascade_everywhere_names_the_node_behind_with_a_strike() -> None:
    """DECISIONS.md: in a collective timeout the node whose progress stopped first is the culprit; with nothing
    else against it that is weak evidence: a strike (resubmit), not an exclusion."""
    nodes = [node("n1", progress(40) + [NCCL]), node("n2", progress(40) + [NCCL]), node("n3", progress(37) + [NCCL])]
    v = classify(CANCELLED, nodes, Context())
    assert v.cause == Cause.NCCL_TIMEOUT and v.culprit_nodes == ("n3",) and v.blame
    assert v.fault_owner == Owner.NODE_SUSPECT and action_without_history(v)[0] == "resubmit"


def test_success() -> None:
    v = classify(JobStatus(state=JobState.COMPLETED), [node("n1", progress(5), 0)], Context())
    assert v.cause == Cause.SUCCESS


def test_nothing_matches_is_unknown() -> None:
    v = classify(FAILED, [node("n1", ["hello", "world"], 3)], Context())
    assert v.cause == Cause.UNKNOWN and not v.blame and v.evidence


def test_stall_with_d_state_names_the_stuck_node() -> None:
    stuck = NodeEvidence(node="n2", stuck_detail="pid 280058 in uninterruptible sleep (state D)")
    v = classify(CANCELLED, [node("n1", progress(5)), stuck], Context(stalled=True))
    assert v.cause == Cause.HANG and v.culprit_nodes == ("n2",) and v.blame


def test_rank_and_timestamp_prefixes_are_parsed() -> None:
    s = NodeScan("n1", "n1.log", SIGS, PROG)
    s.feed([(1, "2026-11-29T18:01:41.472Z 3: " + ECC), (2, "[2021-08-12 08:19:01,123] [rank7]: " + ECC)])
    assert [m.rank for m in s.matches] == [3, 7]
    assert all(m.ts is not None for m in s.matches)


def test_later_allocation_replaces_earlier_one() -> None:
    s = NodeScan("n1", "n1.log", SIGS, PROG)
    s.feed(list(enumerate(["agent: ORCH-AGENT start segment=1 job=5", ECC,
                           "agent: ORCH-AGENT start segment=2 job=6", " iteration 3/ 9"], 1)))
    assert s.matches == [] and s.history and s.last_iteration == 3


TQDM = re.compile(r"\|\s*(\d+)/\d+\s*\[")


def test_a_loading_bar_is_not_progress() -> None:
    """`Loading checkpoint shards: 100%|...| 4/4 [...]` looks like a tqdm progress bar: it is not training."""
    s = NodeScan("n1", "n1.log", SIGS, TQDM)
    s.feed([(1, "Loading checkpoint shards: 100%|##########| 4/4 [00:21<00:00,  5.31s/it]"),
            (2, "Map: 100%|##########| 1000/1000 [00:01<00:00, 900 examples/s]")])
    assert s.last_iteration is None
    s.feed([(3, " 12%|#         | 120/1000 [01:00<07:20,  2.00it/s]")])
    assert s.last_iteration == 120


# What evals print while they count their own batches (Lightning's tqdm callback descriptions, as printed in
# public logs; Megatron's evaluate(): print_rank_0('Evaluating iter {}/{}'...)): the iteration stays the training's
EVAL_COUNTERS = ["Sanity Checking DataLoader 0: 100%|##########| 2/2 [00:02<00:00,  0.95it/s]",
                 "Validation DataLoader 0:  40%|####      | 8/20 [00:01<00:02,  5.12it/s]",
                 "Validation: |          | 0/? [00:00<?, ?it/s]",
                 "Testing DataLoader 0: 100%|##########| 63/63 [00:05<00:00, 11.6it/s]",
                 "Evaluating iter 10/100"]


@pytest.mark.parametrize("line", EVAL_COUNTERS)
def test_an_eval_counter_is_not_the_training_iteration(line: str) -> None:
    rx = re.compile(PROGRESS_REGEX)
    s = NodeScan("n1", "n1.log", SIGS, rx)
    s.feed([(1, "Epoch 3:  53%|#####     | 580/1100 [02:10<01:48,  4.81it/s, v_num=0]"), (2, line)])
    assert s.last_iteration == 580
    assert last_iteration(rx, f"{line}\r Epoch 3:  54%|#####     | 590/1100 [02:12<01:47]") == 590
    assert last_iteration(rx, f"Epoch 3:  54%|#####     | 590/1100 [02:12<01:47]\r{line}") == 590
    s.feed([(3, " iteration      600/  500000 | consumed samples: 9600 | lm loss: 3.2E+00 |")])
    assert s.last_iteration == 600


def test_cuda_runtime_oom_at_start_on_one_node_is_a_poisoned_gpu_and_the_allocators_after_progress_the_jobs() -> None:
    oom = "RuntimeError: CUDA error: out of memory"
    nodes = [node("n1", ["0: starting"]), node("n2", [f"3: {oom}"], 1), node("n3", ["5: starting"])]
    v = classify(FAILED, nodes, Context())
    assert v.cause == Cause.GPU_OOM_STARTUP and v.culprit_nodes == ("n2",) and v.fault_owner == Owner.NODE
    mine = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
            "79.1 GiB of which 1.2 GiB is free.")
    nodes = [node("n1", progress(30)), node("n2", progress(30) + [mine], 1), node("n3", progress(30))]
    v = classify(FAILED, nodes, Context())
    assert v.cause == Cause.USER_OOM and v.culprit_nodes == () and action_without_history(v)[0] == "stop_and_alert"


def test_an_hca_event_logged_at_info_level_is_that_hosts_fault() -> None:
    port = "dgx-05:5822:5954 [2] NCCL INFO NET/IB : mlx5_2:1 Got async event : port error"
    nodes = [node("dgx-04", progress(20) + [NCCL]), node("dgx-05", progress(20) + [port]),
             node("dgx-06", progress(20) + [NCCL])]
    v = classify(FAILED, nodes, Context())
    assert v.cause == Cause.NETWORK and v.culprit_nodes == ("dgx-05",) and v.rule == "hca_error"
    assert action_without_history(v)[0] == "resubmit_exclude"


def test_the_node_own_ecc_reading_explains_a_generic_cuda_error() -> None:
    generic = "RuntimeError: CUDA error: an illegal memory access was encountered"
    reading = "agent: ORCH-NODE nvml: GPU 0: volatile uncorrectable ECC errors rose 0 -> 2 during the segment"
    nodes = [node("n1", progress(20) + [NCCL]), node("n2", progress(20) + [generic, reading], 1),
             node("n3", progress(20) + [NCCL])]
    v = classify(FAILED, nodes, Context())
    assert v.cause == Cause.GPU_ECC and v.culprit_nodes == ("n2",) and v.rule == "node_reports_hardware"
    assert any(e.source == "node" for e in v.evidence) and action_without_history(v)[0] == "resubmit_exclude"
    without = [node("n1", progress(20) + [generic]), node("n2", progress(20) + [generic]),
               node("n3", progress(20) + [generic])]
    assert action_without_history(classify(FAILED, without, Context()))[0] == "stop_and_alert"


def test_every_rank_killed_is_the_oom_killer_unless_the_job_was_cancelled() -> None:
    line = "torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: -9) local_rank: 0 (pid: 1)"
    killed = [node(h, progress(3) + [line]) for h in ("n1", "n2")]
    v = classify(FAILED, killed, Context())
    assert v.cause == Cause.HOST_OOM and v.rule == "killed_everywhere"
    assert action_without_history(v)[0] == "stop_and_alert"
    assert classify(CANCELLED, killed, Context()).rule != "killed_everywhere"
    assert classify(FAILED, killed, Context(cancel_reason=CancelReason.STALL)).rule != "killed_everywhere"


def test_a_hardware_report_does_not_explain_an_error_every_node_raised() -> None:
    """The same KeyError on every node is the job's even if one node's nvidia-smi shows pending retirements."""
    bug = "KeyError: 'input_ids'"
    nodes = [node("n1", progress(5) + [bug], 1), node("n2", progress(5) + [bug, "Pending Page Blacklist : Yes"], 1),
             node("n3", progress(5) + [bug], 1)]
    v = classify(FAILED, nodes, Context())
    assert v.cause == Cause.USER_BUG and v.culprit_nodes == () and action_without_history(v)[0] == "stop_and_alert"


def test_the_same_ecc_line_on_every_node_at_once_is_the_jobs_output_not_every_nodes_gpu() -> None:
    """Second re-run, W11b: a training that prints its argv (holding the words of a CUDA ECC error) on every
    rank had every node hard-blacklisted. Hardware fails one node at a time: the same line everywhere, with no
    node's own hardware report, is the job's; nobody is excluded."""
    argv = "[rank{}]: args: --inject 'RuntimeError: CUDA error: uncorrectable ECC error encountered'"
    nodes = [node(f"n{i}", [argv.format(i)] + progress(3), exit_code=1 if i == 2 else 0) for i in (1, 2, 3)]
    v = classify(FAILED, nodes, Context())
    assert not v.blame and not v.culprit_nodes and v.fault_owner == Owner.JOB and v.rule == "same_on_every_node"


def test_real_ecc_on_two_nodes_with_different_gpus_is_still_each_nodes() -> None:
    """Different lines (other GPUs, other PCI addresses, other errors) are no echo of one text."""
    nodes = [node("n1", progress(3) + ["NVRM: Xid (PCI:0000:3b:00): 48, pid=1234, DBE (double bit error) ECC Error"]),
             node("n2", progress(3) + [f"2: {ECC}"])]
    v = classify(FAILED, nodes, Context())
    assert v.cause == Cause.GPU_ECC and v.blame and set(v.culprit_nodes) == {"n1", "n2"}


def test_a_node_that_exits_non_zero_after_the_printed_end_is_said() -> None:
    """Second re-run, W10b: done because the training printed its end, with no word that node2 exited 1."""
    from datetime import UTC, datetime

    from orchestrator.model import Action
    from orchestrator.policy import decide
    from orchestrator.settings import Goal, Policy
    from orchestrator.state import RunState, SegmentRecord

    done = "training finished: iteration 40/40"
    nodes = [node("n1", progress(40) + [done], exit_code=0), node("n2", progress(40) + [done], exit_code=1)]
    v = classify(FAILED, nodes, Context())
    assert v.rule == "printed_its_end" and "n2 exited 1" in v.summary
    assert [(e.node, e.role) for e in v.evidence if e.role == "exit"] == [("n2", "exit")]
    now = datetime.now(UTC)
    seg = SegmentRecord(index=1, job_name="r.seg0001", end_iteration=40)
    d = decide(RunState(run="r", created_at=now, updated_at=now, segments=[seg]), v, Policy(),
               Goal(target_iteration=40), now)
    assert d.action == Action.DONE and "n2 exited 1 after the training printed its end" in d.reason


def test_a_prefixed_line_reaches_a_signature_anchored_in_a_later_alternative() -> None:
    """The prefilter sees a line with its prefix (`[rank0]: `, `0: `) where a signature sees the text after it: a
    `^` at the start of a later alternative (`...|^Killed$`) made it skip the line (blind10 case-035: a
    `huggingface_hub.errors.OfflineModeIsEnabled` on every rank read as nothing)."""
    pf = Prefilter([("nothing here|^Killed$", False)])
    data = b"[rank0]: step 1\n[rank0]: Killed\n"
    assert [data[a:b] for a, b in pf.lines(data)] == [b"[rank0]: Killed"]


def test_an_exception_of_any_name_qualified_by_its_module_is_the_programs_error(tmp_path: Path) -> None:
    from orchestrator.offline.diagnosis import diagnose_dir

    for host in ("gpu4-17", "gpu4-18"):
        (tmp_path / f"{host}.out").write_text(
            "[rank0]: Traceback (most recent call last):\n[rank0]:   File \"sft.py\", line 9, in <module>\n"
            "[rank0]: huggingface_hub.errors.OfflineModeIsEnabled: Cannot reach https://huggingface.co/api/models/"
            "x/refs: offline mode is enabled.\n")
    got = diagnose_dir(tmp_path)
    assert (got["cause"], got["action"]) == ("user_bug", "stop_and_alert"), got


@pytest.mark.parametrize("reason", ["Job prolog failed", "Communication connection failure",
                                    "Zero Bytes were transmitted or received"])
def test_a_task_launch_that_failed_on_one_node_names_that_node(tmp_path: Path, reason: str) -> None:
    """srun's `Task launch for StepId=J.S failed on node N: REASON` (slurmd drains a node whose prolog failed): the
    step never started, the node is at fault, whatever host printed the line (blind10 case-028)."""
    from orchestrator.offline.diagnosis import diagnose_dir

    (tmp_path / "slurm-918273.out").write_text(
        f"srun: error: Task launch for StepId=918273.0 failed on node hpc-g7-031: {reason}\n"
        f"srun: error: Application launch failed: {reason}\nsrun: Job step aborted\n")
    got = diagnose_dir(tmp_path)
    assert (got["cause"], got["culprit_nodes"], got["action"]) == ("node_fail", ["hpc-g7-031"], "resubmit_exclude")


@pytest.mark.parametrize("end", ["[INFO:swift] End time of running main: 2025-09-11 16:21:05.118233",
                                 "[INFO:swift] last_model_checkpoint: /out/v3-20250911/checkpoint-74"])
def test_ms_swifts_end_of_training_then_aborts_in_teardown_is_a_success(tmp_path: Path, end: str) -> None:
    from orchestrator.offline.diagnosis import diagnose_dir

    for host in ("h20-11", "h20-12"):
        (tmp_path / f"{host}.log").write_text(
            "Train: 100%|##########| 74/74 [1:02:11<00:00, 50.42s/it]\n" + end + "\n"
            "[rank1]:[E911 16:21:17.1 ProcessGroupNCCL.cpp:1895] [PG ID 0 PG GUID 0(default_pg) Rank 1] Process "
            "group watchdog thread terminated with exception: NCCL error: remote process exited or there was a "
            "network error\nexitcode  : -6 (pid: 470)\ntraceback : Signal 6 (SIGABRT) received by PID 470\n")
    got = diagnose_dir(tmp_path)
    assert (got["cause"], got["action"]) == ("success", "done"), got


APPTAINER_BIND = ("FATAL:   container creation failed: mount hook function failure: mount /var/apptainer/mnt/session/"
                  "mmfs1->/mmfs1 error: while mounting /var/apptainer/mnt/session/mmfs1: destination /mmfs1 doesn't "
                  "exist in container")


def test_a_container_that_cannot_start_on_every_node_is_the_jobs_set_up(tmp_path: Path) -> None:
    """Apptainer's `FATAL: container creation failed` (a bind whose destination the image lacks) on every task, and
    pyxis's `failed to import docker image`: the job's set-up, it stops (blind9 case-027, case-028)."""
    from orchestrator.offline.diagnosis import diagnose_dir

    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "slurm-4120955.out").write_text(
        "".join(f"{t}: {APPTAINER_BIND}\n" for t in range(3))
        + "".join(f"srun: error: r05g0{t + 1}: task {t}: Exited with exit code 255\n" for t in range(3)))
    got = diagnose_dir(tmp_path / "a")
    assert (got["cause"], got["action"]) == ("user_bug", "stop_and_alert"), got
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "slurm-88107.out").write_text(
        "slurmstepd: error: pyxis: child 1022281 failed with error code: 1\n"
        "slurmstepd: error: pyxis: failed to import docker image\n"
        "slurmstepd: error: pyxis: couldn't start container\n"
        "slurmstepd: error: spank: required plugin spank_pyxis.so: task_init_privileged() failed with rc=-1\n")
    got = diagnose_dir(tmp_path / "b")
    assert (got["cause"], got["action"]) == ("user_bug", "stop_and_alert"), got


def test_a_container_that_cannot_start_on_one_node_only_does_not_stop_the_run(tmp_path: Path) -> None:
    from orchestrator.offline.diagnosis import diagnose_dir

    (tmp_path / "slurm-7.out").write_text(
        "".join(f"{t}: iteration 10/ 100 | lm loss 2.0\n" for t in (0, 1)) + f"2: {APPTAINER_BIND}\n"
        "srun: error: r05g03: task 2: Exited with exit code 255\n")
    got = diagnose_dir(tmp_path)
    assert got["action"] != "stop_and_alert", got


def test_a_script_that_requeues_itself_starts_the_next_allocation_in_the_same_file(tmp_path: Path) -> None:
    """`+ scontrol requeue $SLURM_JOB_ID` ends an allocation: the same timeout after the same iteration on other nodes
    in the next one is the job's own problem (blind9 case-014); read as one allocation it was resubmitted."""
    from orchestrator.offline.diagnosis import diagnose_dir

    def alloc(nodes: list[str], start: int) -> str:
        lines = ["+ srun -l python pretrain_gpt.py --train-iters 250000 --load /ckpt --save /ckpt\n"]
        lines += [f"0:  [2024-05-02 20:0{i}:00] iteration {start + 20 * i:8d}/  250000 | lm loss: 2.3E+00 |\n"
                  for i in range(1, 4)]
        lines += [f"{t}: [rank{t}]:[E0502 21:06:23.0 ProcessGroupNCCL.cpp:616] [Rank {t}] Watchdog caught collective "
                  f"operation timeout: WorkNCCL(SeqNum=3001488, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
                  f"Timeout(ms)=1200000) ran for 1200036 milliseconds before timing out.\n" for t in range(len(nodes))]
        lines += [f"srun: error: {n}: task {t}: Exited with exit code 1\n" for t, n in enumerate(nodes)]
        return "".join(lines)

    (tmp_path / "slurm-881234.out").write_text(
        alloc(["jwb0112", "jwb0113"], 37180) + "+ scontrol requeue 881234\n" + alloc(["jwb0201", "jwb0202"], 37180))
    got = diagnose_dir(tmp_path)
    assert got["action"] == "stop_and_alert", got


def test_an_exception_name_with_a_digit_is_not_read_as_a_host_prefix() -> None:
    """`boto3.exceptions.S3UploadFailedError: ...` looked like `host: line` (a name with a digit): the line lost the
    exception's name and no signature saw it (blind9 case-042). A pdsh host prefix still is one."""
    from orchestrator.diagnose.origin import parse_line

    p = parse_line("1: boto3.exceptions.S3UploadFailedError: Failed to upload /tmp/x to b/ep1.pt")
    assert p.host is None and p.body.startswith("boto3.exceptions.S3UploadFailedError: ")
    assert parse_line("E1Error: bad").host is None
    assert parse_line("gpu-a017: iteration 5").host == "gpu-a017"


@pytest.mark.parametrize("text", [
    "boto3.exceptions.S3UploadFailedError: Failed to upload /tmp/t/ep1-ba400-rank1.pt to bkt/ep1-ba400-rank1.pt: An "
    "error occurred (SlowDown) when calling the CreateMultipartUpload operation (reached max retries: 4): Please "
    "reduce your request rate.",
    "botocore.exceptions.ClientError: An error occurred (ServiceUnavailable) when calling the PutObject operation "
    "(reached max retries: 4): Please reduce your request rate.",
])
def test_an_object_store_that_throttles_the_uploads_is_the_shared_storages_passing_fault(tmp_path: Path,
                                                                                         text: str) -> None:
    from orchestrator.offline.diagnosis import diagnose_dir

    (tmp_path / "slurm-7711.out").write_text(
        "0: Uploading checkpoint ep1-ba400-rank0.pt to s3://bkt/ckpt\n"
        f"1: {text}\n3: {text}\nsrun: error: mosaic-1: task 1: Exited with exit code 1\n"
        "srun: error: mosaic-3: task 3: Exited with exit code 1\n")
    got = diagnose_dir(tmp_path)
    assert (got["cause"], got["action"]) == ("filesystem", "wait_and_resubmit"), got


def _two_nodes(tmp_path: Path, first: str, second: str, dmesg: str = "") -> dict[str, Any]:
    from orchestrator.offline.diagnosis import diagnose_dir

    (tmp_path / "n-01.log").write_text(first)
    (tmp_path / "n-02.log").write_text(second)
    if dmesg:
        (tmp_path / "n-02.dmesg").write_text(dmesg)
    return diagnose_dir(tmp_path)


TIMEOUT = ("[rank0]:[E819 04:08:12.1 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation timeout: "
           "WorkNCCL(SeqNum=88213, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600041 "
           "milliseconds before timing out.\n")


def test_an_nvswitch_fatal_sxid_in_one_nodes_kernel_log_names_it_behind_a_collective_timeout(tmp_path: Path) -> None:
    """The NVSwitch driver's `SXid (...): 20034, Fatal, Link 14 LTSSM Fault Up` (blind11 case-012)."""
    got = _two_nodes(tmp_path, "iteration 10/ 100 | lm loss 2.0\n" + TIMEOUT, "iteration 10/ 100 | lm loss 2.0\n"
                     + TIMEOUT, "[Wed Aug 19 03:58:12 2026] nvidia-nvswitch2: SXid (PCI:0000:86:00.0): 20034, Fatal, "
                     "Link 14 LTSSM Fault Up (First)\n")
    assert (got["cause"], got["culprit_nodes"], got["action"]) == ("gpu_lost", ["n-02"], "resubmit_exclude"), got


@pytest.mark.parametrize(("line", "cause", "action"), [
    ("Time limit of 23h reached. Stopping training.", "timelimit", "resubmit"),  # blind11 case-028
    (" validation results at the end of training for val data | lm_loss value: 1.893514E+00 |", "success", "done"),
])
def test_a_frameworks_own_end_or_time_stop_then_an_exit(tmp_path: Path, line: str, cause: str, action: str) -> None:
    body = f"iteration 142980/ 143000 | lm loss 1.9\n{line}\nSegmentation fault (core dumped)\n"
    got = _two_nodes(tmp_path, body, body)
    assert (got["cause"], got["action"]) == (cause, action), got


def test_rays_report_of_a_dead_node_it_cannot_name_does_not_blame_the_reporter(tmp_path: Path) -> None:
    """`The node with client ID ... has been marked dead because the monitor has missed too many heartbeats`, then
    `RayActorError: The actor died unexpectedly`: the reporter is not the dead node, nor is it the job's bug (blind11
    case-031: it excluded the reporter, then it stopped the run)."""
    report = ("2027-06-02 09:41:17,551\tWARNING worker.py:2061 -- The node with client ID 6c4e19b52f0d4e2f7d9b has "
              "been marked dead because the monitor has missed too many heartbeats from it.\n"
              "ray.exceptions.RayActorError: The actor died unexpectedly before finishing this task.\n"
              "ray.train.base_trainer.TrainingFailedError: The Ray Train run failed. Please inspect the previous error "
              "messages for a cause.\n")
    got = _two_nodes(tmp_path, "step 10: loss 2.0\n" + report, "step 10: loss 2.0\n")
    assert "n-01" not in got["culprit_nodes"] and got["action"] != "stop_and_alert", got


@pytest.mark.parametrize("first", ["srun: error: gx-n042: task 11: Aborted (core dumped)",
                                   "srun: error: gx-n042: task 3: Segmentation fault (core dumped)",
                                   "srun: error: gx-n042: tasks 8-9: Exited with exit code 134"])
def test_every_other_task_killed_after_srun_aborted_the_step_is_its_teardown_not_the_oom_killer(
        tmp_path: Path, first: str) -> None:
    """blind12 case-009: one task failed, srun ended the step (`Job step aborted: Waiting up to 32 seconds`) and the
    other tasks were SIGKILLed by it; read as every rank killed at once by the OOM killer, the run was stopped. The
    kills are that teardown; with no task failing first they are still the OOM killer's."""
    from orchestrator.offline.diagnosis import diagnose_dir

    body = "".join(f" 0: iteration {i}/100 | loss 2.5\n" for i in range(1, 30))
    torn = (f"{first}\nsrun: Job step aborted: Waiting up to 32 seconds for job step to finish.\n"
            "slurmstepd: error: *** STEP 2291734.0 ON gx-n041 CANCELLED AT 2026-02-03T01:02:33 ***\n"
            "srun: error: gx-n041: tasks 0-7: Killed\nsrun: error: gx-n043: tasks 16-23: Killed\n"
            "srun: error: gx-n042: tasks 8-10,12-15: Killed\n")
    (tmp_path / "slurm-2291734.out").write_text(body + torn)
    assert diagnose_dir(tmp_path)["cause"] != "host_oom"
    every = "".join(f"srun: error: gx-n04{i}: tasks {8 * i}-{8 * i + 7}: Killed\n" for i in (1, 2, 3))
    (tmp_path / "slurm-2291734.out").write_text(body + every)
    assert diagnose_dir(tmp_path)["cause"] == "host_oom"


@pytest.mark.parametrize("line", [
    "Train Epoch: 12 [1280/60000 (2%)]\tLoss: 0.301245",  # pytorch/examples mnist/main.py
    "[1,0]<stdout>:Train Epoch: 12 [3072000/3072000 (100%)]\tLoss: 1.560000",  # Horovod's examples under mpirun
    "[rank0]: {'step': 12, 'loss': 2.2048, 'lr': 1.2e-04, 'tokens_per_sec': 41551}",  # a printed dict
    '{"step": 12, "loss": 2.2048, "lr": 0.00012}',  # a JSON metrics line
])
def test_the_pytorch_examples_epoch_line_and_a_printed_step_are_progress(line: str) -> None:
    """blind12 case-040: Horovod's `Train Epoch: N [x/y (p%)]` lines were not progress, so a CUDA OOM after six
    epochs read as one at start-up (a poisoned GPU, excluded and resubmitted) instead of the job's own memory."""
    from orchestrator.settings import PROGRESS_REGEX

    m = re.search(PROGRESS_REGEX, line)
    assert m is not None and int(m.group(1)) == 12
    assert re.search(PROGRESS_REGEX, "Train Epoch: 3 finished, starting evaluation") is None


@pytest.mark.parametrize(("line", "preempted"), [
    ("[preempt-watch a3-spot-1 2026-03-04 11:37:10] curl -s -H 'Metadata-Flavor: Google' "
     "http://metadata.google.internal/computeMetadata/v1/instance/preempted -> TRUE", True),
    ("instance/preempted: TRUE", True),
    ("Operation type compute.instances.preempted on instance a3-spot-1", True),
    ("computeMetadata/v1/instance/preempted -> FALSE", False),
])
def test_a_gce_preemption_read_from_its_metadata_server_is_a_preemption(line: str, preempted: bool) -> None:
    """blind12 case-023: GCE's metadata key `instance/preempted` turned TRUE, then the VM went away (`Node
    failure on ...`): read as a node failure, the healthy spot node excluded."""
    from orchestrator.diagnose.signatures import build_table

    spot = next(s for s in build_table() if s.name == "spot_termination")
    assert (re.search(spot.pattern, line) is not None) == preempted


@pytest.mark.parametrize(("extra", "ranks", "want"), [
    # NVIDIA's Xid 13 (an SM warp exception: the program's own out-of-range access) is no hardware fault
    ("NVRM: Xid (PCI:0000:bb:00): 13, pid=3381207, name=python, Graphics SM Warp Exception on (GPC 4, TPC 1, SM 0): "
     "Out Of Range Address", (22,), ("user_bug", "resubmit")),
    ("NVRM: Xid (PCI:0000:bb:00): 79, pid=3381207, name=python, GPU has fallen off the bus.", (22,),
     ("gpu_lost", "resubmit_exclude")),
    ("", (20, 21, 22, 23), ("gpu_lost", "resubmit_exclude")),  # every rank of the node at once
])
def test_one_ranks_launch_failure_with_no_hardware_message_is_a_strike_not_an_exclusion(
        tmp_path: Path, extra: str, ranks: tuple[int, ...], want: tuple[str, str]) -> None:
    """blind12 case-029 (issue 38, DECISIONS.md): one rank's `CUDA error: unspecified launch failure` after 20000
    iterations, its node's kernel log holding only Xid 13 for that process: a kernel's own crash, weak evidence
    (a strike), not a lost GPU; with a hardware message, or on every rank of the node at once, it is the node's."""
    from orchestrator.offline.diagnosis import diagnose_dir

    steps = "".join(f"[rank0]: iteration {i}/50000 | loss 2.1\n" for i in range(19900, 20001, 20))
    (tmp_path / "h1-r07-c2.log").write_text(steps)
    crash = "".join(f"[rank{r}]: RuntimeError: CUDA error: unspecified launch failure\n" for r in ranks)
    (tmp_path / "h1-r07-c3.log").write_text(crash + (f"h1-r07-c3 kernel: {extra}\n" if extra else ""))
    got = diagnose_dir(tmp_path)
    assert (got["cause"], got["action"], got["culprit_nodes"]) == (*want, ["h1-r07-c3"]), got


@pytest.mark.parametrize(("silent_until", "want"), [("2026-03-06T02:04:02", "hang"),
                                                    ("2026-03-05T14:41:00", "timelimit")])
def test_silence_before_the_time_limit_after_untimed_progress_is_a_hang(tmp_path: Path, silent_until: str,
                                                                         want: str) -> None:
    """blind12 case-003: NeMo's progress lines carry no time; its `[NeMo I 2026-03-05 14:27:00 ...] Starting
    validation` line does, and nothing followed for 11.5 hours until the time limit: a hang in the validation, not
    the time limit. A short silence before the limit stays the time limit."""
    from orchestrator.offline.diagnosis import diagnose_dir

    steps = "".join(f"Training epoch 0, iteration {i}/100000 | lr: 0.00018 | global_step: {i} | "
                    "reduced_train_loss: 1.9 | train_step_timing in s: 3.2\n" for i in range(41300, 41381, 20))
    (tmp_path / "slurm-6121870.out").write_text(
        steps + "[NeMo I 2026-03-05 14:27:00 nemo_logging:393] Starting validation at step 41380\n"
        f"slurmstepd: error: *** JOB 6121870 ON dgx-g21 CANCELLED AT {silent_until} DUE TO TIME LIMIT ***\n"
        "srun: error: dgx-g21: tasks 0-7: Terminated\nsrun: error: dgx-g22: tasks 8-15: Terminated\n")
    assert diagnose_dir(tmp_path)["cause"] == want


@pytest.mark.parametrize(("coordinator", "want"), [
    ("E0208 19:09:28.306330 1211 coordination_service.cc:440] UNAVAILABLE: Task /job:jax_worker/replica:0/task:2 "
     "heartbeat timeout. This indicates that the remote task has failed, got preempted, or crashed unexpectedly.",
     "node_fail"),
    ("", "hang"),
])
def test_a_quiet_node_whose_heartbeats_the_coordination_lost_died(tmp_path: Path, coordinator: str,
                                                                   want: str) -> None:
    """blind12 case-041: XLA's coordination service lost task 2's heartbeats (sent from a thread of their own, so a
    hung process keeps sending them) and the other tasks terminated: the quiet node died (node_fail), it did not
    hang. Without that line the quiet node is a hang, as before."""
    from orchestrator.offline.diagnosis import diagnose_dir

    died = ("F0208 19:09:30.741552 48093 client.h:77] Terminating process because the JAX distributed service "
            "detected fatal errors. This most likely indicates that another task died; see the other task logs for "
            "more details.\n")
    for i, host in enumerate(("jx-h100-20", "jx-h100-21", "jx-h100-22", "jx-h100-23")):
        steps = "".join(f"I0208 18:{50 + s}:20.108676 139921 train.py:512] [{14800 + 200 * s}] train/loss=2.157\n"
                        for s in range(3))
        end = "" if i == 2 else (coordinator + "\n" if i == 0 and coordinator else "") + died
        (tmp_path / f"{host}.log").write_text(steps + end)
    got = diagnose_dir(tmp_path)
    assert (got["cause"], got["culprit_nodes"]) == (want, ["jx-h100-22"]), got


@pytest.mark.parametrize("with_map", [True, False])
def test_two_ucx_peers_naming_one_lid_name_the_host_the_jobs_ibstat_dump_maps_it_to(tmp_path: Path,
                                                                                    with_map: bool) -> None:
    """blind12 case-007: UCX's log prefix `[host:pid:thread:tid]` names the reporter, and the job's own `ibstat |
    sed "s/^/$h: /"` dump (ibstat's indentation after the host) maps LID 1219 to cn-r3-16: two peers naming it are
    strong evidence. Without the map nobody can be named."""
    from orchestrator.offline.diagnosis import diagnose_dir

    lids = "".join(f"{h}:                 Base lid: {lid}\n" for h, lid in
                   (("cn-r3-14", 1187), ("cn-r3-15", 1203), ("cn-r3-16", 1219), ("cn-r3-17", 1236)))
    steps = "".join(f"[1,0]<stdout>:Train Epoch: 3 [{i}/9000 (1%)]\tLoss: 1.2\n" for i in range(100, 600, 100))
    errors = "".join(
        f"[1,{r}]<stderr>:[{h}:{pid}:0:{pid}] ib_mlx5_log.c:177  Transport retry count exceeded on mlx5_0:1/IB "
        f"(synd 0x15 vend 0x81 hw_synd 0/0)\n[1,{r}]<stderr>:[{h}:{pid}:0:{pid}] ib_mlx5_log.c:177  RC QP 0x2b1c "
        f"wqe[58255]: SEND s-e [rqpn 0x51fa rlid 1219] [va 0x7fae26e90f len 8256 lkey 0x7e2ce]\n"
        for r, h, pid in ((2, "cn-r3-14", 48211), (13, "cn-r3-17", 39904)))
    (tmp_path / "slurm-3390417.out").write_text((lids if with_map else "") + steps + errors)
    got = diagnose_dir(tmp_path)
    assert got["cause"] == "network" and got["culprit_nodes"] == (["cn-r3-16"] if with_map else []), got


@pytest.mark.parametrize(("stuck_frame", "named"), [
    ("    cudaStreamSynchronize (libcudart.so.12)\n    item (torch/_tensor.py)\n    log_metrics (train.py:262)", True),
    ("    wait (torch/distributed/distributed_c10d.py:2806)\n"
     "    all_reduce (torch/distributed/distributed_c10d.py:2806)", False),
])
def test_a_rank_outside_the_collective_in_two_dumps_is_named_though_a_kill_ended_the_job(
        tmp_path: Path, stuck_frame: str, named: bool) -> None:
    """blind11 case-032: a hang monitor's two py-spy dumps on one node (one rank in cudaStreamSynchronize, its
    neighbour waiting in all_reduce), then the job's tasks SIGKILLed. The kill, with no error of its own, blocked
    the stacks' reading, and two dumps have no majority frame: the rank outside the collective call is the hang."""
    from orchestrator.offline.diagnosis import diagnose_dir

    steps = "".join(f"step {i} | loss 1.73 | lr 2.0e-04\n" for i in range(77000, 77101, 20))
    (tmp_path / "dgx-h-117.log").write_text(steps + "srun: error: dgx-h-117: tasks 0-7: Killed\n")
    dumps = (f'$ py-spy dump --native --pid 144905\nThread 144905 (active): "MainThread"\n{stuck_frame}\n\n'
             '$ py-spy dump --pid 144903\nThread 144903 (idle): "MainThread"\n'
             "    wait (torch/distributed/distributed_c10d.py:2806)\n"
             "    all_reduce (torch/distributed/distributed_c10d.py:2806)\n")
    (tmp_path / "dgx-h-118.log").write_text(steps + dumps + "srun: error: dgx-h-118: tasks 8-15: Killed\n")
    got = diagnose_dir(tmp_path)
    assert (got["cause"] == "hang" and got["culprit_nodes"] == ["dgx-h-118"]) == named, got


@pytest.mark.parametrize("node_map", [
    "[ray-nodes] 10.72.56.2 ray-head-0 | 10.72.56.3 ray-gpu-1 | 10.72.56.4 ray-gpu-2",
    "# nodes: ray-head-0 10.72.56.2, ray-gpu-1 10.72.56.3, ray-gpu-2 10.72.56.4",
    "10.72.56.3      ray-gpu-1",  # getent hosts
])
def test_a_ray_node_marked_dead_by_address_is_named_through_the_jobs_node_map(tmp_path: Path, node_map: str) -> None:
    """Ray names a dead node by its address only; the job printed its node map (IP host, or host IP, pairs on one
    line): the dead node is named and excluded (corpus r3 and blind case-017, both unnamed before)."""
    from orchestrator.offline.diagnosis import diagnose_dir

    (tmp_path / "slurm-43751.out").write_text(
        "".join(f"(RayTrainWorker pid=6420, ip=10.72.56.3) Epoch 2: {p}%|#   | {22 * p}/5000 [31:11<39:40, 1.18it/s]\n"
                for p in (40, 42, 44))
        + node_map + "\n"
        "2024-04-11 16:38:16,464\tWARNING worker.py:2037 -- The node with node id: 677df2a9020c5db45e755b0078c469e2ce5"
        "1e05ea093ed3b283505a0 and address: 10.72.56.3 and node name: 10.72.56.3 has been marked dead because the "
        "detector has missed too many heartbeats from it. This can happen when a \t(1) raylet crashes unexpectedly "
        "(OOM, etc.) \n(2) raylet has lagging heartbeats due to slow network or busy workload.\n"
        "ray.exceptions.RayActorError: The actor died unexpectedly before finishing this task.\n")
    got = diagnose_dir(tmp_path)
    assert (got["cause"], got["culprit_nodes"], got["action"]) == ("node_fail", ["ray-gpu-1"], "resubmit_exclude"), got


@pytest.mark.parametrize(("last", "want"), [
    ("I0524 14:42:10.551 train.py:512] [step 21250] loss=2.0", "node_fail"),
    ("I0524 14:42:10.551 train.py:512] [step 21250] loss=2.09\n", "hang")])
def test_survivors_of_a_jax_barrier_timeout_name_the_host_that_never_arrived(tmp_path: Path, last: str,
                                                                               want: str) -> None:
    """blind13 case-021: XLA's coordination barrier timed out on every surviving task (the same
    `DEADLINE_EXCEEDED: Barrier timed out` on three hosts read as the job's own bug, the run stopped); the fourth
    host's log is cut off mid-line: it died (node_fail). A complete last line leaves a silent host: a hang."""
    from orchestrator.offline.diagnosis import diagnose_dir

    steps = "".join(f"I0524 14:4{i}:20.263 train.py:512] [step {21100 + 50 * i}] loss=2.098\n" for i in range(3))
    barrier = ("jaxlib.xla_extension.XlaRuntimeError: DEADLINE_EXCEEDED: Barrier timed out. Barrier_id: "
               "checkpoint_step_21250. Timed out task names:\n/job:jax_worker/replica:0/task:3\n")
    for i in range(3):
        (tmp_path / f"tpu-gpu-h{i}.log").write_text(steps + barrier)
    (tmp_path / "tpu-gpu-h3.log").write_text(steps + last)
    got = diagnose_dir(tmp_path)
    assert (got["cause"], got["culprit_nodes"]) == (want, ["tpu-gpu-h3"]), got


def test_a_summary_saying_no_process_is_in_state_d_names_nobody(tmp_path: Path) -> None:
    """blind13 case-019: an epilog's `n-01..n-04: ranks 3,9,14 in horovod_allreduce ...; no process in state D` was
    read as a process in D state on a host called `n-01..n-04` (a range, not a host), which was excluded."""
    from orchestrator.diagnose.origin import parse_line
    from orchestrator.offline.diagnosis import diagnose_dir

    assert parse_line("n-01..n-04: ranks 3,9,14 in horovod_allreduce").host is None
    assert parse_line("n-01: ranks 3,9,14 in horovod_allreduce").host == "n-01"
    (tmp_path / "slurm-771210.out").write_text(
        "".join(f"[1,0]<stdout>:pretrain epoch 3, step {s}, loss 4.6, 0.612 sec/step\n" for s in (600, 700, 800))
        + "n-01..n-04: ranks 3,9,14 in horovod_allreduce (have_more_data); no process in state D\n"
        "slurmstepd: error: *** JOB 771210 ON n-01 CANCELLED AT 2026-08-02T14:50:44 ***\n")
    got = diagnose_dir(tmp_path)
    assert got["culprit_nodes"] == [] and got["action"] != "resubmit_exclude", got
