#!/usr/bin/env python3
"""How fast and how right hangs are named, on the test cluster, with the real PyTorch job
(scripts/torch_train.py: DDP over Gloo on 3 nodes) and the default watch settings.

Each trial runs one segment and injects one hang once the run has its cadence: a rank stopped
(SIGSTOP), sleeping before its all-reduce, spinning in Python holding the GIL, a node's job frozen
in D state (the testbed's cgroup freezer), or two ranks stopped at once. Onset is the fault's own
log line (or the moment of the freeze); the controller's cancel and verdict times come from
state.json. Healthy runs pause for evals (every rank, no progress lines) and slow checkpoint saves
(rank 0 writing while the others wait in a barrier): any hang verdict there is a false one.

Baseline, side by side: the fixed limit (watch.stall_timeout_s, 1200 s by default) that a hang
waited for before the early limit existed, and PyTorch's default collective timeout (600 s).

  scripts/slurm-testbed.sh start && export SLURM_CONF=/tmp/orch-testbed/etc/slurm.conf
  python scripts/bench_hang.py --hangs 10 --healthy-min 10 --out /tmp/bench_hang.json

Hangs in the first minute of progress and after a resume, tree against tree: scripts/bench_hang_early.py.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
TESTBED = REPO / "scripts" / "slurm-testbed.sh"
KINDS = ("stop", "sleep", "spin", "dstate", "two")
NODES = ["node1", "node2", "node3"]  # --nodes: the 3 the jobs run on; the testbed's others are excluded
EXCLUDE: list[str] = []
FIXED_LIMIT_S, COLLECTIVE_DEFAULT_S = 1200.0, 600.0


def config(root: Path, name: str, iters: int, extra: list[str], minutes: int) -> Path:
    cfg = {
        "name": name, "run_dir": str(root / "run"), "workdir": str(REPO),
        "command": ["{python}", str(REPO / "scripts" / "torch_train.py"), f"--iters={iters}", "--ckpt-every=100",
                    "--ckpt-dir={run_dir}/checkpoints", "--resume={checkpoint}",
                    "--sync-dir={run_dir}/sync/seg{segment}", "--step-time=0.05", "--collective-timeout=3600",
                    *extra],
        "env": {"OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"},
        "resources": {"nodes": 3, "time_limit_min": minutes, "exclude": EXCLUDE},
        "checkpoint": {"dir": str(root / "run" / "checkpoints"), "preset": "megatron"},
        "goal": {"target_iteration": iters},
        "policy": {"max_segments": 1},
        "backend": {"kind": "slurm", "slurm": {"command_timeout_s": 20}},
    }
    root.mkdir(parents=True, exist_ok=True)
    p = root / f"{name}.yaml"
    p.write_text(yaml.safe_dump(cfg))
    return p


def orch(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "orchestrator", *args], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def ts(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def fault_onset(run: Path) -> datetime | None:
    """The earliest `[fault]` line of any node's log: when the hang began."""
    times = [ts(line.split(" ", 1)[0]) for log in (run / "segments" / "0001" / "logs").glob("*.log")
             for line in log.read_text(errors="replace").splitlines() if "[fault]" in line]
    return min(times) if times else None


def iteration(run: Path) -> int:
    try:
        seg = json.loads((run / "state.json").read_text())["segments"][0]
        return int(seg.get("end_iteration") or 0)
    except (OSError, ValueError, KeyError, IndexError):
        return 0


