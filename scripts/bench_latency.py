#!/usr/bin/env python3
"""Reaction latency on the real Slurm test cluster (scripts/slurm-testbed.sh start first).

1. hardware error line written on a node -> next segment submitted (expected: cascade_grace + ~1 poll)
2. a rank frozen in D state -> its job cancelled (expected: at most stall_timeout + one poll after the
   last progress)
Usage: python scripts/bench_latency.py [--poll 2] [--stall 20] [--grace 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "SLURM_CONF": os.environ.get("SLURM_CONF", "/tmp/orch-testbed/etc/slurm.conf")}


def config(d: Path, name: str, faults: list[str], args: argparse.Namespace, iters: int, step: float) -> Path:
    cfg = {
        "name": name, "run_dir": str(d / "run"), "workdir": str(REPO),
        "command": ["{python}", "scripts/demo_train.py", f"--iters={iters}", "--ckpt-every=10",
                    "--ckpt-dir={run_dir}/checkpoints", "--resume={checkpoint}", "--sync-dir={run_dir}/sync/{segment}",
                    f"--step-time={step}", "--collective-timeout=600", *[f"--fault={f}" for f in faults]],
        "resources": {"nodes": 3, "time_limit_min": 10},
        "checkpoint": {"dir": str(d / "run" / "checkpoints")},
        "goal": {"target_iteration": iters},
        "watch": {"poll_interval_s": args.poll, "stall_timeout_s": args.stall, "startup_timeout_s": 120,
                  "cascade_grace_s": args.grace},
        "backend": {"kind": "slurm"},
    }
    p = d / f"{name}.yaml"
    p.write_text(yaml.safe_dump(cfg))
    return p


def state(cfg: Path) -> dict:
    return json.loads((cfg.parent / "run" / "state.json").read_text())


def ts(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def hardware_to_resubmit(d: Path, args: argparse.Namespace) -> float:
    cfg = config(d, f"lat-ecc-{os.getpid()}", ["ecc:node3:40"], args, 60, 0.05)
    subprocess.run([sys.executable, "-m", "orchestrator", "run", str(cfg)], env=ENV, cwd=REPO, check=True,
                   capture_output=True)
    st = state(cfg)
    log = (d / "run" / "segments" / "0001" / "logs" / "node3.log").read_text().splitlines()
    ecc = next(ln for ln in log if "uncorrectable ECC" in ln)
    return (ts(st["segments"][1]["submitted_at"]) - ts(ecc.split()[0])).total_seconds()


def freeze_to_cancel(d: Path, args: argparse.Namespace) -> tuple[float, float]:
    cfg = config(d, f"lat-frz-{os.getpid()}", [], args, 600, 0.1)
    ctl = subprocess.Popen([sys.executable, "-m", "orchestrator", "run", str(cfg)], env=ENV, cwd=REPO,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if (state(cfg)["segments"][0].get("end_iteration") or 0) > 20:
                break
        except (FileNotFoundError, IndexError, json.JSONDecodeError, KeyError):
            pass
        time.sleep(0.5)
    subprocess.run([str(REPO / "scripts" / "slurm-testbed.sh"), "freeze-job", "node2"], env=ENV, check=True,
                   capture_output=True)
    try:
        while time.monotonic() < deadline + 300:
            seg = state(cfg)["segments"][0]
            if seg.get("cancelled_at"):
                break
            time.sleep(0.5)
    finally:
        subprocess.run([str(REPO / "scripts" / "slurm-testbed.sh"), "thaw-job", "node2"], env=ENV,
                       capture_output=True)
        ctl.terminate()
        ctl.wait(timeout=60)
        subprocess.run(["scancel", "--name", state(cfg)["segments"][-1]["job_name"]], env=ENV, capture_output=True)
    seg = state(cfg)["segments"][0]
    return ((ts(seg["cancelled_at"]) - ts(seg["last_progress_at"])).total_seconds(), args.stall + args.poll)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--poll", type=float, default=2.0)
    ap.add_argument("--stall", type=float, default=20.0)
    ap.add_argument("--grace", type=float, default=3.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(dir="/tmp") as d1, tempfile.TemporaryDirectory(dir="/tmp") as d2:
        hw = hardware_to_resubmit(Path(d1), args)
        print(f"hardware error line -> next segment submitted: {hw:.1f} s "
              f"(cascade_grace {args.grace:g} s + poll {args.poll:g} s = {args.grace + args.poll:g} s)")
        took, bound = freeze_to_cancel(Path(d2), args)
        print(f"last progress before the freeze -> job cancelled: {took:.1f} s "
              f"(bound: stall_timeout {args.stall:g} s + poll {args.poll:g} s = {bound:g} s) "
              f"{'OK' if took <= bound else 'OVER'}")


if __name__ == "__main__":
    main()
