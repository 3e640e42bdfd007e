"""Newer hardware and stacks (diagnose/platforms.py): each reading on at least two real variants of
the text (sources in the signature table and tests/data/blind6-7/SOURCES.md)."""

from __future__ import annotations

import re

import pytest

from orchestrator.diagnose.classify import Context, classify
from orchestrator.diagnose.nodes import node_evidence
from orchestrator.diagnose.prefilter import Prefilter
from orchestrator.diagnose.scan import NodeScan
from orchestrator.diagnose.signatures import build_table
from orchestrator.evidence import NodeEvidence
from orchestrator.model import Cause, JobState, JobStatus, Owner, Verdict
from orchestrator.offline.diagnosis import action_without_history

SIGS = build_table()
PREFILTER = Prefilter([(s.pattern, s.ignore_case) for s in SIGS])
PROG = re.compile(r"iteration\s+(\d+)\s*/\s*\d+")
FAILED = JobStatus(state=JobState.FAILED)
TIMEOUT = ("[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, "
           "OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600023 milliseconds before timing out.")


def node(name: str, lines: list[str]) -> NodeEvidence:
    s = NodeScan(name, f"{name}.log", SIGS, PROG)
    s.feed_bytes(1, "".join(f"{x}\n" for x in lines).encode(), PREFILTER)
    return node_evidence(s)


def progress(n: int) -> list[str]:
    return [f" iteration {i:8d}/     100 | lm loss: 1.0" for i in range(1, n + 1)]


def action(v: Verdict) -> str:
    return action_without_history(v)[0]


@pytest.mark.parametrize("line", [
    "[171167.620236] NVRM: Xid (PCI:0009:01:00): 149, NETIR_LINK_EVT  Fatal   XC0 i0 Link 01 "
    "(0x021425c6 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)",
    "NVRM: Xid (PCI:0000:00:1e): 149, NETIR_LINK_EVT Fatal XC 1 i 2 Link 01 [0x0000000a]",
])
def test_a_fatal_nvlink_xid_makes_the_peers_timeouts_that_nodes(line: str) -> None:
    v = classify(FAILED, [node("a", progress(5) + [line]), node("b", progress(5) + [TIMEOUT]),
                          node("c", progress(5) + [TIMEOUT])], Context())
    assert v.cause == Cause.GPU_LOST and v.culprit_nodes == ("a",)
    assert action(v) == "resubmit_exclude"


def test_a_nonfatal_nvlink_xid_blames_nobody() -> None:
    line = ("NVRM: Xid (PCI:0018:01:00): 145, RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2 "
            "0x00000008 0x00000001 0x00000000 0x00100000 0x00000004)")
    v = classify(FAILED, [node("a", progress(5) + [line, TIMEOUT]),
                          node("b", progress(5) + [TIMEOUT])], Context())
    assert v.cause != Cause.GPU_LOST and not v.culprit_nodes


@pytest.mark.parametrize("line", [
    "[rank8]: Cuda failure 802 'system not yet initialized'",
    "RuntimeError: cuda runtime error (802) : system not yet initialized at "
    "/opt/conda/conda-bld/pytorch_1579022034529/work/aten/src/THC/THCGeneral.cpp:50",
    "CUDA error at bandwidthTest.cu:256 code=802(cudaErrorSystemNotReady) "
    "\"cudaSetDevice(currentDevice)\"",
    "hgx-32 systemd[1]: nvidia-fabricmanager.service: Failed with result 'exit-code'.",
    "Failed to bind NVLink SHARP (NVLS) Multicast memory of size 2097152 : CUDA error 401 'the "
    "operation cannot be performed in the present state'.",
    "a:27907:27907 [1] transport/nvls.cc:254 NCCL WARN Cuda failure 401 'the operation "
    "cannot be performed in the present state'",
])
def test_a_fabric_manager_or_nvls_failure_on_one_node_is_that_nodes_gpus(line: str) -> None:
    v = classify(FAILED, [node("a", [line]), node("b", [TIMEOUT]), node("c", [TIMEOUT])],
                 Context())
    assert v.cause == Cause.GPU_LOST and v.culprit_nodes == ("a",)
    assert action(v) == "resubmit_exclude"


