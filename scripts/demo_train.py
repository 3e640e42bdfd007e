#!/usr/bin/env python3
"""A small, real data-parallel training job for the demo and the tests (CPU, numpy, seconds).

Every rank trains a linear model on its own shard; gradients are averaged each iteration through
files in a shared directory (an all-reduce: one stuck rank stalls all the others, as with NCCL).
Rank 0 writes Megatron-layout checkpoints (iter_NNNNNNN/ + latest_checkpointed_iteration.txt, the
tracker written last) and the job resumes from --resume. Progress lines look like Megatron's.

Faults (--fault, repeatable) print the error text real stacks print, on the named node:
  ecc:NODE:ITER        uncorrectable ECC in the backward pass at ITER; sticky: every later job on NODE
                       dies at start-up with CUDA OOM in barrier() (a poisoned GPU)
  oom_startup:NODE     CUDA OOM in the first barrier()
  hang:NODE:ITER       the rank stops answering at ITER (interruptible sleep), once per run
  exception:NODE|all:ITER  a Python exception at ITER on every matching rank (a user bug)
  keyerror:NODE|all:ITER   the same KeyError at ITER, printed as torchrun prints it ([rankN]: prefixes)
  segfault:NODE|all:ITER   a native crash (Python's faulthandler text, then SIGSEGV)
  cudaerr:NODE:ITER    a generic CUDA error ('an illegal memory access'); with an NVML stand-in
                       (ORCH_NVML_STANDIN, tests/nvml_standin.py) the node's volatile uncorrectable ECC
                       counters rise first, as on a GPU whose memory failed
  nan:all:ITER         the loss becomes NaN at ITER (every time the run gets there: bad data)
  nan_once:all:ITER    the loss becomes NaN at ITER once per run (a rare bad step: a rollback gets past it)

A collective that times out (--collective-timeout) prints what PyTorch's NCCL watchdog prints: the
[rankN]:-prefixed c10d lines, the DistBackendError traceback and the c10 `terminate called ... what():`
lines, then the rank aborts (SIGABRT), as on a real cluster.
"""

from __future__ import annotations

import argparse
import os
import resource
import signal
import socket
import sys
import time
from pathlib import Path

import numpy as np

DIM = 32


def node_name() -> str:
    return os.environ.get("ORCH_NODE_NAME") or os.environ.get("SLURMD_NODENAME") or socket.gethostname()


def parse_faults(items: list[str]) -> list[tuple[str, str, int]]:
    out = []
    for item in items:
        parts = item.split(":")
        kind, node = parts[0], (parts[1] if len(parts) > 1 else "all")
        at = int(parts[2]) if len(parts) > 2 else 0
        out.append((kind, node, at))
    return out


def die_ecc(it: int) -> None:
    sys.stderr.write(
        "Traceback (most recent call last):\n"
        '  File "pretrain_gpt.py", line 222, in <module>\n'
        "    pretrain(train_valid_test_datasets_provider, model_provider, forward_step)\n"
        '  File "/opt/deepspeed/runtime/pipe/engine.py", line 1257, in _exec_backward_pass\n'
        "    torch.autograd.backward(tensors=(outputs, ), grad_tensors=(grad_tensors, ))\n"
        "RuntimeError: transform: failed to synchronize: cudaErrorECCUncorrectable: "
        "uncorrectable ECC error encountered\n"
        "terminate called after throwing an instance of 'c10::Error'\n"
        "  what():  CUDA error: uncorrectable ECC error encountered\n"
        f"Exception raised from synchronize at iteration {it} (most recent call first):\n"
    )
    sys.stderr.flush()
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    os.kill(os.getpid(), signal.SIGABRT)


def _c10_stamp() -> str:
    t = time.time()
    return time.strftime("%m%d %H:%M:%S", time.localtime(t)) + f".{int(t % 1 * 1e9):09d}"


