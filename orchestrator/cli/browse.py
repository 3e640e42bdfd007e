"""Reading runs without a controller: `logs` (a segment's node output, as `srun -l` would label it)
and `runs` (every run under a directory, its state, iteration and ETA). Read-only: nothing is
created or locked."""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path
from typing import Annotated

import typer

from orchestrator.cli.common import _state_for, app, err, fail, loaded, out, wiring
from orchestrator.cli.following import Follower, node_logs, node_name, show
from orchestrator.clock import Clock, RealClock
from orchestrator.contract import SegmentPaths
from orchestrator.state import STATE_FILE, RunState, StateError, StateStore
from orchestrator.views.ettr import run_metrics
from orchestrator.views.nodelogs import merge
from orchestrator.views.text import clean

MAX_RUNS = 10_000


def _segment(state: RunState, index: int | None, where: str) -> int:
    if not state.segments:
        raise fail([f"{where}: no segment has been submitted yet"], 1)
    seg = (state.segments[-1] if index is None
           else next((s for s in state.segments if s.index == index), None))
    if seg is None:
        raise fail([f"{where}: no segment {index} (segments 1-{state.segments[-1].index})"], 1)
    return seg.index


def _tail_lines(path: Path, lines: int, whole: bool = False) -> tuple[list[str], int]:
    """The last `lines` lines of a log, read from its end (a 2 GB log costs what its end costs), and
    the offset after them. `whole`: a half-written last line is left out (following prints it once
    it is complete)."""
    if lines == 0 and not whole:
        return [], 0
    try:
        # never through a link swapped in since it was listed, never waiting on a FIFO
        with os.fdopen(os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK), "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            start = max(0, size - lines * 512 - 65536)
            fh.seek(start)
            data = fh.read(size - start)
    except OSError as exc:
        raise fail([f"{path}: cannot read: {exc.strerror or exc}"], 1) from None
    if whole:
        data = data[: data.rfind(b"\n") + 1]
    found = [clean(x.decode("utf-8", "replace").replace("\x00", ""))
             for x in data.split(b"\n")[-lines - 1:] if x.strip()]
    return (found[-lines:] if lines else []), start + len(data)


@app.command()
def logs(
    ctx: typer.Context,
    target: Annotated[Path, typer.Argument(help="Config file or run directory.")],
    node: Annotated[str | None, typer.Option("--node", help="One node's log (default: every "
                                                            "node's).")] = None,
    segment: Annotated[int | None, typer.Option("--segment", help="Segment number (default: the "
                                                                  "latest; -f follows into the "
                                                                  "next ones).")] = None,
    lines: Annotated[int, typer.Option("-n", "--lines", min=0, max=100_000,
                                       help="Lines from the end of each node's log (0: none).")]
    = 20,
    follow: Annotated[bool, typer.Option("-f", "--follow", help="Keep printing what the nodes "
                                                                "write, into the next segments, "
                                                                "until the run ends.")] = False,
) -> None:
    """Print a segment's node output: the last lines of every node in time order (each line after
    its node's name), or of one. With -f, keep printing until the run is done, stopped or
    cancelled.

    \b
    Examples:
      orchestrator logs runs/demo
      orchestrator logs runs/demo --node node3 --segment 1 -n 50
      orchestrator logs runs/demo -f -n 0
    """
    store, where = _state_for(target)
    state, waited = (first_state(store, where, wiring(ctx).clock()) if follow
                     else (loaded(store, where), False))
    lines = 100_000 if waited else lines  # all it printed began after logs did
    # nothing submitted yet: -f follows the first segment once there is one
    index = None if follow and segment is None and not state.segments else _segment(state, segment,
                                                                                      where)
    paths = None if index is None else SegmentPaths.of(store.run_dir, index)
    found = [] if paths is None else node_logs(paths, node)
    if paths is not None and not found and not follow:
        raise fail([f"{clean(paths.logs)}: "
                    + ("no node log yet" if node is None else f"no log of node {clean(node)}")], 1)
    offsets: dict[Path, int] = {}
    blocks: dict[str, list[str]] = {}
    for path in found:
        blocks[node_name(path)], offsets[path] = _tail_lines(path, lines, whole=follow)
    last: dict[str, datetime] = {}
    show(merge(blocks, last), node is None)
    if follow:
        follower = Follower(store, where, node, segment, wiring(ctx).clock())
        follower.start(index, offsets, last)
        follower.run()