HIP_LAUNCH = ["[rank12]: RuntimeError: HIP error: unspecified launch failure",
              "[rank12]: HIP kernel errors might be asynchronously reported at some other API call"]


@pytest.mark.parametrize("lines", [
    ["[drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring gfx timeout, signaled seq=2463, emitted "
     "seq=2465", "amdgpu 0000:03:00.0: amdgpu: GPU reset begin!"],
    ["amdgpu 0000:45:00.0: amdgpu: [drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring comp_1.2.0 "
     "timeout, signaled seq=2210987, emitted seq=2210989", "[drm] VRAM is lost due to GPU reset!"],
    HIP_LAUNCH + ["[drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring comp_1.2.0 timeout, signaled "
                  "seq=2210987, emitted seq=2210989"],
])
def test_an_amdgpu_ring_timeout_or_hip_launch_failure_excludes_the_node(lines: list[str]) -> None:
    v = classify(FAILED, [node("a", progress(5) + lines), node("b", progress(5) + [TIMEOUT])],
                 Context())
    assert v.cause == Cause.GPU_LOST and v.culprit_nodes == ("a",)
    assert action(v) == "resubmit_exclude"


def test_one_ranks_hip_launch_failure_with_no_driver_report_is_a_strike() -> None:
    """Issue 38 and DECISIONS.md: one rank's launch failure after progress that nothing else explains (no ring
    timeout, no reset, no Xid) is retried once with a strike on its node, not an exclusion (this test excluded it
    before issue 38 said so)."""
    v = classify(FAILED, [node("a", progress(5) + HIP_LAUNCH), node("b", progress(5) + [TIMEOUT])], Context())
    assert v.culprit_nodes == ("a",) and action(v) == "resubmit"


UCX = "[{h}:4938:0:4938] ib_mlx5_log.c:179  {err} on mlx5_0:1/IB (synd 0x14 vend 0x89 hw_synd 0/0)"
QP = ["[{h}:4938:0:4938] ib_mlx5_log.c:179  RC QP 0x8bc wqe[0]: RDMA_READ s-- [rva 0x14dfe rkey "
      "0x1858] [va 0x14d8 len 589824 lkey 0x1856] [rqpn 0xa90 dlid={lid} sl=0 port=1 "
      "src_path_bits=0]",
      "[{h}:4938:0:4938] ib_mlx5_log.c:174  RC QP 0x938 wqe[1]: RDMA_WRITE --- [rva 0x0 rkey 0x0] "
      "[rqpn 0x937 rlid {lid} dgid fe80::1c34:da03:5b:b25d]"]


@pytest.mark.parametrize(("announce", "lid", "qp", "err"), [
    ("ibstat mlx5_0 | grep 'Base lid' ->         Base lid: 5", "5", QP[0], "Remote operation error"),
    ("\tbase lid:\t 0x1c", "28", QP[1], "Transport retry count exceeded"),
])
def test_ucx_errors_of_two_peers_name_the_host_of_the_lid(announce: str, lid: str, qp: str,
                                                          err: str) -> None:
    def reporter(h: str) -> NodeEvidence:
        return node(h, ["Base lid: 9" if h == "r1" else "Base lid: 11", UCX.format(h=h, err=err),
                        qp.format(h=h, lid=lid)])
    v = classify(FAILED, [reporter("r1"), reporter("r2"), node("x", [announce]),
                          node("y", ["Base lid: 3"])], Context())
    assert v.cause == Cause.NETWORK and v.culprit_nodes == ("x",) and v.rule == "peers_name_host"


