"""Readings taught by blind14's misses (issue 38), each held on more than one variant of the text: a job's own
rank -> host map and host/address lists, Open MPI's openib and Gloo's TCP pair naming the peer, a named peer whose
own output stops mid-write, UCX's signal handler naming its host, an epilog section header naming the host of the
node report under it (nvidia-smi's ERR!, ibstat's Polling port), and a CUDA illegal access re-raised by the
watchdog. Every case goes through `diagnose_dir`, the offline path a user runs (prefilter included)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from orchestrator.offline.diagnosis import diagnose_dir


def _steps(n: int = 3, start: int = 100) -> list[str]:
    return [f" iteration {start + 10 * i:>8}/   10000 | lm loss: 2.{i}E+00 |" for i in range(n)]


def _diagnose(tmp_path: Path, files: dict[str, list[str]], cut: str = "") -> dict[str, Any]:
    """`cut`: the file whose last line is written half (no newline: the host died mid-write)."""
    logs = tmp_path / "logs"
    logs.mkdir(parents=True)
    for name, lines in files.items():
        (logs / name).write_text("\n".join(lines) + ("\n[2025-06-01 11:10:40] [INFO] [Rank 8] gradient acc"
                                                     if name == cut else "\n"))
    return diagnose_dir(logs)


def _said(d: dict[str, Any]) -> tuple[str, list[str], str]:
    return d["cause"], list(d["culprit_nodes"]), d["action"]


ILLEGAL = ("Process group watchdog thread terminated with exception: CUDA error: an illegal memory access was "
           "encountered")


@pytest.mark.parametrize("tag", ["rank map: 0-7 gx-011, 8-15 gx-014, 16-23 gx-017",
                                 "rank->host: 0-7 gx-011, 8-15 gx-014, 16-23 gx-017",
                                 "Rank mapping: 0-7 -> gx-011; 8-15 -> gx-014; 16-23 -> gx-017"])
def test_a_jobs_own_rank_map_names_the_host_of_one_ranks_crash(tmp_path: Path, tag: str) -> None:
    d = _diagnose(tmp_path, {"slurm-4242.out": [tag, *_steps(), f"[rank9]:[E0504 03:12:44.99 ProcessGroupNCCL.cpp:1899]"
                                                                 f" [PG ID 0 Rank 9] {ILLEGAL}"]})
    assert _said(d) == ("user_bug", ["gx-014"], "resubmit"), d["reason"]  # one rank's crash: a strike


def test_the_same_illegal_access_on_every_node_is_the_jobs(tmp_path: Path) -> None:
    lines = [f"RuntimeError: {ILLEGAL.split(': ', 1)[1]}"]
    d = _diagnose(tmp_path, {"gx-011.out": [*_steps(), *lines], "gx-014.out": [*_steps(), *lines]})
    assert _said(d)[2] == "stop_and_alert", d["reason"]


OPENIB = ("[[13535,1],{r}][btl_openib_component.c:3645:handle_wc] from {src} to: {dst} error polling LP CQ with "
          "status RETRY EXCEEDED ERROR status number 12 for wr_id 209907960 opcode 0  vendor error 129 qp_idx 3")


def test_openib_errors_from_two_hosts_naming_one_peer_exclude_it(tmp_path: Path) -> None:
    d = _diagnose(tmp_path, {"slurm-88412.out": [
        "[1,0]<stdout>:Train Epoch: 31 [0/1281167 (0%)]\tLoss: 1.602000",
        "[1,0]<stdout>:Train Epoch: 31 [10240/1281167 (1%)]\tLoss: 1.598000",
        OPENIB.format(r=17, src="c-2-09", dst="c-2-11"), OPENIB.format(r=5, src="c-2-05", dst="c-2-11")]})
    assert _said(d) == ("network", ["c-2-11"], "resubmit_exclude"), d["reason"]


def test_one_openib_report_is_a_strike_on_the_peer(tmp_path: Path) -> None:
    d = _diagnose(tmp_path, {"slurm-88412.out": [
        "[1,0]<stdout>:Train Epoch: 31 [0/1281167 (0%)]\tLoss: 1.602000",
        "[1,0]<stdout>:Train Epoch: 31 [10240/1281167 (1%)]\tLoss: 1.598000",
        OPENIB.format(r=17, src="c-2-09", dst="c-2-11")]})
    assert _said(d) == ("network", ["c-2-11"], "resubmit"), d["reason"]


GLOO = ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer "
        "[172.28.0.12]:14004")
GLOO_READ = ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:589] Read error [172.28.0.12]:25266: "
             "Connection reset by peer")


@pytest.mark.parametrize("error", [GLOO, GLOO_READ])
def test_gloo_errors_from_two_hosts_naming_one_address_exclude_its_host(tmp_path: Path, error: str) -> None:
    def start(host: str, ip: str, rank: int) -> str:
        return f"{host} ({ip}): dist.init_process_group(backend='gloo', world_size=3, rank={rank}) ok"

    d = _diagnose(tmp_path, {"wk-a1.out": [start("wk-a1", "172.28.0.11", 0), *_steps(), error],
                             "wk-a2.out": [start("wk-a2", "172.28.0.12", 1), *_steps()],
                             "wk-a3.out": [start("wk-a3", "172.28.0.13", 2), *_steps(), error]})
    assert _said(d) == ("network", ["wk-a2"], "resubmit_exclude"), d["reason"]


def test_one_gloo_error_in_a_job_wide_file_is_a_strike_on_the_host_its_address_maps_to(tmp_path: Path) -> None:
    d = _diagnose(tmp_path, {"slurm-60412.out": [
        "hosts: lab-gpu3=192.168.70.91 (rank 0-1), lab-gpu4=192.168.70.92 (rank 2-3)", *_steps(),
        GLOO_READ.replace("172.28.0.12", "192.168.70.92"),
        "srun: error: lab-gpu3: task 0: Exited with exit code 1"]})
    assert _said(d) == ("network", ["lab-gpu4"], "resubmit"), d["reason"]


def test_a_named_peer_whose_output_stops_mid_write_died(tmp_path: Path) -> None:
    """Both peers lost the connection to 10.77.1.11, and that host's own log stops in the middle of a line: the
    node died (node_fail), it did not merely drop packets."""
    def start(host: str, ip: str) -> str:
        return f"{host} ({ip}): init ok"

    error = GLOO.replace("172.28.0.12", "10.77.1.11")
    d = _diagnose(tmp_path, {"g-s03.log": [start("g-s03", "10.77.1.10"), *_steps(), error],
                             "g-s04.log": [start("g-s04", "10.77.1.11"), *_steps()],
                             "g-s09.log": [start("g-s09", "10.77.1.12"), *_steps(), error]},
                  cut="g-s04.log")
    assert _said(d) == ("node_fail", ["g-s04"], "resubmit_exclude"), d["reason"]
    whole = _diagnose(tmp_path / "whole", {"g-s03.log": [start("g-s03", "10.77.1.10"), *_steps(), error],
                                           "g-s04.log": [start("g-s04", "10.77.1.11"), *_steps()],
                                           "g-s09.log": [start("g-s09", "10.77.1.12"), *_steps(), error]})
    assert _said(whole) == ("network", ["g-s04"], "resubmit_exclude"), whole["reason"]


@pytest.mark.parametrize("prefix", ["", "Sun Oct 12 04:41:17 2025[1,3]<stderr>:"])
def test_ucx_signal_handler_lines_name_their_host_and_the_same_crash_everywhere_is_the_jobs(
        tmp_path: Path, prefix: str) -> None:
    crash = prefix + "[{h}:140515:0:140515] Caught signal 11 (Segmentation fault: address not mapped to object at " \
                     "address 0x54000009)"
    d = _diagnose(tmp_path, {"slurm-661203.out": [crash.format(h="dgx-0911"), crash.format(h="dgx-0912")]})
    assert _said(d) == ("segfault", [], "stop_and_alert"), d["reason"]
    one = _diagnose(tmp_path / "one", {"slurm-661203.out": [
        f"{prefix}[dgx-0911:140515:0:140515] ib_md.c:100 UCX INFO ok", *_steps(), crash.format(h="dgx-0912")]})
    assert _said(one) == ("segfault", ["dgx-0912"], "resubmit"), one["reason"]


SMI_ERR = ["|   3  NVIDIA H100 80GB HBM3          On  |   00000000:5D:00.0 Off |                 ERR! |",
           "|ERR!  ERR!  ERR!             ERR! / ERR! |   79870MiB /  81559MiB |    ERR!      Default |"]


@pytest.mark.parametrize("header", ["=== epilog gpu-b2-13: nvidia-smi ===", "---- gpu-b2-13 nvidia-smi ----",
                                    "### epilog gpu-b2-13 ###"])
def test_a_node_report_under_an_epilog_header_is_that_hosts(tmp_path: Path, header: str) -> None:
    d = _diagnose(tmp_path, {"slurm-4471203.out": [
        *_steps(), "[rank19]: RuntimeError: CUDA error: unspecified launch failure",
        "srun: error: gpu-b2-13: task 19: Exited with exit code 1",
        "srun: error: gpu-b2-11: tasks 0-7: Terminated", header, *SMI_ERR]})
    assert _said(d) == ("gpu_lost", ["gpu-b2-13"], "resubmit_exclude"), d["reason"]


def test_a_header_that_names_no_host_names_nobody(tmp_path: Path) -> None:
    d = _diagnose(tmp_path, {"slurm-4471203.out": [*_steps(), "=== epilog: nvidia-smi ===", *SMI_ERR,
                                                   "slurmstepd: error: *** JOB 4471203 ON gpu-b2-11 CANCELLED AT "
                                                   "2025-03-01T10:00:00 DUE TO TIME LIMIT ***"]})
    assert d["culprit_nodes"] == [] and d["cause"] == "timelimit", d["reason"]


@pytest.mark.parametrize("state", ["Polling", "Disabled"])
def test_an_ib_port_without_link_on_one_node_explains_its_peers_transport_errors(tmp_path: Path, state: str) -> None:
    retry = ("[{h}:27796:0:27796] ib_mlx5_log.c:113  FATAL: Error on QP 0x6b10 wqe[057]: Transport retry count "
             "exceeded (synd 0x15 vend 0x81) opcode SEND")
    ibstat = ["=== epilog: ibstat mlx5_0 ===", "CA 'mlx5_0'", "\tPort 1:", "\t\tState: Down",
              f"\t\tPhysical state: {state}"]
    d = _diagnose(tmp_path, {"lx-1125.out": [*_steps(), retry.format(h="lx-1125")],
                             "lx-1126.out": [*_steps(), retry.format(h="lx-1126")],
                             "lx-1127.out": [*_steps(), *ibstat]})
    assert _said(d) == ("network", ["lx-1127"], "resubmit_exclude"), d["reason"]


WATCHDOG = ("[rank{r}]:[E621 08:57:00.0012 ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog caught collective operation "
            "timeout: WorkNCCL(SeqNum=512994, OpType=ALLREDUCE, NumelIn=4, NumelOut=4, Timeout(ms)=1800000) ran for "
            "1800092 milliseconds before timing out.")


def _pyspy(header: str, frames: list[str]) -> list[str]:
    return [header, "Thread 48813 (idle): \"MainThread\"", *[f"    {f}" for f in frames]]


ALL_REDUCE = ["all_reduce (torch/distributed/distributed_c10d.py:2501)", "train_step (train.py:418)"]
IN_DRIVER = ["cuStreamSynchronize (libcuda.so.1)", "cudaStreamSynchronize (libcudart.so.12)", "item (torch/_tensor.py)"]


@pytest.mark.parametrize("header", ["=== py-spy rank {r} ({h}, pid 48813) ===",
                                    "--- py-spy dump --native --pid 4881 (rank {r}, {h}) ---"])
def test_stacks_under_headers_naming_their_hosts_name_the_rank_outside_the_collective(
        tmp_path: Path, header: str) -> None:
    """A hang monitor's dumps in one job-wide file: each under a header naming its host; the one rank inside a CUDA
    driver call while the others wait in all_reduce is that host's."""
    dumps = (_pyspy(header.format(r=11, h="ip-10-1-7-44"), IN_DRIVER)
             + _pyspy(header.format(r=3, h="ip-10-1-7-41"), ALL_REDUCE)
             + _pyspy(header.format(r=19, h="ip-10-1-9-12"), ALL_REDUCE))
    d = _diagnose(tmp_path, {"slurm-31120.out": [*_steps(), *dumps, WATCHDOG.format(r=0), WATCHDOG.format(r=8)]})
    assert _said(d) == ("hang", ["ip-10-1-7-44"], "resubmit_exclude"), d["reason"]


