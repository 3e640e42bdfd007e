"""argv -> settings -> objects -> Controller.run(). The only place that sets up logging."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from loguru import logger
from rich.console import Console

from orchestrator.backends.base import Backend
from orchestrator.clock import Clock, RealClock
from orchestrator.diagnose.classify import Context, NodeEvidence, classify, infer_job_state
from orchestrator.diagnose.prefilter import Prefilter
from orchestrator.diagnose.scan import scan_file
from orchestrator.diagnose.signatures import build_table
from orchestrator.report import blacklist_table, drain_commands, status_json, summary_table, timeline_table
from orchestrator.settings import ConfigError, Settings, check_paths, load_settings, parse_overrides
from orchestrator.state import STOP_REQUEST, LockHeld, RunLock, StateError, StateStore, write_request

app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  help="Keep long multi-node training on Slurm moving: diagnose, blacklist, resume.")
out = Console(width=None if sys.stdout.isatty() else 200)
err = Console(stderr=True, soft_wrap=True)

EXIT_CONFIG = 2


def fail(lines: list[str], code: int = EXIT_CONFIG) -> typer.Exit:
    for line in lines:
        err.print(f"error: {line}", markup=False, highlight=False)
    return typer.Exit(code)


def setup_logging(run_dir: Path | None, verbose: bool) -> None:
    logger.remove()
    fmt = "{time:YYYY-MM-DD HH:mm:ss} {level: <7} {message}"
    logger.add(sys.stderr, level="DEBUG" if verbose else "INFO", format=fmt)
    if run_dir is not None:
        run_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        logger.add(run_dir / "controller.log", level="DEBUG", rotation="20 MB", retention=5,
                   format="{time:YYYY-MM-DDTHH:mm:ss.SSSZ} {level} {message} {extra}")


def load(config: Path, overrides: list[str]) -> Settings:
    try:
        s = load_settings(config, parse_overrides(overrides))
    except ConfigError as exc:
        raise fail(exc.problems) from None
    problems = check_paths(s)
    if problems:
        raise fail(problems)
    return s


def build_backend(s: Settings, clock: Clock) -> Backend:
    if s.backend.kind == "local":
        from orchestrator.backends.local import LocalBackend

        return LocalBackend(s.backend.local.node_names(), s.run_dir / "local-backend", clock)
    from orchestrator.backends.slurm import SlurmBackend

    return SlurmBackend(s.backend.slurm, clock, s.run_dir)


SetOpt = Annotated[list[str], typer.Option("--set", help="Override a setting: --set watch.poll_interval_s=5")]


@app.command()
def run(
    config: Annotated[Path, typer.Argument(help="The run's YAML config file.")],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the next submission; submit nothing.")] = False,
    cancel_on_exit: Annotated[bool, typer.Option(help="Cancel the running job when the controller stops.")] = False,
    verbose: Annotated[bool, typer.Option("-v", "--verbose")] = False,
    set_: SetOpt = [],  # noqa: B006 - typer needs a literal default
) -> None:
    """Run (or resume) the training until its goal, resubmitting segments as they end.

    Examples:
      orchestrator run configs/demo.yaml
      orchestrator run configs/example.yaml --dry-run
      orchestrator run configs/demo.yaml --set watch.poll_interval_s=1
    """
    s = load(config, set_)
    clock = RealClock()
    if dry_run:
        dry(s, clock)
        return
    setup_logging(s.run_dir, verbose)
    from orchestrator.controller import Controller

    lock = RunLock(s.run_dir)
    try:
        lock.acquire()
    except LockHeld as exc:
        raise fail([str(exc)], 1) from None
    from orchestrator.failpoints import Failpoints

    try:
        failpoint = Failpoints.from_env()
    except ValueError as exc:
        raise fail([str(exc)]) from None
    from orchestrator.notify import Notifier

    try:
        notifier = Notifier(s.notify.urls, clock, s.notify.max_per_hour, s.notify.dedup_window_s)
    except (ValueError, ImportError) as exc:
        raise fail([f"{config}: {exc}"]) from None
    backend = build_backend(s, clock)
    store = StateStore(s.run_dir, failpoint)
    ctl = Controller(s, backend, clock, store, notify=notifier, failpoint=failpoint)
    ctl.reloader = lambda: load_settings(config, parse_overrides(set_))
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, _f: ctl.request_stop(signal.Signals(signum).name))
    signal.signal(signal.SIGHUP, lambda _s, _f: ctl.request_reload())
    try:
        state = ctl.run()
    except StateError as exc:
        raise fail([str(exc)], 1) from None
    finally:
        lock.release()
    if cancel_on_exit and state.status.value == "running" and state.current and state.current.job_id:
        from orchestrator.model import JobRef

        cur = state.current
        assert cur.submitted_at is not None and cur.job_id is not None
        backend.cancel(JobRef(job_id=cur.job_id, submitted_at=cur.submitted_at, backend=backend.name))
    out.print(timeline_table(state))
    raise typer.Exit(0 if state.status.value in ("done", "running") else 1)


def dry(s: Settings, clock: Clock) -> None:
    from orchestrator.controller import Controller

    store = StateStore(s.run_dir)
    try:
        state = store.load()
    except StateError as exc:
        raise fail([str(exc)], 1) from None
    from orchestrator.state import RunState

    now = clock.now()
    state = state or RunState(run=s.name, created_at=now, updated_at=now)
    backend = build_backend(s, clock)
    ctl = Controller(s, backend, clock, store)
    spec, excl = ctl.next_spec(state)
    print(f"# dry run: nothing is submitted. Segment {spec.index} of run {s.name} ({s.backend.kind} backend)")
    print(f"# exclude: {spec.exclude_hostlist or '(none)'}" + (f"  [{excl.note}]" if excl.note else ""))
    print(f"# resume from: {spec.resume_from or '(no checkpoint: start from scratch)'} "
          f"(iteration {spec.start_iteration})")
    print(backend.render(spec))


def _state_for(target: Path) -> tuple[StateStore, str]:
    if target.is_dir():
        return StateStore(target), str(target)
    s = load(target, [])
    return StateStore(s.run_dir), str(s.run_dir)


@app.command()
def status(
    target: Annotated[Path, typer.Argument(help="A run's config file or its run directory.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    watch: Annotated[bool, typer.Option("--watch", help="Refresh in place every few seconds (Ctrl-C ends).")] = False,
    every: Annotated[float, typer.Option(help="Seconds between refreshes with --watch.")] = 5.0,
) -> None:
    """Where the run is, what happened to it and why: segments, causes, culprits, blacklist, time lost.

    Examples:
      orchestrator status configs/demo.yaml
      orchestrator status runs/demo --json
      orchestrator status configs/example.yaml --watch
    """
    store, where = _state_for(target)

    def load_state():  # noqa: ANN202 - RunState
        try:
            state = store.load()
        except StateError as exc:
            raise fail([str(exc)], 1) from None
        if state is None:
            raise fail([f"{where}: no run state yet (has 'orchestrator run' been started for this config?)"], 1)
        return state

    if as_json:
        print(json.dumps(status_json(load_state(), RealClock().now()), indent=2))
        return
    if not watch:
        out.print(status_view(load_state(), RealClock().now()))
        return
    from rich.live import Live

    clock = RealClock()
    with Live(status_view(load_state(), clock.now()), console=out, refresh_per_second=1) as live:
        try:
            while clock.sleep(every):
                live.update(status_view(load_state(), clock.now()))
        except KeyboardInterrupt:
            pass


def status_view(state: Any, now: Any) -> Any:
    from rich.console import Group

    parts: list[Any] = [summary_table(state, now), timeline_table(state)]
    if state.blacklist.entries:
        parts.append(blacklist_table(state, now))
    drains = drain_commands(state, now)
    if drains:
        parts.append("To take the blacklisted nodes out of service (an admin runs these):\n" + "\n".join(drains))
    return Group(*parts)


@app.command()
def report(
    target: Annotated[Path, typer.Argument(help="A run's config file or its run directory.")],
    out_dir: Annotated[Path | None, typer.Option("--out", help="Where to write (default: the run directory).")]
    = None,
) -> None:
    """Write a self-contained HTML page and a PNG: segment timeline by cause, iterations over time, time lost.

    Examples:
      orchestrator report configs/demo.yaml
      orchestrator report runs/demo --out /tmp/report
    """
    from orchestrator.timeline import write_report

    store, where = _state_for(target)
    state = store.load()
    if state is None:
        raise fail([f"{where}: no run state yet"], 1)
    html_path, png_path = write_report(state, RealClock().now(), out_dir or store.run_dir)
    out.print(f"wrote {html_path} and {png_path}", markup=False, highlight=False)


@app.command("import-sbatch")
def import_sbatch_cmd(
    script: Annotated[Path, typer.Argument(help="An existing batch script with #SBATCH lines.")],
    output: Annotated[Path | None, typer.Option("-o", "--output", help="Write the config here (default stdout).")]
    = None,
) -> None:
    """Turn an #SBATCH script (job array, dependency chain, srun/torchrun/deepspeed line) into a config.

    What could not be translated is listed on stderr and as comments at the top of the file.

    Examples:
      orchestrator import-sbatch train.sbatch -o configs/train.yaml
      orchestrator import-sbatch run_array.sh
    """
    import yaml

    from orchestrator.importer import import_sbatch

    try:
        text = script.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise fail([f"{script}: cannot read: {exc}"]) from None
    if "#SBATCH" not in text and "srun" not in text:
        raise fail([f"{script}: no #SBATCH line and no srun line: is this a Slurm batch script?"])
    cfg, notes = import_sbatch(text, script.stem)
    head = "".join(f"# NOTE: {n}\n" for n in notes)
    body = f"# imported from {script} by orchestrator import-sbatch; check CHANGE-ME values\n{head}" + \
        yaml.safe_dump(cfg, sort_keys=False, width=110)
    if output:
        output.write_text(body)
        out.print(f"wrote {output}", markup=False)
    else:
        print(body, end="")
    for n in notes:
        err.print(f"note: {n}", markup=False, highlight=False)


@app.command()
def validate(config: Annotated[Path, typer.Argument(help="The YAML config file to check.")]) -> None:
    """Check a config file and print every problem with its field path (exit 2 if any).

    Example: orchestrator validate configs/example.yaml
    """
    s = load(config, [])
    out.print(f"{config}: ok (run {s.name}, {s.resources.nodes} nodes, backend {s.backend.kind})",
              markup=False, highlight=False)


@app.command()
def stop(target: Annotated[Path, typer.Argument(help="Config file or run directory.")],
         wait: Annotated[float, typer.Option(help="Seconds to wait for the controller to exit.")] = 60.0) -> None:
    """Ask the run's controller to stop; the job keeps running and a new controller re-attaches to it.

    Example: orchestrator stop configs/demo.yaml
    """
    import time

    store, where = _state_for(target)
    lock = RunLock(store.run_dir)
    if not lock.is_held():
        out.print(f"{where}: no controller is running", markup=False)
        return
    (store.run_dir / STOP_REQUEST).write_text("stop\n")
    pid = lock.holder_pid()
    if pid:
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if not lock.is_held():
            out.print(f"controller of {where} stopped", markup=False)
            return
        time.sleep(0.2)
    raise fail([f"{where}: the controller ({lock.holder()}) has not exited after {wait:.0f}s; "
                "it stops at its next poll"], 1)


bl_app = typer.Typer(help="List or edit a run's node blacklist (manual overrides).", no_args_is_help=True)
app.add_typer(bl_app, name="blacklist")


def _queue_if_running(target: Path, request: dict[str, Any]) -> bool:
    """If a controller holds the run, queue the edit for it and poke it with SIGHUP; True if queued."""
    store, _ = _state_for(target)
    lock = RunLock(store.run_dir)
    try:
        lock.acquire()
    except LockHeld:
        write_request(store.run_dir, request)
        pid = lock.holder_pid()
        if pid:
            os.kill(pid, signal.SIGHUP)
        out.print(f"queued for the running controller ({lock.holder()}); it applies it at its next poll",
                  markup=False)
        return True
    lock.release()
    return False


def _locked_state(target: Path):  # noqa: ANN202 - (store, state, lock)
    store, where = _state_for(target)
    lock = RunLock(store.run_dir)
    try:
        lock.acquire()
    except LockHeld as exc:
        raise fail([f"{exc}; try again"], 1) from None
    try:
        state = store.load()
    except StateError as exc:
        lock.release()
        raise fail([str(exc)], 1) from None
    if state is None:
        lock.release()
        raise fail([f"{where}: no run state yet"], 1)
    return store, state, lock


def _names(nodes: str) -> list[str]:
    from orchestrator.blacklist import expand

    try:
        return expand(nodes)
    except ValueError as exc:
        raise fail([str(exc)]) from None


def _edit(target: Path, change: Any) -> Any:
    """Apply `change` (Blacklist -> Blacklist) to the run's blacklist under the run lock; the old one back."""
    store, state, lock = _locked_state(target)
    try:
        before = state.blacklist
        state.blacklist = change(before)
        store.save(state)
        return before
    finally:
        lock.release()


