"""Operator requests reaching a running controller: `orchestrator stop`, queued blacklist edits and a
SIGHUP reload of the policy, watch and goal sections. Owns reading and applying them; nothing else."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from loguru import logger

from orchestrator import failpoints
from orchestrator.model import RunStatus
from orchestrator.requests import STOP_REQUEST, apply_queued
from orchestrator.settings import Settings
from orchestrator.state import RunState


def stop_requested(settings: Settings) -> bool:
    """A stop asked by `orchestrator stop` (the file is consumed)."""
    path = settings.run_dir / STOP_REQUEST
    if path.exists():
        path.unlink(missing_ok=True)
        return True
    return False


def resume(state: RunState, target: int | None) -> str:
    """A stopped run, or a finished one whose goal was raised, runs again: what changed, or ''."""
    before, state.target_iteration = state.target_iteration, target
    raised = state.status == RunStatus.DONE and before is not None and (target or 0) > before
    if state.status != RunStatus.STOPPED and not raised:
        return ""
    why = "the goal was raised" if raised else f"it stopped because: {state.stop_reason}"
    line = f"resuming a {state.status.value} run ({why})"
    state.status, state.stop_reason = RunStatus.RUNNING, ""
    return line


def forget_stale_stop(settings: Settings) -> None:
    """A stop request left behind was meant for a controller that has exited."""
    (settings.run_dir / STOP_REQUEST).unlink(missing_ok=True)


def reload(settings: Settings, reloader: Callable[[], Settings]) -> Settings:
    """The settings with policy, watch and goal re-read; the old ones if the file is now invalid."""
    try:
        new = reloader()
    except Exception as exc:  # noqa: BLE001 - a bad edit must not kill a running controller
        logger.error("reload failed; keeping the old settings: {}", exc)
        return settings
    logger.info("reloaded policy, watch and goal from {}", settings.config_path)
    return settings.model_copy(update={"policy": new.policy, "watch": new.watch, "goal": new.goal})


def apply_blacklist_requests(settings: Settings, state: RunState, now: datetime) -> bool:
    """Apply queued blacklist edits to the state; True if any was applied (the caller saves)."""
    done = apply_queued(settings.run_dir, state, now)
    failpoints.hit("after_take_requests")
    for p in done.problems:
        logger.warning("blacklist request {}", p)
    for r in done.rejected:  # a bad request never stops the controller
        logger.error("blacklist request rejected {}", r)
    for a in done.applied:
        logger.info("blacklist request applied {}", a)
    return bool(done.applied)
