"""Issue 23: `orchestrator logs` (a segment's node output, labelled by node) and `orchestrator runs` (every run
under a directory), read-only."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.contract import SegmentPaths
from orchestrator.model import RunStatus
from orchestrator.state import RunState, SegmentRecord, StateStore

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def make_run(run_dir: Path, name: str, status: RunStatus = RunStatus.RUNNING) -> None:
    segs = [SegmentRecord(index=i, job_name=f"{name}.seg{i}", job_id=str(1000 + i), start_iteration=0,
                          end_iteration=10 * i) for i in (1, 2)]
    StateStore(run_dir).save(RunState(run=name, created_at=NOW, updated_at=NOW, segments=segs, status=status,
                                      target_iteration=100))
    for i in (1, 2):
        logs = SegmentPaths.of(run_dir, i).logs
        logs.mkdir(parents=True)
        for node in ("node1", "node2"):
            (logs / f"{node}.log").write_text("".join(f"seg{i} {node} line {k}\n" for k in range(30)))
    (SegmentPaths.of(run_dir, 2).logs / "node2.log").open("a").write("evil \x1b[2J title\n")


def test_logs_of_the_latest_segment_every_node_labelled(tmp_path: Path) -> None:
    make_run(tmp_path / "run", "r")
    res = CliRunner().invoke(app, ["logs", str(tmp_path / "run"), "-n", "2"])
    assert res.exit_code == 0, res.output
    assert res.output.splitlines() == ["node1: seg2 node1 line 28", "node1: seg2 node1 line 29",
                                       "node2: seg2 node2 line 29", "node2: evil \\x1b[2J title"]


def test_logs_of_one_node_of_an_older_segment_and_the_errors(tmp_path: Path) -> None:
    make_run(tmp_path / "run", "r")
    res = CliRunner().invoke(app, ["logs", str(tmp_path / "run"), "--node", "node1", "--segment", "1", "-n", "1"])
    assert res.exit_code == 0 and res.output == "seg1 node1 line 29\n"
    res = CliRunner().invoke(app, ["logs", str(tmp_path / "run"), "--node", "node9"])
    assert res.exit_code == 1 and "no log of node node9" in res.output
    res = CliRunner().invoke(app, ["logs", str(tmp_path / "run"), "--segment", "7"])
    assert res.exit_code == 1 and "no segment 7 (segments 1-2)" in res.output


def test_runs_lists_every_run_under_a_directory(tmp_path: Path) -> None:
    make_run(tmp_path / "a" / "run", "alpha")
    make_run(tmp_path / "b", "beta", RunStatus.DONE)
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "state.json").write_text("{not json")
    res = CliRunner().invoke(app, ["runs", str(tmp_path)])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[0].split()[:6] == ["run", "state", "segs", "iteration", "goal", "eta"]
    assert any(ln.split()[:5] == ["alpha", "running", "2", "20", "100"] for ln in lines)
    assert any(ln.split()[:2] == ["beta", "done"] for ln in lines)
    assert any("unreadable" in ln for ln in lines)


def test_notify_test_delivers_through_the_configured_urls_and_says_when_not(tmp_path: Path) -> None:
    """Issue 23: a way to check alerts before a month-long run relies on them: a local JSON webhook receives
    the test, a dead endpoint is reported (exit 1), an empty notify.urls is said."""
    import http.server
    import threading

    from tests.conftest import base_config, write_config

    got: list[bytes] = []

    class Hook(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            got.append(self.rfile.read(int(self.headers["Content-Length"])))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *_: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"json://127.0.0.1:{server.server_port}/hook"
        cfg = write_config(tmp_path, base_config(tmp_path, notify={"urls": [url]}))
        res = CliRunner().invoke(app, ["notify", str(cfg), "--test"])
        assert res.exit_code == 0 and "test notification delivered" in res.output, res.output
        assert got and b"test notification" in got[0]
        assert f"json://127.0.0.1:{server.server_port}/…: ok" in res.output, res.output
        assert "/hook" not in res.output  # the URL's path (its token) is not printed
        dead = write_config(tmp_path, base_config(tmp_path, notify={"urls": ["json://127.0.0.1:9/none"]}))
        res = CliRunner().invoke(app, ["notify", str(dead), "--test"])
        assert res.exit_code == 1 and "not delivered" in res.output
    finally:
        server.shutdown()
    empty = write_config(tmp_path, base_config(tmp_path))
    res = CliRunner().invoke(app, ["notify", str(empty), "--test"])
    assert res.exit_code == 0 and "notify.urls is empty" in res.output
