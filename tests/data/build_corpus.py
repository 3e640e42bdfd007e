#!/usr/bin/env python3
"""Build the labelled diagnosis corpus in tests/data/corpus/ (one directory per case, one file per host).

Every error line is written the way real stacks print it (sources in SOURCES.md); the surroundings vary
on purpose: rank prefixes (`0: `, `[rank3]:`, `[default3]:`), several timestamp formats or none,
carriage-return progress bars, NCCL INFO chatter, monitoring lines, NUL padding after a crash,
half-written last lines, invalid UTF-8, two allocations appended to one file.
Run: python tests/data/build_corpus.py   (deterministic; the output is committed)
"""

from __future__ import annotations

import json
import random
import shutil
from collections.abc import Callable
from pathlib import Path

OUT = Path(__file__).resolve().parent / "corpus"
R = random.Random(20260812)

ECC = "RuntimeError: transform: failed to synchronize: cudaErrorECCUncorrectable: uncorrectable ECC error encountered"
ECC_WHAT = ["terminate called after throwing an instance of 'c10::Error'",
            "  what():  CUDA error: uncorrectable ECC error encountered"]
OOM_BARRIER = ["Traceback (most recent call last):", '  File "pretrain_gpt.py", line 222, in <module>',
               "    torch.distributed.barrier()", "RuntimeError: CUDA error: out of memory"]
OOM_TRAIN = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
             "of 79.15 GiB of which 1.12 GiB is free. Including non-PyTorch memory, this process has 78.01 GiB "
             "memory in use.")


def watchdog(rank: int, seq: int = 1580) -> str:
    return (f"[Rank {rank}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, "
            f"NumelIn=466119168, NumelOut=466119168, Timeout(ms)=600000) ran for 6000{R.randint(10, 99)} "
            "milliseconds before timing out.")


PREFIXES: dict[str, Callable[[int], str]] = {
    "label": lambda r: f"{r}: ",
    "rank": lambda r: f"[rank{r}]:",
    "default": lambda r: f"[default{r}]:",
    "none": lambda r: "",
}
STAMPS: dict[str, Callable[[int], str]] = {
    "iso": lambda s: f"2024-03-21T02:{s // 60 % 60:02d}:{s % 60:02d}.{R.randint(0, 999):03d}Z ",
    "bracket": lambda s: f"[2024-03-21 02:{s // 60 % 60:02d}:{s % 60:02d},{R.randint(0, 999):03d}] ",
    "none": lambda s: "",
}


class Host:
    def __init__(self, name: str, rank: int, prefix: str, stamp: str, ip: str):
        self.name, self.rank, self.prefix, self.stamp, self.ip = name, rank, prefix, stamp, ip
        self.lines: list[str] = []
        self.t = 0
        self.raw_tail = b""

    def say(self, *texts: str, rank: int | None = None) -> Host:
        for text in texts:
            self.t += 1
            r = self.rank if rank is None else rank
            self.lines.append(STAMPS[self.stamp](self.t) + PREFIXES[self.prefix](r) + text)
        return self

    def plain(self, *texts: str) -> Host:
        self.lines.extend(texts)
        return self

    def nccl_info(self) -> Host:
        return self.plain(f"{self.name}:{4000 + self.rank}:{4000 + self.rank} [0] NCCL INFO NET/IB : Using "
                          f"[0]mlx5_0:1/IB ; OOB ib0:{self.ip}<0>")

    def progress(self, start: int, end: int, total: int = 100000) -> Host:
        for it in range(start, end + 1):
            self.say(f" iteration {it:8d}/{total:8d} | consumed samples: {it * 2048:12d} | elapsed time per "
                     f"iteration (ms): {R.uniform(900, 1100):.1f} | learning rate: 1.000E-04 | lm loss: "
                     f"{R.uniform(1.8, 2.4):.6E} | loss scale: 65536.0 |")
        return self

    def tqdm(self, steps: int) -> Host:
        bar = "\r".join(f"Epoch 0: {p:3d}%|{'#' * (p // 10):10s}| {p}/100 [00:{p:02d}<00:00]" for p in range(0, steps))
        self.lines.append(bar)
        return self

    def noise(self, n: int) -> Host:
        for _ in range(n):
            self.plain(R.choice([
                f"wandb: 🚀 View run at https://wandb.example/run/{R.randint(1000, 9999)}",
                f"[monitor] gpu_util={R.randint(90, 100)} mem_used={R.randint(70, 79)}GiB temp={R.randint(40, 70)}C",
                "NCCL INFO Channel 00/32 :    0   1   2   3   4   5   6   7",
                "INFO:root:step time 1.01s",
            ]))
        return self


