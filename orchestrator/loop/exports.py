"""After every poll, what the run tells the monitoring people already run (settings `exports`): the
metrics file for node_exporter's textfile collector, the same metrics over HTTP, a dead-man
heartbeat and an event log. None of it may stop or slow the loop: a failure is logged once per kind
and the loop goes on."""

from __future__ import annotations

import threading
import urllib.request
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

from loguru import logger
from prometheus_client import CollectorRegistry, start_http_server, write_to_textfile
from prometheus_client.metrics_core import Metric

from orchestrator.loop.bundles import write_bundles
from orchestrator.loop.events import EventLog
from orchestrator.redact import shown_url
from orchestrator.settings import Settings
from orchestrator.settings.metricsfile import not_our_metrics, user_metrics_path
from orchestrator.state import RunState
from orchestrator.views.metrics import METRICS_FILE, registry

HEARTBEAT_TIMEOUT_S = 10.0


class _Latest:
    """What the HTTP endpoint serves: the registry of the last poll (swapped whole, never half
    written)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()

    def collect(self) -> Iterable[Metric]:
        return self.registry.collect()

    def restricted_registry(self, names: Iterable[str]) -> Any:
        return self.registry.restricted_registry(names)


class Exports:
    """Owns what leaves the controller after each poll: the metrics file, the HTTP endpoint's
    server, the event log's cursor and the heartbeat's timing."""

    def __init__(self) -> None:
        self._latest = _Latest()
        self._server: Any = None
        self._events: EventLog | None = None
        self._seen_pinged: datetime | None = None
        self._pinged_at: datetime | None = None
        self._ping: threading.Thread | None = None
        self._failed: set[str] = set()

    def after_poll(self, s: Settings, state: RunState, now: datetime,
                   seen_at: datetime | None) -> None:
        reg = registry(state, now, seen_at)
        self._latest.registry = reg
        self._guard("metrics file", lambda: _write_metrics(metrics_path(s), reg))
        if s.exports.http_port is not None and self._server is None:
            self._guard("metrics endpoint",
                        lambda: self._serve(s.exports.http_addr, s.exports.http_port or 0))
        if s.exports.events:
            self._guard("event log", lambda: self._event_log(s).record(state, now))
        self._guard("evidence bundles", lambda: write_bundles(state, s.run_dir))
        if s.exports.heartbeat_url and seen_at is not None:
            self._heartbeat(s.exports.heartbeat_url, s.exports.heartbeat_interval_s, now, seen_at)

    def _guard(self, what: str, work: Any) -> None:
        try:
            work()
            self._failed.discard(what)
        # whatever it is (a name the resolver refuses raised UnicodeError and killed the loop,
        # issue 37), it is said once per outage, not once per poll, and the loop goes on
        except Exception as exc:  # noqa: BLE001
            if what not in self._failed:
                logger.warning("{} not written: {}", what, exc)
            self._failed.add(what)

    def _serve(self, addr: str, port: int) -> None:
        self._server, _thread = start_http_server(port, addr, registry=self._latest)
        logger.info("metrics endpoint: http://{}:{}/metrics", addr, self._server.server_port)

    @property
    def http_port(self) -> int | None:
        return int(self._server.server_port) if self._server is not None else None

    def _event_log(self, s: Settings) -> EventLog:
        if self._events is None or self._events.path.parent != s.run_dir:
            self._events = EventLog(s.run_dir)
        return self._events

    def _heartbeat(self, url: str, every_s: float, now: datetime, seen_at: datetime) -> None:
        """Only after a poll that saw the job (seen_at moved on), at most every `every_s`, one ping
        in flight."""
        if self._seen_pinged is not None and seen_at <= self._seen_pinged:
            return
        if self._pinged_at is not None and (now - self._pinged_at).total_seconds() < every_s:
            return
        if self._ping is not None and self._ping.is_alive():
            return
        self._seen_pinged, self._pinged_at = seen_at, now
        self._ping = threading.Thread(target=_ping, args=(url,), name="heartbeat", daemon=True)
        self._ping.start()

    def wait_heartbeat(self, timeout: float = HEARTBEAT_TIMEOUT_S + 1) -> None:
        if self._ping is not None:
            self._ping.join(timeout)

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


def metrics_path(s: Settings) -> Path:
    return user_metrics_path(s.exports.metrics_path, s.config_dir) or s.run_dir / METRICS_FILE


def _write_metrics(path: Path, reg: CollectorRegistry) -> None:
    """Replace the metrics file, unless what is there now is no metrics file of ours (a file put
    there since the config was checked is not overwritten either)."""
    if why := not_our_metrics(path):
        raise ValueError(why)
    write_to_textfile(str(path), reg)


def _ping(url: str) -> None:
    """GET the URL (healthchecks.io, Cronitor, Uptime Kuma push); its token and password are never
    logged, only its scheme and host."""
    try:
        with urllib.request.urlopen(
            url, timeout=HEARTBEAT_TIMEOUT_S) as res:  # noqa: S310 - http(s) only, checked
            res.read(1024)
    except (OSError, ValueError) as exc:
        logger.warning("heartbeat to {} failed: {}", shown_url(url), type(exc).__name__)