def die_collective_timeout(rank: int, seq: int, numel: int, timeout_s: float, waited_s: float) -> None:
    """PyTorch 2.4+ output when the NCCL watchdog sees a collective time out, then abort."""
    work = (f"WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn={numel}, NumelOut={numel}, "
            f"Timeout(ms)={int(timeout_s * 1000)}) ran for {int(waited_s * 1000)} milliseconds before timing out.")
    pg = f"[PG ID 0 PG GUID 0(default_pg) Rank {rank}]"
    p = f"[rank{rank}]:"
    lines = [
        f"{p}[E{_c10_stamp()} ProcessGroupNCCL.cpp:616] [Rank {rank}] Watchdog caught collective operation "
        f"timeout: {work}",
        f"{p}[E{_c10_stamp()} ProcessGroupNCCL.cpp:1785] {pg} Exception (either an error or timeout) detected by "
        f"watchdog at work: {seq}, last enqueued NCCL work: {seq}, last completed NCCL work: {seq - 1}.",
        f"{p}[E{_c10_stamp()} ProcessGroupNCCL.cpp:1834] {pg} Timeout at NCCL work: {seq}, last enqueued NCCL work: "
        f"{seq}, last completed NCCL work: {seq - 1}.",
        f"{p}[E{_c10_stamp()} ProcessGroupNCCL.cpp:630] [Rank {rank}] Some NCCL operations have failed or timed out. "
        "Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on "
        "corrupted/incomplete data.",
        f"{p}[E{_c10_stamp()} ProcessGroupNCCL.cpp:636] [Rank {rank}] To avoid data inconsistency, we are taking the "
        "entire process down.",
        f"{p}: Traceback (most recent call last):",
        f'{p}:   File "pretrain_gpt.py", line 231, in <module>',
        f"{p}:     train_step(model, batch)",
        f'{p}:   File "/opt/torch/distributed/c10d_logger.py", line 83, in wrapper',
        f"{p}:     return func(*args, **kwargs)",
        f'{p}:   File "/opt/torch/distributed/distributed_c10d.py", line 2501, in all_reduce',
        f"{p}:     work.wait()",
        f"{p}: torch.distributed.DistBackendError: [Rank {rank}] Watchdog caught collective operation timeout: {work}",
        "terminate called after throwing an instance of 'c10::DistBackendError'",
        f"  what():  {pg} Process group watchdog thread terminated with exception: [Rank {rank}] Watchdog caught "
        f"collective operation timeout: {work}",
        "Exception raised from checkTimeout at /opt/pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:618 "
        "(most recent call first):",
    ]
    sys.stderr.write("\n".join(lines) + "\n")
    sys.stderr.flush()
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    os.kill(os.getpid(), signal.SIGABRT)


def die_keyerror(rank: int, it: int) -> None:
    """A user bug as torchrun shows it with --log-line-prefix / tee: every line prefixed with the rank."""
    p = f"[rank{rank}]:"
    sys.stderr.write("\n".join([
        f"{p} Traceback (most recent call last):",
        f'{p}   File "pretrain_gpt.py", line 231, in <module>',
        f"{p}     loss = forward_step(batch, model)",
        f'{p}   File "pretrain_gpt.py", line 148, in forward_step',
        f'{p}     tokens = batch["input_ids"]',
        f"{p} KeyError: 'input_ids'",
    ]) + "\n")
    sys.stderr.flush()
    sys.exit(1)


def die_segfault(it: int) -> None:
    sys.stderr.write(
        "Fatal Python error: Segmentation fault\n\n"
        f"Current thread 0x00007f3a2c1ff740 (most recent call first):\n"
        '  File "/opt/apex/fused_dense.py", line 88 in forward\n'
        f'  File "pretrain_gpt.py", line 148 in forward_step (iteration {it})\n'
    )
    sys.stderr.flush()
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    os.kill(os.getpid(), signal.SIGSEGV)