def cluster(n: int, prefix: str = "label", stamp: str = "iso", base: str = "gpu-a0") -> list[Host]:
    return [Host(f"{base}{10 + i}", i, prefix, stamp, f"10.0.3.{20 + i}") for i in range(n)]


CASES: list[tuple[str, list[Host], dict[str, object], str]] = []


def case(name: str, hosts: list[Host], cause: str, culprits: list[str], action: str, note: str,
         ext: str = ".out") -> None:
    CASES.append((name, hosts, {"cause": cause, "culprit_nodes": sorted(culprits), "action": action,
                                "ext": ext}, note))


def start(hosts: list[Host], it0: int, it1: int) -> None:
    for h in hosts:
        h.nccl_info().noise(2).progress(it0, it1)


# ---------------------------------------------------------------- gpu_ecc
hs = cluster(4)
start(hs, 43670, 43679)
hs[2].say(ECC, *ECC_WHAT)
for h in hs[:2] + hs[3:]:
    h.say(*(watchdog(h.rank * 8 + k) for k in range(8)))
hs[0].plain("srun: error: gpu-a012: task 2: Aborted (core dumped)",
            "slurmstepd: error: *** STEP 77.0 ON gpu-a010 CANCELLED AT 2021-08-12T08:01:02 ***")
case("ecc-bigscience-cascade", hs, "gpu_ecc", ["gpu-a012"], "resubmit_exclude",
     "tr1-13B: ECC on one node, louder NCCL timeouts on the healthy ones, Slurm banner on the head node")

hs = cluster(8, "rank", "bracket")
start(hs, 100, 140)
hs[5].plain("[Mon Mar 18 10:11:12 2024] NVRM: Xid (PCI:0000:3b:00): 48, pid=28001, DBE (double bit error) ECC "
            "Error").say("RuntimeError: CUDA error: uncorrectable ECC error encountered")
for h in hs:
    if h is not hs[5]:
        h.say(watchdog(h.rank))
case("ecc-xid48-dmesg-in-log", hs, "gpu_ecc", ["gpu-a015"], "resubmit_exclude", "Xid 48 line copied by a prologue")

hs = cluster(4, "default", "none")
start(hs, 1, 3000)
hs[1].say("torch.cuda: CUDA_ERROR_ECC_UNCORRECTABLE while synchronizing stream")
for h in hs:
    h.progress(3001, 3001)
case("ecc-buried-in-long-log", hs, "gpu_ecc", ["gpu-a011"], "resubmit_exclude",
     "one error line among thousands of progress lines")

hs = cluster(2, "label", "iso")
start(hs, 10, 20)
hs[0].plain("NVRM: Xid (PCI:0000:b1:00): 94, pid=999, Contained: CE User Channel (0x9). RST: No, D-RST: No")
hs[0].say("RuntimeError: CUDA error: uncorrectable ECC error encountered")
hs[1].say(watchdog(1))
case("ecc-xid94-two-nodes", hs, "gpu_ecc", ["gpu-a010"], "resubmit_exclude", "contained ECC error, Xid 94")

# ---------------------------------------------------------------- gpu_lost
hs = cluster(4)
start(hs, 500, 510)
hs[3].plain("NVRM: Xid (PCI:0000:07:00): 79, pid=2961, GPU has fallen off the bus.")
hs[3].say("RuntimeError: CUDA error: unknown error")
for h in hs[:3]:
    h.say(watchdog(h.rank), "ncclRemoteError: A call failed possibly due to a network error or a remote process "
          "exiting prematurely.")
case("gpu-lost-xid79", hs, "gpu_lost", ["gpu-a013"], "resubmit_exclude", "Xid 79 and NCCL errors on peers")

hs = cluster(3, "rank", "none")
start(hs, 7, 9)
hs[1].plain("Unable to determine the device handle for GPU 0000:3B:00.0: Unknown Error")
hs[1].say("RuntimeError: CUDA error: unspecified launch failure")
case("gpu-lost-nvidia-smi", hs, "gpu_lost", ["gpu-a011"], "resubmit_exclude", "nvidia-smi in an epilog")

