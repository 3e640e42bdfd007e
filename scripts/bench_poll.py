#!/usr/bin/env python3
"""Cost of one controller poll cycle as the cluster grows: per-node log reads, and Slurm commands.

Usage: python scripts/bench_poll.py [--nodes 4096] [--cycles 20] [--lines-per-node 3]
       python scripts/bench_poll.py --backlog-mb 16 [--nodes 4096] [--backlog-polls 4]
Prints, for 8 nodes and for --nodes: wall time per idle cycle and per cycle with appends, each beside its I/O
floor measured alternately in the same run (listing the logs and records directories; plus reading the appended
bytes) and their ratio (goal <= 2), CPU share,
the controller's peak RSS, and the number of Slurm commands per poll (which must not grow with nodes).
"""

from __future__ import annotations

import argparse
import re
import resource
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from orchestrator.backends.slurm import SlurmBackend
from orchestrator.clock import FakeClock
from orchestrator.diagnose.signatures import build_table
from orchestrator.model import JobRef
from orchestrator.settings import SlurmBackendCfg
from orchestrator.watch.reader import scan_dir
from orchestrator.watch.segment import SegmentWatch

LINE = (" iteration {it:8d}/  500000 | consumed samples: {s:12d} | elapsed time per iteration (ms): 1001.2 | "
        "lm loss: 2.1E+00 |\n")


def setup(root: Path, n: int) -> list[Path]:
    logs, nodes = root / "logs", root / "nodes"
    logs.mkdir(parents=True)
    nodes.mkdir()
    paths = [logs / f"gpu-{i:05d}.log" for i in range(n)]
    for p in paths:
        p.write_text("".join(LINE.format(it=i, s=i * 2048) for i in range(50)))
        (nodes / f"{p.stem}.heartbeat.json").write_text("{}")  # each agent's heartbeat, as on a real segment
    return paths


def new_watch(root: Path, paths: list[Path]) -> SegmentWatch:
    watch = SegmentWatch(root, build_table(), re.compile(r"iteration\s+(\d+)\s*/\s*\d+"), read_timeout_s=10)
    watch.slurm_nodes = [p.stem for p in paths]  # the job's node list, as the controller hands it over
    return watch


def backlog(n: int, mb: int, polls: int) -> None:
    """Peak RSS while the first polls read an `mb` MiB backlog on each of `n` nodes (one realistic log,
    hard-linked n times: the same bytes from the page cache, no n x mb of disk)."""
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        paths = setup(root, n)
        block = "".join(LINE.format(it=i, s=i * 2048) if i % 7 else
                        f"gpu-{i % n:05d}:{i % 8}:{i % 8} [{i % 8}] NCCL INFO Channel {i % 32:02d}/0 : {i % 8}[{i % 8}]"
                        f" -> {(i + 1) % 8}[{(i + 1) % 8}] via P2P/CUMEM/read\n" for i in range(20000))
        big = root / "backlog.log"
        with big.open("w") as fh:
            while fh.tell() < mb << 20:
                fh.write(block)
        for p in paths:
            p.unlink()
            p.hardlink_to(big)
        watch = new_watch(root, paths)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        clock, t0, done = FakeClock(), time.perf_counter(), 0
        for k in range(polls or 10**9):  # noqa: B007 - k counts the polls
            watch.poll(clock.now())
            done = sum(nw.tail.offset for nw in watch.nodes.values())
            if done >= n * big.stat().st_size:
                break
        wall = time.perf_counter() - t0
        watch.close()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"backlog {mb} MiB x {n} nodes: {k + 1} poll(s) read {done / 2**30:.1f} GiB in {wall:.0f} s; peak RSS "
          f"{peak:.0f} MB (before the first poll {before:.0f} MB; goal <= 300 MB)")


def cycle(watch: SegmentWatch, clock: FakeClock) -> tuple[float, float]:
    w0, c0 = time.perf_counter(), time.process_time()
    watch.poll(clock.now())
    return time.perf_counter() - w0, time.process_time() - c0


def idle_floor(root: Path) -> float:
    """The I/O an idle poll cannot avoid: listing (scandir + stat) the logs and records directories."""
    w0 = time.perf_counter()
    scan_dir(root / "logs")
    scan_dir(root / "nodes")
    return time.perf_counter() - w0


def busy_floor(root: Path, offsets: dict[Path, int]) -> float:
    """The idle floor plus reading what every node appended since the last cycle (open, seek, read)."""
    w0 = time.perf_counter()
    sizes = scan_dir(root / "logs")
    scan_dir(root / "nodes")
    for path, off in offsets.items():
        if sizes.get(path.name, (0, 0.0))[0] != off:
            with path.open("rb") as fh:
                fh.seek(off)
                offsets[path] = off + len(fh.read())
    return time.perf_counter() - w0


