#!/usr/bin/env python3
"""Does the node agent slow the training it wraps? The demo training, alone and under the agent
(tee with timestamps, progress parsing, heartbeats), alternated, same machine, same run.

Usage: python scripts/bench_agent.py [--iters 2000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from orchestrator.agent.main import NodeAgent
from orchestrator.model import SegmentSpec

REPO = Path(__file__).resolve().parents[1]


def argv(d: Path, iters: int, k: int) -> list[str]:
    return [sys.executable, str(REPO / "scripts" / "demo_train.py"), f"--iters={iters}", "--ckpt-every=100000",
            f"--ckpt-dir={d}/ck{k}", f"--sync-dir={d}/sync{k}", "--step-time=0"]


def bare(d: Path, iters: int, k: int) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv(d, iters, k), check=True, stdout=subprocess.DEVNULL,
                   env={**os.environ, "ORCH_RANK": "0", "ORCH_WORLD_SIZE": "1", "PYTHONUNBUFFERED": "1"})
    return time.perf_counter() - t0


def agent(d: Path, iters: int, k: int) -> float:
    spec = SegmentSpec(run_name="b", index=k, job_name="b", nodes=1, tasks_per_node=1, gpus_per_node=0,
                       time_limit_min=60, command=tuple(argv(d, iters, k)), workdir=str(REPO), run_dir=str(d),
                       segment_dir=str(d / f"seg{k}"), progress_regex=r"iteration\s+(\d+)\s*/\s*\d+")
    t0 = time.perf_counter()
    code = NodeAgent(spec, "bench", 0, 1, str(k)).run()
    assert code == 0
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--iters", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        b, a = [], []
        for k in range(args.repeats):
            b.append(bare(d, args.iters, 2 * k))
            a.append(agent(d, args.iters, 2 * k + 1))
    mb, ma = statistics.median(b), statistics.median(a)
    print(f"{args.iters} iterations, {args.repeats} runs each (median): alone {mb:.2f} s, under the agent "
          f"{ma:.2f} s; ratio agent/alone = {ma / mb:.3f} ({(ma - mb) / args.iters * 1e6:.0f} us per iteration)")


if __name__ == "__main__":
    main()
