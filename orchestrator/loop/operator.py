"""Operator requests reaching a running controller: `orchestrator stop`, queued blacklist edits and
a SIGHUP reload of the policy, watch and goal sections. Owns reading and applying them; nothing
else."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from loguru import logger

from orchestrator import failpoints
from orchestrator.files import read_request
from orchestrator.loop.observations import BlacklistEdited
from orchestrator.requests import STOP_REQUEST, apply_queued
from orchestrator.settings import Settings
from orchestrator.state import RunState


def stop_requested(settings: Settings) -> str | None:
    """A stop asked by `orchestrator stop` ("stop") or `orchestrator cancel` ("cancel BY": the
    controller cancels the job itself before it exits, so its last view says so); the file is
    consumed. None: nothing asked."""
    path = settings.run_dir / STOP_REQUEST
    if not path.exists():
        return None
    text = read_request(path)
    path.unlink(missing_ok=True)
    return text if text.startswith("cancel") else "stop"


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


def queued_edits(run_dir: Path, state: RunState, now: datetime) -> BlacklistEdited | None:
    """Queued blacklist edits applied to the state's blacklist, each said in the log; None when none
    was queued (the caller feeds the result to `advance` and saves)."""
    done = apply_queued(run_dir, state, now)
    failpoints.hit("after_take_requests")
    for p in done.problems:
        logger.warning("blacklist request {}", p)
    for r in done.rejected:  # a bad request never stops the controller
        logger.error("blacklist request rejected {}", r)
    for a in done.applied:
        logger.info("blacklist request applied {}", a)
    return BlacklistEdited(done.blacklist, done.taken) if done.taken else None
