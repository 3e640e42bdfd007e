"""Issue 37, secrets: no command prints a URL's token or password (validate, errors, logs, notify), `notify
--test` names each URL by scheme and host with its result, the controller's and the nodes' logs are 0600, and
every command's terminal lines share one format without loguru's source locations."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
from loguru import logger
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.redact import redacted, shown_url
from tests.conftest import REPO, base_config, write_config

SLACK = "https://hooks.slack.com/services/T0SECRET/B0SECRET/xoxSECRETTOKEN"


@pytest.mark.parametrize(("url", "shown"), [
    (SLACK, "https://hooks.slack.com/…"),
    ("https://user:SECRETPW@hc.example.org:8443/ping/SECRET?k=SECRET", "https://hc.example.org:8443/…"),
    ("slack://SECRETA/SECRETB/SECRETC", "slack://…"),  # apprise's forms put a token where a host would be
    ("hxxps://SECRET@hc-ping.com/SECRET", "hxxps://…"),
    ("hc-ping.com/SECRET", "(not a URL)"),
    ("http://h:99999/SECRET", "http://…"),
])
def test_a_url_is_shown_by_scheme_and_host_only(url: str, shown: str) -> None:
    assert shown_url(url) == shown
    assert "SECRET" not in redacted(f"failed: {url} (was {url.split('//')[-1]})", (url,))


@pytest.mark.parametrize("where", ["file", "--set"])
def test_validate_never_echoes_a_urls_token(tmp_path: Path, where: str) -> None:
    """The probe: a mistyped Slack webhook or heartbeat URL came back whole, token included, in validate's
    error (pydantic's message carries the input; apprise's refusal quoted it)."""
    bad = {"notify": {"urls": ["htps://hooks.slack.com/services/T0/B0/SECRETTOKEN"]},
           "exports": {"heartbeat_url": "hxxps://user:SECRETPW@hc-ping.com/SECRETUUID"}}
    cfg = write_config(tmp_path, base_config(tmp_path, **({} if where == "--set" else bad)))
    sets = ["--set", "exports.heartbeat_url=ftp://u:SECRETPW@hc-ping.com/SECRETUUID",
            "--set", "notify.urls=[htps://hooks.slack.com/services/T0/B0/SECRETTOKEN]"] if where == "--set" else []
    res = CliRunner().invoke(app, ["validate", str(cfg), *sets])
    assert res.exit_code == 2, res.output
    assert "SECRET" not in res.output, res.output
    assert "notify.urls" in res.output and "htps://…" in res.output
    assert "exports.heartbeat_url" in res.output


def test_a_failed_heartbeat_never_logs_the_password(tmp_path: Path) -> None:
    """`urlsplit().netloc` logged `user:password@host` on every failed ping."""
    from orchestrator.loop.exports import _ping

    said: list[str] = []
    sink = logger.add(lambda m: said.append(str(m)), level="WARNING", format="{message}")
    try:
        _ping("http://user:SECRETPW@127.0.0.1:9/ping/SECRETUUID")
    finally:
        logger.remove(sink)
    assert said and "heartbeat to http://127.0.0.1:9/… failed" in said[0], said
    assert not any("SECRET" in m or "user" in m for m in said), said


class _Hook(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *_: object) -> None:
        pass


def test_notify_test_names_each_url_with_its_result(tmp_path: Path) -> None:
    server = HTTPServer(("127.0.0.1", 0), _Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        urls = [f"json://127.0.0.1:{server.server_port}/SECRETPATH", "json://127.0.0.1:9/SECRETDEAD"]
        cfg = write_config(tmp_path, base_config(tmp_path, notify={"urls": urls}))
        res = CliRunner().invoke(app, ["notify", str(cfg), "--test"])
    finally:
        server.shutdown()
    lines = res.output.splitlines()
    assert res.exit_code == 1, res.output
    assert f"  json://127.0.0.1:{server.server_port}/…: ok" in lines, res.output
    dead = next(ln for ln in lines if ln.startswith("  json://127.0.0.1:9/…: "))
    assert "ok" not in dead.split(": ", 1)[1] and "not delivered through 1 of 2 URLs" in res.output
    assert "SECRET" not in res.output


def test_controller_log_and_node_logs_are_private(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both were created 0644 (umask 022): hosts, paths and the training's output for every user."""
    from orchestrator.agent.main import NodeAgent
    from orchestrator.cli.common import setup_logging
    from orchestrator.contract import SegmentPaths
    from orchestrator.model import SegmentSpec

    old = os.umask(0o022)
    try:
        setup_logging(tmp_path / "run", verbose=False)
        logger.info("a line")
        spec = SegmentSpec(run_name="r", index=1, job_name="r.seg0001", nodes=1, tasks_per_node=1,
                           gpus_per_node=0, time_limit_min=5, command=("sleep", "60"), workdir=str(tmp_path),
                           run_dir=str(tmp_path), segment_dir=str(tmp_path / "s"), progress_regex=r"it (\d+)")
        agent = NodeAgent(spec, "node1", 0, 1, "9")
        # stopped before its ranks start: the log is what is looked at
        monkeypatch.setattr(agent.facts, "baseline", lambda: os.kill(os.getpid(), signal.SIGTERM))
        saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR2)}
        try:
            agent.run()
        finally:
            for s, h in saved.items():
                signal.signal(s, h)
    finally:
        os.umask(old)
        logger.remove()
    assert stat.S_IMODE((tmp_path / "run" / "controller.log").stat().st_mode) == 0o600
    assert stat.S_IMODE(SegmentPaths(tmp_path / "s").log("node1").stat().st_mode) == 0o600