EFA = ("libfabric:451707:1721365100::efa:cq:efa_rdm_txe_handle_error():737<warn> err: {n}, "
       "message: {msg} My EFA addr: fi_addr_efa://[fe80::13:c2ff:fe6f:9c4]:0:1072483550 My host "
       "id: {me} Peer EFA addr: fi_addr_efa://[fe80::b8:aff:fe44:425]:0:947699476 Peer host id: "
       "i-0ce6d3d57139f053c (7)")


@pytest.mark.parametrize(("msg", "announce"), [
    ("Invalid address", "ip-10 instance-id i-0ce6d3d57139f053c p4de.24xlarge"),
    ("Unreachable remote - never received a response", "instance-id: i-0ce6d3d57139f053c"),
])
def test_efa_errors_of_two_peers_name_the_host_of_the_instance(msg: str, announce: str) -> None:
    v = classify(FAILED, [node("a", [EFA.format(n=5, msg=msg, me="i-0db7083f3fcbebb65")]),
                          node("b", [EFA.format(n=5, msg=msg, me="i-0a41c2b9e07d31f55")]),
                          node("c", [announce, TIMEOUT]), node("d", [TIMEOUT])], Context())
    assert v.cause == Cause.NETWORK and v.culprit_nodes == ("c",) and v.rule == "peers_name_host"


@pytest.mark.parametrize("line", [
    "E0929 17:48:40.000000 31200 coordination_service.cc:1170] /job:jax_worker/replica:0/task:2 "
    "has been set to ERROR in coordination service: UNAVAILABLE: Task "
    "/job:jax_worker/replica:0/task:2 heartbeat timeout. This indicates that the remote task has "
    "failed, got preempted, or crashed unexpectedly.",
    "F0929 17:48:41.000000 31201 client.h:77] Terminating process because the JAX distributed "
    "service detected fatal errors. This most likely indicates that another task died",
])
def test_jax_coordination_errors_are_the_peers_and_name_the_host_that_died(line: str) -> None:
    v = classify(FAILED, [node("a", progress(5) + [line]), node("b", progress(5) + [line]),
                          node("c", progress(5) + ["iteration 6/100 lm lo" + "\x00" * 64])],
                 Context())
    assert v.cause == Cause.NODE_FAIL and v.culprit_nodes == ("c",)


@pytest.mark.parametrize("line", [
    "Lustre: lustre1-MDT0000-mdc-ffff9e2d38104000: Connection to lustre1-MDT0000 (at "
    "10.128.4.11@o2ib) was lost; in progress operations using this service will wait for recovery "
    "to complete",
    "Lustre: scratch-OST0004-osc-ffff8803f0b3c800: Connection to scratch-OST0004 (at 10.0.0.4@tcp) "
    "was lost; in progress operations using this service will wait for recovery to complete",
    "Lustre: 2449:0:(client.c:2141:ptlrpc_expire_one_request()) @@@ Request sent has timed out for "
    "slow reply: [sent 1736463600/real 1736463600]  req@ffff9a0eb14da700 x1790198182041824/t0(0) "
    "o36->lustre1-MDT0000-mdc-ffff9e2d38104000@10.128.4.11@o2ib:12/10 lens 488/512 e 0 to 1",
])
def test_a_lustre_server_lost_on_every_node_is_a_shared_outage(line: str) -> None:
    v = classify(FAILED, [node(h, progress(5) + [line, TIMEOUT]) for h in ("a", "b")], Context())
    assert v.cause == Cause.FILESYSTEM and v.owner == Owner.SHARED
    assert action(v) == "wait_and_resubmit"


SAVE = "RuntimeError: [enforce fail at inline_container.cc:603] . unexpected pos 2214592 vs 2214480"


@pytest.mark.parametrize("row", [
    "10.30.0.5@o2ib:/scratch   1.8P  1.8P     0 100% /scratch/shared",
    "nfs01:/export/home 2147483648 2147483648 0 100% /home",
])
def test_a_full_shared_filesystem_in_df_explains_a_failed_save(row: str) -> None:
    v = classify(FAILED, [node("a", progress(5) + [SAVE, "Filesystem Size Used Avail Use% Mounted "
                                                          "on", row]),
                          node("b", progress(5) + [TIMEOUT])], Context())
    assert v.cause == Cause.FILESYSTEM and v.rule == "disk_full" and action(v) == "stop_and_alert"