hs = cluster(4, "default", "bracket")
start(hs, 1, 5)
hs[0].plain("NVRM: The NVIDIA GPU 0000:b3:00.0", "NVRM: (PCI ID: 10de:26b5) installed in this system has",
            "NVRM: fallen off the bus and is not responding to commands.")
for h in hs[1:]:
    h.say(watchdog(h.rank))
case("gpu-lost-no-xid", hs, "gpu_lost", ["gpu-a010"], "resubmit_exclude", "fallen off the bus without an Xid")

# ---------------------------------------------------------------- gpu_oom_startup / user_oom
hs = cluster(4)
for h in hs:
    h.nccl_info().say("> compiling and loading fused kernels ...")
hs[2].say(*OOM_BARRIER)
for h in hs[:2] + hs[3:]:
    h.say(watchdog(h.rank, 1))
case("oom-barrier-poisoned", hs, "gpu_oom_startup", ["gpu-a012"], "resubmit_exclude",
     "BigScience second crash: CUDA OOM in barrier() at start-up on one node only")

hs = cluster(8, "rank", "iso")
for h in hs:
    h.nccl_info()
for h in (hs[6],):
    h.say("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of "
          "79.15 GiB of which 6.75 MiB is free.")
for h in hs[:6] + hs[7:]:
    h.say("[W init.cpp:767] Warning: waiting for peers in first all-reduce", watchdog(h.rank, 1))
case("oom-startup-one-of-eight", hs, "gpu_oom_startup", ["gpu-a016"], "resubmit_exclude",
     "a tiny allocation fails on one node before the first collective")

hs = cluster(4)
start(hs, 1, 300)
for h in hs:
    h.say("Traceback (most recent call last):", OOM_TRAIN)
case("user-oom-everywhere", hs, "user_oom", [], "stop_and_alert", "the model does not fit: OOM on every rank")

hs = cluster(2, "none", "none")
start(hs, 1, 1200)
for h in hs:
    h.plain("RuntimeError: CUDA out of memory. Tried to allocate 1.50 GiB (GPU 0; 39.59 GiB total capacity; "
            "36.12 GiB already allocated)")
case("user-oom-hf-old-format", hs, "user_oom", [], "stop_and_alert", "older PyTorch OOM wording")

# ---------------------------------------------------------------- nccl_timeout
hs = cluster(4)
start(hs, 90, 120)
for h in hs:
    h.say(watchdog(h.rank, 9000), "[PG 0 Rank 0] Exception (either an error or timeout) detected by watchdog")
case("nccl-timeout-no-culprit", hs, "nccl_timeout", [], "resubmit", "all wait; nobody stands out")

hs = cluster(4, "rank", "bracket")
start(hs, 90, 120)
hs[1].progress(121, 121)
for h in (hs[0], hs[2], hs[3]):
    h.progress(121, 125)
for h in hs:
    h.say(watchdog(h.rank, 9100))
case("nccl-timeout-one-behind", hs, "nccl_timeout", ["gpu-a011"], "resubmit",
     "progress stopped first on one node: named, not excluded on timeouts alone")

hs = cluster(2)
start(hs, 3, 8)
for h in hs:
    h.say("terminate called after throwing an instance of 'c10::DistBackendError'",
          "  what():  [PG 3 Rank 5] Process group watchdog thread terminated with exception: " + watchdog(5, 9141))
case("nccl-distbackenderror", hs, "nccl_timeout", [], "resubmit", "watchdog abort text")

# ---------------------------------------------------------------- network
hs = cluster(4, "none", "none")
start(hs, 10, 12)
for h in hs:
    if h is not hs[3]:
        h.plain(f"{h.name}:3468:3905 [4] ib_plugin.c:1615 NCCL WARN NET/IB : Got completion from peer "
                f"{hs[3].ip}<54862> with status=12 opcode=0 len=0 vendor err 129 (Recv) localGid ::ffff:{h.ip}")
        h.plain(f"{h.name}:3468:3905 [4] NCCL INFO transport/net.cc:1302 -> 6")
case("network-ib-peer-address", hs, "network", ["gpu-a013"], "resubmit",
     "peers name the failing host only by its IB address; NCCL INFO maps it")

hs = cluster(3)
start(hs, 50, 60)
for h in hs:
    h.say("RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer "
          "[10.0.3.99]:29500", "Connection reset by peer")
