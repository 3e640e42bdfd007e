"""A stopped run stays stopped: `run` of a run that ended `stopped` (a bug, a breaker, a cancel)
submits nothing and exits EXIT_STOPPED with one line saying how to go on; `run --resume` is the
deliberate way back. The systemd unit (scripts/orchestrator@.service) does not restart that exit
code (RestartPreventExitStatus), so a stopped run never loops under a supervisor."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated

import typer

from orchestrator.cli.common import SetOpt, app, fail, load, loaded, out, wiring
from orchestrator.model import CancelReason, RunStatus
from orchestrator.runlock import LockHeld, LockUnavailable, RunLock
from orchestrator.state import RunState, StateStore
from orchestrator.views.text import clean

EXIT_STOPPED = 3  # the run is stopped and needs a human: `run` submitted nothing (documented)


def stopped_line(state: RunState, config: Path, what_now: str = "nothing submitted") -> str:
    """What stopped the run and how to go on, as one line: `run CONFIG --resume` after the fix
    (with `--from-scratch` to give the checkpoints up too)."""
    cur = state.current
    if cur is not None and cur.cancel_reason == CancelReason.OPERATOR:
        when = cur.cancelled_at.strftime("%Y-%m-%d %H:%M UTC") if cur.cancelled_at else "earlier"
        what = (f"was cancelled ({clean(cur.cancelled_by_controller or 'by an operator')}, "
                f"{when})")
        fix = "when it should go on"
    else:
        what = f"is stopped: {clean(state.stop_reason)[:300] or 'no reason recorded'}"
        fix = "fix what stopped it, then"
    cmd = shlex.join(["orchestrator", "run", str(config), "--resume"])
    mark = shlex.join(["orchestrator", "resume", str(config)])
    return (f"run {clean(state.run)} {what}. {what_now.capitalize()}; {fix} give '{cmd}' (under "
            f"systemd: '{mark}', then restart the unit; add --from-scratch to give up the "
            "checkpoints as well)")


def must_stay_stopped(state: RunState | None, resume: bool) -> bool:
    """True where a plain `run` must refuse: the ledger says stopped and --resume was not given."""
    return state is not None and state.status == RunStatus.STOPPED and not resume


@app.command()
def resume(ctx: typer.Context,
           config: Annotated[Path, typer.Argument(help="The run's YAML config file.")],
           set_: SetOpt = []) -> None:  # noqa: B006 - typer needs a literal default
    """Mark a stopped (or cancelled) run to go on, once what stopped it is fixed, without starting
    a controller: the next `orchestrator run` (or `systemctl --user restart orchestrator@NAME`)
    resumes it from the newest complete checkpoint. `run --resume` does both at once.

    \b
    Example:
      orchestrator resume configs/demo.yaml
    """
    from orchestrator.loop.advance import advance
    from orchestrator.loop.observations import Started

    s = load(config, set_)
    store, where = StateStore(s.run_dir), str(s.run_dir)
    lock = RunLock(store.run_dir)
    try:
        lock.acquire()  # no controller runs while the ledger changes
    except (LockHeld, LockUnavailable) as exc:
        raise fail([f"{where}: {exc}; nothing changed"], 1) from None
    try:
        state = loaded(store, where)
        if state.status != RunStatus.STOPPED:
            out.print(clean(f"{where}: the run is {state.status.value}; nothing to resume"),
                      markup=False, highlight=False, soft_wrap=True)
            return
        now = wiring(ctx).clock().now()
        t = advance(state, Started(s.goal.target_iteration, resume=True), s, now)
        store.save(t.ledger)
    finally:
        lock.release()
    out.print(clean(f"{where}: {t.note}; 'orchestrator run {config}' goes on"), markup=False,
              highlight=False, soft_wrap=True)