def first_state(store: StateStore, where: str, clock: Clock) -> tuple[RunState, bool]:
    """`logs -f` started before `orchestrator run` wrote the run's first state (two panes, the
    logs one first): it waits for it, as `tail -F` waits for a file, saying so once. The state,
    and whether it waited."""
    said = False
    while (state := _state_or_fail(store)) is None:
        if not said:
            err.print(clean(f"{where}: no run state yet: waiting for 'orchestrator run' to start "
                            "it (Ctrl-C stops)"), markup=False, highlight=False, soft_wrap=True)
            said = True
        clock.sleep(1.0)
    return state, said


def _state_or_fail(store: StateStore) -> RunState | None:
    try:
        return store.load()
    except StateError as exc:
        raise fail([str(exc)], 1) from None


@app.command()
def runs(directory: Annotated[Path,
                              typer.Argument(
                                  help="Where to look (its subdirectories too).")] = Path("."),
         as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """List the runs under a directory: state, segments, iteration, goal, ETA.

    \b
    Example:
      orchestrator runs runs
    """
    if not directory.is_dir():
        raise fail([f"{clean(directory)}: not a directory"])
    rows = []
    for state_file in sorted(directory.rglob(STATE_FILE))[:MAX_RUNS]:
        rows.append(_row(state_file))
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    if not rows:
        out.print(f"no runs under {clean(directory)}", markup=False)
        return
    out.print(f"{'run':<24} {'state':<10} {'segs':>4} {'iteration':>10} {'goal':>10} {'eta':>8} "
              " dir", markup=False)
    for r in rows:
        out.print(f"{clean(r['run'])[:24]:<24} {r['status']:<10} {r['segments']:>4} "
                  f"{r['iteration']:>10} {r['goal']:>10} {r['eta']:>8}  {clean(r['dir'])}",
                  markup=False, highlight=False)


def _row(state_file: Path) -> dict[str, object]:
    run_dir = state_file.parent
    # a FIFO or a link in place of a state is refused, not waited on (StateStore reads it that way)
    try:
        state = StateStore(run_dir).load()
    except (OSError, StateError) as exc:
        return {"run": "?", "status": "unreadable", "segments": 0, "iteration": "-", "goal": "-",
                "eta": "-", "dir": str(run_dir), "problem": str(exc)[:200]}
    if state is None:
        return {"run": "?", "status": "no state", "segments": 0, "iteration": "-", "goal": "-",
                "eta": "-", "dir": str(run_dir)}
    eta = run_metrics(state,
                      RealClock().now()).get("eta_s") if state.status.value == "running" else None
    return {"run": state.run, "status": state.status.value, "segments": len(state.segments),
            "iteration": state.best_iteration(), "goal": state.target_iteration or "-",
            "eta": f"{eta / 3600:.1f} h" if isinstance(eta, int | float) else "-",
            "dir": str(run_dir)}


@app.command()
def notify(config: Annotated[Path, typer.Argument(help="The run config whose notify.urls to try.")],
           test: Annotated[bool,
                           typer.Option("--test",
                                        help="Send a test notification now.")] = False) -> None:
    """Check where the run's alerts go; with --test, send one test notification through every
    notify.urls entry and say each one's result (exit 1 if one is not delivered). The URLs carry
    tokens: only their schemes and hosts are printed.

    \b
    Example:
      orchestrator notify configs/demo.yaml --test
    """
    from orchestrator.cli.common import load
    from orchestrator.notify import Notifier
    from orchestrator.redact import shown_url

    s = load(config, [])
    if not s.notify.urls:
        out.print(f"{clean(config)}: notify.urls is empty: alerts are only logged", markup=False)
        return
    out.print(f"notify.urls: {len(s.notify.urls)}", markup=False)
    if not test:
        for url in s.notify.urls:
            out.print(f"  {clean(shown_url(url))}", markup=False, highlight=False)
        return
    results = Notifier(s.notify.urls, RealClock()).send_each(
        f"{s.name}: test notification",
        f"A test from `orchestrator notify --test` for run {s.name}.")
    for shown, why in results:
        out.print(f"  {clean(shown)}: {'ok' if why is None else clean(why)}", markup=False,
                  highlight=False)
    failed = sum(why is not None for _, why in results)
    if failed:
        raise fail([f"{clean(config)}: the test notification was not delivered through {failed} of "
                    f"{len(results)} URLs (see above)"], 1)
    out.print("test notification delivered", markup=False)
