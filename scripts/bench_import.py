#!/usr/bin/env python3
"""`orchestrator import-sbatch` of large batch scripts: wall time and peak memory, beside `bash -n` of the same
file (its floor: reading and parsing the script once) in the same run.

Usage: python scripts/bench_import.py [--size-mb 20] [--keep]
Two generated scripts: `plain` (plain commands with redirections and comments, the launch at the end) and
`mixed` (one third assignments, one third quoted echo lines with expansions, one third `python prep.py` lines:
every line is a command that may matter). Prints seconds, peak RSS of the importer and the ratio to `bash -n`.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HEAD = "#!/bin/bash\n#SBATCH -N 4\n#SBATCH --ntasks-per-node=1\n#SBATCH --time=60\nexport LOG=/tmp/log\n"
TAIL = "srun python train.py --lr 3e-4 --save /ckpt --load /ckpt\n"


def _line(kind: str, i: int) -> str:
    if kind == "plain":
        return f"echo preparing shard {i} && ls /data/shard_{i} > /dev/null  # shard {i}\n"
    mixed = [f'VAR_{i}="value {i}"\n', f'echo "shard $VAR_{i}" >> "$LOG"\n', f"python prep.py --shard {i} || exit 1\n"]
    return mixed[i % 3]


def generate(path: Path, kind: str, size_mb: int) -> None:
    size, i = 0, 0
    with path.open("w") as f:
        f.write(HEAD)
        while size < size_mb << 20:
            line = _line(kind, i)
            f.write(line)
            size, i = size + len(line), i + 1
        f.write(TAIL)


def _timed(argv: list[str]) -> tuple[float, int]:
    """(wall seconds, peak RSS in MB of this child) of one command."""
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    return wall, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--size-mb", type=int, default=20)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-import-"))
    print(f"{'script':<8} {'MB':>5} {'bash -n':>9} {'import-sbatch':>14} {'x floor':>8} {'peak RSS':>9}")
    for kind in ("plain", "mixed"):
        script = tmp / f"{kind}.sbatch"
        generate(script, kind, args.size_mb)
        floor, _ = _timed(["bash", "-n", str(script)])
        # each import runs in a fresh child: RUSAGE_CHILDREN's peak is the largest child so far, so plain runs first
        wall, rss = _timed([sys.executable, "-m", "orchestrator", "import-sbatch", str(script),
                            "-o", str(tmp / f"{kind}.yaml")])
        mb = script.stat().st_size / 2**20
        print(f"{kind:<8} {mb:5.1f} {floor:8.2f}s {wall:13.2f}s {wall / floor:8.1f} {rss:7d} MB")
    if not args.keep:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
