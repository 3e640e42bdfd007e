#!/usr/bin/env python3
"""Hangs from the first minute (issue 39), on the test cluster with the real PyTorch job, each tree side by side
(this one and the code before the change: `git worktree add /tmp/floor-cadence i38-budget`).

Phases, with the same random onsets for every tree (--seed):
  first   a hang (stop, sleep, spin, two ranks) at an iteration drawn uniformly from the first ~60 s of progress
          (1-850 at the job's ~70 ms per step);
  resume  segment 1 ends at its 2 min time limit, segment 2 resumes from its checkpoint, and a node's job is
          frozen (D state, the testbed's cgroup freezer) a uniform 0-60 s after segment 2's first progress;
  later   a hang 60-80 s in (iteration 1100-1400), as scripts/bench_hang.py injects them.
Per phase and tree: n, top-1 and the p95 of onset -> verdict (a hang never named counts the time waited).

  scripts/slurm-testbed.sh start && export SLURM_CONF=/tmp/orch-testbed/etc/slurm.conf
  python scripts/bench_hang_early.py --per-phase 6 --tree . --tree /tmp/floor-cadence --out /tmp/early.json
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from scripts import bench_hang as bh  # noqa: E402

PHASES = ("first", "resume", "later")
HANG_KINDS = ("stop", "sleep", "spin", "two")


def segments(run: Path) -> list[dict[str, Any]]:
    try:
        return list(json.loads((run / "state.json").read_text())["segments"])
    except (OSError, ValueError, KeyError):
        return []


def resume_trial(root: Path, node: str, delay_s: float) -> dict[str, Any]:
    """Segment 1 runs into its 2 min time limit; `delay_s` after segment 2's first progress, `node` is frozen."""
    name = f"bh-resume-{node}-{int(delay_s)}"
    cfg_path = bh.config(root, name, 10_000_000, [], 2)
    cfg = yaml.safe_load(cfg_path.read_text())
    cfg["policy"]["max_segments"] = 2
    cfg_path.write_text(yaml.safe_dump(cfg))
    run, onset, proc = root / "run", None, bh.orch("run", str(cfg_path))
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and proc.poll() is None:
            segs = segments(run)
            if len(segs) > 1 and segs[1].get("first_progress_at"):
                time.sleep(delay_s)
                subprocess.run([str(bh.TESTBED), "freeze-job", node], check=False, capture_output=True)
                onset = datetime.now().astimezone()
                break
            time.sleep(0.5)
        # thawed once segment 2 is judged: a node frozen past Slurm's kill is drained ("Kill task failed")
        while time.monotonic() < deadline and proc.poll() is None and onset is not None:
            if len(segs := segments(run)) > 1 and segs[1].get("ended_at"):
                break
            time.sleep(0.5)
        subprocess.run([str(bh.TESTBED), "thaw-job", node], check=False, capture_output=True)
        # segment 2 is the trial: a node's hang does not spend max_segments, so a third would follow
        proc.terminate()
        proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        pass
    finally:
        subprocess.run([str(bh.TESTBED), "thaw-job", node], check=False, capture_output=True)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for part in ("seg0002", "seg0003"):
            subprocess.run(["scancel", "-n", f"{name}.{part}"], check=False, capture_output=True)
        # a node Slurm drained anyway goes back into service for the next trial
        subprocess.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"], check=False,
                       capture_output=True)
    seg = (segments(run)[1:2] or [{}])[0]  # segment 2, the one frozen
    row: dict[str, Any] = {"kind": "dstate", "expected": [node], "culprits": seg.get("culprit_nodes", []),
                           "cause": seg.get("cause"), "delay_s": delay_s}
    if onset is not None:
        end = bh.ts(seg["ended_at"]) if seg.get("ended_at") else datetime.now().astimezone()
        row["name_s"] = (end - onset).total_seconds()
    row["right"] = row["cause"] == "hang" and row["culprits"] == [node]
    return row


def one(phase: str, root: Path, i: int, rng: random.Random) -> dict[str, Any]:
    if phase == "resume":
        return resume_trial(root, rng.choice(bh.NODES), rng.uniform(0.0, 60.0))
    kind = HANG_KINDS[i % len(HANG_KINDS)]
    nodes = rng.sample(bh.NODES, 2 if kind == "two" else 1)
    return bh.trial(root, kind, nodes, rng.randint(1, 850) if phase == "first" else rng.randint(1100, 1400))


def campaign(tree: Path, phases: list[str], n: int, seed: int, base: Path) -> dict[str, list[dict[str, Any]]]:
    """Every phase's trials run by the orchestrator of `tree` (its own code and training script)."""
    bh.REPO, bh.TESTBED = tree.resolve(), tree.resolve() / "scripts" / "slurm-testbed.sh"
    rng, out = random.Random(seed), {}
    for phase in phases:
        out[phase] = []
        for i in range(n):
            out[phase].append(one(phase, base / tree.name / f"{phase}{i:03d}", i, rng))
            print(json.dumps({"tree": str(tree), "phase": phase, **out[phase][-1]}), flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--per-phase", type=int, default=6)
    ap.add_argument("--phases", default=",".join(PHASES))
    ap.add_argument("--tree", type=Path, action="append", help="a checkout to run (repeatable; default: this one)")
    ap.add_argument("--seed", type=int, default=39)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    everyone = subprocess.run(["sinfo", "-h", "-N", "-o", "%N"], capture_output=True, text=True).stdout.split()
    bh.EXCLUDE[:] = sorted(set(everyone) - set(bh.NODES))
    base = Path(subprocess.run(["mktemp", "-d"], capture_output=True, text=True, check=True).stdout.strip())
    trees = args.tree or [Path(".")]
    results = {str(t): campaign(t, args.phases.split(","), args.per_phase, args.seed, base) for t in trees}
    print(f"{'phase':8s} " + " ".join(f"{str(t)[-24:]:>34s}" for t in trees))
    for phase in args.phases.split(","):
        cells = []
        for t in trees:
            rows = results[str(t)][phase]
            named = [r["name_s"] for r in rows if "name_s" in r]
            cells.append(f"top-1 {sum(r['right'] for r in rows)}/{len(rows)}, p95 {bh.pct(named, 0.95):6.1f} s")
        print(f"{phase:8s} " + " ".join(f"{c:>34s}" for c in cells))
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
