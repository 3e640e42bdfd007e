"""Readings taught by blind15's misses (issue 38): other accelerators' own device failures (Intel Gaudi, TPU, Intel
GPU Max with its xe driver), a HIP launch failure of one rank as a strike, Open MPI losing a node's daemon (both of
its wordings), Ray's `host (ip X)` start-up lines as the address map, JAX's coordination agent error beside a host
whose log stops mid-write, and a job-named output file whose own banner lists the allocation's nodes. Each through
`diagnose_dir`, the offline path a user runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.test_blind14_readings import _diagnose, _said, _steps

TERMINATED = "srun: error: {h}: tasks {a}-{b}: Terminated"


@pytest.mark.parametrize("error", [
    "RuntimeError: synStatus=20 [Device already acquired] Device acquire failed.",
    "RuntimeError: synStatus=26 [Generic failure] Device acquire failed."])
def test_a_gaudi_device_another_process_holds_is_that_nodes(tmp_path: Path, error: str) -> None:
    d = _diagnose(tmp_path, {"slurm-330912.out": [f"gaudi2-a16: {error}"] * 3
                             + [TERMINATED.format(h="gaudi2-a15", a=0, b=7), TERMINATED.format(h="gaudi2-a17", a=16,
                                                                                               b=23)]})
    assert _said(d) == ("gpu_lost", ["gaudi2-a16"], "resubmit_exclude"), d["reason"]


@pytest.mark.parametrize("error", [
    "E0827 23:43:41.200122 39475 synchronous_driver.cc:820] [/dev/accel0 tpu1013:pe1:0] !!!! FATAL ERROR !!!! for "
    "[/dev/accel0 tpu1013:pe1:0] , fatal_error: true, running_timer: 0xeacdbdd045e77",
    "jaxlib.xla_extension.XlaRuntimeError: INTERNAL: Accelerator device halted prematurely, perhaps due to an "
    "on-device check-failure.",
    "RuntimeError: level_zero backend failed with error: 20 (UR_RESULT_ERROR_DEVICE_LOST)"])
def test_an_accelerators_own_device_loss_on_one_host_excludes_it(tmp_path: Path, error: str) -> None:
    d = _diagnose(tmp_path, {"acc-n17.out": [*_steps(), "Terminated"], "acc-n18.out": [*_steps(), "Terminated"],
                             "acc-n19.out": [*_steps(), error]})
    assert _said(d) == ("gpu_lost", ["acc-n19"], "resubmit_exclude"), d["reason"]


def test_the_xe_drivers_engine_reset_explains_a_ranks_crash_on_that_node(tmp_path: Path) -> None:
    d = _diagnose(tmp_path, {
        "pvc-n018.out": [*_steps(), "Terminated"],
        "pvc-n019.out": [*_steps(), "[rank27]: RuntimeError: an unexpected failure in backward"],
        "pvc-n019.dmesg": ["[Wed Apr  2 12:00:41 2025] xe 0000:3a:00.0: [drm] GT1: Engine reset: engine_class=ccs, "
                           "logical_mask: 0x1, guc_id=11"]})
    assert d["culprit_nodes"] == ["pvc-n019"] and d["action"] == "resubmit_exclude", d["reason"]


def test_one_ranks_hip_launch_failure_with_its_help_line_stays_a_strike(tmp_path: Path) -> None:
    d = _diagnose(tmp_path, {"slurm-660192.out": [
        "rank map: 0-7 mi250-n031, 8-15 mi250-n032", *_steps(),
        "[rank11]: torch.AcceleratorError: HIP error: unspecified launch failure",
        "[rank11]: Search for `hipErrorLaunchFailure' in https://rocm.docs.amd.com/projects/HIP/en/latest/index.html "
        "for more information."]})
    assert d["culprit_nodes"] == ["mi250-n032"] and d["action"] == "resubmit", d["reason"]


@pytest.mark.parametrize("message", [
    ["ORTE has lost communication with a remote daemon.", "", "  HNP daemon   : [[41877,0],0] on node jwb0123",
     "  Remote daemon: [[41877,0],2] on node jwb0125", "",
     "This is usually due to either a failure of the TCP network"],
    ["ORTE has lost communication with its daemon located on node:", "", "  hostname:  jwb0125", "",
     "This is usually due to either a failure of the TCP network"]])
def test_open_mpi_losing_a_nodes_daemon_names_that_node(tmp_path: Path, message: list[str]) -> None:
    d = _diagnose(tmp_path, {"slurm-9911284.out": [f"[1,0]<stdout>:{s}" for s in _steps()] + message})
    assert _said(d) == ("node_fail", ["jwb0125"], "resubmit_exclude"), d["reason"]


def test_rays_start_up_line_maps_the_address_of_the_node_its_gcs_marks_dead(tmp_path: Path) -> None:
    d = _diagnose(tmp_path, {"slurm-5512.out": [
        "Starting HEAD at ray-h100-01 (ip 10.70.3.11)", "Starting WORKER at ray-h100-04 (ip 10.70.3.14), joining "
        "10.70.3.11:6379", *_steps(),
        "2025-03-18 13:04:37,118\tWARNING worker.py:2283 -- The node with node id: 7c1d02fa9b8e4f3b and address: "
        "10.70.3.14 and node name: 10.70.3.14 has been marked dead because the detector has missed too many "
        "heartbeats from it."]})
    assert _said(d) == ("node_fail", ["ray-h100-04"], "resubmit_exclude"), d["reason"]


def test_jaxs_coordination_error_on_the_others_and_a_log_cut_mid_write_is_a_dead_host(tmp_path: Path) -> None:
    agent = ("2023-03-07 15:52:33.376549: E external/tsl/tsl/distributed_runtime/coordination/"
             "coordination_service_agent.cc:702] Coordination agent is set to ERROR: UNAVAILABLE: Task "
             "/job:jax_worker/replica:0/task:3 heartbeat timeout. This indicates that the remote task has failed, "
             "got preempted, or crashed unexpectedly.")
    files = {f"jx-a100-{i}.log": [*_steps(), agent] for i in (1, 2, 3, 5)}
    files["jx-a100-4.log"] = _steps()
    d = _diagnose(tmp_path, files, cut="jx-a100-4.log")
    assert _said(d) == ("node_fail", ["jx-a100-4"], "resubmit_exclude"), d["reason"]


def test_a_job_named_output_file_whose_banner_lists_other_nodes_is_no_host(tmp_path: Path) -> None:
    """`gpt7b-lumi.out` looks like a host name; its own banner lists the allocation (nid005[101-104]) without it:
    the file is the job's output, and only the host whose kernel log reports the GPU is excluded."""
    d = _diagnose(tmp_path, {
        "gpt7b-lumi.out": ["#### job 8812301 nodes nid005[101-104] started 2024-10-07T08:00:03", *_steps(),
                           "[rank31]: torch.AcceleratorError: HIP error: unspecified launch failure"],
        "nid005104.dmesg": ["[Mon Oct  7 16:07:41 2024] amdgpu 0000:d1:00.0: amdgpu: GPU reset begin!"]})
    assert "gpt7b-lumi" not in d["culprit_nodes"], d["reason"]


