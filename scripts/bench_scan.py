#!/usr/bin/env python3
"""Scanner throughput against `grep -E` with the same patterns, over the same generated log, same run.

Usage: python scripts/bench_scan.py [--size-mb 1024] [--keep]
Prints MB/s of both and the ratio grep_time / scanner_time (>= 1.0: the scanner is at least as fast).
The scanner does more than grep -c: line numbers, the ordered signature table, named groups, progress.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from orchestrator.diagnose.prefilter import Prefilter
from orchestrator.diagnose.scan import NodeScan
from orchestrator.diagnose.signatures import build_table
from orchestrator.settings import PROGRESS_REGEX
from orchestrator.tail import LogTail

ERRORS = [
    "RuntimeError: CUDA error: uncorrectable ECC error encountered",
    "[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE) ran for 600000 ms",
    "srun: error: Node failure on gpu-a017",
    "OSError: [Errno 116] Stale file handle",
]


def generate(path: Path, size_mb: int, seed: int = 7) -> int:
    rng = random.Random(seed)
    lines = []
    for it in range(40000):
        lines.append(f"{it % 8}:  iteration {it:8d}/  500000 | consumed samples: {it * 2048:12d} | elapsed time per "
                     f"iteration (ms): {rng.uniform(900, 1100):.1f} | lm loss: {rng.uniform(1.8, 2.4):.6E} |")
        if it % 50 == 0:
            lines.append(f"gpu-a0{it % 90:02d}:4012:4012 [0] NCCL INFO Channel 00/32 : 0 1 2 3 4 5 6 7")
        if it % 97 == 0:
            lines.append(f"[monitor] gpu_util={rng.randint(90, 100)} mem_used={rng.randint(70, 79)}GiB")
    block = ("\n".join(lines) + "\n").encode()
    n_errors = 0
    with path.open("wb") as fh:
        written = 0
        while written < size_mb * 1024 * 1024:
            fh.write(block)
            written += len(block)
            if rng.random() < 0.2:
                fh.write((rng.choice(ERRORS) + "\n").encode())
                n_errors += 1
    return n_errors


def realistic(path: Path, size_mb: int, seed: int = 11) -> int:
    """Job-wide output as `srun -l` writes it for 16 nodes x 8 ranks: every line behind its task prefix, NCCL
    INFO bursts at start-up, tqdm bars rewritten with carriage returns, 4 KB JSON metric lines, HF-style log
    dicts, warnings, a Megatron progress line only now and then (rank 0 logs one in about 2,000 lines, so most
    4 MB blocks end in lines that are not progress), the errors at the end."""
    rng = random.Random(seed)
    ranks = 128
    nccl = [f"{r}: gpu-a{r // 8:03d}:{4000 + r}:{4100 + r} [{r % 8}] NCCL INFO Channel {c:02d}/32 : "
            + " ".join(str((r + k) % ranks) for k in range(8)) for r in range(ranks) for c in range(4)]
    out, n_err = bytearray(), 0
    with path.open("wb") as fh:
        fh.write(("\n".join(nccl) + "\n").encode())
        it = 0
        while fh.tell() < size_mb * 1024 * 1024:
            for _ in range(2000):
                r = rng.randrange(ranks)
                kind = rng.random()
                if kind < 0.01:  # one rank's bar
                    bar = "".join(f"\rEpoch 0: {p:3d}%|{'#' * (p // 10):10s}| {p * 40}/4000 [00:{p:02d}<00:10, "
                                  f"{rng.uniform(1, 9):.2f}it/s, loss={rng.uniform(1, 3):.3f}]"
                                  for p in range(0, 100, 7))
                    out += f"{r}: {bar}\n".encode()
                elif kind < 0.35:
                    metrics = {f"m{k}": rng.random() for k in range(180)}
                    out += (f"{r}: " + json.dumps({"step": it, "metrics": metrics}) + "\n").encode()
                elif kind < 0.6:
                    out += (f"{r}: {{'loss': {rng.uniform(1, 3):.4f}, 'grad_norm': {rng.uniform(0, 2):.3f}, "
                            f"'learning_rate': 2.9e-05, 'epoch': {it / 1e4:.2f}}}\n").encode()
                elif kind < 0.85:
                    out += (f"{r}: /usr/lib/python3/site-packages/torch/distributed/c10d.py:{rng.randint(1, 4000)}:"
                            f" UserWarning: a warning that repeats on every rank ({rng.random():.6f})\n").encode()
                elif kind < 0.97:
                    out += (f"{r}: gpu-a{r // 8:03d}:{4000 + r}:{4100 + r} [{r % 8}] NCCL INFO comm "
                            f"0x{rng.getrandbits(32):x} rank {r} nranks {ranks} cudaDev {r % 8} busId {r % 8}0000 - "
                            "Init COMPLETE\n").encode()
                elif kind < 0.9995:
                    out += f"{r}: [rank{r}]:[W reducer.cpp:1360] Warning: find_unused_parameters=True\n".encode()
                else:
                    it += 1
                    out += (f"0:  iteration {it:8d}/  500000 | consumed samples: {it * 2048:12d} | elapsed time per "
                            f"iteration (ms): {rng.uniform(900, 1100):.1f} | lm loss: {rng.uniform(1.8, 2.4):.6E} |\n"
                            ).encode()
            fh.write(out)
            out.clear()
        for e in ERRORS:
            fh.write(f"5: {e}\n".encode())
            n_err += 1
    return n_err


def to_rust(pattern: str) -> str:
    """The pattern for ripgrep's engine: plain groups (names repeat across signatures), no escaped quotes."""
    return re.sub(r"\(\?P<\w+>", "(?:", pattern).replace('\\"', '"')


