"""`orchestrator stop` and `orchestrator cancel`: ending a run's controller (the job keeps running)
or the controller and its job (the run is recorded as stopped and resumes later)."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Annotated

import typer

from orchestrator.cli.common import _state_for, app, build_backend, fail, load, loaded, out, wiring
from orchestrator.cli.run import _cancel_current
from orchestrator.files import atomic_write
from orchestrator.model import RunStatus
from orchestrator.requests import STOP_REQUEST
from orchestrator.runlock import LockHeld, LockUnavailable, RunLock
from orchestrator.state import RunState, StateStore
from orchestrator.views.text import clean


@app.command()
def stop(target: Annotated[Path, typer.Argument(help="Config file or run directory.")],
         wait: Annotated[float,
                         typer.Option(
                             help="Seconds to wait for the controller to exit.")] = 60.0) -> None:
    """Ask the run's controller to stop; the job keeps running and a new controller re-attaches to
    it.

    \b
    Example:
      orchestrator stop configs/demo.yaml
    """
    store, where = _state_for(target)
    # creates nothing: `stop /tmp` leaves /tmp as it is
    if not RunLock(store.run_dir).holder_is_controller():
        out.print(clean(f"{where}: no controller is running"), markup=False, highlight=False,
                  soft_wrap=True)
        return
    _stop_controller(store, where, wait)
    out.print(clean(f"controller of {where} stopped"), markup=False, highlight=False,
              soft_wrap=True)


def _stop_controller(store: StateStore, where: str, wait: float, ask: str = "stop") -> None:
    """Ask the running controller to exit ("stop"), or to cancel its job and exit ("cancel BY"),
    and wait for it (exit 1 if it has not within `wait`)."""
    import time

    lock = RunLock(store.run_dir)
    atomic_write(store.run_dir / STOP_REQUEST, f"{ask}\n")
    pid = lock.holder_pid()
    if pid:
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if not lock.is_held():
            return
        time.sleep(0.2)
    raise fail([f"{where}: the controller ({lock.holder()}) has not exited after {wait:.0f}s; "
                "it stops at its next poll"], 1)


def _cancelled_by_controller(state: RunState, by: str) -> bool:
    cur = state.current
    return (state.status == RunStatus.STOPPED and cur is not None
            and cur.cancelled_by_controller == by)


def _by_user() -> str:
    """' by ann': who runs `orchestrator cancel`, when the system knows; else ''."""
    import getpass

    try:
        return f" by {getpass.getuser()}"
    except (KeyError, OSError):
        return ""


@app.command()
def cancel(ctx: typer.Context,
           config: Annotated[Path, typer.Argument(help="The run's config file (the backend to "
                                                       "cancel through).")],
           wait: Annotated[float,
                           typer.Option(
                               help="Seconds to wait for the controller to exit.")] = 60.0) -> None:
    """Stop the run's controller and cancel its job; the run is recorded as cancelled (stopped), and
    `orchestrator run --resume` resumes it later from the newest complete checkpoint.

    \b
    Example:
      orchestrator cancel configs/demo.yaml
    """
    if config.is_dir():
        raise fail([f"{clean(config)}: give the run's config file (it says which backend runs the "
                    "job)"])
    s = load(config, [])
    store, where = StateStore(s.run_dir), str(s.run_dir)
    by = f"orchestrator cancel{_by_user()}"
    live = RunLock(store.run_dir).holder_is_controller()
    if live:  # the live controller cancels the job itself: its own last view says cancelled, exit 3
        _stop_controller(store, where, wait, f"cancel {by}")
    state = loaded(store, where)
    if live and _cancelled_by_controller(state, by):
        out.print(clean(f"cancelled job {state.current.job_id if state.current else None} of "
                        f"{where} (by its controller); 'orchestrator run {config} --resume' "
                        "resumes the run"), markup=False, highlight=False, soft_wrap=True)
        return
    lock = RunLock(store.run_dir)
    try:
        lock.acquire()  # no controller starts while the job is cancelled
    except (LockHeld, LockUnavailable) as exc:
        raise fail([f"{where}: {exc}; nothing cancelled"], 1) from None
    try:
        clock = wiring(ctx).clock()
        done = _cancel_current(state, build_backend(s, clock), store, clock, by=by)
    finally:
        lock.release()
    job = state.current.job_id if state.current else None
    out.print(clean(f"cancelled job {job} of {where}; 'orchestrator run {config} --resume' resumes "
                    "the run"
                    if done else f"{where}: no job to cancel (the run is {state.status.value})"),
              markup=False, highlight=False, soft_wrap=True)