def trial(root: Path, kind: str, nodes: list[str], at: int) -> dict[str, Any]:
    name = f"bh-{kind}-{uuid.uuid4().hex[:6]}"
    fault = "stop" if kind == "two" else kind
    extra = [] if kind == "dstate" else [f"--fault={fault}:{n}:{at}" for n in nodes]
    cfg = config(root, name, at + 400, extra, 10)
    run, onset = root / "run", None
    proc = orch("run", str(cfg))
    try:
        if kind == "dstate":
            deadline = time.monotonic() + 300
            while iteration(run) < at and time.monotonic() < deadline and proc.poll() is None:
                time.sleep(0.5)
            subprocess.run([str(TESTBED), "freeze-job", nodes[0]], check=False, capture_output=True)
            onset = datetime.now().astimezone()
        proc.wait(timeout=900)
    except subprocess.TimeoutExpired:
        pass  # not named within 15 min: recorded as such below
    finally:
        if kind == "dstate":
            subprocess.run([str(TESTBED), "thaw-job", nodes[0]], check=False, capture_output=True)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
            subprocess.run(["scancel", "-n", f"{name}.seg0001"], check=False, capture_output=True)
    seg = json.loads((run / "state.json").read_text())["segments"][0]
    onset = onset or fault_onset(run)
    row: dict[str, Any] = {"kind": kind, "expected": sorted(nodes), "culprits": seg.get("culprit_nodes", []),
                           "cause": seg.get("cause"), "cancel": seg.get("cancelled_by_controller", "")}
    if onset and seg.get("cancelled_at"):
        row["detect_s"] = (ts(seg["cancelled_at"]) - onset).total_seconds()
    if onset and seg.get("ended_at"):
        row["name_s"] = (ts(seg["ended_at"]) - onset).total_seconds()
    if onset and "name_s" not in row:  # never named: the time waited, a lower bound, counts
        row["detect_s"] = row["name_s"] = (datetime.now().astimezone() - onset).total_seconds()
        row["unnamed"] = True
    row["right"] = row["cause"] == "hang" and sorted(row["culprits"]) == row["expected"]
    row["healthy_blamed"] = sorted(set(row["culprits"]) - set(nodes))
    return row


def flagged_at(run: Path) -> datetime | None:
    """When the controller logged the slowdown (its log line's own time)."""
    log = run / "controller.log"
    for line in (log.read_text(errors="replace").splitlines() if log.exists() else []):
        if "the job runs" in line and "slower than before" in line:
            return ts(line.split(" ", 1)[0])
    return None


def named_slow(run: Path) -> tuple[datetime, str] | None:
    """When the controller named the slow node (or logged that it named nobody: node "")."""
    log = run / "controller.log"
    for line in (log.read_text(errors="replace").splitlines() if log.exists() else []):
        if " slow node " in line and "WARNING slow node" in line:
            return ts(line.split(" ", 1)[0]), line.split("WARNING slow node ", 1)[1].split(":", 1)[0]
        if "no slow node named" in line:
            return ts(line.split(" ", 1)[0]), ""
    return None


def slow_trial(root: Path, node: str, at: int, factor: float, wait_s: float = 240) -> dict[str, Any]:
    """One node slowed by `factor` from iteration `at`: when is the job's slowdown flagged, and which node do
    the profiles name?"""
    name = f"bh-slow-{uuid.uuid4().hex[:6]}"
    cfg = config(root, name, 1_000_000, [f"--fault=slow:{node}:{at}", f"--slow-factor={factor}"], 15)
    run, proc = root / "run", orch("run", str(cfg))
    deadline, onset, flag, named = time.monotonic() + 300 + wait_s, None, None, None
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            time.sleep(2)
            onset = onset or fault_onset(run)
            flag, named = flagged_at(run), named_slow(run)
            # the profiles take 5 s and the answers are waited for 30 s at most
            if named or (flag and (datetime.now().astimezone() - flag).total_seconds() > 60):
                break
            if onset and not flag and (datetime.now().astimezone() - onset).total_seconds() > wait_s:
                break
    finally:
        proc.kill()
        proc.wait()
        subprocess.run(["scancel", "-n", f"{name}.seg0001"], check=False, capture_output=True)
    row: dict[str, Any] = {"kind": f"slow{factor}", "node": node, "flagged": flag is not None,
                           "named": named[1] if named else None, "right": bool(named and named[1] == node)}
    if onset and flag:
        row["flag_s"] = (flag - onset).total_seconds()
    if onset and named:
        row["name_s"] = (named[0] - onset).total_seconds()
    return row


