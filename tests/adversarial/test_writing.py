"""Issue 15, "Writing where it should not": a directory that is not a run directory is never chmodded, locked
or created; nothing a run's files say makes the orchestrator write outside its places."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from loguru import logger
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.cli.common import setup_logging
from orchestrator.clock import FakeClock
from orchestrator.settings import ConfigError, load_settings
from orchestrator.state import RunState, StateStore
from tests.conftest import base_config, write_config


def shared_dir(tmp_path: Path) -> Path:
    d = tmp_path / "shared"
    d.mkdir()
    d.chmod(0o755)
    (d / "somebody-elses-file").write_text("x")
    return d


def untouched(d: Path) -> bool:
    return stat.S_IMODE(d.stat().st_mode) == 0o755 and sorted(p.name for p in d.iterdir()) == ["somebody-elses-file"]


def test_stop_on_a_shared_directory_changes_nothing(tmp_path: Path) -> None:
    d = shared_dir(tmp_path)
    res = CliRunner().invoke(app, ["stop", str(d), "--wait", "0"])
    assert res.exit_code == 0 and "no controller is running" in res.output
    assert untouched(d)


def test_stop_of_a_run_that_never_existed_creates_nothing(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, base_config(tmp_path))
    res = CliRunner().invoke(app, ["stop", str(cfg), "--wait", "0"])
    assert res.exit_code == 0 and not (tmp_path / "run").exists()


def test_blacklist_add_on_a_shared_directory_changes_nothing(tmp_path: Path) -> None:
    d = shared_dir(tmp_path)
    res = CliRunner().invoke(app, ["blacklist", "add", str(d), "node3"])
    assert res.exit_code == 1 and "no run state" in res.output
    assert untouched(d)


def test_run_with_a_shared_run_dir_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    d = shared_dir(tmp_path)
    cfg = write_config(tmp_path, base_config(tmp_path, run_dir=str(d)))
    res = CliRunner().invoke(app, ["run", str(cfg)])
    assert res.exit_code == 2 and "not a run directory" in res.output
    assert untouched(d)


def test_an_existing_run_directory_keeps_its_mode(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o750)
    run_dir.chmod(0o750)
    now = FakeClock().now()
    StateStore(run_dir).save(RunState(run="t", created_at=now, updated_at=now))
    assert stat.S_IMODE(run_dir.stat().st_mode) == 0o750
    assert stat.S_IMODE((run_dir / "state.json").stat().st_mode) == 0o600


def test_braces_in_run_dir_keep_controller_log_in_run_dir(tmp_path: Path) -> None:
    run_dir = tmp_path / "runs" / "{time}-{exp}"
    try:
        setup_logging(run_dir, verbose=False)
        logger.info("hello")
    finally:
        logger.remove()
    assert (run_dir / "controller.log").exists()
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["{time}-{exp}"]


def test_a_tampered_run_name_cannot_make_report_write_outside_out(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    now = FakeClock().now()
    StateStore(run_dir).save(RunState(run="../../escaped", created_at=now, updated_at=now))
    out = tmp_path / "a" / "b" / "out"
    res = CliRunner().invoke(app, ["report", str(run_dir), "--out", str(out)])
    assert res.exit_code == 0, res.output
    written = {p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*report*")}
    assert written and all(w.startswith("a/b/out/") for w in written), written


@pytest.mark.parametrize("key", ["outp", "err", "job-nam", "exclud", "array", "signal", "comment", "open-mode",
                                 "no-req", "wrap"])
def test_reserved_sbatch_options_and_their_prefixes_are_refused(tmp_path: Path, key: str) -> None:
    cfg = base_config(tmp_path, resources={"nodes": 1, "sbatch_extra": {key: "x"}})
    with pytest.raises(ConfigError, match="resources.sbatch_extra: .*managed by the orchestrator"):
        load_settings(write_config(tmp_path, cfg))


def test_sbatch_options_that_are_not_reserved_still_pass(tmp_path: Path) -> None:
    extra = {"constraint": "h100", "mail-type": "FAIL", "exclusive": "", "gres": "gpu:4"}
    s = load_settings(write_config(tmp_path, base_config(tmp_path, resources={"nodes": 1, "sbatch_extra": extra})))
    assert s.resources.sbatch_extra == extra


def test_a_controller_log_the_disk_cannot_take_is_said_once_never_a_traceback(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 21 re-run (F11): on a full disk loguru's file sink printed `--- Logging error in Loguru Handler ---`
    with a traceback per record and another at exit. Now the log file says once that it cannot be written."""
    import errno
    import logging

    from orchestrator.cli.common import _LogFile

    class Full:
        def write(self, _text: str) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")

        def seek(self, *_: object) -> int:
            return 0

        def tell(self) -> int:
            return 0

        flush = close = lambda self: Full.write(self, "")  # noqa: E731 - every call fails like the disk

    handler = _LogFile(tmp_path / "controller.log")
    handler.stream = Full()  # type: ignore[assignment]
    for i in range(5):
        handler.emit(logging.LogRecord("orchestrator", logging.INFO, __file__, 1, f"record {i}", None, None))
    handler.close()
    err = capsys.readouterr().err
    assert err.count("cannot be written") == 1 and "No space left" in err and "Traceback" not in err