FR = ["--- post-mortem: python -m torch.distributed.flight_recorder.fr_trace /scratch/fr -p nccl_trace_rank_ ---",
      "Not all ranks joining collective 5531 at entry 1877", "group info: 0:default_pg",
      "collective: nccl:all_reduce", "missing ranks: {13}", "input sizes: [[262144000]]"]


def test_the_flight_recorders_missing_rank_with_its_stack_in_a_device_call_is_the_nodes(tmp_path: Path) -> None:
    head = "SLURM_JOB_ID=558120 nodes=a100-pod2-n[13-14]; ranks 0-7 a100-pod2-n13, 8-15 a100-pod2-n14"
    dump = _pyspy("--- py-spy dump --native --pid 77120 (rank 13, a100-pod2-n14) ---", IN_DRIVER)
    d = _diagnose(tmp_path, {"slurm-558120.out": [head, *_steps(), WATCHDOG.format(r=0), WATCHDOG.format(r=9),
                                                  *FR, *dump]})
    assert _said(d) == ("hang", ["a100-pod2-n14"], "resubmit_exclude"), d["reason"]
    # the recorder alone (no stack of that rank): a suspect, a strike
    alone = _diagnose(tmp_path / "alone", {"slurm-558120.out": [
        head, *_steps(), WATCHDOG.format(r=0), WATCHDOG.format(r=9), *FR,
        *_pyspy("--- py-spy (rank 0, a100-pod2-n13) ---", ALL_REDUCE)]})
    assert _said(alone) == ("hang", ["a100-pod2-n14"], "resubmit"), alone["reason"]


