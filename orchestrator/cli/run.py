"""`orchestrator run`; `run --dry-run` prints through `dryrun.py`, `stop` and `cancel` are in
`stopping.py`."""

from __future__ import annotations

import re
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from loguru import logger

from orchestrator.cli.common import (
    SetOpt,
    app,
    build_backend,
    err,
    fail,
    load,
    out,
    require_run_dir,
    setup_logging,
    wiring,
)
from orchestrator.cli.dryrun import dry, spares_problem
from orchestrator.cli.resuming import EXIT_STOPPED, must_stay_stopped, stopped_line
from orchestrator.clock import Clock
from orchestrator.model import RunStatus
from orchestrator.requests import pending
from orchestrator.runlock import CONTROLLER, LockHeld, RunLock
from orchestrator.settings import Settings, load_settings, parse_overrides
from orchestrator.state import STATE_FILE, RunState, StateError, StateStore
from orchestrator.views.status import timeline_table
from orchestrator.views.text import clean

RUN_DIR_CHILD = re.compile(r"\{run_dir\}/([^/{}]+)")

if TYPE_CHECKING:
    from orchestrator.backends.base import Backend
    from orchestrator.loop.controller import Controller


@app.command()
def run(
    ctx: typer.Context,
    config: Annotated[Path, typer.Argument(help="The run's YAML config file.")],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the next submission; submit "
                                                            "nothing.")] = False,
    cancel_on_exit: Annotated[bool, typer.Option(help="Cancel the running job when the controller "
                                                      "stops.")] = False,
    verbose: Annotated[bool, typer.Option("-v", "--verbose")] = False,
    start_over: Annotated[bool, typer.Option(
        "--start-over", help="state.json is gone but the run directory has traces of a run: start "
        "a new ledger anyway (history and blacklist are lost).")] = False,
    from_scratch: Annotated[bool, typer.Option(
        "--from-scratch", help="The checkpoints are gone on purpose: start the next segment from "
        "iteration 0 (history and blacklist are kept).")] = False,
    resume: Annotated[bool, typer.Option(
        "--resume", help="Go on with a run that stopped (a bug, a breaker) or was cancelled, once "
        "what stopped it is fixed; without it such a run stays stopped (exit 3).")] = False,
    set_: SetOpt = [],  # noqa: B006 - typer needs a literal default
) -> None:
    """Run (or resume) the training until its goal, resubmitting segments as they end.

    \b
    Examples:
      orchestrator run configs/demo.yaml
      orchestrator run configs/example.yaml --dry-run
      orchestrator run configs/demo.yaml --set watch.poll_interval_s=1
      orchestrator run configs/slurm-demo.yaml --dry-run --set resources.spare_nodes=1
      orchestrator run configs/demo.yaml --resume

    Exit status: 0 done (or the controller was asked to stop while the run goes on), 1 an error,
    2 a bad config or option, 3 the run is stopped and needs a human (nothing submitted; give
    --resume once it is fixed), or its state.json is gone or garbled (restore it, or --start-over).
    """
    s = load(config, set_)
    if problem := spares_problem(s):
        raise fail([problem])
    clock = wiring(ctx).clock()
    # it sets aside traces only where no ledger is left
    if start_over and (s.run_dir / STATE_FILE).exists():
        err.print(f"note: --start-over does nothing here: {s.run_dir / STATE_FILE} exists, so the "
                  "run resumes from its ledger; to start over on purpose move the run directory "
                  "aside (or use a new run_dir)", markup=False, highlight=False)
    if dry_run:
        dry(s, clock, start_over, from_scratch, resume)
        return
    _refuse_stopped(s, config, resume)
    require_run_dir(s.run_dir, f"{config}: run_dir {s.run_dir}",
                    (Path(s.checkpoint.dir), *command_dirs(s)))
    setup_logging(s.run_dir, verbose)
    _supervised(s, config, set_, clock, (start_over, from_scratch, cancel_on_exit, resume))


def _refuse_stopped(s: Settings, config: Path, resume: bool) -> None:
    """A stopped (or cancelled) run is not resumed by a plain `run`: one line, exit 3."""
    try:
        state = StateStore(s.run_dir).load()
    except StateError:
        return  # the controller says what is wrong with the ledger, as before
    if must_stay_stopped(state, resume):
        assert state is not None
        raise fail([stopped_line(state, config)], EXIT_STOPPED)


def _supervised(s: Settings, config: Path, set_: list[str], clock: Clock,
                flags: tuple[bool, bool, bool, bool]) -> None:
    """The controller under the run lock, until the run ends or a signal stops it; exits with its
    status."""
    lock = RunLock(s.run_dir)
    try:
        lock.acquire(CONTROLLER)
    except LockHeld as exc:
        raise fail([str(exc)], 1) from None
    start_over, from_scratch, cancel_on_exit, ctl_resume = flags
    ctl, backend = _controller(s, config, set_, clock, start_over)
    ctl.keep_job, ctl.resume = not cancel_on_exit, ctl_resume
    _handle_signals(ctl)
    _say_where(s)
    _say_inherited(s, ctl.store)
    try:
        _apply_queued(ctl.store, clock)
        if from_scratch:
            _from_scratch(ctl.store, clock)
        state = ctl.run()
        if not ctl.keep_job:  # the final table shows the job cancelled, not running
            state = _cancel_current(state, backend, ctl.store, clock,
                                    ctl.cancel_asked or "--cancel-on-exit") or state
    except StateError as exc:  # a garbled or missing ledger needs a person: not restarted
        raise fail([str(exc)], 1 if exc.passing else EXIT_STOPPED) from None
    finally:
        lock.release()
    out.print(timeline_table(state, width=out.width))
    if state.status == RunStatus.STOPPED:
        raise fail([stopped_line(state, config, "it stops here")], EXIT_STOPPED)
    raise typer.Exit(0)


