"""Operator requests to a running controller (`orchestrator blacklist ...`, `orchestrator stop`):
typed, validated on the writer's side, queued as files in run_dir/requests/, applied by the
controller."""

from __future__ import annotations

import json
import math
import os
from datetime import datetime, timedelta
from pathlib import Path
from typing import Annotated, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

from orchestrator.blacklist import Blacklist
from orchestrator.files import atomic_write, private_dir, read_regular
from orchestrator.settings.nodes import SAFE_NAME
from orchestrator.state import REQUESTS_DIR, RunState

STOP_REQUEST = "stop-request"
MAX_REQUEST_BYTES = 1 << 20  # a request names nodes; anything bigger is not one


def check_node_names(nodes: tuple[str, ...]) -> tuple[str, ...]:
    """Node names as Slurm spells them: no empty name, leading dash, shell metacharacter or control
    character."""
    if not nodes:
        raise ValueError("no node named")
    bad = [n for n in nodes if not SAFE_NAME.match(n)]
    if bad:
        raise ValueError(f"not a node name: {bad[0]!r} (letters, digits, '_', '.', '+', '-'; not "
                         "first '-')"[:200])
    return nodes


class _Request(BaseModel):
    """Base of the operator requests: frozen, unknown fields rejected."""
    model_config = ConfigDict(frozen=True, extra="forbid")


class BlacklistAdd(_Request):
    """Blacklist nodes by hand for `hours`."""
    op: Literal["add"] = "add"
    nodes: tuple[str, ...]
    reason: str = Field("added by hand", max_length=1000)
    hours: float = 72.0

    _names = field_validator("nodes")(check_node_names)

    @field_validator("hours")
    @classmethod
    def _finite(cls, v: float) -> float:
        if not math.isfinite(v) or v <= 0 or v > 24 * 365 * 10:
            raise ValueError("hours must be a number above 0 and at most 87600 (10 years)")
        return v


class BlacklistRemove(_Request):
    """Return nodes to the pool."""
    op: Literal["remove"] = "remove"
    nodes: tuple[str, ...]

    _names = field_validator("nodes")(check_node_names)


class BlacklistClear(_Request):
    """Empty the blacklist."""
    op: Literal["clear"] = "clear"


Request = Annotated[BlacklistAdd | BlacklistRemove | BlacklistClear, Field(discriminator="op")]
_ADAPTER: TypeAdapter[BlacklistAdd | BlacklistRemove | BlacklistClear] = TypeAdapter(Request)


def apply_request(bl: Blacklist, req: BlacklistAdd | BlacklistRemove | BlacklistClear,
                  now: datetime) -> Blacklist:
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
    body = request.model_dump_json()
    # the controller would refuse it: never acknowledge what it cannot take
    if len(body) > MAX_REQUEST_BYTES:
        raise ValueError(f"the edit is {len(body)} bytes, over the {MAX_REQUEST_BYTES} a request "
                         "may hold; split it")
    atomic_write(path, body)
    return path


def _read_request(path: Path) -> BlacklistAdd | BlacklistRemove | BlacklistClear:
    # a FIFO or symlink in the queue is refused, never waited on
    raw = read_regular(path, MAX_REQUEST_BYTES + 1)
    if len(raw) > MAX_REQUEST_BYTES:
        raise ValueError(f"over {MAX_REQUEST_BYTES} bytes")
    return _ADAPTER.validate_python(json.loads(raw.decode("utf-8")))


def _discard(path: Path) -> None:
    """Remove a consumed request; one that cannot be removed (a directory, ...) is renamed out of
    the queue."""
    try:
        path.unlink(missing_ok=True)
    except OSError:
        try:
            path.rename(path.with_name(path.name + ".rejected"))
        except OSError:
            pass


def take_requests(run_dir: Path,
                  state: RunState) -> tuple[list[BlacklistAdd | BlacklistRemove | BlacklistClear],
                                                          list[str], list[str]]:
    """Queued requests not yet applied to `state`, in order, a problem line for each file that is
    not a valid request, and the names of the files taken: the caller records them in the ledger's
    `applied_requests` with the edits and saves, and the save removes the files (an edit is never
    acknowledged before the state that holds it is on disk). Never raises for what is in the queue:
    a bad request must not stop the controller."""
    out: list[BlacklistAdd | BlacklistRemove | BlacklistClear] = []
    problems: list[str] = []
    names: list[str] = []
    try:
        paths = sorted((Path(run_dir) / REQUESTS_DIR).glob("*.json"))
    except OSError as exc:
        return out, [f"{REQUESTS_DIR}/: unreadable: {exc}"[:300]], names
    for path in paths:
        if path.name in state.applied_requests:
            continue  # applied and saved; its file goes with the next save
        try:
            out.append(_read_request(path))
        except (OSError, ValueError, ValidationError, RecursionError) as exc:
            first = (str(exc).splitlines() or [type(exc).__name__])[0]
            problems.append(f"{path.name!r}: ignored, not a valid request: {first[:200]!r}")
            _discard(path)
            continue
        names.append(path.name)
    return out, problems, names


def pending(run_dir: Path) -> list[Path]:
    """Request files still waiting for a controller."""
    try:
        return sorted((Path(run_dir) / REQUESTS_DIR).glob("*.json"))
    except OSError:
        return []


class Applied(NamedTuple):
    """What applying the queue did, for the caller to say: one line per edit applied or rejected,
    and per file that was no request."""
    applied: list[str]
    rejected: list[str]
    problems: list[str]
    blacklist: Blacklist  # the ledger's blacklist with the edits applied
    taken: tuple[str, ...]  # the request files taken (for the ledger's applied_requests)


def apply_queued(run_dir: Path, state: RunState, now: datetime,
                 also: tuple[BlacklistAdd | BlacklistRemove | BlacklistClear, ...] = ()) -> Applied:
    """The one place queued blacklist edits (and `also`, an edit of the caller's own, last) are
    applied: the controller at each poll, `run` before it starts one, `blacklist` without a
    controller. A bad edit is rejected with a line and never stops the caller; the caller records
    the result (loop.advance) and saves."""
    queued, problems, taken = take_requests(run_dir, state)
    applied, rejected, bl = [], [], state.blacklist
    for req in [*queued, *also]:
        what = f"op={req.op} nodes={','.join(getattr(req, 'nodes', ())) or '-'}"
        try:
            bl = apply_request(bl, req, now)
        except (ValueError, OverflowError) as exc:
            rejected.append(f"{what}: {exc}"[:300])
            continue
        applied.append(what)
    return Applied(applied, rejected, problems, bl, tuple(taken))
