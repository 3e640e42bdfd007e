from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.settings import ConfigError, load_settings, parse_overrides
from tests.conftest import base_config, write_config

runner = CliRunner()


def test_valid_config_resolves_relative_paths(tmp_path: Path) -> None:
    cfg = base_config(tmp_path, run_dir="runs/x", checkpoint={"dir": "ck", "preset": "hf"})
    s = load_settings(write_config(tmp_path, cfg))
    assert s.run_dir == (tmp_path / "runs/x").resolve()
    assert s.checkpoint.dir == (tmp_path / "ck").resolve()
    assert s.workdir == tmp_path.resolve()


def test_precedence_cli_over_env_over_yaml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = write_config(tmp_path, base_config(tmp_path, watch={"poll_interval_s": 7}))
    assert load_settings(p).watch.poll_interval_s == 7
    monkeypatch.setenv("ORCH_WATCH__POLL_INTERVAL_S", "3")
    assert load_settings(p).watch.poll_interval_s == 3
    assert load_settings(p, parse_overrides(["watch.poll_interval_s=1.5"])).watch.poll_interval_s == 1.5
    # the override replaced one field only; the rest of the section still comes from YAML/defaults
    assert load_settings(p, parse_overrides(["watch.poll_interval_s=1.5"])).watch.cascade_grace_s == 2


BAD: list[tuple[str, dict[str, Any] | str, str]] = [
    ("unknown top-level field", {"nmae": "x"}, "nmae: unknown field"),
    ("unknown nested field", {"policy": {"max_segmets": 3}}, "policy.max_segmets: unknown field"),
    ("wrong type", {"resources": {"nodes": "three"}}, "resources.nodes"),
    ("zero nodes", {"resources": {"nodes": 0}}, "resources.nodes"),
    ("negative timeout", {"watch": {"stall_timeout_s": -5}}, "watch.stall_timeout_s"),
    ("zero poll interval", {"watch": {"poll_interval_s": 0}}, "watch.poll_interval_s"),
    ("empty command", {"command": []}, "command"),
    ("command not a list", {"command": "python train.py"}, "command"),
    ("unknown placeholder", {"command": ["python", "{chekpoint}"]}, "unknown placeholder"),
    ("bad preset", {"checkpoint": {"dir": "c", "preset": "keras"}}, "checkpoint.preset"),
    ("glob without pattern", {"checkpoint": {"dir": "c", "preset": "glob"}}, "checkpoint"),
    ("bad backend", {"backend": {"kind": "kubernetes"}}, "backend.kind"),
    ("name with shell chars", {"name": "x; rm -rf /"}, "name"),
    ("name with leading dash", {"name": "--wrap=evil"}, "name"),
    ("partition metachar", {"resources": {"partition": "gpu$(id)"}}, "resources.partition"),
    ("sbatch extra reserved", {"resources": {"sbatch_extra": {"exclude": "node1"}}}, "resources.sbatch_extra"),
    ("sbatch extra bad key", {"resources": {"sbatch_extra": {"--wrap": "x"}}}, "resources.sbatch_extra"),
    ("bad progress regex", {"progress_regex": "iter(ation"}, "progress_regex"),
    ("progress regex without group", {"progress_regex": "iteration \\d+"}, "progress_regex"),
    ("too many nodes for local", {"resources": {"nodes": 9}}, "local backend has 4 nodes"),
    ("bad signature regex", {"signatures": [{"name": "x", "pattern": "(", "cause": "gpu_ecc"}]}, "signatures.0"),
    ("unknown cause", {"signatures": [{"name": "x", "pattern": "boom", "cause": "gremlins"}]}, "signatures.0.cause"),
    ("bad env name", {"env": {"1BAD": "x"}}, "env"),
    ("missing checkpoint", {"checkpoint": None}, "checkpoint"),
    ("spares as yes/no", {"resources": {"spare_nodes": True}}, "resources.spare_nodes: spare_nodes must"),
    ("too many spares", {"resources": {"spare_nodes": 65}}, "between 0 and 64"),
    ("spares as a word", {"resources": {"spare_nodes": "some"}}, "resources.spare_nodes"),
]


