"""Readings taught by blind19's misses (issue 38), each through `diagnose_dir` on variants of the real text."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.test_blind14_readings import _diagnose, _said, _steps

JAX_STEPS = [f"I0804 06:{14 + i}:22.01 7000 callbacks.py:162] step {5 * i:4d} | loss 3.{90 - i} | lr 3.00e-04"
             for i in range(1, 12)]


@pytest.mark.parametrize("err", [
    "E0804 06:32:31.55 7002 pjrt_stream_executor_client.cc:3097] Execution of replica 2 failed: INTERNAL: Failed to "
    "retrieve branch_index value on stream 0x5603a1c7e0b0: CUDA error: Could not synchronize CUDA stream: "
    "CUDA_ERROR_ILLEGAL_INSTRUCTION: an illegal instruction was encountered",
    "E0804 06:32:31.60 7002 gpu_cudamallocasync_allocator.cc:414] cudaFreeAsync failed to free 0x7fcd18fc9fb6: "
    "CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered",
    "RuntimeError: CUDA error: cudaErrorIllegalInstruction"])
def test_one_tasks_illegal_instruction_after_progress_is_a_strike_on_its_node_not_the_jobs_bug(
        tmp_path: Path, err: str) -> None:
    """The driver API's names for a kernel's own crash (XLA prints them): one task's, after progress, nothing
    else explaining it: weak evidence against that node (a strike), never a stop."""
    beat = ("F0804 06:37:31.12 7000 client.h:77] Terminating process because the JAX distributed service detected "
            "fatal errors. This most likely indicates that another task died")
    files = {"s2grxs64.log": [*JAX_STEPS, beat], "s5k62nb4.log": [beat], "s91qxs64.log": [beat],
             "s24qxs64.log": [err, "jax.errors.JaxRuntimeError: INTERNAL: Failed to retrieve branch_index value on "
                                   "stream 0x5603a1c7e0b0:", beat]}
    d = _diagnose(tmp_path, files)
    assert d["culprit_nodes"] == ["s24qxs64"] and d["action"] == "resubmit", d["reason"]


@pytest.mark.parametrize("before", [True, False])
def test_the_same_failure_before_any_progress_on_two_allocations_of_other_nodes_stops(
        tmp_path: Path, before: bool) -> None:
    """Two `slurm-<jobid>.out` of one run on different node pairs, each timing out in the first collective before
    any step: the same failure at the same step (the start), nobody named: the job's (its setup), stop. With
    progress in between, the second is a new failure at another step: resubmit."""
    timeout = ("[rank{r}]:[E0215 08:14:46.00 ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog caught collective "
               "operation timeout: WorkNCCL(SeqNum=1, OpType=BROADCAST, NumelIn=23357030, NumelOut=23357030, "
               "Timeout(ms)=600000) ran for 600075 milliseconds before timing out.")

    def alloc(job: int, a: str, b: str, start: int) -> list[str]:
        steps = [] if before else _steps(start=start)
        return [f"{a}: {line}" for line in steps] + [f"{h}: " + timeout.format(r=r) for r, h in enumerate((a, b))] + [
            "torch.distributed.DistBackendError: NCCL communicator was aborted on rank 0.",
            f"slurmstepd: error: *** STEP {job}.1 ON {b} CANCELLED AT 2026-02-15T08:15:16 ***"]

    d = _diagnose(tmp_path, {"slurm-6101.out": alloc(6101, "p5en-st-1", "p5en-st-2", 100),
                             "slurm-6107.out": alloc(6107, "p5en-st-5", "p5en-st-6", 300)})
    assert d["cause"] == "nccl_timeout" and d["action"] == ("stop_and_alert" if before else "resubmit"), d["reason"]
    if before:
        assert _said(d)[1] == []


EQ = ("Unable to write to EQ: Missing or unavailable event queue. err: Cannot allocate memory (-12) prov_errno: Cannot "
      "allocate memory (-12) ./prov/efa/src/rxr/rxr.h:683")
OFI = ("MPIDI_OFI_handle_cq_error(1062): OFI poll failed (ofi_events.c:1064:MPIDI_OFI_handle_cq_error:Input/output "
       "error - PTLTE_NOT_FOUND)")
CLOSED = "{h}:8814:8877 [3] include/socket.h:409 NCCL WARN Net : Connection closed by remote peer {p}<53203>"


@pytest.mark.parametrize("err", [EQ, OFI])
@pytest.mark.parametrize("progress", [False, True])
def test_every_nodes_own_endpoint_failing_alike_before_any_step_is_the_jobs_environment(
        tmp_path: Path, err: str, progress: bool) -> None:
    """EFA's `Unable to write to EQ ... Cannot allocate memory` (a locked-memory limit), Slingshot's `OFI poll failed`:
    each host's own endpoint, on every host, before any step: the job's environment or transport settings, stop.
    After progress the same lines are no setup problem: not a stop."""
    hosts = [f"p4d-{i}" for i in range(1, 5)]
    files = {f"{h}.log": [*(_steps() if progress else []), err, CLOSED.format(h=h, p=hosts[(i + 1) % 4]),
                          "ncclSystemError: System call (socket, malloc, munmap, etc) failed."]
             for i, h in enumerate(hosts)}
    d = _diagnose(tmp_path, files)
    assert (d["action"] == "stop_and_alert") == (not progress), d["reason"]
    assert d["culprit_nodes"] == [] and d["cause"] == "network", d["reason"]


def test_one_nodes_own_endpoint_error_before_any_step_is_that_nodes(tmp_path: Path) -> None:
    hosts = [f"p4d-{i}" for i in range(1, 5)]
    files = {f"{h}.log": [*([EQ] if h == "p4d-3" else []), CLOSED.format(h=h, p="p4d-3")] for h in hosts}
    d = _diagnose(tmp_path, files)
    assert d["culprit_nodes"] == ["p4d-3"] and d["action"] != "stop_and_alert", d["reason"]


@pytest.mark.parametrize("n", [1, 3, 12])
def test_ray_trains_per_report_training_finished_iteration_is_progress_not_the_end(tmp_path: Path, n: int) -> None:
    """Ray Train prints `Training finished iteration N at <time>. Total running time: ...` after every report: a
    node that dies after it is a failure, not a finished run; its own end line still ends it."""
    report = [f"Training finished iteration {i} at 2024-03-06 01:{40 + i}:55. Total running time: {i}8:05"
              for i in range(1, n + 1)]
    dead = ("WARNING worker.py:2058 -- The node with node id: 677df2a9 and address: 10.72.56.3 and node name: "
            "10.72.56.3 has been marked dead because the detector has missed too many heartbeats from it.")
    files = {"slurm-1902231.out": ["a100-g03: WORKER 2 ip 10.72.56.3", *report, dead,
                                   "ray.exceptions.RayActorError: The actor died unexpectedly before finishing this "
                                   "task."]}
    d = _diagnose(tmp_path, files)
    assert d["action"] != "done" and d["cause"] != "success", d["reason"]
    d2 = _diagnose(tmp_path / "end", {"slurm-1.out": [*report, "Training completed after 3 iterations at "
                                                                "2024-03-06 02:14:07. Total running time: 51:17"]})
    assert d2["action"] == "done", d2["reason"]


@pytest.mark.parametrize("line", ["300 epochs completed in 41.223 hours.", "100 epochs completed in 0.087 hours."])
def test_ultralytics_end_of_training_then_a_teardown_hang_is_a_finished_run(tmp_path: Path, line: str) -> None:
    tail = ["Optimizer stripped from runs/train/exp7/weights/last.pt, 93.1MB", "Results saved to runs/train/exp7",
            "slurmstepd: error: *** JOB 318802 ON gn-a03 CANCELLED AT 2022-04-04T11:02:00 DUE TO TIME LIMIT ***"]
    files = {"gn-a03.out": ["      Epoch   GPU_mem   box_loss", "    299/299     10.2G    0.01234", line, *tail],
             "gn-a04.out": ["slurmstepd: error: *** STEP 318802.0 ON gn-a04 CANCELLED AT 2022-04-04T11:02:00 DUE TO "
                            "TIME LIMIT ***"]}
    d = _diagnose(tmp_path, files)
    assert _said(d) == ("success", [], "done"), d["reason"]


@pytest.mark.parametrize("at", [21730, 5])
def test_megatrons_exiting_program_at_iteration_is_a_stop_ahead_of_the_wall_time(tmp_path: Path, at: int) -> None:
    files = {"slurm-402118.out": [*(f"0: {s}" for s in _steps()),
                                  f"0: saving checkpoint at iteration {at:7d} to /ckpt in torch_dist format",
                                  f"0: [exiting program at iteration {at}] datetime: 2025-02-21 19:51:26 "]}
    d = _diagnose(tmp_path, files)
    assert _said(d) == ("timelimit", [], "resubmit"), d["reason"]


@pytest.mark.parametrize("restarts", ["1", "3"])
def test_a_preemption_slurm_requeued_itself_is_waited_for_never_doubled(tmp_path: Path, restarts: str) -> None:
    end = "slurmstepd: error: *** JOB 8812004 ON gpu-lowprio-21 CANCELLED AT 2024-12-02T14:46:01 DUE TO PREEMPTION ***"
    epilog = ["==== epilog: scontrol show job 8812004 ====", "   JobState=PENDING Reason=BeginTime Dependency=(null)",
              f"   Requeue=1 Restarts={restarts} BatchFlag=1 Reboot=0 ExitCode=0:0"]
    d = _diagnose(tmp_path, {"slurm-8812004.out": [*_steps(), end, *epilog]})
    assert _said(d) == ("preempted", [], "wait_and_resubmit"), d["reason"]
    d2 = _diagnose(tmp_path / "no", {"slurm-8812004.out": [*_steps(), end, *epilog[:2],
                                                          "   Requeue=0 Restarts=0 BatchFlag=1"]})
    assert d2["action"] == "resubmit", d2["reason"]  # not requeued: a new segment


@pytest.mark.parametrize("line", [
    "gpu45:78367:78492 [0] transport/nvls.cc:244 NCCL WARN Cuda failure 1 'invalid argument'",
    "gpu45: failed | Fabric State: In Progress  Status: N/A",
    "gpu45: nv-fabricmanager[3112]: request to query NVSwitch device information from NVSwitch driver failed with "
    "error:WARNING Nothing to do [NV_WARN_NOTHING_TO_DO]"])
def test_one_nodes_nvswitch_fabric_not_set_up_is_that_nodes_lost_gpus(tmp_path: Path, line: str) -> None:
    """NVLS setup failing on one node's ranks, its fabric manager failed or still `In Progress`: the node's NVSwitch
    fabric (strong evidence), while the other nodes only time out in the first broadcast."""
    timeout = ("{h}: [rank{r}]:[E0103 09:24:53.39 ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught collective "
               "operation timeout: WorkNCCL(SeqNum=2, OpType=BROADCAST, NumelIn=2621440, NumelOut=2621440, "
               "Timeout(ms)=600000) ran for 600031 milliseconds before timing out.")
    lines = ["SLURM_JOB_ID=90412 nodes=gpu[41-42,45-46]", line,
             "gpu45: [rank16]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:3356, "
             "unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.23.4",
             *(timeout.format(h=h, r=r) for r, h in ((0, "gpu41"), (8, "gpu42"), (24, "gpu46")))]
    d = _diagnose(tmp_path, {"slurm-90412.out": lines})
    assert _said(d) == ("gpu_lost", ["gpu45"], "resubmit_exclude"), d["reason"]


@pytest.mark.parametrize("header", ["==== epilog cn-g033: dmesg -T | tail -40 ====", "--- cn-g033 dmesg ---"])
def test_a_kernel_line_under_a_section_naming_one_host_is_that_hosts(tmp_path: Path, header: str) -> None:
    """A hung task (or an Xid) in an epilog's dmesg under a header naming one host: that host's. A header naming the
    whole node list names none of them."""
    timeouts = [f"{r}: [rank{r}]:[E1220 16:28:50.02 ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog caught collective "
                f"operation timeout: WorkNCCL(SeqNum=984412, OpType=ALLREDUCE, NumelIn=212, NumelOut=212, "
                f"Timeout(ms)=1800000) ran for 1800083 milliseconds before timing out." for r in (0, 1, 3)]
    hung = "[Wed Dec 20 16:00:55 2023] INFO: task python3.11:17271 blocked for more than 122 seconds."
    files = {"slurm-4476120.out": [*_steps(), *timeouts, header, hung]}
    d = _diagnose(tmp_path, files)
    assert _said(d) == ("hang", ["cn-g033"], "resubmit_exclude"), d["reason"]
    listed = {"slurm-4476120.out": [*_steps(), *timeouts, "==== SLURM_JOB_NODELIST=cn-g031,cn-g033 ====", hung]}
    d2 = _diagnose(tmp_path / "list", listed)
    assert d2["culprit_nodes"] != ["cn-g031"], d2["reason"]
