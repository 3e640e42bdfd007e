#!/usr/bin/env python3
"""Nodes slow from their first iteration (issue 39), on the test cluster with the real PyTorch job
(scripts/torch_train.py, DDP over Gloo on 3 nodes, default watch settings), each tree side by side (this one
and the code before the change: `git worktree add /tmp/floor39 main`). Each trial slows one node by a factor
(1.1: 10% slower, 1.25, 4) from iteration 1 (`--fault=slow:NODE:1`, the job's own sleep after each step); onset
is the fault's own log line; a trial ends when the controller names a node, or `--wait` s after the onset.
Per level and tree: n, top-1 and the time from onset to the name.

  export SLURM_CONF=/tmp/orch-testbed/etc/slurm.conf
  flock /tmp/testbed.lock python scripts/bench_slow_start.py --per-level 3 --tree . --tree /tmp/floor39
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from scripts import bench_hang as bh  # noqa: E402


def campaign(tree: Path, levels: list[float], n: int, seed: int, base: Path, wait_s: float) -> list[dict[str, Any]]:
    bh.REPO, bh.TESTBED = tree.resolve(), tree.resolve() / "scripts" / "slurm-testbed.sh"
    rng, rows = random.Random(seed), []
    for i in range(n):
        for factor in levels:
            node = rng.choice(bh.NODES)
            row = bh.slow_trial(base / tree.name / f"s{factor}-{i:02d}", node, 1, factor, wait_s)
            row.setdefault("name_s", None)
            rows.append({"tree": str(tree), **row})
            print(json.dumps(rows[-1]), flush=True)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--per-level", type=int, default=3)
    ap.add_argument("--levels", default="1.1,1.25,4")
    ap.add_argument("--tree", type=Path, action="append", help="a checkout to run (repeatable; default: this one)")
    ap.add_argument("--wait", type=float, default=240.0, help="seconds after the onset before a trial gives up")
    ap.add_argument("--seed", type=int, default=39)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--nodes", default=",".join(bh.NODES), help="the 3 testbed nodes the jobs run on")
    args = ap.parse_args()
    bh.NODES[:] = args.nodes.split(",")
    everyone = subprocess.run(["sinfo", "-h", "-N", "-o", "%N"], capture_output=True, text=True).stdout.split()
    bh.EXCLUDE[:] = sorted(set(everyone) - set(bh.NODES))
    base = Path(subprocess.run(["mktemp", "-d"], capture_output=True, text=True, check=True).stdout.strip())
    levels = [float(x) for x in args.levels.split(",")]
    trees = args.tree or [Path(".")]
    rows = [r for t in trees for r in campaign(t, levels, args.per_level, args.seed, base, args.wait)]
    for t in trees:
        for f in levels:
            ks = [r for r in rows if r["tree"] == str(t) and r["kind"] == f"slow{f}"]
            named = [r["name_s"] for r in ks if r.get("right") and r["name_s"] is not None]
            print(f"{str(t)[-20:]:>20s} x{f:<5} n={len(ks)} right {sum(r['right'] for r in ks)}, wrong "
                  f"{sum(bool(r.get('named')) and not r['right'] for r in ks)}, onset -> named "
                  f"{', '.join(f'{x:.0f}' for x in named) or '-'} s (not named within {args.wait:.0f} s: "
                  f"{sum(not r.get('named') for r in ks)})")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
