"""Issue 15, "Tracebacks and accepted nonsense": values that used to pass `validate` and then crash or hang the
run are refused with one line naming the field (and where the value came from); hostile YAML is one error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from orchestrator.plan import render
from orchestrator.settings import ConfigError, load_settings, parse_overrides, path_warnings
from tests.conftest import base_config, write_config

REFUSED: list[tuple[str, dict[str, Any], str]] = [
    ("poll inf", {"watch": {"poll_interval_s": float("inf")}}, "watch.poll_interval_s"),
    ("read timeout nan", {"watch": {"read_timeout_s": float("nan")}}, "watch.read_timeout_s"),
    ("expiry inf", {"policy": {"blacklist_expiry_h": float("inf")}}, "policy.blacklist_expiry_h"),
    ("expiry 1e9", {"policy": {"blacklist_expiry_h": 1e9}}, "policy.blacklist_expiry_h"),
    ("time limit 1e17", {"resources": {"time_limit_min": 10**17}}, "resources.time_limit_min"),
    ("nodes 1e26", {"resources": {"nodes": 10**26}}, "resources.nodes"),
    ("local nodes 1e9", {"backend": {"kind": "local", "local": {"nodes": 10**9}}}, "backend.local.nodes"),
    ("NUL in shared blacklist", {"policy": {"shared_blacklist": "/tmp/a\x00b"}}, "policy.shared_blacklist"),
    ("NUL in run_dir", {"run_dir": "/tmp/r\x00"}, "run_dir"),
    ("empty preflight", {"preflight": {"commands": [[]]}}, "preflight.commands"),
    ("blank preflight", {"preflight": {"commands": [[" "]]}}, "preflight.commands"),
    ("absolute glob", {"checkpoint": {"dir": "/c", "preset": "glob", "glob": "/etc/*"}}, "checkpoint.glob"),
    ("regex no group", {"progress_regex": r"step \d+"}, "progress_regex"),
    ("regex broken", {"progress_regex": r"step (\d+"}, "progress_regex"),
]


@pytest.mark.parametrize("over,field", [(o, f) for _, o, f in REFUSED], ids=[i for i, _, _ in REFUSED])
def test_nonsense_is_one_clear_error(tmp_path: Path, over: dict[str, Any], field: str) -> None:
    path = write_config(tmp_path, base_config(tmp_path, **over))
    with pytest.raises(ConfigError) as err:
        load_settings(path)
    assert len(err.value.problems) == 1 and f": {field}: " in err.value.problems[0]


@pytest.mark.parametrize("text,says", [
    ("name: a\nname: b\n", "duplicate key 'name'"),
    ("n: " + "9" * 5000 + "\n", "line 1: n: a number of 5000 digits"),
    ("n: " + "[" * 5000 + "]" * 5000 + "\n", "nested"),
    ("a: &a [x,x,x,x,x,x,x,x,x]\n" + "".join(f"{c}: &{c} [*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p}]\n"
                                           for p, c in zip("abcdefgh", "bcdefghi", strict=True))
     + "name: *i\n", "more than 100000 values"),
], ids=["duplicate-key", "5000-digits", "5000-deep", "yaml-bomb"])
def test_hostile_yaml_is_one_clear_error(tmp_path: Path, text: str, says: str) -> None:
    (tmp_path / "c.yaml").write_text(text)
    with pytest.raises(ConfigError) as err:
        load_settings(tmp_path / "c.yaml")
    assert len(err.value.problems) == 1 and says in err.value.problems[0]


@pytest.mark.parametrize("var", ["ORCH_RESOURCES", "ORCH_COMMAND"])
def test_an_env_section_that_is_not_json_is_one_error_naming_the_variable(
        tmp_path: Path, var: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(var, "{not json")
    with pytest.raises(ConfigError) as err:
        load_settings(write_config(tmp_path, base_config(tmp_path)))
    assert err.value.problems[0].startswith(f"environment: {var}: not valid JSON")


def test_env_errors_are_blamed_on_the_variable_not_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCH_WATCH__POLL_INTERVAL_S", "-1")
    with pytest.raises(ConfigError) as err:
        load_settings(write_config(tmp_path, base_config(tmp_path)))
    assert err.value.problems[0].startswith("environment ORCH_WATCH__POLL_INTERVAL_S: watch.poll_interval_s")


@pytest.mark.parametrize(("var", "meant"), [
    ("ORCH_POLICIY__MAX_SEGMENTS", "ORCH_POLICY__MAX_SEGMENTS"), ("ORCH_RESOURCE__NODES", "ORCH_RESOURCES__NODES"),
    ("ORCH_WATCHS__POLL_INTERVAL_S", "ORCH_WATCH__POLL_INTERVAL_S"), ("ORCH_POLICY_MAX_SEGMENTS",
                                                                      "ORCH_POLICY__MAX_SEGMENTS"),
    ("ORCH_RUNDIR", "ORCH_RUN_DIR"), ("ORCH_NOPE__X", None)])
def test_a_misspelled_orch_variable_is_an_error_naming_what_was_meant(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                      var: str, meant: str | None) -> None:
    """Second re-run, B17: ignored with a warning, the value it meant to set silently stayed the file's."""
    monkeypatch.setenv(var, "2")
    with pytest.raises(ConfigError) as err:
        load_settings(write_config(tmp_path, base_config(tmp_path)))
    line = err.value.problems[0]
    assert line.startswith(f"environment: {var} is not a setting")
    assert (f"did you mean {meant}?" in line) if meant else "no section 'nope'" in line


