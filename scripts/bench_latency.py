#!/usr/bin/env python3
"""Reaction latency on the real Slurm test cluster (scripts/slurm-testbed.sh start first).

1. hardware error line written on a node -> next segment submitted (expected: cascade_grace + ~1 poll)
2. a rank frozen in D state -> its job cancelled (expected: at most stall_timeout + one poll after the
   last progress)
3. (--mode restart) fault -> training running again, inside the allocation vs through a new segment (issue 14):
   2 nodes, ECC on node2 at iteration 15 of 40, one short run per fault; (a) with 1 spare node the next segment
   is a step of the same job on the spare, (b) with 0 spares it is a new job with --exclude. Measured from the
   ECC line's timestamp in node2's log to the first progress line of segment 2 in any node's log (each node log
   line starts with an ISO timestamp); median of --faults runs per variant, side by side with the ratio.
Usage: python scripts/bench_latency.py [--mode reaction|restart|all] [--faults 10] [--poll 2] [--stall 20] [--grace 3]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "SLURM_CONF": os.environ.get("SLURM_CONF", "/tmp/orch-testbed/etc/slurm.conf")}


def config(d: Path, name: str, faults: list[str], args: argparse.Namespace, iters: int, step: float,
           nodes: int = 3, spares: int = 0) -> Path:
    cfg = {
        "name": name, "run_dir": str(d / "run"), "workdir": str(REPO),
        "command": ["{python}", "scripts/demo_train.py", f"--iters={iters}", "--ckpt-every=10",
                    "--ckpt-dir={run_dir}/checkpoints", "--resume={checkpoint}", "--sync-dir={run_dir}/sync/{segment}",
                    f"--step-time={step}", "--collective-timeout=600", *[f"--fault={f}" for f in faults]],
        "resources": {"nodes": nodes, "time_limit_min": 10, "spare_nodes": spares},
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


PROGRESS = re.compile(r"\biteration\s+\d+/")


def first_progress_after(logs: Path, after: datetime) -> datetime | None:
    """The earliest progress line after `after` in any node log of a segment."""
    best = None
    for log in logs.glob("*.log"):
        for line in log.read_text(errors="replace").splitlines():
            if PROGRESS.search(line):
                t = ts(line.split()[0])
                if t > after:
                    best = t if best is None or t < best else best
                    break
    return best


def fault_to_running(d: Path, args: argparse.Namespace, spares: int, i: int) -> tuple[float, float, str] | str:
    """One run of 2 nodes (+ `spares`) with ECC on node2 at iteration 15 of 40: (seconds from the ECC line to the
    first progress line of segment 2, seconds from the controller starting segment 2 (the restart request or
    the sbatch) to that line, how segment 2 ran), or why the sample is void."""
    name = f"lat-{'spare' if spares else 'resub'}-{os.getpid()}-{i}"
    cfg = config(d, name, ["ecc:node2:15"], args, 40, 0.05, nodes=2, spares=spares)
    try:
        res = subprocess.run([sys.executable, "-m", "orchestrator", "run", str(cfg)], env=ENV, cwd=REPO,
                             capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        return "the run timed out"
    finally:
        subprocess.run(["scancel", "--name", ",".join(f"{name}.seg{k:04d}" for k in range(1, 7))], env=ENV,
                       capture_output=True)
    if res.returncode != 0:
        return f"the run exited {res.returncode}: {(res.stdout + res.stderr)[-300:]}"
    st = state(cfg)
    if len(st["segments"]) < 2 or st["status"] != "done":
        return f"expected a second segment and done, got {len(st['segments'])} segment(s), {st['status']}"
    s1, s2 = st["segments"][0], st["segments"][1]
    how = f"in job {s2['job_id']}" if s2.get("in_job_of") else f"new job {s2['job_id']}"
    if bool(s2.get("in_job_of")) != bool(spares) or (s2["job_id"] == s1["job_id"]) != bool(spares):
        return f"segment 2 ran {how}, not {'inside the job' if spares else 'as a new job'}"
    segs = d / "run" / "segments"
    ecc = next((ln for ln in (segs / "0001" / "logs" / "node2.log").read_text().splitlines()
                if "uncorrectable ECC" in ln), None)
    if ecc is None:
        return "no ECC line in segment 1's node2 log"
    fault = ts(ecc.split()[0])
    again = first_progress_after(segs / "0002" / "logs", fault)
    if again is None:
        return "no progress line in segment 2's logs"
    return (again - fault).total_seconds(), (again - ts(s2["submitted_at"])).total_seconds(), \
        f"{how} on {','.join(s2['nodes'])}"


def restart_latency(args: argparse.Namespace) -> None:
    """Fault -> training running again, `args.faults` runs each with 1 spare (in the job) and 0 (new segment)."""
    took: dict[int, list[float]] = {1: [], 0: []}
    start: dict[int, list[float]] = {1: [], 0: []}
    for i in range(args.faults):
        for spares in (1, 0):  # interleaved, so that a drift of the cluster hits both alike
            with tempfile.TemporaryDirectory(dir="/tmp") as d:
                got = fault_to_running(Path(d), args, spares, i)
            label = "in allocation" if spares else "new segment"
            if isinstance(got, str):
                print(f"  fault {i + 1:2d} {label:13s}: void ({got})", flush=True)
                continue
            took[spares].append(got[0])
            start[spares].append(got[1])
            print(f"  fault {i + 1:2d} {label:13s}: {got[0]:5.1f} s, {got[1]:4.1f} s of it from the controller's "
                  f"start of segment 2 ({got[2]})", flush=True)
    a, b = took[1], took[0]
    if not a or not b:
        print("not enough samples")
        return
    ma, mb = statistics.median(a), statistics.median(b)
    print(f"\nfault -> training running again (ECC line -> first progress line of the next segment), "
          f"poll {args.poll:g} s, cascade_grace {args.grace:g} s")
    print(f"{'':22s} {'inside the allocation':>22s} {'new segment':>14s}")
    print(f"{'faults measured':22s} {len(a):>22d} {len(b):>14d}")
    print(f"{'median':22s} {ma:>20.1f} s {mb:>12.1f} s")
    print(f"{'min .. max':22s} {f'{min(a):.1f} .. {max(a):.1f} s':>22s} {f'{min(b):.1f} .. {max(b):.1f} s':>14s}")
    sa, sb = statistics.median(start[1]), statistics.median(start[0])
    print(f"{'of it: start -> running':22s} {sa:>20.1f} s {sb:>12.1f} s   (restart request / sbatch -> first progress)")
    print(f"ratio new segment / inside the allocation: {mb / ma:.2f}x fault -> running, {sb / sa:.2f}x start -> "
          "running (an idle cluster: no queue wait)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--poll", type=float, default=2.0)
    ap.add_argument("--stall", type=float, default=20.0)
    ap.add_argument("--grace", type=float, default=3.0)
    ap.add_argument("--mode", choices=("reaction", "restart", "all"), default="reaction",
                    help="reaction: 1 and 2 (default); restart: 3; all: every measurement")
    ap.add_argument("--faults", type=int, default=10, help="--mode restart: injected faults per variant")
    args = ap.parse_args()
    if args.mode in ("restart", "all"):
        restart_latency(args)
    if args.mode == "restart":
        return
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