def test_every_commands_warnings_have_the_terminal_format(tmp_path: Path) -> None:
    """A command without the controller (validate, notify, cancel) printed loguru's default lines, with
    `orchestrator.loop.exports:_ping:129` in them."""
    cfg = write_config(tmp_path, base_config(tmp_path))
    code = ("import sys; from loguru import logger; from orchestrator.cli import app\n"
            "try:\n    app(['validate', sys.argv[1]])\nexcept SystemExit:\n    pass\n"
            "logger.warning('after the command')\n")
    res = subprocess.run([sys.executable, "-c", code, str(cfg)], cwd=REPO, capture_output=True, text=True,
                         timeout=60, check=True)
    line = next(ln for ln in res.stderr.splitlines() if "after the command" in ln)
    assert line.split(" ", 2)[2] == "WARNING after the command", line
    assert ":<module>:" not in line and "__main__" not in line


def test_a_heartbeat_port_that_is_no_number_is_a_config_error(tmp_path: Path) -> None:
    """Issue 37 re-probe: `https://hc-ping.com:notaport/UUID` passed validate, then the heartbeat thread raised a
    traceback on every ping and never pinged."""
    from orchestrator.settings import ConfigError, load_settings

    cfg = write_config(tmp_path, base_config(tmp_path, exports={"heartbeat_url": "https://hc-ping.com:notaport/X"}))
    with pytest.raises(ConfigError, match=r"exports\.heartbeat_url: .*port after the host is not a number"):
        load_settings(cfg)


def test_the_dry_run_masks_url_credentials_in_the_environment_and_the_command(tmp_path: Path) -> None:
    """The re-probe (E7): only `*_TOKEN`-named values were masked; a password in a database URL, a pip index
    URL, a webhook's path and a tracker URL in an argument were printed twice."""
    env = {"DATABASE_URL": "postgres://dbuser:SECRETPW1@db.host/x", "MY_WEBHOOK": SLACK,
           "PIP_INDEX_URL": "https://puser:SECRETPW2@pypi.corp/simple", "PLAIN": "s3://bucket/data?versionId=SECRETV"}
    cfg = base_config(tmp_path, env=env)
    cfg["command"] = [*cfg["command"], "--tracker=https://tuser:SECRETPW3@tracker.corp/api?key=SECRETQ"]
    res = CliRunner().invoke(app, ["run", str(write_config(tmp_path, cfg)), "--dry-run"])
    assert res.exit_code == 0, res.output
    assert "SECRET" not in res.output, [ln for ln in res.output.splitlines() if "SECRET" in ln]
    # what is not a credential stays, so the dry run still shows what runs where
    assert "postgres://dbuser:***@db.host/x" in res.output and "tracker.corp/api?key=***" in res.output
    assert "s3://bucket/data?versionId=***" in res.output


def test_the_dry_run_masks_a_token_as_a_urls_user_and_an_argument_named_for_a_secret(tmp_path: Path) -> None:
    """The fifth re-probe (X1): `https://ghp_TOKEN@github.com/...` (a token as the user, no password) and
    `--password=X` were printed in clear. A name that only contains such a word (`--tokenizer_name`) is no secret."""
    cfg = base_config(tmp_path, env={"GIT_URL": "https://ghp_SECRETGH1@github.com/x/y"})
    cfg["command"] = [*cfg["command"], "--password=SECRETARG", "--hf-token", "SECRETHF", "--tokenizer_name", "gpt2"]
    res = CliRunner().invoke(app, ["run", str(write_config(tmp_path, cfg)), "--dry-run"])
    assert res.exit_code == 0, res.output
    assert "SECRET" not in res.output, [ln for ln in res.output.splitlines() if "SECRET" in ln]
    assert "https://***@github.com/x/y" in res.output and "--tokenizer_name gpt2" in res.output


@pytest.mark.parametrize("value", ["slack://SECRETA/SECRETB/SECRETC", "https://user:SECRETPW@x.invalid/"])
def test_validate_never_echoes_a_url_given_where_a_section_or_a_number_goes(tmp_path: Path, value: str) -> None:
    """The re-probe (E3): a URL pasted where `notify:`'s mapping goes (one lost indent), or into a number,
    came back whole in pydantic's words ("valid dictionary or instance of NotifyCfg")."""
    for notify in (value, {"max_per_hour": value}):
        cfg = write_config(tmp_path, base_config(tmp_path, notify=notify))
        res = CliRunner().invoke(app, ["validate", str(cfg)])
        assert res.exit_code == 2, res.output
        assert "SECRET" not in res.output and "NotifyCfg" not in res.output, res.output
        assert "notify" in res.output
    assert "a section is needed here" in CliRunner().invoke(
        app, ["validate", str(write_config(tmp_path, base_config(tmp_path, notify=value)))]).output