case("network-reset-unknown-peer", hs, "network", [], "resubmit", "resets everywhere, peer outside the job")

hs = cluster(2, "label", "iso")
start(hs, 1, 2)
hs[0].plain(f"{hs[0].name}:9821:9920 [1] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer "
            f"{hs[1].ip}<44413> with error 4, opcode 32613, len 32613, vendor err 81 (Send)")
case("network-ib-error4", hs, "network", ["gpu-a010"], "resubmit",
     "older NET/IB wording 'with error 4' (IBV_WC_LOC_PROT_ERR: a local error of the reporting host)")

# ---------------------------------------------------------------- hang (stack dumps in the logs)
hs = cluster(8, "none", "none")
start(hs, 3000, 3010)
for h in hs:
    h.plain(f"Process {280000 + h.rank}: python -u finetune.py", "Python v3.8.12", "")
    if h is hs[6]:
        h.plain("Error: Failed to suspend process", "Reason: EPERM: Operation not permitted")
    else:
        h.plain(f'Thread {280000 + h.rank} (active): "MainThread"',
                "    barrier (torch/distributed/distributed_c10d.py:2784)", "    _do_batch (engine.py:412)")
case("hang-pyspy-d-state", hs, "hang", ["gpu-a016"], "resubmit_exclude",
     "HF 64-GPU hang: py-spy cannot suspend the stuck rank; all others wait in barrier")

hs = cluster(4, "none", "none")
start(hs, 20, 21)
for h in hs:
    frame = "_do_batch (engine.py:412)" if h is hs[1] else "barrier (torch/distributed/distributed_c10d.py:2784)"
    h.plain(f'Thread {100 + h.rank} (idle): "MainThread"', f"    {frame}", "    main (train.py:10)")
case("hang-one-rank-outside-collective", hs, "hang", ["gpu-a011"], "resubmit_exclude",
     "one rank is not in the collective where all the others wait")

