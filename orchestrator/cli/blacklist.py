"""`orchestrator blacklist list|add|remove|clear`: applied under the run lock, or queued for the
running controller."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError

from orchestrator.blacklist import Blacklist, compress
from orchestrator.cli.blacklist_nodes import checked_add, node_names
from orchestrator.cli.common import _state_for, app, err, fail, load, loaded, out, require_run_dir
from orchestrator.clock import RealClock
from orchestrator.requests import (
    BlacklistAdd,
    BlacklistClear,
    BlacklistRemove,
    apply_queued,
    apply_request,
    pending,
    write_request,
)
from orchestrator.runlock import EDIT_LOCK_FILE, LockHeld, LockUnavailable, RunLock
from orchestrator.settings.errors import error_message
from orchestrator.state import RunState, StateError, StateStore
from orchestrator.views.status import blacklist_table, status_json

bl_app = typer.Typer(help="List or edit a run's node blacklist (manual overrides).",
                     no_args_is_help=True)
app.add_typer(bl_app, name="blacklist")


EditRequest = BlacklistAdd | BlacklistRemove | BlacklistClear
LOCK_PATIENCE_S = 10.0  # how long a command holding the run lock for a moment is waited for


def _loaded(store: StateStore, where: str) -> RunState:
    return loaded(store, where)


def _apply_locked(store: StateStore, where: str, request: EditRequest | None) -> Blacklist:
    """Under the run lock: apply every queued edit (a controller that exited left them), then
    `request`."""
    from orchestrator.loop.advance import advance
    from orchestrator.loop.observations import BlacklistEdited

    state = _loaded(store, where)
    before = state.blacklist
    now = RealClock().now()
    # edits queued for a controller that is gone, first
    done = apply_queued(store.run_dir, state, now)
    for p in [*done.problems, *(f"queued edit rejected: {r}" for r in done.rejected)]:
        err.print(f"warning: {p}", markup=False, highlight=False)
    bl = done.blacklist
    # the user's own edit: a problem with it is the command's error, not a warning
    if request is not None:
        bl = apply_request(bl, request, now)
    store.save(advance(state, BlacklistEdited(bl, done.taken), None, now).ledger)
    return before


def _wait_applied(lock: RunLock, queued: Path, wait_s: float) -> str:
    """'applied' once the controller consumed the queued file, 'free' if the lock came free first,
    else ''."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if not queued.exists():
            return "applied"
        if not lock.is_held():
            return "free"
        time.sleep(0.05)
    return ""


def _edit(target: Path, request: EditRequest, wait_s: float) -> tuple[str, Blacklist | None]:
    """Apply `request` to the run's blacklist, or hand it to the running controller and wait until
    it has applied it. ('applied', blacklist before) | ('controller', None) | ('queued', None); exit
    1 if refused. Edits are serialised among themselves, so concurrent `blacklist` commands never
    lose one another's."""
    store, where = _state_for(target)
    if isinstance(request, BlacklistAdd) and not target.is_dir():
        _begin_ledger(target, store)
    _loaded(store, where)  # a run directory with a state, before anything is created in it
    editors = RunLock(store.run_dir, EDIT_LOCK_FILE)
    try:
        editors.acquire_within(max(wait_s, LOCK_PATIENCE_S))
    except LockUnavailable as exc:
        raise fail([f"{where}: {exc}; nothing changed"], 1) from None
    except LockHeld:
        raise fail([f"{where}: another 'orchestrator blacklist' edit is still running; nothing "
                    "changed, try again"], 1) from None
    try:
        return _edit_serialised(store, where, request, wait_s)
    # a full or read-only disk, an edit too big: nothing was queued
    except (StateError, OSError, ValueError) as exc:
        raise fail([f"{where}: {exc}; nothing changed"[:600]], 1) from None
    finally:
        editors.release()


def _begin_ledger(config: Path, store: StateStore) -> None:
    """`blacklist add CONFIG NODES` before the first run (known-bad nodes kept out of segment 1):
    the run's ledger begins with the edit. Only in a new or empty run directory; one with traces of
    a run is left alone."""
    from orchestrator.cli.run import command_dirs

    try:
        if store.load() is not None:
            return
    except StateError:
        return  # said by the caller
    s = load(config, [])
    require_run_dir(s.run_dir, f"{config}: run_dir {s.run_dir}",
                    (Path(s.checkpoint.dir), *command_dirs(s)))
    now = RealClock().now()
    try:
        store.save(RunState.begin(s.name, now))
    except StateError as exc:
        raise fail([f"{s.run_dir}: {exc}; nothing changed"], 1) from None