def healthy(root: Path, minutes: int) -> dict[str, Any]:
    """A run with eval and slow-save pauses until its time limit: every hang verdict is false."""
    name = f"bh-healthy-{uuid.uuid4().hex[:6]}"
    # every rank evaluates (600), rank 0 alone (1000, announced by its log), rank 0 saves slowly (500)
    pauses = ["--eval-every=600", "--eval0-every=1000", "--eval-time=45", "--save-time=30", "--ckpt-every=500"]
    cfg = config(root, name, 10_000_000, pauses, minutes)
    config_run = root / "run"
    t0 = time.monotonic()
    orch("run", str(cfg)).wait(timeout=minutes * 60 + 300)
    seg = json.loads((config_run / "state.json").read_text())["segments"][0]
    return {"minutes": (time.monotonic() - t0) / 60, "cause": seg.get("cause"),
            "false_slowdown": flagged_at(config_run) is not None,
            "false_slow_node": bool((found := named_slow(config_run)) and found[1]),
            "false_hang": seg.get("cause") == "hang" or bool(seg.get("cancelled_by_controller")),
            "culprits": seg.get("culprit_nodes", []), "cancel": seg.get("cancelled_by_controller", "")}


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


def report_slow(slow: list[dict[str, Any]]) -> None:
    for kind in sorted({r["kind"] for r in slow}):
        ks = [r for r in slow if r["kind"] == kind]
        lat = [r["flag_s"] for r in ks if "flag_s" in r]
        name = [r["name_s"] for r in ks if "name_s" in r]
        print(f"  {kind:8s} n={len(ks)} flagged={sum(r['flagged'] for r in ks)} onset -> flag median "
              f"{statistics.median(lat) if lat else float('nan'):.0f} s, max {max(lat) if lat else float('nan'):.0f} s;"
              f" right node named {sum(r.get('right', False) for r in ks)}, a wrong one "
              f"{sum(bool(r.get('named')) and not r.get('right') for r in ks)}, nobody "
              f"{sum(r.get('named') == '' for r in ks)}; onset -> named max "
              f"{max(name) if name else float('nan'):.0f} s")


def report(rows: list[dict[str, Any]], calm: list[dict[str, Any]]) -> dict[str, Any]:
    detect = [r["detect_s"] for r in rows if "detect_s" in r]
    named = [r["name_s"] for r in rows if "name_s" in r]
    out = {"hangs": len(rows), "top1": sum(r["right"] for r in rows) / max(1, len(rows)),
           "healthy_excluded": sum(len(r["healthy_blamed"]) for r in rows),
           "detect_median_s": statistics.median(detect) if detect else None, "detect_p95_s": pct(detect, 0.95),
           "name_median_s": statistics.median(named) if named else None, "name_p95_s": pct(named, 0.95),
           "healthy_minutes": sum(c["minutes"] for c in calm), "false_hangs": sum(c["false_hang"] for c in calm),
           "by_kind": {k: {"n": len(ks), "right": sum(r["right"] for r in ks),
                           "detect_median_s": statistics.median([r["detect_s"] for r in ks if "detect_s" in r] or [0])}
                       for k in KINDS if (ks := [r for r in rows if r["kind"] == k])}}
    print(f"hangs {out['hangs']}: top-1 {out['top1']:.0%}, healthy nodes excluded {out['healthy_excluded']}")
    print(f"onset -> cancel: median {out['detect_median_s']} s, p95 {out['detect_p95_s']} s; "
          f"onset -> verdict: median {out['name_median_s']} s, p95 {out['name_p95_s']} s")
    print(f"baseline (same settings, no early limit): >= {FIXED_LIMIT_S:.0f} s (stall_timeout_s), or "
          f"{COLLECTIVE_DEFAULT_S:.0f} s when the peers' collective timeout fires first; ratio of the p95 to the "
          f"fixed limit: {out['detect_p95_s'] / FIXED_LIMIT_S:.3f}")
    print(f"healthy runs: {out['healthy_minutes']:.0f} min with eval and save pauses, false hang verdicts "
          f"{out['false_hangs']}")
    for k, v in out["by_kind"].items():
        print(f"  {k:7s} n={v['n']:3d} right={v['right']:3d} median onset->cancel {v['detect_median_s']:.0f} s")
    return out