def test_a_missing_rank_no_map_places_names_no_host_and_the_stacks_decide(tmp_path: Path) -> None:
    """Per-host files: the analysis printed on one host is about another rank; with no rank map the file's host is
    not blamed, and the missing rank's own stack (the program's queue) makes it the job's hang."""
    queue = ["get (queue.py:180)", "prefetch (shard_cache.py:77)"]
    d = _diagnose(tmp_path, {"hpc-g11.log": [*_steps(), WATCHDOG.format(r=0), *FR,
                                             *_pyspy("Thread dump rank 0:", ALL_REDUCE)],
                             "hpc-g12.log": [*_steps(), *_pyspy("Thread dump rank 13:", queue)]})
    assert d["culprit_nodes"] != ["hpc-g11"], d["reason"]
    assert _said(d) == ("hang", [], "stop_and_alert"), d["reason"]


FAULTHANDLER_WAIT = ["Timeout (0:30:00)!", "Thread 0x00007f4392c4d740 (most recent call first):",
                     '  File "/usr/lib/python3.11/multiprocessing/connection.py", line 440 in _poll',
                     '  File "/venv/lib/python3.11/site-packages/torch/utils/data/dataloader.py", line 1310 in '
                     '_try_get_data']
FAULTHANDLER_BARRIER = ["Timeout (0:30:00)!", "Thread 0x00007f004d8c4d740 (most recent call first):",
                        '  File "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 4635 '
                        'in barrier', '  File "/p/project/train.py", line 121 in train']