STALL = ("[1,0]<stderr>:[2026-02-03 19:44:10.118713: W /tmp/pip-install/horovod/common/stall_inspector.cc:107] One or "
         "more tensors were submitted to be reduced, gathered or broadcasted by subset of ranks and are waiting for "
         "remainder of ranks for more than 60 seconds.")


SLOTS = "-np 32 -H amd-g4-n05:8,amd-g4-n06:8,amd-g4-n07:8,amd-g4-n08:8 python t.py"


@pytest.mark.parametrize("launch", [f"horovodrun {SLOTS}", f"mpirun {SLOTS}"])
def test_horovods_missing_rank_through_the_host_slots_with_its_stack_in_a_device_call(
        tmp_path: Path, launch: str) -> None:
    """The stall inspector lists rank 21 missing; by the launch's host slots rank 21 runs on amd-g4-n07, whose hang
    check (a tag holding a time, then `HOST: py-spy dump`) shows it inside hipStreamSynchronize: that node's hang."""
    d = _diagnose(tmp_path, {"slurm-404815.out": [
        launch, *[f"[1,0]<stdout>:{s}" for s in _steps()], STALL, "[1,0]<stderr>:Missing ranks:",
        "[1,0]<stderr>:21: [allreduce.module.fc.bias, allreduce.module.fc.weight ...]",
        "[hang-check 21:31] amd-g4-n07: py-spy dump --native --pid 228714",
        "Thread 228714 (active): \"MainThread\"", "    hipStreamSynchronize (libamdhip64.so.6.2.60200)",
        "    synchronize (torch/cuda/__init__.py:954)",
        "slurmstepd: error: *** JOB 404815 ON amd-g4-n05 CANCELLED AT 2025-01-10T04:00:00 DUE TO TIME LIMIT ***"]})
    assert d["culprit_nodes"] == ["amd-g4-n07"] and d["action"] == "resubmit_exclude", d["reason"]