def _edit_serialised(store: StateStore, where: str, request: EditRequest,
                     wait_s: float) -> tuple[str, Blacklist | None]:
    lock = RunLock(store.run_dir)
    queued: Path | None = None
    deadline = time.monotonic() + max(wait_s, LOCK_PATIENCE_S)
    while True:
        try:
            lock.acquire()
        except LockUnavailable as exc:
            raise fail([f"{where}: {exc}; nothing changed"], 1) from None
        except LockHeld:
            if not lock.holder_is_controller():
                if time.monotonic() >= deadline:
                    raise fail([f"{where}: the run is locked by {lock.holder()}; nothing changed, "
                                "try again"], 1) from None
                time.sleep(0.05)
                continue
            if queued is None:
                queued = write_request(store.run_dir, request)
                pid = lock.holder_pid()
                if pid:
                    os.kill(pid, signal.SIGHUP)  # wakes it: the edit is applied at once
            result = _wait_applied(lock, queued, wait_s)
            if result == "applied":
                return "controller", None
            if result == "":
                return "queued", None
            continue  # the controller exited first: apply it here
        try:
            return "applied", _apply_locked(store, where, None if queued else request)
        finally:
            lock.release()


def _report(how: str, done: str) -> None:
    if how == "queued":
        out.print("queued for the running controller; not applied yet: it is applied at the "
                  "controller's next poll (or by the next 'orchestrator run' or 'blacklist' "
                  "command)", markup=False)
    else:
        out.print(done + (" (by the running controller)" if how == "controller" else ""),
                  markup=False)


@bl_app.command("list")
def bl_list(target: Annotated[Path, typer.Argument(help="Config file or run directory.")],
            as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Show blacklisted nodes with cause, evidence and expiry.

    \b
    Example:
      orchestrator blacklist list configs/demo.yaml
    """
    store, where = _state_for(target)
    state = _loaded(store, where)
    now = RealClock().now()
    if as_json:
        print(json.dumps(status_json(state, now)["blacklist"], indent=2))
    else:
        out.print(blacklist_table(state, now))
    waiting = pending(store.run_dir)
    if waiting:
        err.print(f"{len(waiting)} edit(s) queued for the controller, not applied yet",
                  markup=False)


WaitOpt = Annotated[float, typer.Option("--wait", help="Seconds to wait for a running controller "
                                                       "to apply it.")]


@bl_app.command("add")
def bl_add(target: Annotated[Path, typer.Argument(help="Config file or run directory.")],
           nodes: Annotated[str, typer.Argument(help="Hostlist, e.g. node[3,7-9].")],
           reason: Annotated[str, typer.Option(help="Why (kept as evidence).")] = "added by hand",
           hours: Annotated[float | None, typer.Option(
               help="Expiry in hours [default: the config's policy.blacklist_expiry_h].")] = None,
           force: Annotated[bool, typer.Option(
               "--force", help="Take node names the cluster does not list.")] = False,
           wait: WaitOpt = 30.0) -> None:
    """Exclude nodes by hand (cause `manual`). Each node must be one the cluster lists.

    \b
    Example:
      orchestrator blacklist add runs/demo 'node[3-4]' --reason 'Xid 79'
    """
    names = node_names(nodes)
    hours = checked_add(target, names, hours, force)
    try:
        req = BlacklistAdd(nodes=tuple(names), reason=reason, hours=hours)
    # name the option and say what is wrong, not where pydantic's docs are
    except ValidationError as exc:
        problems = [f"--{'.'.join(str(p) for p in e['loc']) or 'hours'} "
                    f"{hours if 'hours' in e['loc'] else reason!r}: {error_message(e)}"
                    for e in exc.errors()]
        raise fail([p[:300] for p in problems]) from None
    how, _ = _edit(target, req, wait)
    _report(how, f"blacklisted {compress(names)} for {hours:g} h")


@bl_app.command("remove")
def bl_remove(target: Annotated[Path, typer.Argument(help="Config file or run directory.")],
              nodes: Annotated[str, typer.Argument(help="Hostlist, e.g. node3.")],
              wait: WaitOpt = 30.0) -> None:
    """Return nodes to the pool.

    \b
    Example:
      orchestrator blacklist remove configs/demo.yaml node3
    """
    names = node_names(nodes)
    # what a running controller will remove from (it applies the edit, not this command)
    prior = _snapshot(target)
    how, before = _edit(target, BlacklistRemove(nodes=tuple(names)), wait)
    before = before or prior
    if before is None:
        _report(how, f"removed {compress(names)}")
        return
    if how == "queued":
        _report(how, "")
        return
    missing = [n for n in names if before.get(n) is None]
    out.print(f"removed {compress([n for n in names if n not in missing]) or 'nothing'}"
              + (f"; not blacklisted: {compress(missing)}" if missing else "")
              + (" (by the running controller)" if how == "controller" else ""), markup=False)


def _snapshot(target: Path) -> Blacklist | None:
    """The blacklist as the state file holds it now, or None when it cannot be read."""
    try:
        store, _ = _state_for(target)
        state = store.load()
    except (StateError, OSError, typer.Exit):
        return None
    return state.blacklist if state is not None else None


@bl_app.command("clear")
def bl_clear(target: Annotated[Path, typer.Argument(help="Config file or run directory.")],
             wait: WaitOpt = 30.0) -> None:
    """Empty the blacklist.

    \b
    Example:
      orchestrator blacklist clear runs/demo
    """
    how, before = _edit(target, BlacklistClear(), wait)
    _report(how, f"cleared {len(before.entries)} entries" if before is not None else "cleared")