def merge(files: list[Path], out: Path | None) -> int:
    """One summary over several campaigns (each file one `--out`): hangs, slow trials and healthy runs pooled."""
    rows, slow, calm = [], [], []
    for f in files:
        d = json.loads(f.read_text())
        rows += d["hangs"]
        slow += d["slow"]
        calm += d["healthy"]
        print(f"{f}: {len(d['hangs'])} hangs, {len(d['slow'])} slow trials, "
              f"{sum(c['minutes'] for c in d['healthy']):.0f} healthy min")
    summary = report(rows, calm)
    report_slow(slow)
    print(f"healthy runs: false slowdowns {sum(c.get('false_slowdown', False) for c in calm)}, "
          f"false slow nodes {sum(c.get('false_slow_node', False) for c in calm)}")
    if out:
        out.write_text(json.dumps({"summary": summary, "files": [str(f) for f in files], "hangs": rows,
                                   "slow": slow, "healthy": calm}, indent=1))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hangs", type=int, default=10)
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--healthy-min", type=int, default=0, help="minutes of healthy run (0: none)")
    ap.add_argument("--slow", type=int, default=0, help="slow-node trials")
    ap.add_argument("--slow-factors", default="1.1,1.25,4", help="the slowdowns, in turn")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--nodes", default=",".join(NODES),
                    help="the 3 testbed nodes the jobs run on (the others are excluded): two campaigns can run at once"
                         " on a testbed started with ORCH_TESTBED_NODES=7")
    ap.add_argument("--merge", type=Path, nargs="+", help="print one summary of these --out files, run nothing")
    args = ap.parse_args()
    if args.merge:
        return merge(args.merge, args.out)
    NODES[:] = args.nodes.split(",")
    everyone = subprocess.run(["sinfo", "-h", "-N", "-o", "%N"], capture_output=True, text=True).stdout.split()
    EXCLUDE[:] = sorted(set(everyone) - set(NODES))
    rng = random.Random(args.seed)
    kinds = args.kinds.split(",")
    rows, calm = [], []
    base = Path(subprocess.run(["mktemp", "-d"], capture_output=True, text=True, check=True).stdout.strip())
    for i in range(args.hangs):
        kind = kinds[i % len(kinds)]
        nodes = rng.sample(NODES, 2 if kind == "two" else 1)
        # 60-80 s into the segment: the cadence needs 6 gaps between progress sightings (30 s at a 5 s poll)
        row = trial(base / f"t{i:03d}", kind, nodes, rng.randint(1100, 1400))
        rows.append(row)
        print(json.dumps(row), flush=True)
    slow = []
    for i in range(args.slow):
        factors = [float(f) for f in args.slow_factors.split(",")]
        factor = factors[i % len(factors)]
        slow.append(slow_trial(base / f"s{i:03d}", rng.choice(NODES), rng.randint(1400, 1600), factor))
        print(json.dumps(slow[-1]), flush=True)
    if args.healthy_min:
        calm.append(healthy(base / "healthy", args.healthy_min))
        print(json.dumps(calm[-1]), flush=True)
    out = report(rows, calm)
    report_slow(slow)
    if args.out:
        args.out.write_text(json.dumps({"summary": out, "hangs": rows, "slow": slow, "healthy": calm}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