def test_a_hip_out_of_memory_is_the_jobs_oom(tmp_path: Path) -> None:
    oom = ("[rank11]: torch.OutOfMemoryError: HIP out of memory. Tried to allocate 7.63 GiB. GPU 3 has a total "
           "capacity of 191.98 GiB of which 5.29 GiB is free.")
    d = _diagnose(tmp_path, {"mi300-n01.out": [*_steps(), oom], "mi300-n02.out": [*_steps(), oom]})
    assert _said(d) == ("user_oom", [], "stop_and_alert"), d["reason"]


def test_a_kernel_log_timestamp_is_no_tag_and_a_drivers_name_no_host(tmp_path: Path) -> None:
    d = _diagnose(tmp_path, {
        "hgx-21.log": [*_steps(), "[E0819 04:12:51.506 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective "
                                  "operation timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE) ran for 1800092 ms"],
        "hgx-22.log": _steps(),
        "hgx-22.dmesg": ["[Wed Aug 19 03:58:12 2026] nvidia-nvswitch2: SXid (PCI:0000:86:00.0): 20034, Fatal, Link 14 "
                         "LTSSM Fault Up (First)"]})
    assert d["culprit_nodes"] == ["hgx-22"], d["reason"]


def test_the_same_horovod_stall_at_the_same_step_on_other_nodes_is_the_jobs(tmp_path: Path) -> None:
    """Two allocations in one file, each banner naming its nodes (`job N on HOSTLIST`), progress as `[step N]`
    lines without a time, Horovod's stall inspector (timed) after the last step and Slurm's time limit long after:
    the same hang at step 83999 on other nodes is the job's."""
    def alloc(job: int, nodes: str, end: str) -> list[str]:
        return [f"======== job {job} on gpu-q1-[{nodes}] (32 ranks, 8 per node) resuming from step 80000 ========",
                *[f"[1,0]<stdout>:INFO:root:[step {s}]\tmlm_loss=1.39\tthroughput=14.5K tks/s" for s in
                  (80999, 81999, 82999, 83999)],
                "[1,0]<stderr>:[2019-10-09 15:13:28.346609: W horovod/common/stall_inspector.cc:105] One or more "
                "tensors were submitted to be reduced, gathered or broadcasted by subset of ranks",
                "[1,0]<stderr>:Stalled ranks:", "[1,0]<stderr>:6: [horovod_allreduce.0, horovod_allreduce.1 ...]",
                f"slurmstepd: error: *** JOB {job} ON gpu-q1-{nodes[:2]} CANCELLED AT {end} DUE TO TIME LIMIT ***"]

    d = _diagnose(tmp_path, {"bert.log": [*alloc(301772, "07-10", "2019-10-09T17:00:07"),
                                          *alloc(301955, "21-24", "2019-10-09T17:00:09")]})
    assert d["action"] == "stop_and_alert" and d["policy_rule"] == "repeats_on_other_nodes", d["reason"]


