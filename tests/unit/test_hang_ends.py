"""Hang evidence printed in the log and how the scheduler's end reads with it (issue 38): py-spy
--native dumps whose innermost frames have no name, a stuck process before the time limit, and a
step that would not die at a preemption or time limit."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from orchestrator.diagnose.classify import Context, classify
from orchestrator.diagnose.nodes import node_evidence, scan_file
from orchestrator.diagnose.prefilter import Prefilter
from orchestrator.diagnose.scan import NodeScan
from orchestrator.diagnose.signatures import build_table
from orchestrator.evidence import NodeEvidence
from orchestrator.model import Cause, JobState, JobStatus
from orchestrator.offline.diagnosis import action_without_history

SIGS = build_table()
PROG = re.compile(r"iteration\s+(\d+)\s*/\s*\d+")
PREFILTER = Prefilter([(s.pattern, s.ignore_case) for s in SIGS])
TIMEOUT = JobStatus(state=JobState.TIMEOUT)
PREEMPTED = JobStatus(state=JobState.PREEMPTED)


def node(name: str, lines: list[str]) -> NodeEvidence:
    s = NodeScan(name, f"{name}.log", SIGS, PROG)
    s.feed(list(enumerate(lines, 1)))
    return node_evidence(s)


def progress(n: int, at: str = "2025-03-04 09:50:00") -> list[str]:
    return [f"[{at}] iteration {i:8d}/  90000 | lm loss: 1.0" for i in range(1, n + 1)]


def banner(host: str, why: str) -> str:
    return f"slurmstepd: error: *** JOB 771203 ON {host} CANCELLED AT 2025-03-04T10:00:00 DUE TO {why} ***"


# slurmstepd's step_terminate_monitor prints the step or the job; slurmctld's `Kill task failed`
UNKILLABLE = ["slurmstepd: error: *** STEP 771203.0 STEPD TERMINATED ON n2 AT 2025-03-04T10:02:30 DUE TO JOB "
              "NOT ENDING WITH SIGNALS ***",
              "slurmstepd: error: *** JOB 6847502 STEPD TERMINATED ON n2 AT 2019-11-07T02:10:11 DUE TO JOB NOT "
              "ENDING WITH SIGNALS ***"]


@pytest.mark.parametrize("job,why", [(PREEMPTED, "PREEMPTION"), (TIMEOUT, "TIME LIMIT")])
@pytest.mark.parametrize("line", UNKILLABLE)
def test_a_node_whose_processes_would_not_die_at_the_end_is_excluded_and_the_cause_stays(
        job: JobStatus, why: str, line: str) -> None:
    nodes = [node("n1", progress(5) + [banner("n1", why)]), node("n2", progress(5) + [line])]
    v = classify(job, nodes, Context())
    assert v.cause == (Cause.PREEMPTED if job is PREEMPTED else Cause.TIMELIMIT)
    assert v.culprit_nodes == ("n2",) and v.blame and v.rule == "unkillable_at_end"
    assert action_without_history(v)[0] == "resubmit_exclude"


def test_a_node_stuck_in_d_state_before_the_end_that_could_not_be_killed_is_a_node_failure() -> None:
    ps = node("n2", ["  7701 Dl   -                    python pretrain_gpt.py --tensor-model-parallel-size 4"])
    nodes = [node("n1", progress(5) + [banner("n1", "TIME LIMIT")]), node("n2", progress(5) + [UNKILLABLE[0]]), ps]
    v = classify(TIMEOUT, nodes, Context())
    assert v.cause == Cause.NODE_FAIL and v.culprit_nodes == ("n2",)


# the kernel's hung-task report, prefixed by the host (a job-wide file) as journald and srun print it
HUNG = ["gpu-r7-04 kernel: INFO: task python:180447 blocked for more than 245 seconds.",
        "gpu-r7-04 kernel: INFO: task pt_main_thread:60412 blocked for more than 122 seconds."]


@pytest.mark.parametrize("hung", HUNG)
def test_a_process_stuck_before_the_time_limit_with_no_progress_line_is_a_hang_on_its_host(hung: str) -> None:
    job = node("slurm-442190", ["[1,0]<stdout>:Epoch 31 [990/1500] loss 0.3910", hung,
                                "gpu-r7-04 kernel: task:python          state:D stack:0     pid:180447",
                                banner("gpu-r7-01", "TIME LIMIT")])
    v = classify(TIMEOUT, [job], Context())
    assert v.cause == Cause.HANG and v.culprit_nodes == ("gpu-r7-04",) and v.rule == "stuck_before_limit"


def test_a_process_stuck_after_the_time_limit_or_while_the_job_trained_is_not_a_hang() -> None:
    after = node("slurm-442190", ["[1,0]<stdout>:Epoch 31 [990/1500]", banner("gpu-r7-01", "TIME LIMIT"), HUNG[0]])
    assert classify(TIMEOUT, [after], Context()).cause == Cause.TIMELIMIT
    trained = [node("gpu-r7-04", progress(5) + [HUNG[0]]),
               node("gpu-r7-01", progress(5) + [banner("gpu-r7-01", "TIME LIMIT")])]
    assert classify(TIMEOUT, trained, Context()).cause == Cause.TIMELIMIT


def dump(host: str, frames: list[list[str]]) -> str:
    out = [f"==== py-spy dump --native on {host} ===="]
    for i, stack in enumerate(frames):
        out += [f"Process {3301300 + i}: python train_dist.py", "Python v3.10.12 (/usr/bin/python3.10)", "",
                f'Thread {3301300 + i} (active): "MainThread"'] + [f"    {f}" for f in stack] + [""]
    return "\n".join(out) + "\n"


# unnamed libcuda frames over the CUDA runtime call each rank waits in (pytorch#95944, returnn#1811)
WAIT = ["0x14cd955ebdbc (libcuda.so.1)", "cudaDeviceSynchronize (libcudart.so.11.0)",
        "synchronize (torch/cuda/__init__.py:792)", "train_epoch (train_dist.py:221)"]
STUCK = [["0x14cd955ebdbc (libcuda.so.1)", "0x14cd953608b6 (libcuda.so.1)", "0x14cd956bb12f (libcuda.so.1)",
          "cudaMemcpyAsync (libcudart.so.11.0)", "at::native::_local_scalar_dense_cuda (libtorch_cuda.so)"],
         ["0x14e37c579940 (libcuda.so.1)", "0x14e37c724994 (libcuda.so.1)", "0x14e4468293a5 (libcudart.so.12)",
          "cudaStreamSynchronize (libcudart.so.12)", "copy_to_device (returnn/torch/util.py:40)"]]


@pytest.mark.parametrize("stuck", STUCK)
def test_py_spy_native_frames_with_no_name_give_way_to_the_call_a_rank_waits_in(tmp_path: Path,
                                                                                stuck: list[str]) -> None:
    nodes = []
    for host, stacks in (("g31", [WAIT] * 4), ("g32", [WAIT] * 3 + [stuck])):
        log = tmp_path / f"{host}.log"
        log.write_text(dump(host, stacks) + banner(host, "TIME LIMIT") + "\n")
        nodes.append(node_evidence(scan_file(log, host, SIGS, PROG, PREFILTER)))
    assert nodes[0].top_frames == ("cudaDeviceSynchronize (libcudart.so.11.0)",) * 4
    assert nodes[1].top_frames[-1] == stuck[3]
    v = classify(TIMEOUT, nodes, Context(stalled=True))
    assert v.cause == Cause.HANG and v.culprit_nodes == ("g32",) and v.blame


def nccl_info(host: str, ip: str) -> str:
    return f"{host}:5246:5246 [0] NCCL INFO Bootstrap : Using ib0:{ip}<0>"


# NCCL's net_ib completion line, older (`with error N, ... vendor err`) and newer (`with status=N ...`)
# formats: a retry-exceeded completion (12 / vendor err 129) and the flush (5 / 249) it leaves behind
COMPLETIONS = [("NET/IB : Got completion from peer 172.20.40.{ip}<44411> with error {st}, opcode 0, len 0, "
                "vendor err {vendor} (Recv)"),
               ("NET/IB : Got completion from peer 172.20.40.{ip}<44411> with status={st} opcode=0 len=0 "
                "vendor err {vendor} (Recv) localGid ::ffff:172.20.40.18 remoteGids ::ffff:172.20.40.{ip}")]


@pytest.mark.parametrize("fmt", COMPLETIONS)
def test_a_flushed_request_after_one_peers_retry_exceeded_error_does_not_name_the_reporter_back(fmt: str) -> None:
    reporter = node("n4018", [nccl_info("n4018", "172.20.40.18"), fmt.format(ip=24, st=12, vendor=129)])
    flushed = node("n4024", [nccl_info("n4024", "172.20.40.24"), fmt.format(ip=18, st=5, vendor=249)])
    quiet = node("n4017", [nccl_info("n4017", "172.20.40.17"),
                           "socketProgress: Connection closed by remote peer 172.20.40.18<39112>"])
    v = classify(JobStatus(state=JobState.FAILED), [quiet, reporter, flushed], Context())
    assert v.cause == Cause.NETWORK and v.culprit_nodes == ("n4024",) and v.rule == "one_peer_names_host"
    assert action_without_history(v)[0] == "resubmit"
