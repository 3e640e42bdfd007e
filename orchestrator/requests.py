"""Operator requests to a running controller (`orchestrator blacklist ...`, `orchestrator stop`): typed,
validated on the writer's side, queued as files in run_dir/requests/, applied by the controller."""

from __future__ import annotations

import json
import math
import os
from datetime import datetime, timedelta
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

from orchestrator.blacklist import Blacklist
from orchestrator.state import atomic_write, private_dir

REQUESTS_DIR = "requests"
STOP_REQUEST = "stop-request"


class _Request(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class BlacklistAdd(_Request):
    op: Literal["add"] = "add"
    nodes: tuple[str, ...]
    reason: str = "added by hand"
    hours: float = 72.0

    @field_validator("hours")
    @classmethod
    def _finite(cls, v: float) -> float:
        if not math.isfinite(v) or v <= 0 or v > 24 * 365 * 10:
            raise ValueError("hours must be a number above 0 and at most 87600 (10 years)")
        return v


class BlacklistRemove(_Request):
    op: Literal["remove"] = "remove"
    nodes: tuple[str, ...]


class BlacklistClear(_Request):
    op: Literal["clear"] = "clear"


Request = Annotated[BlacklistAdd | BlacklistRemove | BlacklistClear, Field(discriminator="op")]
_ADAPTER: TypeAdapter[BlacklistAdd | BlacklistRemove | BlacklistClear] = TypeAdapter(Request)


def apply_request(bl: Blacklist, req: BlacklistAdd | BlacklistRemove | BlacklistClear, now: datetime) -> Blacklist:
    """Pure: the blacklist after one operator edit."""
    if isinstance(req, BlacklistAdd):
        return bl.add_manual(list(req.nodes), req.reason, now, timedelta(hours=req.hours))
    if isinstance(req, BlacklistRemove):
        return bl.remove_all(list(req.nodes))
    return Blacklist()


def write_request(run_dir: Path, request: BlacklistAdd | BlacklistRemove | BlacklistClear) -> Path:
    """Queue a blacklist edit for a running controller (applied on SIGHUP or at its next poll)."""
    d = private_dir(Path(run_dir) / REQUESTS_DIR)
    path = d / f"{datetime.now().strftime('%Y%m%dT%H%M%S%f')}-{os.getpid()}.json"
    atomic_write(path, request.model_dump_json())
    return path


def take_requests(run_dir: Path) -> tuple[list[BlacklistAdd | BlacklistRemove | BlacklistClear], list[str]]:
    """Queued requests in order, and a problem line for each file that is not a valid request."""
    out: list[BlacklistAdd | BlacklistRemove | BlacklistClear] = []
    problems: list[str] = []
    for path in sorted((Path(run_dir) / REQUESTS_DIR).glob("*.json")):
        try:
            out.append(_ADAPTER.validate_python(json.loads(path.read_text())))
        except (OSError, ValueError, ValidationError) as exc:
            problems.append(f"{path.name}: ignored, not a valid request: {str(exc).splitlines()[0][:200]}")
        path.unlink(missing_ok=True)
    return out, problems
