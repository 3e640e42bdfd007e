#!/usr/bin/env python3
"""A small, real torch.distributed training job (Gloo on CPU) for the Slurm scenarios, the benchmarks
and the Slurm demo: a two-layer network under DistributedDataParallel, one rank per task, the
rendezvous through a FileStore in the shared run directory. Every gradient is a real Gloo
all-reduce, so one stuck rank stalls all the others; every timeout line, traceback and stack is
PyTorch's own. Rank 0 writes Megatron-layout checkpoints (iter_NNNNNNN/ + the tracker, written last)
and the job resumes from --resume. Progress lines look like Megatron's.

Needs `pip install 'segment-orchestrator[torch]'` (torch; the CPU build is enough).

Faults (--fault KIND:NODE:ARG, repeatable, on the ranks of NODE; once per run unless said):
  stop:NODE:ITER    the rank stops itself (SIGSTOP) before the collective of ITER
  sleep:NODE:ITER   the rank sleeps (interruptible) before the collective of ITER
  spin:NODE:ITER    the rank spins in Python holding the GIL before the collective of ITER
  kill:NODE:ITER    the rank is killed (SIGKILL) at ITER: the peers' Gloo timeout fires
  slow:NODE:ITER    from ITER on, every step on NODE takes --slow-factor times as long (1.25: 25% slower)
  nan:NODE:ITER     the ranks of NODE get a batch of NaN at ITER (bad data): the all-reduce spreads it, every
                    rank's weights and loss are NaN from then on and the job trains on (every time it gets there)
  nan_once:NODE:ITER  the same, once per run (a rare bad batch: a rollback gets past it)
Pauses a healthy run makes: --eval-every N --eval-time S (every rank evaluates for S seconds, then an
all-reduce of the metric), --eval0-every N (rank 0 alone evaluates for --eval-time seconds, announced as
Hugging Face's Trainer does, while the others wait in a barrier), --save-time S (rank 0 spends S seconds
writing each checkpoint while the others wait in a barrier).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import signal
import socket
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

DIM = 64


def node_name() -> str:
    return os.environ.get("ORCH_NODE_NAME") or os.environ.get("SLURMD_NODENAME") or socket.gethostname()


def parse_faults(items: list[str], node: str) -> dict[str, float]:
    mine: dict[str, float] = {}
    for item in items:
        kind, where, arg = (item.split(":") + ["", ""])[:3]
        if where in (node, "all"):
            mine[kind] = float(arg or 0)
    return mine


def once(markers: Path, kind: str, node: str, it: int) -> bool:
    """True the first time this fault fires in the run (a marker beside the per-segment sync dirs)."""
    marker = markers / f".fault-{kind}-{node}-{it}"
    if marker.exists():
        return False
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text("fired\n")
    return True


def inject(mine: dict[str, float], it: int, markers: Path, node: str) -> None:
    """The faults due before this iteration's collective."""
    for kind in ("stop", "sleep", "spin", "kill"):
        if int(mine.get(kind, -1)) != it or not once(markers, kind, node, it):
            continue
        print(f"[fault] {kind} on {node} at iteration {it}", flush=True)
        if kind == "stop":
            os.kill(os.getpid(), signal.SIGSTOP)
        elif kind == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        elif kind == "sleep":
            while True:
                time.sleep(3600)
        else:
            spin_forever()


def spin_forever() -> None:
    """Pure Python arithmetic: holds the GIL, never reaches the collective."""
    x = 0
    while True:
        x = (x * 31 + 7) % 1_000_003


def save(root: Path, it: int, model: nn.Module, opt: torch.optim.Optimizer, seconds: float) -> None:
    d = root / f"iter_{it:07d}" / "mp_rank_00"
    d.mkdir(parents=True, exist_ok=True)
    torch.save({"model": model.state_dict(), "optim": opt.state_dict(), "iteration": it},
               d / "model_optim_rng.pt")
    deadline = time.monotonic() + seconds  # a slow filesystem: the file keeps growing
    with (d / "padding.bin").open("wb") as f:
        while time.monotonic() < deadline:
            f.write(b"\0" * 4096)
            f.flush()
            time.sleep(0.05)
    tmp = root / ".latest.tmp"
    tmp.write_text(str(it))
    os.replace(tmp, root / "latest_checkpointed_iteration.txt")  # written last: complete


def load(path: str, model: nn.Module, opt: torch.optim.Optimizer) -> int:
    state = torch.load(Path(path) / "mp_rank_00" / "model_optim_rng.pt", weights_only=True)
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["optim"])
    return int(state["iteration"])


def evaluate(model: nn.Module, seconds: float) -> float:
    """Every rank evaluates (no collective) for `seconds`, then the metric is averaged."""
    deadline = time.monotonic() + seconds
    total = torch.zeros(1)
    with torch.no_grad():
        while time.monotonic() < deadline:
            total += model(torch.randn(32, DIM)).pow(2).mean()
            time.sleep(0.05)
    dist.all_reduce(total)
    return float(total)