def test_an_orch_variable_like_no_setting_is_only_a_warning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCH_MYTEAM_TOKEN", "x")  # a variable of the user's own, not a setting's misspelling
    s = load_settings(write_config(tmp_path, base_config(tmp_path)))
    assert any("ORCH_MYTEAM_TOKEN is not a setting; it is ignored" in w for w in path_warnings(s))


def test_a_huge_value_is_not_echoed(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load_settings(write_config(tmp_path, base_config(tmp_path, watch={"poll_interval_s": "x" * 10_000_000})))
    # its own length, not its repr's (the quotes made it 10000002: the re-probes of issue 37)
    assert len(err.value.problems[0]) < 500 and "10000000 characters" in err.value.problems[0]


def test_set_a_value_then_a_key_below_it_is_one_error() -> None:
    with pytest.raises(ConfigError, match="policy was given a value by an earlier --set"):
        parse_overrides(["policy=5", "policy.x=3"])
    with pytest.raises(ConfigError, match="policy is a section"):
        parse_overrides(["policy.x=3", "policy=5"])


def test_double_braces_are_a_literal_placeholder(tmp_path: Path) -> None:
    cmd = ["python", "t.py", "--fmt={{segment}}-{segment}", "${segment}", "{\"a\": {\"b\": 1}}"]
    s = load_settings(write_config(tmp_path, base_config(tmp_path, command=cmd)))
    assert render(s.command, {"segment": "7"}) == ("python", "t.py", "--fmt={segment}-7", "$7", "{\"a\": {\"b\": 1}}")
    assert render(["{checkpoint}"], {"checkpoint": "{segment}", "segment": "7"}) == ("{segment}",)


@pytest.mark.parametrize(("over", "field", "says"), [
    ({"run_dir": "/tmp/" + "x" * 5000}, "run_dir", "5000 bytes long; the limit is 255"),
    ({"env": {"A=B": "1", "X Y": "2", "OK": "3"}}, "env", "'A=B', 'X Y'"),
    ({"notify": {"urls": ["json://localhost", "notaurl"]}}, "notify.urls", "entry 2 (not a URL)"),
    ({"checkpoint": {"write_time_s": 1e-300}}, "checkpoint.write_time_s", "greater than or equal to 0.1"),
])
def test_issue_21_config_findings_are_one_line_naming_the_field(tmp_path: Path, over: dict[str, Any], field: str,
                                                                says: str) -> None:
    """A 5000-character run_dir was a traceback; env names were reported one at a time; notify.urls was only
    checked once the run dir existed; a write time of 1e-300 s advised an interval of 0."""
    cfg = base_config(tmp_path)
    for k, v in over.items():
        cfg[k] = {**cfg[k], **v} if isinstance(v, dict) and isinstance(cfg.get(k), dict) else v
    with pytest.raises(ConfigError) as err:
        load_settings(write_config(tmp_path, cfg))
    assert len(err.value.problems) == 1 and f"{field}:" in err.value.problems[0] and says in err.value.problems[0]


def test_a_checkpoint_write_longer_than_half_the_time_limit_is_refused(tmp_path: Path) -> None:
    cfg = base_config(tmp_path)
    cfg["checkpoint"] = {**cfg["checkpoint"], "write_time_s": 86400}
    cfg["resources"] = {**cfg.get("resources", {}), "time_limit_min": 10}
    with pytest.raises(ConfigError, match="more than half the 10 min time limit"):
        load_settings(write_config(tmp_path, cfg))
