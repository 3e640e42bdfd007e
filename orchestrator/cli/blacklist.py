"""`orchestrator blacklist list|add|remove|clear`: applied under the run lock, or queued for the
running controller."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Annotated, Any

import typer

from orchestrator.cli.common import _state_for, app, fail, out
from orchestrator.clock import RealClock
from orchestrator.requests import BlacklistAdd, BlacklistClear, BlacklistRemove, write_request
from orchestrator.runlock import LockHeld, RunLock
from orchestrator.state import RunState, StateError, StateStore
from orchestrator.views.status import blacklist_table, status_json

bl_app = typer.Typer(help="List or edit a run's node blacklist (manual overrides).", no_args_is_help=True)
app.add_typer(bl_app, name="blacklist")


def _queue_if_running(target: Path, request: BlacklistAdd | BlacklistRemove | BlacklistClear) -> bool:
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


def _locked_state(target: Path) -> tuple[StateStore, RunState, RunLock]:
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
    try:
        req = BlacklistAdd(nodes=tuple(names), reason=reason, hours=hours)
    except ValueError as exc:
        raise fail([f"--hours {hours}: {str(exc).splitlines()[-1].strip()}"]) from None
    if _queue_if_running(target, req):
        return
    now = RealClock().now()
    _edit(target, lambda bl: bl.add_manual(names, reason, now, timedelta(hours=hours)))
    out.print(f"blacklisted {','.join(names)} for {hours:g} h", markup=False)


@bl_app.command("remove")
def bl_remove(target: Annotated[Path, typer.Argument(help="Config file or run directory.")],
              nodes: Annotated[str, typer.Argument(help="Hostlist, e.g. node3.")]) -> None:
    """Return nodes to the pool. Example: orchestrator blacklist remove configs/demo.yaml node3"""
    names = _names(nodes)
    if _queue_if_running(target, BlacklistRemove(nodes=tuple(names))):
        return
    before = _edit(target, lambda bl: bl.remove_all(names))
    missing = [n for n in names if before.get(n) is None]
    out.print(f"removed {','.join(n for n in names if n not in missing) or 'nothing'}"
              + (f"; not blacklisted: {','.join(missing)}" if missing else ""), markup=False)


@bl_app.command("clear")
def bl_clear(target: Annotated[Path, typer.Argument(help="Config file or run directory.")]) -> None:
    """Empty the blacklist. Example: orchestrator blacklist clear runs/demo"""
    from orchestrator.blacklist import Blacklist

    if _queue_if_running(target, BlacklistClear()):
        return
    n = len(_edit(target, lambda bl: Blacklist()).entries)
    out.print(f"cleared {n} entries", markup=False)