def _say_where(s: Settings) -> None:
    """Where to look while it runs: the run directory, the controller's log and each segment's node
    logs."""
    rd = clean(s.run_dir)
    logger.info("logs: run directory {rd}, controller log {rd}/controller.log, node logs "
                "{rd}/segments/NNNN/logs/<host>.log, state {rd}/state.json", rd=rd)


def _say_inherited(s: Settings, store: StateStore) -> None:
    """A new run directory over a checkpoint directory that already holds checkpoints (`--set
    run_dir=NEW` with the old checkpoint.dir): segment 1 resumes from them. Legal (a moved run), but
    never silent."""
    from orchestrator.checkpoint import find_latest
    from orchestrator.timeout import call_with_timeout

    try:
        if store.load() is not None:
            return
    except StateError:
        return  # said by the controller itself
    done, found = call_with_timeout(lambda: find_latest(s.checkpoint), s.watch.read_timeout_s)
    if not done or found is None or isinstance(found, BaseException):
        return
    goal = s.goal.target_iteration
    logger.warning("run_dir {} is new, but checkpoint.dir {} already holds {} (iteration {}): "
                   "segment 1 resumes from it{}; give this run its own checkpoint.dir to start "
                   "from scratch", clean(s.run_dir),
                   clean(s.checkpoint.dir), clean(found.path), found.iteration,
                   " and the goal is already reached" if goal is not None
                   and (found.iteration or 0) >= goal else "")


def _controller(s: Settings, config: Path, set_: list[str], clock: Clock,
                start_over: bool = False) -> tuple[Controller, Backend]:
    """The controller of a real run: failpoints from the environment, notifier, backend, state
    store."""
    from orchestrator import failpoints
    from orchestrator.loop.controller import Controller

    try:
        failpoints.install(failpoints.Failpoints.from_env())
    except ValueError as exc:
        raise fail([str(exc)]) from None
    from orchestrator.notify import Notifier

    try:
        notifier = Notifier(s.notify.urls, clock, s.notify.max_per_hour, s.notify.dedup_window_s)
    except (ValueError, ImportError) as exc:
        raise fail([f"{config}: {exc}"]) from None
    backend = build_backend(s, clock)
    store = StateStore(s.run_dir, start_over=start_over)
    ctl = Controller(s, backend, clock, store, notify=notifier)
    ctl.reloader = lambda: load_settings(config, parse_overrides(set_))
    return ctl, backend


def command_dirs(s: Settings) -> list[Path]:
    """What the training command itself puts under run_dir (`--sync-dir={run_dir}/sync/...`): part
    of the run, never a sign that run_dir is some other directory."""
    found = {m.group(1) for arg in s.command for m in RUN_DIR_CHILD.finditer(arg)}
    return [s.run_dir / name for name in sorted(found)]


def _from_scratch(store: StateStore, clock: Clock) -> None:
    """`--from-scratch`: the checkpoints seen so far and the progress made are given up (once, on
    purpose)."""
    from orchestrator.loop.advance import advance
    from orchestrator.loop.observations import FromScratch

    state = store.load()
    if state is None or not state.segments:
        return
    state = advance(state, FromScratch(), None, clock.now()).ledger
    store.save(state)
    logger.warning("--from-scratch: segments up to {} are history; the next one may start from "
                   "iteration 0", state.scratch_after)


def _apply_queued(store: StateStore, clock: Clock) -> None:
    """Blacklist edits queued for a controller that exited before applying them (also for a finished
    run)."""
    if not pending(store.run_dir):
        return
    state = store.load()
    if state is None:
        return  # a new run: the controller applies them once it has a ledger
    from orchestrator.loop.advance import advance
    from orchestrator.loop.operator import queued_edits

    edited = queued_edits(store.run_dir, state, clock.now())
    if edited is not None:
        store.save(advance(state, edited, None, clock.now()).ledger)


def _handle_signals(ctl: Controller) -> None:
    """SIGTERM/SIGINT stop the controller at its next poll (the job keeps running); SIGHUP reloads
    the config."""
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, _f: ctl.request_stop(signal.Signals(signum).name))
    signal.signal(signal.SIGHUP, lambda _s, _f: ctl.request_reload())


def _cancel_current(state: RunState, backend: Backend, store: StateStore, clock: Clock,
                    by: str = "--cancel-on-exit") -> RunState | None:
    """--cancel-on-exit (or `orchestrator cancel`): cancel the job of a run that is still running
    when the controller stops, and record it, so `status` says the job was cancelled (not that it
    runs). The new ledger if one was, else None."""
    if state.status.value == "running" and state.current and state.current.job_id:
        from orchestrator.loop.advance import advance
        from orchestrator.loop.observations import CancelledByOperator
        from orchestrator.model import JobRef

        cur = state.current
        assert cur.submitted_at is not None and cur.job_id is not None
        backend.cancel(JobRef(job_id=cur.job_id, submitted_at=cur.submitted_at,
                              backend=backend.name))
        logger.warning("{}: job {} (segment {}) cancelled; it does not keep running. "
                       "'orchestrator run --resume' starts a new segment from the last "
                       "checkpoint", by,
                       cur.job_id, cur.index)
        new = advance(state, CancelledByOperator(by), None, clock.now()).ledger
        store.save(new)
        return new
    return None