def to_ere(pattern: str) -> str:
    p = re.sub(r"\(\?P<\w+>", "(", pattern).replace("(?:", "(")
    p = p.replace(r"\d", "[0-9]").replace(r"\w", "[[:alnum:]_]").replace(r"\s", "[[:space:]]")
    return p[1:] if p.startswith("^") else p


def run_scanner(path: Path, progress: str) -> tuple[float, int]:
    sigs = build_table()
    pf = Prefilter([(s.pattern, s.ignore_case) for s in sigs])
    scan = NodeScan("n", str(path), sigs, re.compile(progress))
    tail = LogTail(path)
    t0 = time.process_time()
    while True:
        blocks = tail.read_chunks(final=True)
        if not blocks:
            break
        for first, block, newlines in blocks:
            scan.feed_bytes(first, block, pf, newlines)
    return time.process_time() - t0, len(scan.matches) + scan.dropped_matches


def run_tool(argv: list[str]) -> tuple[float, int]:
    """CPU seconds of a child (user + system) and the count it printed."""
    before = os.times()
    res = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, "LC_ALL": "C"}, check=False)
    after = os.times()
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return cpu, int((res.stdout.strip() or "0").splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--log", choices=["realistic", "progress"], default="realistic",
                    help="realistic: job-wide srun -l output (default); progress: nearly all progress lines")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        path, patfile, rgfile = Path(d) / "big.log", Path(d) / "patterns.txt", Path(d) / "rg-patterns.txt"
        n_err = (realistic if args.log == "realistic" else generate)(path, args.size_mb)
        patfile.write_text("\n".join(to_ere(s.pattern) for s in build_table()) + "\n")
        rgfile.write_text("\n".join(to_rust(s.pattern) for s in build_table()) + "\n")
        size = path.stat().st_size / 1e6
        grep = ["grep", "-E", "-i", "-c", "-f", str(patfile), str(path)]
        rg = ["rg", "--no-unicode", "-i", "-c", "-f", str(rgfile), str(path)] if shutil.which("rg") else None
        run_tool(grep)  # warm the page cache for every reader
        gt, gn = run_tool(grep)
        st, sn = run_scanner(path, PROGRESS_REGEX)
        engine = Prefilter([(s.pattern, s.ignore_case) for s in build_table()]).engine
        print(f"log ({args.log}): {size:.0f} MB, {n_err} error lines planted; prefilter engine: {engine}; CPU seconds")
        print(f"grep -E -i -c -f    : {gt:6.2f} s  {size / gt:8.0f} MB/s  ({gn} matching lines)")
        if rg:
            rt, rn = run_tool(rg)
            print(f"rg --no-unicode -i  : {rt:6.2f} s  {size / rt:8.0f} MB/s  ({rn} matching lines)")
        else:
            print("rg --no-unicode -i  : not installed (apt-get install ripgrep)")
        print(f"scanner (default progress regex): {st:6.2f} s  {size / st:8.0f} MB/s  ({sn} matches)")
        print(f"ratio grep_cpu / scanner_cpu = {gt / st:.2f}  (goal >= 1.0; 1.5 stretch)"
              + (f"; rg_cpu / scanner_cpu = {rt / st:.2f} (goal >= 0.5)" if rg else ""))
        if args.keep:
            os.link(path, Path.cwd() / "bench-scan.log")


if __name__ == "__main__":
    main()