@pytest.mark.parametrize("count", [1, 3])
def test_amdgpu_uncorrectable_errors_in_the_memory_controller_are_ecc(tmp_path: Path, count: int) -> None:
    d = _diagnose(tmp_path, {
        "nid005121.out": [*_steps(), "Terminated"],
        "nid005123.out": [*_steps(), "[rank18]: torch.AcceleratorError: HIP error: unspecified launch failure"],
        "nid005123.dmesg": [f"[Mon Oct  7 16:07:41 2024] amdgpu 0000:d1:00.0: amdgpu: {count} uncorrectable hardware "
                            "errors detected in umc block",
                            "[Mon Oct  7 16:07:41 2024] amdgpu 0000:d1:00.0: amdgpu: GPU reset begin!"]})
    assert _said(d) == ("gpu_ecc", ["nid005123"], "resubmit_exclude"), d["reason"]


# py-spy prints its thread id with Rust's `{:#X}` (upper-case digits), `/TID` where it knows the OS thread
PYSPY_HEADERS = ["Thread 0x7F2A0C9E1740 (idle): \"MainThread\"",
                 "Thread 0x7F3C8812A740/402118 (active+gil): \"MainThread\"",
                 "Thread 0x7f3c8812a740 (active): \"MainThread\"", "Thread 402118 (idle): \"MainThread\""]


@pytest.mark.parametrize("header", PYSPY_HEADERS)
def test_py_spy_threads_as_py_spy_prints_them_name_the_rank_in_a_device_call(tmp_path: Path, header: str) -> None:
    def dump(frames: list[str]) -> list[str]:
        return ["py-spy dump (hang monitor):", header, *[f"    {f}" for f in frames]]
    waits = ["all_reduce (torch/distributed/distributed_c10d.py:2501)", "step (train.py:9)"]
    d = _diagnose(tmp_path, {
        "gx-101.out": [*_steps(), *dump(waits)], "gx-103.out": [*_steps(), *dump(waits)],
        "gx-102.out": [*_steps(), *dump(["cuStreamSynchronize (libcuda.so.1)", "item (torch/_tensor.py:1012)"])]})
    assert _said(d) == ("hang", ["gx-102"], "resubmit_exclude"), d["reason"]


def _threads(frames: list[str]) -> list[str]:
    """One rank's dump: its main thread and a helper thread and process, each with its innermost frame first."""
    names = ["\"MainThread\"", "\"Thread-3 (_pin_memory_loop)\"", "\"MainThread\""]
    return [line for i, f in enumerate(frames) for line in (f"Thread 0x7F2A0C9E17{i}0 (idle): {names[i]}", f"    {f}",
                                                              "    main (train.py:598)")]


DATA_WAIT = ["wait (threading.py:331)", "select (selectors.py:415)", "__call__ (streaming/base/shared/barrier.py:124)"]


def test_every_node_waiting_in_the_same_data_pipeline_frames_is_the_programs_hang(tmp_path: Path) -> None:
    """Every node's dump: the main thread in the DataLoader's queue, its helpers in their own waits, the same on every
    node, none in a collective or a device call: the program's hang, which would recur (stop)."""
    end = "slurmstepd: error: *** JOB 7730142 ON {h} CANCELLED AT 2024-03-01T11:59:33 DUE TO TIME LIMIT ***"
    d = _diagnose(tmp_path, {f"aic-09{i}.out": [*_steps(), *_threads(DATA_WAIT), end.format(h=f"aic-09{i}")]
                             for i in (13, 14)})
    assert _said(d) == ("hang", [], "stop_and_alert"), d["reason"]
    assert d["rule"] == "hang_in_program_code", d["rule"]


@pytest.mark.parametrize("other", [["all_reduce (torch/distributed/distributed_c10d.py:2501)"],
                                   ["cuStreamSynchronize (libcuda.so.1)"]])
def test_frames_that_differ_or_wait_in_a_collective_are_not_the_programs_hang(tmp_path: Path, other: list[str]) -> None:
    """The same wait in a collective on every node, or one node's frames in a device call: not the program's."""
    frames = [*DATA_WAIT[:2], *other]
    d = _diagnose(tmp_path, {"aic-0913.out": [*_steps(), *_threads(frames)],
                             "aic-0914.out": [*_steps(), *_threads(frames if "all_reduce" in other[0] else DATA_WAIT)]})
    assert d["rule"] != "hang_in_program_code", d["reason"]


