#!/usr/bin/env python3
"""A small, real JAX data-parallel job for the test cluster (CPU, seconds): the second framework of issue 39, whose
collectives are not torch's. Every process joins `jax.distributed` (the coordinator on the first node, gloo
collectives across processes), trains a linear model on its own shard and averages the gradients each step with a
cross-process all-gather, so one stuck process stalls the others inside JAX's collective, as on a real multi-host
job. Process 0 writes Megatron-layout checkpoints (`iter_NNNNNNN/params.npy`, the tracker
`latest_checkpointed_iteration.txt` written last) and the job resumes from --resume. Progress lines are MaxText's
(`completed step: N, seconds: S, loss: L`).

The process's place comes from the agent's environment (ORCH_RANK / ORCH_WORLD_SIZE, else RANK / WORLD_SIZE) and
the coordinator from MASTER_ADDR and a port derived from the job id (`--port-base`)."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

DIM = 16


def save_checkpoint(root: Path, step: int, w: np.ndarray) -> None:
    d = root / f"iter_{step:07d}"
    d.mkdir(parents=True, exist_ok=True)
    np.save(d / "params.npy", w)
    (root / "latest_checkpointed_iteration.txt").write_text(f"{step}\n")  # the tracker last: complete
    print(f"saved checkpoint at step {step} to {d}", flush=True)


def load_checkpoint(path: str) -> tuple[int, np.ndarray | None]:
    if not path:
        return 0, None
    p = Path(path)
    return int(p.name.split("_")[-1]), np.load(p / "params.npy")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--ckpt-dir", required=True)
    ap.add_argument("--ckpt-every", type=int, default=20)
    ap.add_argument("--resume", default="")
    ap.add_argument("--step-time", type=float, default=0.05)
    ap.add_argument("--port-base", type=int, default=21000)
    args = ap.parse_args()
    rank = int(os.environ.get("ORCH_RANK", os.environ.get("RANK", "0")))
    world = int(os.environ.get("ORCH_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1")))
    job = int(os.environ.get("SLURM_JOB_ID", "0") or 0)

    import jax

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    coordinator = f"{os.environ.get('MASTER_ADDR', '127.0.0.1')}:{args.port_base + job % 4000}"
    jax.distributed.initialize(coordinator_address=coordinator, num_processes=world, process_id=rank,
                               initialization_timeout=120)
    import jax.numpy as jnp
    from jax.experimental import multihost_utils

    start, w0 = load_checkpoint(args.resume)
    rng = np.random.default_rng(1234 + rank)
    x = rng.normal(size=(256, DIM)).astype(np.float32)
    y = x @ np.linspace(-1, 1, DIM).astype(np.float32)
    w = jnp.asarray(w0 if w0 is not None else np.zeros(DIM, np.float32))
    print(f"process {jax.process_index()}/{jax.process_count()} on {os.environ.get('ORCH_NODE_NAME', '?')}: "
          f"{'resuming from step ' + str(start) if start else 'starting from scratch'}", flush=True)

    @jax.jit
    def grad_loss(w: jax.Array, x: jax.Array, y: jax.Array) -> tuple[jax.Array, jax.Array]:
        err = x @ w - y
        return x.T @ err / x.shape[0], jnp.mean(err ** 2)

    root = Path(args.ckpt_dir)
    for step in range(start + 1, args.steps + 1):
        t0 = time.time()
        g, loss = grad_loss(w, x, y)
        # the data-parallel step: every process's gradient, averaged (blocks until all have sent theirs)
        g = multihost_utils.process_allgather(g).mean(axis=0)
        w = w - 0.05 * g
        time.sleep(args.step_time)
        print(f"completed step: {step}, seconds: {time.time() - t0:.3f}, loss: {float(loss):.5f}", flush=True)
        if rank == 0 and step % args.ckpt_every == 0:
            save_checkpoint(root, step, np.asarray(w))
    multihost_utils.sync_global_devices("end")
    print(f"training finished at step {args.steps}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
