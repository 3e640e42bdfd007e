"""Readings taught by blind16's misses (issue 38), each through `diagnose_dir`, the offline path a user runs, on
variants of the real text, not the case's own."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.test_blind14_readings import _diagnose, _said

LIMIT = "slurmstepd: error: *** JOB 640423 ON {h} CANCELLED AT 2025-06-04T06:47:12 DUE TO TIME LIMIT ***"


def _progress(n: int = 4) -> list[str]:
    return [f"2025-06-03 21:{10 + i:02d}:00 | INFO | step {250 * i:>5} | loss 1.{40 - i} | 2.41 it/s" for i in range(n)]


@pytest.mark.parametrize(("error", "cause"), [
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 31.25 GiB. GPU 0 has a total capacity of 79.19 GiB "
     "of which 9.87 GiB is free.", "user_oom"),
    ("RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 3; 39.59 GiB total capacity)", "user_oom"),
    ("KeyError: 'ci_histograms'", "user_bug")])
def test_the_jobs_own_error_on_every_rank_then_idle_to_the_time_limit_is_that_error(
        tmp_path: Path, error: str, cause: str) -> None:
    """Every rank raises the job's own error at an eval, the processes never exit, Slurm's time limit ends it hours
    later: the error (which would recur), not a hang and not the time limit."""
    lines = [*_progress(), "2025-06-03 21:14:30 | INFO | step 750 | running eval",
             *[f"[rank{r}]: {error}" for r in range(16)], LIMIT.format(h="gpu-041")]
    d = _diagnose(tmp_path, {"slurm-640423.out": ["SLURM_JOB_NODELIST=gpu-[041-042]", *lines]})
    assert _said(d) == (cause, [], "stop_and_alert"), d["reason"]


def test_a_filesystem_error_that_stalls_one_node_before_the_limit_stays_that_nodes_hang(tmp_path: Path) -> None:
    """Not the program's own error: a node's Lustre client lost its OST and its rank sits in D state."""
    stuck = ["[1204400.118220] LustreError: 11-0: fs-OST0042-osc: operation ost_write to node 10.1.2.42@o2ib failed: "
             "rc = -110", "[1204645.311902] INFO: task python3:88214 blocked for more than 122 seconds."]
    d = _diagnose(tmp_path, {"gpu-a1.out": [*_progress(), *stuck, LIMIT.format(h="gpu-a1")],
                             "gpu-a2.out": [*_progress(), LIMIT.format(h="gpu-a2")]})
    assert d["cause"] == "hang" or d["action"] != "stop_and_alert", d["reason"]


NCCL_ERR = ("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:"
            "1970, {kind}, NCCL version 2.21.5")


@pytest.mark.parametrize(("kind", "last"), [
    ("internal error - please report this issue to the NCCL developers", "Attribute arch of node cpu not found"),
    ("invalid usage (run with NCCL_DEBUG=WARN for details)",
     "Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1d000"),
    ("invalid usage (run with NCCL_DEBUG=WARN for details)",
     "ncclInvalidUsage: This usually reflects invalid usage of NCCL library.")])
def test_nccl_refusing_the_jobs_own_setup_on_every_node_stops(tmp_path: Path, kind: str, last: str) -> None:
    """Every rank of both nodes: NCCL's init refuses the job's configuration before any progress: the job's."""
    lines = [line for r in range(16) for line in (f"[1,{r}]<stderr>:{NCCL_ERR.format(kind=kind)}",
                                                  f"[1,{r}]<stderr>:Last error:", f"[1,{r}]<stderr>:{last}")]
    d = _diagnose(tmp_path, {"p5-st-1.out": lines[: len(lines) // 2], "p5-st-2.out": lines[len(lines) // 2:]})
    assert _said(d) == ("user_bug", [], "stop_and_alert"), d["reason"]


BUS = ["ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm).",
       "RuntimeError: DataLoader worker (pid 34569) is killed by signal: Bus error. Details are lost due to "
       "multiprocessing. Rerunning with num_workers=0 may give better error trace."]


@pytest.mark.parametrize("df", ["[epilog {h}] df -h /dev/shm: tmpfs 2.0G 2.0G 0 100% /dev/shm",
                                "{h}: shm              64G   64G     0 100% /dev/shm"])
def test_loader_bus_errors_with_shm_full_on_every_host_are_the_jobs(tmp_path: Path, df: str) -> None:
    """DataLoader workers die of SIGBUS in shared memory and every host's /dev/shm is full: the job's loaders, which
    will fill it again (stop), though no line ties the bus errors to a host."""
    hosts = ["sh-idc-81", "sh-idc-82", "sh-idc-83"]
    d = _diagnose(tmp_path, {"slurm-771309.out": [*_progress(), *BUS * 3,
                                                  *[f"srun: error: {h}: task {i}: Exited with exit code 1"
                                                    for i, h in enumerate(hosts)],
                                                  *[df.format(h=h) for h in hosts]]})
    assert _said(d) == ("bus_error", [], "stop_and_alert"), d["reason"]


def test_one_hosts_loader_bus_error_without_shm_full_elsewhere_stays_a_strike(tmp_path: Path) -> None:
    d = _diagnose(tmp_path, {"gpu-a011.out": [*_progress(), *BUS], "gpu-a012.out": [*_progress(), "Terminated"]})
    assert _said(d) == ("bus_error", ["gpu-a011"], "resubmit"), d["reason"]


def _ud(host: str, rank: int, peer: str) -> list[str]:
    return [f"Tue Apr 20 05:47:14 2021[1,{rank}]<stderr>:[{host}:1405{rank}:0:1405{rank}]       ud_ep.c:270  Fatal: UD "
            f"endpoint 0x973660 to {peer}: unhandled timeout error",
            f"Tue Apr 20 05:47:14 2021[1,{rank}]<stderr>:[{host}:1405{rank}] *** Process received signal ***"]


def test_ucx_ud_timeouts_of_two_peers_name_the_host_that_went_silent(tmp_path: Path) -> None:
    """Two hosts' UCX UD endpoints time out on cn0419, whose own output stops mid-line: that node died."""
    steps = [f"Tue Apr 20 05:{i:02d}:00 2021[1,8]<stdout>:step  {7000 + 400 * i}  loss 2.0" for i in range(3)]
    d = _diagnose(tmp_path, {"cn0417.log": [*steps, *_ud("cn0417", 0, "cn0419:70564")],
                             "cn0418.log": [*steps, *_ud("cn0418", 6, "cn0419:70571")],
                             "cn0419.log": steps, "cn0420.log": [*steps, "Terminated"]}, cut="cn0419.log")
    assert _said(d)[1:] == (["cn0419"], "resubmit_exclude"), d["reason"]
    # without UCX's debug data no peer is named
    bare = _diagnose(tmp_path / "bare", {"cn0417.log": [*steps, *_ud("cn0417", 0, "<no debug data>")],
                                         "cn0418.log": [*steps, "Terminated"]})
    assert bare["culprit_nodes"] != ["cn0418"] and bare["action"] != "stop_and_alert", bare["reason"]


def _dump(header: str, frames: list[str]) -> list[str]:
    return [header, "Process 54343: /usr/bin/python -u train.py", "", "Thread 54343 (active): \"MainThread\"",
            *[f"    {f}" for f in frames]]


@pytest.mark.parametrize("header", ["== {h} rank {r} ==", "=== {h} (rank {r}) ===", "==== py-spy {h} rank {r} ===="])
def test_a_hang_monitors_dumps_under_two_equals_headers_are_their_hosts(tmp_path: Path, header: str) -> None:
    """A watchdog's dumps in the job-wide file, each under `== HOST rank N ==`: the one rank inside a CUDA sync while
    every other waits in all_reduce is its host's."""
    wait = ["all_reduce (torch/distributed/distributed_c10d.py:2501)", "do_train (dinov2/train/train.py:274)"]
    sync = ["cudaStreamSynchronize (libcudart.so.12)", "_local_scalar_dense (torch/_ops.py:755)"]
    dumps = [line for i, h in enumerate(["gpu-b09", "gpu-b10", "gpu-b11", "gpu-b12"]) for r in range(4 * i, 4 * i + 4)
             for line in _dump(header.format(h=h, r=r), sync if r == 13 else wait)]
    d = _diagnose(tmp_path, {"slurm-730115.out": ["job 730115 on gpu-b[09-12]", *_progress(),
                                                  "progress-watchdog: no step line for 20 min; dumping stacks",
                                                  *dumps]})
    assert _said(d) == ("hang", ["gpu-b12"], "resubmit_exclude"), d["reason"]


@pytest.mark.parametrize("ucx", [
    "[{h}:9358 :0:9358]    ud_iface.c:737  UCX Fatal: transport error: Endpoint timeout",
    "[{h}:17046:0:17046]    ud_iface.c:780  Fatal: transport error: Endpoint timeout"])
def test_one_ranks_ucx_endpoint_timeout_under_intel_mpi_is_a_strike_on_its_host(tmp_path: Path, ucx: str) -> None:
    """Intel MPI's startup rows map ranks to hosts; one rank's UCX endpoint timeout and hydra's `RUNNING AT HOST`:
    that host's own link, weak evidence (a strike)."""
    rows = ["[0] MPI startup(): Rank    Pid      Node name     Pin cpu",
            *[f"[0] MPI startup(): {r:<7} {9340 + r:<8} compute-0-{18 + r // 4}  {{0-15}}" for r in range(16)]]
    d = _diagnose(tmp_path, {"slurm-1187220.out": [
        *rows, *_progress(), ucx.format(h="compute-0-20"), "==== backtrace ====",
        "=" * 83, "=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES",
        "=   RANK 10 PID 9358 RUNNING AT compute-0-20", "=   KILLED BY SIGNAL: 6 (Aborted)", "=" * 83]})
    assert _said(d) == ("network", ["compute-0-20"], "resubmit"), d["reason"]


@pytest.mark.parametrize("echo", ["{i}: {h} {ip} NCCL_SOCKET_IFNAME=eth0", "{i}: {h}   {ip}"])
def test_one_peer_that_cannot_reach_an_address_the_job_printed_names_its_host_as_a_suspect(
        tmp_path: Path, echo: str) -> None:
    """The job's `hostname; hostname -I` lines map addresses to hosts; NCCL's `socketPollConnect: Connect to IP
    returned 113(No route to host)` from one rank names that host: a strike, not an exclusion."""
    hosts = [("gpu-q02", "10.0.0.2"), ("gpu-q03", "10.0.0.3"), ("gpu-q04", "10.0.0.4"), ("gpu-q05", "10.0.0.5")]
    warn = ("3: gpu-q05:240:240 [0] misc/socket.cc:533 NCCL WARN socketPollConnect: Connect to 10.0.0.4<56849> "
            "returned 113(No route to host) errno 115(Operation now in progress)")
    d = _diagnose(tmp_path, {"slurm-203377.out": [
        *[echo.format(i=i, h=h, ip=ip) for i, (h, ip) in enumerate(hosts)], *_progress(), warn,
        "srun: error: gpu-q05: task 3: Exited with exit code 1", "srun: error: gpu-q03: task 1: Terminated"]})
    assert _said(d) == ("network", ["gpu-q04"], "resubmit"), d["reason"]


@pytest.mark.parametrize("after", [
    "(raylet, ip=10.8.0.42) The node with node id: 9f3c1a and address: 10.8.0.42 and node name: 10.8.0.42 has been "
    "marked dead because the detector has missed too many heartbeats from it.",
    "srun: error: Node failure on gpu-v42"])
def test_a_nodes_death_printed_after_the_time_limit_is_its_teardown(tmp_path: Path, after: str) -> None:
    """Steps ran to the end; Slurm's time limit cancelled the job; a node reported dead after that banner is the
    teardown's (the time limit, resubmit), never an exclusion."""
    steps = [f"(TaskRunner pid=3954228) step:{s} - actor/pg_loss:0.0085 - timing_s/step:53.0" for s in (350, 370, 390)]
    d = _diagnose(tmp_path, {"slurm-3954228.out": [
        *steps, "slurmstepd: error: *** JOB 3954228 ON gpu-v41 CANCELLED AT 2025-10-16T18:00:27 DUE TO TIME LIMIT ***",
        "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.", after,
        "srun: error: gpu-v42: task 1: Terminated"]})
    assert _said(d) == ("timelimit", [], "resubmit"), d["reason"]


@pytest.mark.parametrize("end", [
    ["[01/15 12:37:42 fvcore.common.checkpoint]: Saving checkpoint to ./output/model_final.pth",
     "[01/15 12:37:49 d2.engine.hooks]: Overall training speed: 29998 iterations in 3:25:21 (0.4108 s / it)"],
    ["2021-03-02 10:11:12 | INFO | fairseq_cli.train | done training in 86400.3 seconds"]])
def test_a_crash_after_the_training_printed_its_end_is_teardown(tmp_path: Path, end: list[str]) -> None:
    d = _diagnose(tmp_path, {"slurm-2264.out": [
        *_progress(), *[f"0: {line}" for line in end], "1: Segmentation fault (core dumped)",
        "srun: error: gpu-t15: task 1: Segmentation fault (core dumped)",
        "srun: error: gpu-t14: task 0: Exited with exit code 0"]})
    assert _said(d) == ("success", [], "done"), d["reason"]
