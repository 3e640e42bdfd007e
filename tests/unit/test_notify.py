"""Notifications to a real local endpoint: apprise's JSON webhook to a small HTTP server on 127.0.0.1."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import pytest

from orchestrator.clock import FakeClock
from orchestrator.notify import Notifier


class Sink:
    def __init__(self, status: int = 200):
        self.received: list[dict[str, Any]] = []
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                n = int(self.headers.get("Content-Length", 0))
                sink.received.append(json.loads(self.rfile.read(n)))
                self.send_response(status)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"json://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()


@pytest.fixture
def sink() -> Iterator[Sink]:
    s = Sink()
    yield s
    s.close()


def test_delivered_deduplicated_and_rate_limited(sink: Sink) -> None:
    clock = FakeClock()
    n = Notifier([sink.url], clock, max_per_hour=3, dedup_window_s=600)
    assert n("demo: node node3 blacklisted", "gpu_ecc: RuntimeError: uncorrectable ECC error")
    assert not n("demo: node node3 blacklisted", "gpu_ecc: RuntimeError: uncorrectable ECC error")  # duplicate
    assert n("demo: segment 1 ended (gpu_ecc)", "culprits=node3")
    assert n("demo: segment 2 ended (success)", "done")
    assert not n("demo: segment 3 ended (timelimit)", "over budget")  # 4th in the hour
    clock.advance(3601)
    assert n("demo: node node3 blacklisted", "gpu_ecc: RuntimeError: uncorrectable ECC error")  # window passed
    titles = [r["title"] for r in sink.received]
    assert titles == ["demo: node node3 blacklisted", "demo: segment 1 ended (gpu_ecc)",
                      "demo: segment 2 ended (success)", "demo: node node3 blacklisted"]
    assert "1 more notifications were suppressed" in sink.received[-1]["message"]


def test_failure_never_raises() -> None:
    bad = Sink(status=500)
    try:
        n = Notifier([bad.url], FakeClock())
        assert n("t", "b") is False and n.failures == 1
    finally:
        bad.close()
    dead = Notifier(["json://127.0.0.1:9/nothing-listens"], FakeClock())
    assert dead("t", "b") is False


def test_bad_url_is_a_config_error() -> None:
    with pytest.raises(ValueError, match="notify.urls"):
        Notifier(["not a url at all"], FakeClock())