def measure(n: int, cycles: int, lines_per_node: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        paths = setup(root, n)
        watch = new_watch(root, paths)
        clock = FakeClock()
        watch.poll(clock.now())  # first read of everything
        idle, idle_io = [], []
        for _ in range(cycles):  # alternated with its floor, so both see the same machine
            idle.append(cycle(watch, clock))
            idle_io.append(idle_floor(root))
        busy, busy_io = [], []
        offsets = {p: p.stat().st_size for p in paths}
        it = 50
        for _ in range(cycles):
            it += lines_per_node
            chunk = "".join(LINE.format(it=it + k, s=(it + k) * 2048) for k in range(lines_per_node))
            for p in paths:
                with p.open("a") as fh:
                    fh.write(chunk)
            busy.append(cycle(watch, clock))
            busy_io.append(busy_floor(root, offsets))
        watch.close()
    sacct_calls = count_slurm_commands(n)
    return {
        "idle_ms": statistics.median(w for w, _ in idle) * 1000,
        "idle_floor_ms": statistics.median(idle_io) * 1000,
        "busy_floor_ms": statistics.median(busy_io) * 1000,
        "idle_cpu": sum(c for _, c in idle) / sum(w for w, _ in idle),
        "busy_ms": statistics.median(w for w, _ in busy) * 1000,
        "busy_cpu": sum(c for _, c in busy) / sum(w for w, _ in busy),
        "lines_per_cycle": n * lines_per_node,
        "slurm_cmds_per_poll": sacct_calls,
    }


def count_slurm_commands(n_nodes: int) -> float:
    """Poll one job on an n-node allocation through the real Slurm backend with a recording runner."""
    calls: list[list[str]] = []
    nodelist = f"gpu-[00000-{n_nodes - 1:05d}]"

    def runner(argv: list[str], _timeout: float) -> str:
        calls.append(argv)
        return f"42|run.seg0001|RUNNING|0:0|{nodelist}|2026-01-01T00:00:00|2026-01-01T00:00:01|Unknown\n"

    backend = SlurmBackend(SlurmBackendCfg(), FakeClock(), Path("/tmp"), runner=runner)
    ref = JobRef(job_id="42", submitted_at=datetime(2026, 1, 1, tzinfo=UTC), backend="slurm")
    for _ in range(10):
        st = backend.poll([ref])["42"]
        assert len(st.nodes) == n_nodes
    return len(calls) / 10


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--nodes", type=int, default=4096)
    ap.add_argument("--cycles", type=int, default=20)
    ap.add_argument("--lines-per-node", type=int, default=3, help="appended per node between two polls")
    ap.add_argument("--backlog-mb", type=int, default=0, help="instead: peak RSS with this backlog per node")
    ap.add_argument("--backlog-polls", type=int, default=4, help="polls to measure with --backlog-mb (0: until read)")
    args = ap.parse_args()
    if args.backlog_mb:
        backlog(args.nodes, args.backlog_mb, args.backlog_polls)
        return
    rows = {n: measure(n, args.cycles, args.lines_per_node) for n in (8, args.nodes)}
    print(f"{'nodes':>6} {'idle ms':>8} {'floor':>6} {'x':>5} {'idle cpu':>9} {'append ms':>10} {'floor':>6} "
          f"{'x':>5} {'append cpu':>11} {'lines/poll':>11} {'slurm cmds/poll':>16}")
    for n, r in rows.items():
        print(f"{n:>6} {r['idle_ms']:>8.1f} {r['idle_floor_ms']:>6.1f} {r['idle_ms'] / r['idle_floor_ms']:>5.1f} "
              f"{r['idle_cpu']:>9.0%} {r['busy_ms']:>10.1f} {r['busy_floor_ms']:>6.1f} "
              f"{r['busy_ms'] / r['busy_floor_ms']:>5.1f} {r['busy_cpu']:>11.0%} {r['lines_per_cycle']:>11.0f} "
              f"{r['slurm_cmds_per_poll']:>16.1f}")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    big = rows[args.nodes]
    print(f"peak RSS {rss:.0f} MB; idle cycle at {args.nodes} nodes: {big['idle_ms']:.1f} ms (goal < 50 ms); "
          f"ratio {args.nodes}/8 nodes idle time: {big['idle_ms'] / rows[8]['idle_ms']:.0f}x; "
          f"Slurm commands per poll: {rows[8]['slurm_cmds_per_poll']:.0f} at 8 nodes, "
          f"{big['slurm_cmds_per_poll']:.0f} at {args.nodes}")


if __name__ == "__main__":
    main()
