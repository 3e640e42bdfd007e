#!/usr/bin/env python3
"""Scanner throughput against `grep -E` with the same patterns, over the same generated log, same run.

Usage: python scripts/bench_scan.py [--size-mb 1024] [--keep]
Prints MB/s of both and the ratio grep_time / scanner_time (>= 1.0: the scanner is at least as fast).
The scanner does more than grep -c: line numbers, the ordered signature table, named groups, progress.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import subprocess
import tempfile
import time
from pathlib import Path

from orchestrator.diagnose.prefilter import Prefilter
from orchestrator.diagnose.scan import NodeScan
from orchestrator.diagnose.signatures import build_table
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


def to_ere(pattern: str) -> str:
    p = re.sub(r"\(\?P<\w+>", "(", pattern).replace("(?:", "(")
    p = p.replace(r"\d", "[0-9]").replace(r"\w", "[[:alnum:]_]").replace(r"\s", "[[:space:]]")
    return p[1:] if p.startswith("^") else p


def run_scanner(path: Path) -> tuple[float, int]:
    sigs = build_table()
    pf = Prefilter([(s.pattern, s.ignore_case) for s in sigs])
    scan = NodeScan("n", str(path), sigs, re.compile(r"iteration\s+(\d+)\s*/\s*\d+"))
    tail = LogTail(path)
    t0 = time.perf_counter()
    while True:
        blocks = tail.read_chunks(final=True)
        if not blocks:
            break
        for first, block, newlines in blocks:
            scan.feed_bytes(first, block, pf, newlines)
    return time.perf_counter() - t0, len(scan.matches) + scan.dropped_matches


def run_grep(path: Path, patfile: Path) -> tuple[float, int]:
    t0 = time.perf_counter()
    res = subprocess.run(["grep", "-E", "-i", "-c", "-f", str(patfile), str(path)], capture_output=True, text=True,
                         env={**os.environ, "LC_ALL": "C"}, check=False)
    return time.perf_counter() - t0, int(res.stdout.strip() or 0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        path, patfile = Path(d) / "big.log", Path(d) / "patterns.txt"
        n_err = generate(path, args.size_mb)
        patfile.write_text("\n".join(to_ere(s.pattern) for s in build_table()) + "\n")
        size = path.stat().st_size / 1e6
        run_grep(path, patfile)  # warm the page cache for both
        gt, gn = run_grep(path, patfile)
        st, sn = run_scanner(path)
        engine = Prefilter([(s.pattern, s.ignore_case) for s in build_table()]).engine
        print(f"log: {size:.0f} MB, {n_err} error lines planted; prefilter engine: {engine}")
        print(f"grep -E -i -c -f : {gt:6.2f} s  {size / gt:8.0f} MB/s  ({gn} matching lines)")
        print(f"scanner          : {st:6.2f} s  {size / st:8.0f} MB/s  ({sn} matches)")
        print(f"ratio grep_time / scanner_time = {gt / st:.2f}  (goal >= 1.0)")
        if args.keep:
            os.link(path, Path.cwd() / "bench-scan.log")


if __name__ == "__main__":
    main()