# ---------------------------------------------------------------- node_fail
hs = cluster(4)
start(hs, 200, 230)
hs[2].lines = hs[2].lines[: len(hs[2].lines) // 2]
hs[0].plain("srun: error: Node failure on gpu-a012", "slurmstepd: error: *** JOB 4242 ON gpu-a010 CANCELLED AT "
            "2024-03-21T02:11:12 DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***")
case("node-fail-named-by-srun", hs, "node_fail", ["gpu-a012"], "resubmit_exclude",
     "the head node prints the banner; the failed node is the one srun names")

hs = cluster(3, "rank", "none")
start(hs, 1, 40)
hs[1].lines = hs[1].lines[:-25]
hs[0].plain("slurmstepd-gpu-a010: error: *** JOB 99 ON gpu-a010 CANCELLED AT 2024-03-21T02:11:12 DUE TO NODE "
            "FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***")
case("node-fail-log-stops-early", hs, "node_fail", ["gpu-a011"], "resubmit_exclude",
     "no name in the banner: the node whose output stopped first")

hs = cluster(2)
start(hs, 1, 10)
hs[1].raw_tail = b" iteration       11/  100000 | consumed sam" + b"\x00" * 4096
hs[0].plain("srun: error: Node failure on gpu-a011")
case("node-fail-nul-padding", hs, "node_fail", ["gpu-a011"], "resubmit_exclude",
     "the dead node's file ends in NUL padding and half a line")

# ---------------------------------------------------------------- filesystem
hs = cluster(4)
start(hs, 5000, 5010)
hs[0].say("Traceback (most recent call last):", '  File "megatron/checkpointing.py", line 262, in save_checkpoint',
          "OSError: [Errno 116] Stale file handle: '/lustre/ckpt/iter_0005010/mp_rank_00'")
case("fs-stale-handle", hs, "filesystem", [], "wait_and_resubmit", "NFS/Lustre stale handle while saving")

hs = cluster(2, "default", "iso")
start(hs, 1, 3)
hs[1].say("OSError: [Errno 5] Input/output error: '/gpfs/data/shard_00042.bin'")
hs[1].plain("LustreError: 11-0: scratch-OST0003-osc: operation ost_read failed: rc = -107")
case("fs-io-error", hs, "filesystem", [], "wait_and_resubmit", "EIO from the data filesystem")

hs = cluster(3, "none", "bracket")
start(hs, 1, 3)
for h in hs:
    h.say("OSError: [Errno 107] Transport endpoint is not connected: '/mnt/weka/run'")
case("fs-transport-endpoint", hs, "filesystem", [], "wait_and_resubmit", "FUSE mount gone on every node")

# ---------------------------------------------------------------- host_oom
hs = cluster(4, "none", "none")
start(hs, 1, 30)
hs[0].plain("slurmstepd: error: Detected 2 oom_kill events in StepId=4242.0. Some of the step tasks have been "
            "OOM Killed.", "srun: error: gpu-a013: task 3: Out Of Memory")
for h in hs[1:3]:
    h.say(watchdog(h.rank))
case("host-oom-named-by-srun", hs, "host_oom", ["gpu-a013"], "resubmit",
     "the step's OOM is reported by the head node; srun names the node")

hs = cluster(2, "rank", "iso")
start(hs, 1, 4)
hs[1].plain("[Thu Mar 21 02:07:08 2024] Out of memory: Killed process 28001 (python) total-vm:812345678kB, "
            "anon-rss:501234567kB")
hs[0].say(watchdog(0))
case("host-oom-kernel", hs, "host_oom", ["gpu-a011"], "resubmit", "kernel OOM killer line in the log")

hs = cluster(3)
start(hs, 1, 2)
hs[2].plain("slurmstepd: error: Detected 1 oom-kill event(s) in StepId=191.batch cgroup. Some of your processes "
            "may have been killed by the cgroup out-of-memory handler.")
case("host-oom-cgroup-batch", hs, "host_oom", ["gpu-a012"], "resubmit", "older cgroup wording")

# ---------------------------------------------------------------- preempted / timelimit
hs = cluster(4)
start(hs, 1, 50)
hs[0].plain("slurmstepd: error: *** JOB 777 ON gpu-a010 CANCELLED AT 2024-03-21T02:11:12 DUE TO PREEMPTION ***")
for h in hs:
    h.say("ORCH-AGENT got signal SIGTERM; stopping training")
case("preempted-banner", hs, "preempted", [], "resubmit", "preempted by a higher-priority job")

hs = cluster(2, "rank", "bracket")
start(hs, 1, 10)
hs[1].plain("slurmstepd-gpu-a011: error: *** STEP 777.0 ON gpu-a011 CANCELLED AT 2024-03-21T02:11:12 DUE TO "
            "PREEMPTION ***")
case("preempted-step-banner", hs, "preempted", [], "resubmit", "step banner printed by a non-head node")

hs = cluster(4)
start(hs, 1, 80)
hs[0].plain("slurmstepd: error: *** JOB 4321 ON gpu-a010 CANCELLED AT 2024-03-21T20:00:07 DUE TO TIME LIMIT ***")
for h in hs:
    h.say("Traceback (most recent call last):", "KeyboardInterrupt")
case("timelimit-head-banner", hs, "timelimit", [], "resubmit",
     "the banner names the head node; it is not to blame; the signal tracebacks are noise")

hs = cluster(3, "default", "none")
for h in hs:
    h.plain("submitit INFO (2024-03-20 08:00:00,000) - Starting with JobEnvironment(job_id=100, hostname=x)")
    h.nccl_info().progress(1, 20)
hs[1].say(ECC)
for h in hs:
    h.plain("submitit INFO (2024-03-21 08:00:00,000) - Starting with JobEnvironment(job_id=101, hostname=x)")
    h.progress(21, 60)
hs[0].plain("slurmstepd: error: *** JOB 101 ON gpu-a010 CANCELLED AT 2024-03-21T20:00:07 DUE TO TIME LIMIT ***")
case("two-allocations-latest-is-timelimit", hs, "timelimit", [], "resubmit",
     "--open-mode=append: an earlier allocation had an ECC error; the latest one ended at its time limit")

# ---------------------------------------------------------------- user_bug
hs = cluster(4, "rank", "iso")
start(hs, 1, 25)
for h in hs:
    h.say("Traceback (most recent call last):", '  File "train.py", line 88, in <module>',
          "ValueError: could not broadcast input array from shape (8,32) into shape (8,33)")
case("user-bug-all-ranks", hs, "user_bug", [], "stop_and_alert", "the same exception on every rank")

hs = cluster(4)
start(hs, 1, 1000)
hs[0].say("Traceback (most recent call last):", "KeyError: 'input_ids'")
for h in hs[1:]:
    h.say(watchdog(h.rank))
case("user-bug-rank0-only", hs, "user_bug", [], "stop_and_alert",
     "rank 0 raises in its logging code, the others time out: blame nobody")

hs = cluster(2, "label", "none")
start(hs, 1, 700)
for h in hs:
    h.say("FloatingPointError: Loss is NaN at iteration 701")
case("user-bug-nan", hs, "user_bug", [], "stop_and_alert", "NaN assertions blame no node")

hs = cluster(3, "none", "iso")
for h in hs:
    h.say("Traceback (most recent call last):", '  File "train.py", line 3, in <module>',
          "ModuleNotFoundError: No module named 'flash_attn'")
case("user-bug-import", hs, "user_bug", [], "stop_and_alert", "environment problem at start-up")

# ---------------------------------------------------------------- segfault / bus_error
hs = cluster(4)
start(hs, 1, 60)
hs[1].say("Fatal Python error: Segmentation fault", "Segmentation fault (core dumped)")
for h in hs[:1] + hs[2:]:
    h.say(watchdog(h.rank))
case("segfault-one-node", hs, "segfault", ["gpu-a011"], "resubmit", "native crash on one node")

hs = cluster(3, "none", "none")
start(hs, 1, 9)
hs[0].plain("srun: error: gpu-a012: task 2: Segmentation fault")
case("segfault-named-by-srun", hs, "segfault", ["gpu-a012"], "resubmit", "srun names the node")

hs = cluster(2, "rank", "iso")
start(hs, 1, 5)
hs[1].say("RuntimeError: DataLoader worker (pid 1234) is killed by signal: Bus error. It is possible that "
          "dataloader's workers are out of shared memory. Please try to raise your shared memory limit.")
case("bus-error-dataloader", hs, "bus_error", ["gpu-a011"], "resubmit", "shm exhausted on one node")

hs = cluster(3)
start(hs, 1, 5)
hs[0].plain("srun: error: gpu-a011: task 1: Bus error", "srun: Terminating job step 3495450.0")
case("bus-error-named-by-srun", hs, "bus_error", ["gpu-a011"], "resubmit", "srun names the node")

# ---------------------------------------------------------------- success / unknown
hs = cluster(4)
start(hs, 99990, 100000)
for h in hs:
    h.tqdm(100).say("> training done at iteration 100000")
    h.plain("submitit INFO (2024-03-21 09:00:00,000) - Job completed successfully")
case("success-clean", hs, "success", [], "done", "no error anywhere")

hs = cluster(2, "none", "none")
for h in hs:
    h.plain("hello from the prologue")
case("unknown-nothing-matches", hs, "unknown", [], "resubmit", "no known signature")

hs = cluster(3)
start(hs, 1, 3)
hs[2].raw_tail = b"\xff\xfe\xfd garbage \x80\x81 without a newline"
case("unknown-garbage-bytes", hs, "unknown", [], "resubmit", "invalid UTF-8 and a half line, nothing known")

hs = cluster(3, "default", "bracket")
start(hs, 1, 3)
hs[1].plain("x" * 1_100_000)  # a line over 1 MB
hs[1].say(ECC)
case("ecc-after-monster-line", hs, "gpu_ecc", ["gpu-a011"], "resubmit_exclude", "a line over 1 MB before the error")

hs = cluster(4, "label", "iso", base="jean-zay-iam0")
start(hs, 1, 10)
hs[3].say(ECC, *ECC_WHAT)
case("ecc-log-extension", hs, "gpu_ecc", ["jean-zay-iam013"], "resubmit_exclude", "files named host.log",
     ext=".log")


def write() -> None:
    if OUT.exists():
        shutil.rmtree(OUT)
    manifest = []
    for name, hosts, expected, note in CASES:
        d = OUT / name
        (d / "logs").mkdir(parents=True)
        ext = str(expected.pop("ext"))
        for h in hosts:
            data = ("\n".join(h.lines) + ("\n" if h.lines else "")).encode() + h.raw_tail
            (d / "logs" / f"{h.name}{ext}").write_bytes(data)
        (d / "expected.json").write_text(json.dumps({**expected, "note": note}, indent=2) + "\n")
        manifest.append(name)
    print(f"wrote {len(manifest)} cases to {OUT}")


if __name__ == "__main__":
    write()