def test_faulthandler_frames_keep_their_package_path_and_a_data_loader_wait_is_the_programs(tmp_path: Path) -> None:
    d = _diagnose(tmp_path, {"jwb0231.out": [*_steps(), *FAULTHANDLER_WAIT],
                             "jwb0232.out": [*_steps(), *FAULTHANDLER_BARRIER],
                             "jwb0233.out": [*_steps(), *FAULTHANDLER_BARRIER]})
    assert _said(d) == ("hang", [], "stop_and_alert"), d["reason"]


@pytest.mark.parametrize("banner", ["==== job {j} nodes: gn[{a}-{b}] ====",
                                    "### job {j} SLURM_JOB_NODELIST=gn[{a}-{b}] ###"])
def test_the_same_hang_at_the_same_step_on_the_other_nodes_a_banner_lists_is_the_jobs(
        tmp_path: Path, banner: str) -> None:
    def alloc(job: int, a: int, b: int) -> list[str]:
        return [banner.format(j=job, a=a, b=b), *_steps(start=2400), WATCHDOG.format(r=4)]

    d = _diagnose(tmp_path, {"slurm-771388.out": [*alloc(771021, 101, 102), *alloc(771388, 117, 118)]})
    assert d["action"] == "stop_and_alert" and d["policy_rule"] == "repeats_on_other_nodes", d["reason"]
    same = _diagnose(tmp_path / "same", {"slurm-771388.out": [*alloc(771021, 101, 102), *alloc(771388, 101, 102)]})
    assert same["action"] != "stop_and_alert", same["reason"]