@pytest.mark.parametrize("row", ["/dev/loop3        56M   56M     0 100% /snap/core18/2128",
                                 "shm              64M   64M     0 100% /dev/shm"])
def test_read_only_snaps_and_shm_in_df_are_not_a_full_filesystem(row: str) -> None:
    assert not any(s.regex.search(row) for s in SIGS if s.name == "df_full")


@pytest.mark.parametrize("line", [
    "[exiting program after receiving SIGTERM.] datetime: 2024-11-08 06:09:55 ",
    "[default0]:[exiting program after receiving SIGTERM.] datetime: 2026-09-06 17:57:10 ",
])
def test_megatron_exit_signal_handler_is_a_stop_ahead_of_the_wall_time(line: str) -> None:
    v = classify(FAILED, [node("a", progress(5) + [line]), node("b", progress(5))], Context())
    assert v.cause == Cause.TIMELIMIT and action(v) == "resubmit"


OWN_OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a "
           "total capacity of 79.15 GiB of which 9.69 MiB is free. Process {pid} has 79.13 GiB "
           "memory in use. Of the allocated memory {mine} GiB is allocated by PyTorch, and 196.56 "
           "MiB is reserved by PyTorch but unallocated.")


@pytest.mark.parametrize(("mine", "extra"), [
    ("78.46", []),  # a container's rank under its host pid: PyTorch's memory is all of it
    ("3.10", ["E0909 02:12:10.000000 93301 torch/distributed/elastic/multiprocessing/api.py:869] "
              "failed (exitcode: 1) local_rank: 6 (pid: 93341) of binary: /usr/bin/python"]),
])
def test_an_oom_that_lists_only_the_ranks_own_process_is_the_jobs(mine: str,
                                                                  extra: list[str]) -> None:
    v = classify(FAILED, [node("a", [OWN_OOM.format(pid=93341, mine=mine)] + extra),
                          node("b", [TIMEOUT])], Context())
    assert v.cause == Cause.USER_OOM and not v.culprit_nodes and action(v) == "stop_and_alert"


def test_an_oom_that_lists_another_process_at_start_is_still_the_node() -> None:
    v = classify(FAILED, [node("a", [OWN_OOM.format(pid=4417, mine="0.50")]),
                          node("b", [TIMEOUT])], Context())
    assert v.cause == Cause.GPU_OOM_STARTUP and v.culprit_nodes == ("a",)


@pytest.mark.parametrize(("oom", "shutdown"), [
    ("[1,11]<stderr>:tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when "
     "allocating tensor with shape[384,16,512,512] and type float on "
     "/job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc [Op:BatchMatMulV2]",
     "[1,0]<stderr>:tensorflow.python.framework.errors_impl.UnknownError: Horovod has been shut "
     "down. This was caused by an exception on one of the ranks or an attempt to allreduce, "
     "allgather or broadcast a tensor after one of the ranks finished execution."),
    ("ResourceExhaustedError (see above for traceback): OOM when allocating tensor with "
     "shape[10000,10000] and type float on /job:localhost/replica:0/task:0/device:GPU:0",
     "RuntimeError: Horovod has been shut down. This was caused by an exception on one of the "
     "ranks or an attempt to allreduce, allgather or broadcast a tensor after one of the ranks "
     "finished execution."),
])
def test_a_horovod_shutdown_after_a_tensorflow_oom_is_the_jobs_oom(oom: str, shutdown: str) -> None:
    v = classify(FAILED, [node("a", progress(5) + [oom]), node("b", progress(5) + [shutdown]),
                          node("c", progress(5) + [shutdown])], Context())
    assert v.cause == Cause.USER_OOM and action(v) == "stop_and_alert"