@bl_app.command("list")
def bl_list(target: Annotated[Path, typer.Argument(help="Config file or run directory.")],
            as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Show blacklisted nodes with cause, evidence and expiry.

    Example: orchestrator blacklist list configs/demo.yaml
    """
    store, where = _state_for(target)
    state = store.load()
    if state is None:
        raise fail([f"{where}: no run state yet"], 1)
    now = RealClock().now()
    if as_json:
        print(json.dumps(status_json(state, now)["blacklist"], indent=2))
    else:
        out.print(blacklist_table(state, now))


@bl_app.command("add")
def bl_add(target: Annotated[Path, typer.Argument(help="Config file or run directory.")],
           nodes: Annotated[str, typer.Argument(help="Hostlist, e.g. node[3,7-9].")],
           reason: Annotated[str, typer.Option(help="Why (kept as evidence).")] = "added by hand",
           hours: Annotated[float, typer.Option(help="Expiry in hours.")] = 72.0) -> None:
    """Exclude nodes by hand. Example: orchestrator blacklist add runs/demo 'node[3-4]' --reason 'Xid 79'"""
    from datetime import timedelta

    names = _names(nodes)
    if _queue_if_running(target, {"op": "add", "nodes": names, "reason": reason, "hours": hours}):
        return
    now = RealClock().now()
    _edit(target, lambda bl: bl.add_manual(names, reason, now, timedelta(hours=hours)))
    out.print(f"blacklisted {','.join(names)} for {hours:g} h", markup=False)


@bl_app.command("remove")
def bl_remove(target: Annotated[Path, typer.Argument(help="Config file or run directory.")],
              nodes: Annotated[str, typer.Argument(help="Hostlist, e.g. node3.")]) -> None:
    """Return nodes to the pool. Example: orchestrator blacklist remove configs/demo.yaml node3"""
    names = _names(nodes)
    if _queue_if_running(target, {"op": "remove", "nodes": names}):
        return
    before = _edit(target, lambda bl: bl.remove_all(names))
    missing = [n for n in names if before.get(n) is None]
    out.print(f"removed {','.join(n for n in names if n not in missing) or 'nothing'}"
              + (f"; not blacklisted: {','.join(missing)}" if missing else ""), markup=False)


@bl_app.command("clear")
def bl_clear(target: Annotated[Path, typer.Argument(help="Config file or run directory.")]) -> None:
    """Empty the blacklist. Example: orchestrator blacklist clear runs/demo"""
    from orchestrator.blacklist import Blacklist

    if _queue_if_running(target, {"op": "clear", "nodes": []}):
        return
    n = len(_edit(target, lambda bl: Blacklist()).entries)
    out.print(f"cleared {n} entries", markup=False)


def diagnose_dir(directory: Path, progress_regex: str = r"iteration\s+(\d+)\s*/\s*\d+") -> dict[str, Any]:
    files = sorted(p for p in directory.iterdir() if p.is_file() and not p.name.startswith("."))
    sigs = build_table()
    rx = re.compile(progress_regex)
    prefilter = Prefilter([(s.pattern, s.ignore_case) for s in sigs])
    nodes = [NodeEvidence.from_scan(scan_file(f, f.name.split(".")[0] if "." in f.name else f.name, sigs, rx,
                                              prefilter)) for f in files]
    stalled = any(n.top_frames or n.stuck_detail for n in nodes)
    v = classify(infer_job_state(nodes), nodes, Context(stalled=stalled))
    return {
        "cause": v.cause.value, "culprit_nodes": list(v.culprit_nodes), "blame": v.blame,
        "action": v.action.value, "confidence": v.confidence, "summary": v.summary,
        "evidence": [{"node": e.node, "file": e.file, "line": e.line, "text": e.text, "role": e.role}
                     for e in v.evidence],
    }


@app.command()
def diagnose(
    directory: Annotated[Path, typer.Argument(help="A directory with one log file per node (host.out).")],
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Name the cause and the culprit node from per-node logs of any Slurm job.

    Examples:
      orchestrator diagnose runs/demo/segments/0001/logs
      orchestrator diagnose /scratch/logs/job-12345 --json
    """
    if not directory.is_dir():
        raise fail([f"{directory}: not a directory"])
    if not any(p.is_file() for p in directory.iterdir()):
        raise fail([f"{directory}: no log files in it (expected one file per node, named after the host)"])
    result = diagnose_dir(directory)
    if as_json:
        print(json.dumps(result, indent=2))
        return
    out.print(f"cause: {result['cause']}  culprits: {','.join(result['culprit_nodes']) or '-'}  "
              f"blame: {result['blame']}  action: {result['action']}  confidence: {result['confidence']:.2f}",
              markup=False, highlight=False)
    out.print(f"summary: {result['summary']}", markup=False, highlight=False)
    for e in result["evidence"][:15]:
        out.print(f"  [{e['role']}] {e['node']} {Path(e['file']).name}:{e['line']}: {e['text'][:160]}",
                  markup=False, highlight=False)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
