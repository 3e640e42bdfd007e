"""Issue 23: a real Prometheus server (Debian's `prometheus`) scrapes a run's metrics both ways people run it,
through node_exporter's textfile collector (Debian's `prometheus-node-exporter`, reading exports.metrics_path)
and from the controller's own endpoint (exports.http_port), and a PromQL query returns the run's effective
training time. CI installs both (ORCH_REQUIRE_PROMETHEUS=1); elsewhere the test is skipped without them."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from orchestrator.loop.exports import Exports
from tests.fakes import Fault
from tests.unit.test_controller_fake import make

DEADLINE_S = 90.0


def _binary(*names: str) -> str:
    for name in names:
        if found := shutil.which(name, path=f"{os.environ.get('PATH', '')}:/usr/bin:/usr/sbin"):
            return found
    if os.environ.get("ORCH_REQUIRE_PROMETHEUS") == "1":
        pytest.fail(f"{names[0]} is not installed")
    pytest.skip(f"{names[0]} is not installed (apt-get install prometheus prometheus-node-exporter)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def daemons(tmp_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()


def _query(port: int, promql: str) -> list[dict[str, Any]]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=10) as res:
        body = json.loads(res.read())
    assert body["status"] == "success", body
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def _wait_for(port: int, promql: str, proc: subprocess.Popen[bytes], log: Path) -> list[dict[str, Any]]:
    end = time.monotonic() + DEADLINE_S
    while time.monotonic() < end:
        assert proc.poll() is None, f"prometheus exited: {log.read_text()[-2000:]}"
        try:
            if found := _query(port, promql):
                return found
        except OSError:
            pass  # not listening yet
        time.sleep(0.5)
    pytest.fail(f"no answer to {promql} in {DEADLINE_S:.0f} s: {log.read_text()[-2000:]}")


def test_prometheus_scrapes_the_run_and_promql_returns_its_effective_training_time(
        tmp_path: Path, daemons: list[subprocess.Popen[bytes]]) -> None:
    prometheus, node_exporter = _binary("prometheus"), _binary("prometheus-node-exporter", "node_exporter")
    textfiles = tmp_path / "textfile"
    textfiles.mkdir()
    ctl, _, clock = make(tmp_path, {"node3": Fault("ecc", at=35)},
                         overrides=[f"exports.metrics_path={textfiles / 'run-t.prom'}"])
    state = ctl.run()
    exporter = Exports()  # the controller's endpoint, serving the same run
    exporter.after_poll(ctl.s.model_copy(update={"exports": ctl.s.exports.model_copy(update={"http_port": 0})}),
                        state, clock.now(), clock.now())
    want = next(s.value for fam in text_string_to_metric_families((textfiles / "run-t.prom").read_text())
                for s in fam.samples if s.name == "orchestrator_effective_training_seconds")
    assert want > 0
    ne_port, prom_port = _free_port(), _free_port()
    daemons.append(subprocess.Popen(
        [node_exporter, f"--web.listen-address=127.0.0.1:{ne_port}", "--collector.disable-defaults",
         "--collector.textfile", f"--collector.textfile.directory={textfiles}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    (tmp_path / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\nscrape_configs:\n"
        f"  - job_name: node\n    static_configs: [{{targets: ['127.0.0.1:{ne_port}']}}]\n"
        f"  - job_name: orchestrator\n    static_configs: [{{targets: ['127.0.0.1:{exporter.http_port}']}}]\n")
    log = tmp_path / "prometheus.log"
    with log.open("wb") as out:
        daemons.append(subprocess.Popen(
            [prometheus, f"--config.file={tmp_path / 'prometheus.yml'}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{prom_port}"], stdout=out, stderr=subprocess.STDOUT))
    try:
        for job in ("node", "orchestrator"):
            got = _wait_for(prom_port, f'orchestrator_effective_training_seconds{{run="t",job="{job}"}}',
                            daemons[-1], log)
            assert len(got) == 1 and float(got[0]["value"][1]) == pytest.approx(want), (job, got)
        lost = _query(prom_port, 'sum by (cause) (orchestrator_lost_seconds{run="t",job="node"})')
        assert "gpu_ecc" in {r["metric"]["cause"] for r in lost}  # PromQL aggregates the labelled losses
    finally:
        exporter.close()