def die_cuda_generic(node: str, it: int) -> None:
    standin = os.environ.get("ORCH_NVML_STANDIN")
    if standin:  # the GPU's own counters say what the program's error does not
        import json

        path = Path(standin)
        data = json.loads(path.read_text())
        for gpu in data.get(node, data.get("*", [])):
            gpu["ecc_volatile_uncorrected"] = int(gpu.get("ecc_volatile_uncorrected", 0)) + 2
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, path)
    sys.stderr.write(
        "Traceback (most recent call last):\n"
        f'  File "pretrain_gpt.py", line 212 in train_step (iteration {it})\n'
        "RuntimeError: CUDA error: an illegal memory access was encountered\n"
        "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below "
        "might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1.\n")
    sys.stderr.flush()
    sys.exit(1)


def die_oom_barrier() -> None:
    sys.stderr.write(
        "Traceback (most recent call last):\n"
        '  File "pretrain_gpt.py", line 222, in <module>\n'
        '  File "/opt/megatron/initialize.py", line 84, in _compile_dependencies\n'
        "    torch.distributed.barrier()\n"
        '  File "/opt/torch/distributed/distributed_c10d.py", line 2420, in barrier\n'
        "    work = default_pg.barrier(opts=opts)\n"
        "RuntimeError: CUDA error: out of memory\n"
    )
    sys.stderr.flush()
    sys.exit(1)


class AllReduce:
    """Average arrays across ranks through files in a shared directory."""

    def __init__(self, root: Path, rank: int, world: int, timeout: float):
        self.root, self.rank, self.world, self.timeout = root, rank, world, timeout
        root.mkdir(parents=True, exist_ok=True)

    def __call__(self, seq: int, arr: np.ndarray) -> np.ndarray:
        d = self.root / f"{seq:08d}"
        d.mkdir(exist_ok=True)
        tmp = d / f".r{self.rank}.tmp.npy"
        np.save(tmp, arr)
        os.replace(tmp, d / f"r{self.rank}.npy")
        start = time.monotonic()
        while True:
            files = [d / f"r{r}.npy" for r in range(self.world)]
            if all(f.exists() for f in files):
                break
            waited = time.monotonic() - start
            if waited > self.timeout:
                die_collective_timeout(self.rank, seq, arr.size, self.timeout, waited)
            time.sleep(0.005)
        total = sum(np.load(f) for f in files)
        if self.rank == 0 and seq >= 3:  # everyone has read seq-2 by now (they reached seq)
            old = self.root / f"{seq - 3:08d}"
            for f in old.glob("*"):
                f.unlink(missing_ok=True)
            old.rmdir() if old.exists() else None
        return total / self.world


def save_checkpoint(root: Path, it: int, w: np.ndarray) -> None:
    d = root / f"iter_{it:07d}" / "mp_rank_00"
    d.mkdir(parents=True, exist_ok=True)
    np.savez(d / "model_optim_rng.npz", w=w, iteration=it)
    tracker = root / "latest_checkpointed_iteration.txt"
    tmp = root / ".latest.tmp"
    tmp.write_text(str(it))
    os.replace(tmp, tracker)  # the tracker is written last: it marks the checkpoint complete


