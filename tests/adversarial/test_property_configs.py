"""Issue 15: every config value that passes `validate` runs without a traceback: hypothesis generates
configs within (and at the edges of) the schema; `validate` and the dry run never raise."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from orchestrator.cli import app
from tests.conftest import base_config, write_config

runner = CliRunner()
finite = st.floats(min_value=0.001, max_value=1e7, allow_nan=False, allow_infinity=False)
text = st.text(st.characters(exclude_categories=["Cs"]), max_size=30)


@st.composite
def configs(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "command": draw(st.lists(st.one_of(text, st.sampled_from(["{checkpoint}", "{segment}", "{{x}}",
                                                                    "{checkpoint_interval}", "$RANK"])),
                                 min_size=1, max_size=5)),
        "resources": {"nodes": draw(st.integers(1, 4)), "time_limit_min": draw(st.integers(1, 525600)),
                      "tasks_per_node": draw(st.integers(1, 8))},
        "watch": {"poll_interval_s": draw(finite), "stall_timeout_s": draw(finite),
                  "read_timeout_s": draw(finite)},
        "policy": {"blacklist_expiry_h": draw(st.floats(0.001, 87600)), "max_segments": draw(st.integers(1, 10**6)),
                   "strike_threshold": draw(st.integers(1, 100))},
        "checkpoint": {"write_time_s": draw(st.floats(0.1, 86400)), "preset": draw(st.sampled_from(
            ["megatron", "deepspeed", "hf", "lightning"]))},
        "env": draw(st.dictionaries(st.from_regex(r"[A-Z][A-Z0-9_]{0,8}", fullmatch=True), text, max_size=3)),
        "goal": {"target_iteration": draw(st.one_of(st.none(), st.integers(1, 10**12)))},
    }


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(over=configs())
def test_validate_and_dry_run_never_raise(tmp_path: Path, over: dict[str, Any]) -> None:
    cfg = write_config(tmp_path, base_config(tmp_path, **{**over, "checkpoint": {
        **over["checkpoint"], "dir": str(tmp_path / "ckpt")}}))
    for args in (["validate", str(cfg)], ["run", str(cfg), "--dry-run"]):
        res = runner.invoke(app, args)
        assert res.exception is None or isinstance(res.exception, SystemExit), (args, res.output, res.exception)
        assert res.exit_code in (0, 1, 2), res.output
        if res.exit_code:
            assert "error:" in res.output and "Traceback" not in res.output, res.output


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(over=configs())
def test_a_short_run_of_any_valid_config_never_raises(tmp_path_factory: pytest.TempPathFactory,
                                                       over: dict[str, Any]) -> None:
    """The whole loop (fake cluster, fake clock) with a generated config ends done or stopped, no exception."""
    from orchestrator.clock import FakeClock
    from orchestrator.loop.controller import Controller
    from orchestrator.settings import ConfigError, load_settings, parse_overrides
    from orchestrator.state import StateStore
    from tests.fakes import FakeCluster

    tmp = tmp_path_factory.mktemp("run")
    over = {**over, "checkpoint": {**over["checkpoint"], "dir": str(tmp / "ckpt")},
            "policy": {**over["policy"], "max_segments": min(over["policy"]["max_segments"], 4)},
            "goal": {"target_iteration": 30}}
    try:
        s = load_settings(write_config(tmp, base_config(tmp, **over)), parse_overrides([]))
    except ConfigError:
        return  # refused with one clear error: covered above
    clock = FakeClock()
    cluster = FakeCluster(clock, ["node1", "node2", "node3", "node4"], 30, tmp / "ckpt")
    state = Controller(s, cluster, clock, StateStore(s.run_dir), python="python").run()
    assert state.status.value in ("done", "stopped")


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(over=configs())
def test_a_short_local_run_of_any_valid_config_never_raises(tmp_path_factory: pytest.TempPathFactory,
                                                             over: dict[str, Any]) -> None:
    """A real run on the local backend (real agents) with a generated config: exit 0, 1 or a one-line error."""
    from loguru import logger

    tmp = tmp_path_factory.mktemp("local")
    over = {**over, "checkpoint": {**over["checkpoint"], "dir": str(tmp / "ckpt")},
            "command": ["python3", "-c", "print(' iteration 1/ 1')", *over["command"][:2]],
            "resources": {**over["resources"], "time_limit_min": 5, "tasks_per_node": 1},
            "watch": {"poll_interval_s": 0.2, "stall_timeout_s": 60, "read_timeout_s": 10},
            "policy": {**over["policy"], "max_segments": 2}, "goal": {"target_iteration": None}}
    cfg = write_config(tmp, base_config(tmp, **over))
    logger.remove()
    res = runner.invoke(app, ["run", str(cfg)])
    assert res.exception is None or isinstance(res.exception, SystemExit), (res.output, res.exception)
    assert res.exit_code in (0, 1, 2), res.output