BOOT = "{h}:3230:3230 [0] NCCL INFO Bootstrap : Using eth0:{ip}<0>"
RAS = {"listed": ["#0-0 (3c81a0fe227b94d1) MISMATCH", "  Communicator ranks have different AllGather operation counts",
                  "  31 ranks have launched up to operation 641", "  1 ranks have launched up to operation 640",
                  "  Rank 29 -- GPU 5 managed by process 323165 on node 10.1.0.4"],
       "inline": ["#0-0 (7f41c2a9b05e3d18) MISMATCH", "  Communicator ranks have different AllReduce operation counts",
                  "  31 ranks have launched up to operation 95417",
                  "  Rank 29 has launched up to operation 95416 -- GPU 5 managed by process 323165 on node 10.1.0.4"]}


@pytest.mark.parametrize("form", sorted(RAS))
@pytest.mark.parametrize("dump", ["prefixed", "traced"])
def test_nccl_ras_names_the_rank_behind_by_its_nodes_address_and_its_stack_decides(
        tmp_path: Path, form: str, dump: str) -> None:
    """NCCL's RAS report puts one rank behind; the log maps its node's address (NCCL's Bootstrap lines); that
    process's py-spy dump (lines prefixed by its host, or after a traced `+ srun -w HOST py-spy dump`) is inside
    a CUDA driver call: the node's hang."""
    hosts = [(f"sn-{i}", f"10.1.0.{i}") for i in range(1, 5)]
    stack = ["Thread 323165 (active): \"MainThread\"", "    ioctl (libc.so.6)", "    0x7f81c2b1e4d2 (libcuda.so.1)",
             "    cuStreamSynchronize (libcuda.so.1)", "    synchronize (torch/cuda/streams.py:225)"]
    shown = ([f"sn-4: {line}" for line in stack] if dump == "prefixed"
             else ["+ srun -w sn-4 --overlap py-spy dump --native --pid 323165", *stack])
    lines = [f"{h}: {BOOT.format(h=h, ip=ip)}" for h, ip in hosts] + [f"sn-1: {s}" for s in _steps()]
    d = _diagnose(tmp_path, {"slurm-910223.out": [*lines, "sn-1: watchdog: no step for 1200 s", *RAS[form], *shown,
                                                  "slurmstepd: error: *** JOB 910223 ON sn-1 CANCELLED AT "
                                                  "2025-12-11T17:30:42 ***"]})
    assert _said(d) == ("hang", ["sn-4"], "resubmit_exclude"), d["reason"]