@pytest.mark.parametrize("label,patch,expect", BAD, ids=[b[0] for b in BAD])
def test_malformed_configs_name_the_field_and_file(tmp_path: Path, label: str, patch: dict[str, Any],
                                                  expect: str) -> None:
    cfg = base_config(tmp_path)
    for k, v in patch.items():
        if v is None:
            cfg.pop(k)
        elif isinstance(v, dict) and isinstance(cfg.get(k), dict):
            cfg[k] = {**cfg[k], **v}
        else:
            cfg[k] = v
    p = write_config(tmp_path, cfg)
    with pytest.raises(ConfigError) as ei:
        load_settings(p)
    text = "\n".join(ei.value.problems)
    assert str(p) in text
    assert expect in text
    # the orchestrator's words, not pydantic's prefixes (issue 37)
    assert "Value error" not in text and "Assertion failed" not in text
    # the CLI says the same, exits 2 and submits nothing (no run directory appears)
    res = runner.invoke(app, ["run", str(p)])
    assert res.exit_code == 2, res.output
    assert expect in res.output
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("text,expect", [
    ("name: [unclosed", "YAML syntax error"),
    ("", "empty"),
    ("- a\n- b\n", "mapping"),
    ("name: x\n\tbad: tab\n", "line 2"),
])
def test_unparsable_files(tmp_path: Path, text: str, expect: str) -> None:
    p = tmp_path / "bad.yaml"
    p.write_text(text)
    with pytest.raises(ConfigError) as ei:
        load_settings(p)
    assert expect in ei.value.problems[0] and str(p) in ei.value.problems[0]


def test_every_problem_reported_at_once(tmp_path: Path) -> None:
    cfg = base_config(tmp_path, resources={"nodes": 0, "tasks_per_node": -1}, watch={"poll_interval_s": -1})
    with pytest.raises(ConfigError) as ei:
        load_settings(write_config(tmp_path, cfg))
    assert len(ei.value.problems) >= 3


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    res = runner.invoke(app, ["run", str(tmp_path / "nope.yaml")])
    assert res.exit_code == 2 and "file not found" in res.output


def test_bad_override_syntax() -> None:
    with pytest.raises(ConfigError):
        parse_overrides(["watch.poll_interval_s"])


@pytest.mark.parametrize("patch,expect", [
    ({"checkpoint": {"dir": "FILE", "preset": "megatron"}}, "checkpoint.dir: "),
    ({"workdir": "missing-dir"}, "workdir: "),
    ({"command": ["./nope/train.sh", "{checkpoint}"]}, "command.0: program ./nope/train.sh does not exist"),
])
def test_unusable_paths_are_config_errors(tmp_path: Path, patch: dict[str, Any], expect: str) -> None:
    (tmp_path / "FILE").write_text("not a directory")
    cfg = base_config(tmp_path)
    for k, v in patch.items():
        if k == "checkpoint":
            v = {**v, "dir": str(tmp_path / v["dir"])}
        cfg[k] = v
    p = write_config(tmp_path, cfg)
    res = runner.invoke(app, ["run", str(p)])
    assert res.exit_code == 2 and expect in res.output and str(p) in res.output, res.output
    assert not (tmp_path / "run").exists()


def test_run_dir_in_checkpoint_dir_is_the_run_dir(tmp_path: Path) -> None:
    """import-sbatch writes `checkpoint.dir: '{run_dir}/checkpoints'`; it was taken literally (a directory named
    `{run_dir}` beside the config), so every segment of such a config started from scratch (independent probe)."""
    cfg = base_config(tmp_path, checkpoint={"dir": "{run_dir}/checkpoints", "preset": "megatron"})
    s = load_settings(write_config(tmp_path, cfg), parse_overrides([]))
    assert s.checkpoint.dir == s.run_dir / "checkpoints"
    moved = load_settings(write_config(tmp_path, cfg), parse_overrides([f"run_dir={tmp_path / 'other'}"]))
    assert moved.checkpoint.dir == tmp_path / "other" / "checkpoints"  # it follows --set run_dir=...


def test_a_cut_value_says_its_own_length() -> None:
    """The re-probes of issue 37: a 300-character host name was said to be "(302 characters)" (repr's quotes)."""
    from orchestrator.settings.errors import cut

    assert cut("a" * 300).endswith("... (300 characters)")
    assert cut(list(range(100))).endswith(f"... ({len(repr(list(range(100))))} characters)")
    assert cut("short") == "'short'"
