"""Issue 37, crashes and data loss in `exports`: an http_addr no resolver takes is a config error (it killed the
controller right after segment 1, every restart again), an endpoint that cannot start is a warning, and
metrics_path never overwrites the run's own files or a file that is not our metrics output."""

from __future__ import annotations

from pathlib import Path

import pytest
from loguru import logger
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.loop.exports import Exports
from orchestrator.model import RunStatus
from orchestrator.settings import ConfigError, load_settings
from tests.conftest import base_config, write_config
from tests.unit.test_controller_fake import make


@pytest.mark.parametrize(("addr", "says"), [
    ("a" * 300, "1 to 253 characters"),
    ("a" * 64 + ".example.org", "label of 1 to 63"),
    ("metrics.example.org:9100", "its port is exports.http_port"),
    ("-bad.example.org", "not a host name"),
])
def test_an_http_addr_no_resolver_takes_is_a_config_error(tmp_path: Path, addr: str, says: str) -> None:
    cfg = write_config(tmp_path, base_config(tmp_path, exports={"http_port": 9100, "http_addr": addr}))
    with pytest.raises(ConfigError, match=says) as got:
        load_settings(cfg, {})
    assert "exports.http_addr" in str(got.value)


@pytest.mark.parametrize(("addr", "kept"), [("0.0.0.0", "0.0.0.0"), ("::1", "::1"), ("[::1]", "::1"),
                                            ("metrics-01.example.org", "metrics-01.example.org")])
def test_an_ordinary_http_addr_passes(tmp_path: Path, addr: str, kept: str) -> None:
    cfg = write_config(tmp_path, base_config(tmp_path, exports={"http_port": 9100, "http_addr": addr}))
    assert load_settings(cfg, {}).exports.http_addr == kept


def test_an_endpoint_that_cannot_start_is_one_warning_and_the_run_goes_on(tmp_path: Path) -> None:
    """The probe's crash: `UnicodeError: label too long` from the endpoint's start left the job unwatched."""
    ctl, _, _ = make(tmp_path, overrides=["exports.http_port=0"])
    bad = ctl.s.exports.model_copy(update={"http_addr": "a" * 300})  # as a config from before the check
    ctl.s = ctl.s.model_copy(update={"exports": bad})
    said: list[str] = []
    sink = logger.add(lambda m: said.append(str(m)), level="WARNING", format="{message}")
    try:
        assert ctl.run().status == RunStatus.DONE
    finally:
        logger.remove(sink)
    ended = [m for m in said if m.startswith("metrics endpoint not written")]
    assert len(ended) == 1, said  # once, not once per poll


def _validate(cfg: Path) -> tuple[int, str]:
    res = CliRunner().invoke(app, ["validate", str(cfg)])
    return res.exit_code, res.output


@pytest.mark.parametrize("target", ["state", "tracker", "notes", "checkpoint dir"])
def test_metrics_path_never_points_at_a_file_that_is_not_ours(tmp_path: Path, target: str) -> None:
    run_dir, ckpt = tmp_path / "run", tmp_path / "ckpt"
    run_dir.mkdir()
    ckpt.mkdir()
    path = {"state": run_dir / "state.json", "tracker": ckpt / "latest_checkpointed_iteration.txt",
            "notes": tmp_path / "notes.txt", "checkpoint dir": ckpt / "run.prom"}[target]
    if target != "checkpoint dir":
        path.write_text('{"run": "t"}\n')
    cfg = write_config(tmp_path, base_config(tmp_path, exports={"metrics_path": str(path)}))
    code, out = _validate(cfg)
    assert code == 2 and "exports.metrics_path" in out, out
    assert target == "checkpoint dir" or path.read_text() == '{"run": "t"}\n'


def test_metrics_path_of_our_own_earlier_file_is_replaced_and_a_stranger_is_not(tmp_path: Path) -> None:
    textfiles = tmp_path / "textfile"
    textfiles.mkdir()
    path = textfiles / "t.prom"
    ctl, _, clock = make(tmp_path, overrides=[f"exports.metrics_path={path}"])
    state = ctl.run()
    assert "orchestrator_iteration" in path.read_text()
    assert _validate(ctl.s.config_path or Path())[0] == 0  # our own file from the last run: fine
    path.write_text("someone_else 1\n")  # put there after the config was checked
    said: list[str] = []
    sink = logger.add(lambda m: said.append(str(m)), level="WARNING", format="{message}")
    try:
        Exports().after_poll(ctl.s, state, clock.now(), None)
    finally:
        logger.remove(sink)
    assert path.read_text() == "someone_else 1\n"
    assert any("not a metrics file this tool wrote" in m for m in said), said