BATCH = ("[rank{r}]: AssertionError: Check batch related parameters. train_batch_size is not equal to "
         "micro_batch_per_gpu * gradient_acc_step * world_size 256 != 4 * 2 * 31")


@pytest.mark.parametrize("shown", ["smi", "torchrun"])
def test_a_node_showing_fewer_gpus_than_every_other_explains_a_start_up_failure(tmp_path: Path, shown: str) -> None:
    def listing(n: int) -> list[str]:
        if shown == "smi":
            return [f"GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-7d49ce65-f4eb-217d-49d1-c5{i}a)" for i in range(n)]
        return ["I0122 09:02:52.070000 17069 torch/distributed/elastic/agent/server/api.py:514] Rendezvous complete",
                f"  local_ranks=[{', '.join(str(i) for i in range(n))}]"]

    files = {f"gpu-a0{i}.log": [*listing(7 if i == 18 else 8), BATCH.format(r=i)] for i in (17, 18, 19, 20)}
    d = _diagnose(tmp_path, files)
    assert _said(d) == ("gpu_lost", ["gpu-a018"], "resubmit_exclude"), d["reason"]
    # the same counts everywhere: the batch assertion is the job's
    same = _diagnose(tmp_path / "same", {f"gpu-a0{i}.log": [*listing(8), BATCH.format(r=i)] for i in (17, 18, 19)})
    assert _said(same)[2] == "stop_and_alert", same["reason"]


def test_a_gaudi_accelerator_the_driver_could_not_bring_up_is_that_nodes(tmp_path: Path) -> None:
    d = _diagnose(tmp_path, {
        "slurm-210394.out": ["gaudi2-c3-14: RuntimeError: synStatus=26 [Generic failure] Device acquire failed.",
                             "gaudi2-c3-11: RuntimeError: Connection reset by peer",
                             "gaudi2-c3-12: RuntimeError: Connection reset by peer"],
        "gaudi2-c3-14.dmesg": ["[   72.993204] habanalabs hl5: failed to initialize the H/W",
                               "[   72.993269] habanalabs 0000:b3:00.0: Failed to initialize hl5. Device is NOT "
                               "usable !"]})
    assert _said(d) == ("gpu_lost", ["gaudi2-c3-14"], "resubmit_exclude"), d["reason"]


@pytest.mark.parametrize("mount", ["/run", "/tmp", "/lscratch"])
def test_a_df_row_of_one_task_maps_a_full_node_local_disk_to_its_host(tmp_path: Path, mount: str) -> None:
    d = _diagnose(tmp_path, {"slurm-1022901.out": [
        "slurmstepd: error: pyxis:     Write failed because No space left on device",
        "srun: error: dgx33: task 2: Exited with exit code 1", "srun: error: dgx31: task 0: Terminated",
        "srun: error: dgx32: task 1: Terminated",
        f"0: tmpfs           101G  4.1G   97G   5% {mount}", f"1: tmpfs           101G  4.1G   97G   5% {mount}",
        f"2: tmpfs           101G  101G     0 100% {mount}"]})
    assert _said(d) == ("filesystem", ["dgx33"], "resubmit_exclude"), d["reason"]


NVML_MISMATCH = "Failed to initialize NVML: Driver/library version mismatch"


@pytest.mark.parametrize("line", [f"prolog: gpu-r3n07 nvidia-smi: {NVML_MISMATCH}",
                                  f"epilog: gpu-r3n07: {NVML_MISMATCH}"])
def test_a_prolog_line_naming_its_host_ties_the_report_to_it(tmp_path: Path, line: str) -> None:
    d = _diagnose(tmp_path, {"slurm-4471093.out": [
        line, "23: UserWarning: CUDA initialization: Error 803: system has unsupported display driver / cuda driver "
              "combination", "srun: error: gpu-r3n07: tasks 16-23: Exited with exit code 1",
        "srun: error: gpu-r3n05: tasks 0-7: Terminated"]})
    assert _said(d) == ("gpu_lost", ["gpu-r3n07"], "resubmit_exclude"), d["reason"]
