"""Issue 23: what a run tells the monitoring people already run: events.jsonl (schema-versioned, no event lost
or repeated across a controller restart), the metrics over HTTP (prometheus_client), a dead-man heartbeat
pinged only after a poll that could see the job, and a metrics file a kill -9 never leaves half written."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
from loguru import logger
from prometheus_client.parser import text_string_to_metric_families

from orchestrator.loop.events import EVENTS_FILE, EventLog
from orchestrator.loop.exports import Exports
from orchestrator.model import RunStatus
from tests.conftest import REPO
from tests.fakes import Fault
from tests.unit.test_controller_fake import make


def _events(run_dir: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (run_dir / EVENTS_FILE).read_text().splitlines()]


def test_a_run_logs_its_segments_blacklisting_and_end_as_json_lines(tmp_path: Path) -> None:
    ctl, _, _ = make(tmp_path, {"node3": Fault("ecc", at=35)})
    state = ctl.run()
    got = _events(ctl.s.run_dir)
    assert all(e["schema"] == 1 and e["run"] == "t" for e in got)
    kinds = [e["event"] for e in got]
    assert kinds.count("segment_submitted") == 2 and kinds.count("segment_ended") == 2
    first_end = next(e for e in got if e["event"] == "segment_ended")
    assert first_end["cause"] == "gpu_ecc" and first_end["culprit_nodes"] == ["node3"]
    assert first_end["action"] == "resubmit_exclude" and first_end["segment"] == 1
    assert [e["node"] for e in got if e["event"] == "node_blacklisted"] == ["node3"]
    assert got[-1]["event"] == "run_ended" and got[-1]["status"] == "done" and got[-1]["iteration"] == 50
    assert [e["time"] for e in got] == sorted(e["time"] for e in got)  # type: ignore[type-var]
    assert stat.S_IMODE((ctl.s.run_dir / EVENTS_FILE).stat().st_mode) == 0o600
    assert state.status == RunStatus.DONE


def test_a_restarted_controller_repeats_no_event_and_survives_a_cut_line(tmp_path: Path) -> None:
    ctl, _, clock = make(tmp_path, {"node3": Fault("ecc", at=35)})
    state = ctl.run()
    path = ctl.s.run_dir / EVENTS_FILE
    before = path.read_text().splitlines()
    with path.open("a") as f:
        f.write('{"schema": 1, "key": "cut-by-a-kill')  # a kill -9 in the middle of a line
    assert EventLog(ctl.s.run_dir).record(state, clock.now()) == 0  # a new controller: nothing again
    state = state.evolve(status=RunStatus.STOPPED)  # and something new after the restart
    assert EventLog(ctl.s.run_dir).record(state, clock.now()) == 1
    lines = path.read_text().splitlines()
    assert lines[: len(before)] == before and lines[len(before)].startswith('{"schema": 1, "key": "cut')
    added = [json.loads(line) for line in lines[len(before) + 1:]]
    assert [e["event"] for e in added] == ["run_ended"] and added[0]["status"] == "stopped"


class _Hits(BaseHTTPRequestHandler):
    hits: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        _Hits.hits.append(self.path)
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"OK")

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def pinged() -> Iterator[tuple[str, list[str]]]:
    server = HTTPServer(("127.0.0.1", 0), _Hits)
    _Hits.hits = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/ping/0123-secret-uuid", _Hits.hits
    server.shutdown()
    server.server_close()


def test_the_heartbeat_is_pinged_only_after_a_poll_that_saw_the_job(tmp_path: Path,
                                                                    pinged: tuple[str, list[str]]) -> None:
    url, hits = pinged
    ctl, _, clock = make(tmp_path, overrides=[f"exports.heartbeat_url={url}", "exports.heartbeat_interval_s=60"])
    state = ctl.run()
    ctl.exports.wait_heartbeat()
    assert hits and set(hits) == {"/ping/0123-secret-uuid"}  # the run pinged while it ran
    hits.clear()
    ex, now = Exports(), clock.now()
    ex.after_poll(ctl.s, state, now, None)  # the scheduler never answered: no ping
    ex.wait_heartbeat()
    assert hits == []
    ex.after_poll(ctl.s, state, now, now)
    ex.wait_heartbeat()
    assert hits == ["/ping/0123-secret-uuid"]
    ex.after_poll(ctl.s, state, now + timedelta(seconds=120), now)  # no newer sight of the job: silence
    ex.after_poll(ctl.s, state, now + timedelta(seconds=10), now + timedelta(seconds=10))  # too soon
    ex.wait_heartbeat()
    assert len(hits) == 1
    ex.after_poll(ctl.s, state, now + timedelta(seconds=70), now + timedelta(seconds=70))
    ex.wait_heartbeat()
    assert len(hits) == 2
    ex.close()


def test_a_dead_heartbeat_endpoint_never_stops_the_loop_and_the_token_is_not_logged(tmp_path: Path) -> None:
    said: list[str] = []
    sink = logger.add(lambda m: said.append(str(m)), level="WARNING")
    try:
        ctl, _, _ = make(tmp_path, overrides=["exports.heartbeat_url=http://127.0.0.1:9/ping/secret-token"])
        assert ctl.run().status == RunStatus.DONE
        ctl.exports.wait_heartbeat()
    finally:
        logger.remove(sink)
    assert any("heartbeat to http://127.0.0.1:9/… failed" in m for m in said), said
    assert not any("secret-token" in m for m in said)


def test_the_metrics_endpoint_serves_the_last_polls_metrics(tmp_path: Path) -> None:
    ctl, _, clock = make(tmp_path, overrides=["exports.http_port=0"])
    state = ctl.run()
    ex = Exports()
    ex.after_poll(ctl.s, state, clock.now(), clock.now())
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{ex.http_port}/metrics", timeout=10).read().decode()
    finally:
        ex.close()
    got = {s.name: s.value for fam in text_string_to_metric_families(body) for s in fam.samples
           if s.name.startswith("orchestrator_")}
    assert got["orchestrator_iteration"] == 50 and got["orchestrator_effective_training_seconds"] > 0


def test_metrics_path_puts_the_file_where_node_exporter_reads(tmp_path: Path) -> None:
    textfile_dir = tmp_path / "textfile"
    textfile_dir.mkdir()
    ctl, _, _ = make(tmp_path, overrides=[f"exports.metrics_path={textfile_dir / 't.prom'}"])
    ctl.run()
    assert "orchestrator_iteration" in (textfile_dir / "t.prom").read_text()


WRITER = """
import sys
from datetime import UTC, datetime
from pathlib import Path
from orchestrator.state import RunState, SegmentRecord
from orchestrator.views.metrics import write_metrics
now = datetime.now(UTC)
state = RunState(run="k", created_at=now, updated_at=now,
                 segments=[SegmentRecord(index=i, job_name=f"k.{i}") for i in range(1, 2000)])
print("ready", flush=True)
while True:
    write_metrics(Path(sys.argv[1]), state, datetime.now(UTC), now)
"""


def test_a_kill_9_in_the_middle_of_a_write_leaves_the_file_whole(tmp_path: Path) -> None:
    path = tmp_path / "metrics.prom"
    for _ in range(8):
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE, cwd=REPO,
                                env={**os.environ, "PYTHONPATH": str(REPO)})
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        while not path.exists():  # at least one whole file, then a kill at some point of the next writes
            pass
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        text = path.read_text()
        assert text.endswith("\n") and "orchestrator_job_seen_timestamp_seconds" in text
        assert sum(1 for _ in text_string_to_metric_families(text)) > 5