def load_checkpoint(path: str) -> tuple[int, np.ndarray]:
    f = Path(path) / "mp_rank_00" / "model_optim_rng.npz"
    with np.load(f) as z:
        return int(z["iteration"]), z["w"].copy()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iters", type=int, required=True)
    ap.add_argument("--ckpt-dir", type=Path, required=True)
    ap.add_argument("--ckpt-every", type=int, default=10)
    ap.add_argument("--resume", default="")
    ap.add_argument("--sync-dir", type=Path, required=True)
    ap.add_argument("--step-time", type=float, default=0.05)
    ap.add_argument("--collective-timeout", type=float, default=600.0)
    ap.add_argument("--fault", action="append", default=[])
    args = ap.parse_args()

    rank = int(os.environ.get("ORCH_RANK", os.environ.get("RANK", "0")))
    world = int(os.environ.get("ORCH_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1")))
    node = node_name()
    faults = parse_faults(args.fault)
    mine = [(k, at) for k, n, at in faults if n in (node, "all")]

    rng = np.random.default_rng(1234)
    w_true = rng.normal(size=DIM)
    w = np.zeros(DIM)
    start = 0
    resume = args.resume or os.environ.get("ORCH_RESUME_FROM", "")
    if resume:
        start, w = load_checkpoint(resume)
    print(f"> rank {rank}/{world} on {node}: {'resuming from ' + resume if resume else 'starting from scratch'} "
          f"at iteration {start}", flush=True)

    markers = args.sync_dir.parent  # kept across segments, beside the per-segment sync dirs
    poisoned = markers / f".fault-ecc-{node}"
    for kind, _at in mine:
        if kind == "oom_startup" or (kind == "ecc" and poisoned.exists()):
            die_oom_barrier()
    reduce = AllReduce(args.sync_dir, rank, world, args.collective_timeout)
    reduce(0, np.zeros(1))  # the first collective: a barrier

    data_rng = np.random.default_rng(rank)
    lr = 0.05
    for it in range(start + 1, args.iters + 1):
        for kind, at in mine:
            if at != it:
                continue
            if kind == "ecc":
                poisoned.parent.mkdir(parents=True, exist_ok=True)
                poisoned.write_text("the GPU on this node had an uncorrectable ECC error\n")
                die_ecc(it)
            if kind == "hang":
                marker = markers / f".fault-hang-{node}-{it}"
                if not marker.exists():
                    marker.parent.mkdir(parents=True, exist_ok=True)
                    marker.write_text("fired\n")
                    print(f"PID {os.getpid()}: After clip in _do_batch", flush=True)
                    while True:
                        time.sleep(3600)
            if kind == "keyerror":
                die_keyerror(rank, it)
            if kind == "segfault":
                die_segfault(it)
            if kind == "cudaerr":
                die_cuda_generic(node, it)
            if kind == "exception":
                raise ValueError(f"could not broadcast input array from shape (8,{DIM}) into shape (8,{DIM + 1}) "
                                 f"(batch at iteration {it})")
        x = data_rng.normal(size=(64, DIM))
        y = x @ w_true + 0.01 * data_rng.normal(size=64)
        err = x @ w - y
        grad = reduce(it, 2 * x.T @ err / len(y))
        loss = float(np.mean(err**2))
        if any(k == "nan" and at <= it for k, at in mine) or nan_once(mine, args.sync_dir, it):
            loss = float("nan")
            if not np.isfinite(loss):
                raise FloatingPointError(f"Loss is NaN at iteration {it}")
        w -= lr * grad
        time.sleep(args.step_time)
        print(f" iteration {it:8d}/{args.iters:8d} | consumed samples: {it * 64 * world:10d} | "
              f"elapsed time per iteration (ms): {args.step_time * 1000:.1f} | learning rate: {lr:.3E} | "
              f"lm loss: {loss:.6E} |", flush=True)
        if rank == 0 and (it % args.ckpt_every == 0 or it == args.iters):
            print(f"saving checkpoint at iteration {it:7d} to {args.ckpt_dir} in torch format", flush=True)
            save_checkpoint(args.ckpt_dir, it, w)
            print(f"  successfully saved checkpoint from iteration {it:7d} to {args.ckpt_dir} [ t 1/1, p 1/1 ]",
                  flush=True)
    reduce(args.iters + 1, np.zeros(1))  # everyone finished: rank 0's checkpoint is on disk
    print(f"> training done at iteration {args.iters} on {node}", flush=True)
    return 0


def nan_once(mine: list[tuple[str, int]], sync_dir: Path, it: int) -> bool:
    """A `nan_once` fault at this iteration that has not fired in an earlier segment of the run
    (the marker names the segment's sync directory: every rank of that segment fires)."""
    if not any(k == "nan_once" and at == it for k, at in mine):
        return False
    marker = sync_dir.parent / f".fault-nan-once-{it}"
    if marker.exists() and marker.read_text() != sync_dir.name:
        return False
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(sync_dir.name)
    return True


if __name__ == "__main__":
    sys.exit(main())