MPICH_ERROR = ["[{r}] Fatal error in PMPI_Test: A process has failed, error stack:",
               "[{r}] MPIR_Test_impl(65).........:",
               "[{r}] MPID_nem_tcp_connpoll(1826): Communication error with rank {peer}: Connection reset by peer"]


def _mpich_job(rank_map: list[str], reporters: tuple[int, ...], peer: int = 9) -> list[str]:
    errors = [line.format(r=r, peer=peer) for r in reporters for line in MPICH_ERROR]
    return ["SLURM_JOB_ID=1529903", *rank_map, "[0] step   7000  epoch 27  loss 2.0333", *errors,
            *[f"srun: error: cn40{12 + i}: task {i}: Exited with exit code 7" for i in (0, 1, 3)]]


@pytest.mark.parametrize("rank_map", [
    [f"[{r}] rank {r} on cn40{12 + r // 4} (MPICH 3.4.3 ch3:nemesis tcp)" for r in range(16)],
    [f"Hello, World! I am process {r} of 16 on cn40{12 + r // 4}." for r in range(16)],
    ["(cn4012:0,1,2,3)", "(cn4013:4-7)", "(cn4014:8,9,10,11)", "(cn4015:12,13,14,15)"]])
def test_mpich_peers_naming_one_rank_name_its_host_by_the_jobs_rank_map(tmp_path: Path, rank_map: list[str]) -> None:
    """Two ranks on two hosts lose their connection with rank 9 (`-prepend-rank` tags): the map says cn4014."""
    d = _diagnose(tmp_path, {"slurm-1529903.out": _mpich_job(rank_map, (2, 13))})
    assert _said(d)[1:] == (["cn4014"], "resubmit_exclude"), d["reason"]
    # one reporter alone: a strike on the host it names
    one = _diagnose(tmp_path / "one", {"slurm-1529903.out": _mpich_job(rank_map, (13,))})
    assert _said(one)[1:] == (["cn4014"], "resubmit"), one["reason"]


def test_a_peer_rank_no_map_places_names_nobody(tmp_path: Path) -> None:
    d = _diagnose(tmp_path, {"slurm-1529903.out": _mpich_job([], (2, 13))})
    assert d["culprit_nodes"] == [], d["reason"]


@pytest.mark.parametrize(("line", "rank"), [("[9] step 10", 9), ("[1] 12345", None), ("[12]+ Done  ./x.sh", None)])
def test_mpichs_prepend_rank_tag_is_a_rank_and_bashs_job_line_is_not(line: str, rank: int | None) -> None:
    from orchestrator.diagnose.origin import parse_prefixes
    assert parse_prefixes(line).rank == rank


@pytest.mark.parametrize("error", [
    "MPIDI_OFI_handle_cq_error(1075): OFI poll failed (ofi_events.c:1077:MPIDI_OFI_handle_cq_error:Input/output "
    "error - PTLTE_NOT_FOUND)",
    "MPIDI_OFI_handle_cq_error(593): OFI poll failed (default nic=hsn0: Input/output error)",
    "MPICH ERROR: OFI Poll Failed UNDELIVERABLE"])
def test_one_ranks_own_ofi_completion_error_is_a_network_strike_not_a_filesystem(tmp_path: Path, error: str) -> None:
    """Cray MPICH over Slingshot: one rank's endpoint error (errno text `Input/output error`), the others terminated:
    its host's link, a strike; never the shared filesystem."""
    d = _diagnose(tmp_path, {"slurm-2281503.out": [
        "SLURM_JOB_ID=2281503 SLURM_NODELIST=frontier[04412-04413,04418]", *_steps(),
        "Fatal error in PMPI_Iprobe: Other MPI error, error stack:", error,
        "srun: error: frontier04418: task 21: Exited with exit code 255",
        "srun: error: frontier04412: tasks 0-7: Terminated", "srun: error: frontier04413: tasks 8-15: Terminated",
        "srun: error: frontier04418: tasks 16-20,22-23: Terminated"]})
    assert _said(d) == ("network", ["frontier04418"], "resubmit"), d["reason"]