class Scorer(nn.Module):
    """Rank 0's eval model: its forward waits as a GPU forward's host thread does (on the device's
    kernels), so two stack samples find it in the same `forward` frame."""

    def __init__(self, body: nn.Module) -> None:
        super().__init__()
        self.body = body

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.body(x)
        time.sleep(0.2)  # the kernels' time
        return out


def evaluate_alone(model: nn.Module, seconds: float) -> float:
    """Rank 0 evaluates alone, as a script whose eval runs on one rank does; no collective."""
    print("***** Running Evaluation *****", flush=True)
    print("  Num examples = 2048", flush=True)
    scorer, deadline, total = Scorer(model), time.monotonic() + seconds, 0.0
    with torch.no_grad():
        while time.monotonic() < deadline:
            total += float(scorer(torch.randn(32, DIM)).pow(2).mean())
    print(f"{{'eval_loss': {total:.4f}, 'eval_runtime': {seconds:.1f}}}", flush=True)
    return total


def options() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iters", type=int, required=True)
    ap.add_argument("--ckpt-dir", type=Path, required=True)
    ap.add_argument("--ckpt-every", type=int, default=20)
    ap.add_argument("--resume", default="")
    ap.add_argument("--sync-dir", type=Path, required=True, help="shared directory for the FileStore")
    ap.add_argument("--step-time", type=float, default=0.1, help="seconds of compute per step")
    ap.add_argument("--collective-timeout", type=float, default=600.0, help="Gloo's timeout, seconds")
    ap.add_argument("--eval-every", type=int, default=0)
    ap.add_argument("--eval-time", type=float, default=0.0)
    ap.add_argument("--eval0-every", type=int, default=0, help="rank 0 alone evaluates every N iterations")
    ap.add_argument("--save-time", type=float, default=0.0)
    ap.add_argument("--slow-factor", type=float, default=1.25)
    ap.add_argument("--fault", action="append", default=[])
    return ap.parse_args()


def main() -> int:
    args = options()
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    node = node_name()
    mine = parse_faults(args.fault, node)
    args.sync_dir.mkdir(parents=True, exist_ok=True)
    store = dist.FileStore(str(args.sync_dir / "store"), world)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world,
                            timeout=dt.timedelta(seconds=args.collective_timeout))
    try:  # the flight recorder written on the orchestrator's dump request (a no-op outside it)
        from orchestrator.flight import dump_on_request
    except ImportError:
        pass
    else:
        dump_on_request()
    torch.manual_seed(1234)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(DIM, DIM), nn.Tanh(), nn.Linear(DIM, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    start = load(args.resume, model.module, opt) if args.resume else 0
    origin = "resuming from " + args.resume if args.resume else "starting from scratch"
    print(f"> rank {rank}/{world} on {node}: {origin} at iteration {start}", flush=True)
    dist.barrier()
    gen = torch.Generator().manual_seed(rank)
    markers = args.sync_dir.parent
    slow_from = int(mine.get("slow", 0)) or None
    for it in range(start + 1, args.iters + 1):
        t0 = time.monotonic()
        if it == slow_from:
            print(f"[fault] slow on {node} at iteration {it}: {args.slow_factor}x per step", flush=True)
        slow = args.slow_factor if slow_from is not None and it >= slow_from else 1.0
        x = torch.randn(64, DIM, generator=gen)
        if int(mine.get("nan", -1)) == it or (int(mine.get("nan_once", -1)) == it
                                              and once(markers, "nan_once", node, it)):
            print(f"[fault] a batch of NaN on {node} at iteration {it}", flush=True)
            x = x * float("nan")
        loss = (model(x).squeeze(1) - x.sum(1).tanh()).pow(2).mean()
        opt.zero_grad()
        time.sleep(args.step_time)  # the rest of a real step's compute
        inject(mine, it, markers, node)
        loss.backward()  # DDP's all-reduce of the gradients (Gloo)
        opt.step()
        if slow > 1:  # a slow node: its whole step takes `slow` times as long (its peers wait for it)
            time.sleep((slow - 1) * (time.monotonic() - t0))
        ms = (time.monotonic() - t0) * 1000
        print(f" iteration {it:8d}/{args.iters:8d} | consumed samples: {it * 64 * world:10d} | "
              f"elapsed time per iteration (ms): {ms:.1f} | learning rate: 1.000E-02 | "
              f"lm loss: {loss.item():.6E} |", flush=True)
        if args.eval_every and it % args.eval_every == 0:
            print(f" validation loss at iteration {it} | lm loss value: {evaluate(model, args.eval_time):.6E} |",
                  flush=True)
        if args.eval0_every and it % args.eval0_every == 0:
            if rank == 0:
                evaluate_alone(model.module, args.eval_time)
            dist.barrier()
        if it % args.ckpt_every == 0 or it == args.iters:
            if rank == 0:
                print(f"saving checkpoint at iteration {it:7d} to {args.ckpt_dir} in torch format", flush=True)
                save(args.ckpt_dir, it, model.module, opt, args.save_time)
                print(f"  successfully saved checkpoint from iteration {it:7d} to {args.ckpt_dir}", flush=True)
            dist.barrier()
    dist.barrier()
    print(f"> training done at iteration {args.iters} on {node}", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
