"""Issue 37: resources.time_limit_min takes minutes or any of Slurm's --time formats (man sbatch), from
the file, --set or ORCH_*; YAML 1.1's base 60 (`30:00` read as 1800) never turns a Slurm time into
hours of minutes; anything else is refused with the formats named, in the orchestrator's words."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.importer import import_sbatch
from orchestrator.settings import load_settings
from orchestrator.settings.errors import ConfigError
from orchestrator.settings.source import parse_overrides
from tests.conftest import base_config

SLURM_TIMES = [("90", 90), ("30:00", 30), ("30:01", 31), ("12:00:00", 720), ("1-12", 2160),
               ("1-12:30", 2190), ("2-00:00:00", 2880), ("0:30", 1)]


def _config(tmp: Path, limit: str) -> Path:
    """The limit written as a person writes it: unquoted YAML."""
    path = tmp / "run.yaml"
    path.write_text(yaml.safe_dump(base_config(tmp)).replace("time_limit_min: 60", f"time_limit_min: {limit}"))
    return path


@pytest.mark.parametrize(("limit", "minutes"), SLURM_TIMES)
def test_a_slurm_time_written_plainly_in_the_file_is_its_minutes(tmp_path: Path, limit: str, minutes: int) -> None:
    assert load_settings(_config(tmp_path, limit)).resources.time_limit_min == minutes


@pytest.mark.parametrize(("limit", "minutes"), SLURM_TIMES)
def test_a_slurm_time_from_set_or_the_environment_is_its_minutes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 limit: str, minutes: int) -> None:
    p = _config(tmp_path, "60")
    over = parse_overrides([f"resources.time_limit_min={limit}"])
    assert load_settings(p, over).resources.time_limit_min == minutes
    monkeypatch.setenv("ORCH_RESOURCES__TIME_LIMIT_MIN", limit)
    assert load_settings(p).resources.time_limit_min == minutes


@pytest.mark.parametrize("limit", ["'2 days'", "1-", "UNLIMITED", "12:00:00:00", "1.5h"])
def test_anything_else_is_refused_naming_the_formats(tmp_path: Path, limit: str) -> None:
    p = _config(tmp_path, limit)
    with pytest.raises(ConfigError) as ei:
        load_settings(p)
    text = "\n".join(ei.value.problems)
    assert f"{p}: resources.time_limit_min: minutes or a Slurm time" in text and "2-00:00:00" in text
    assert "Value error" not in text
    res = CliRunner().invoke(app, ["validate", str(p)])
    assert res.exit_code == 2 and "D-H:M:S" in res.output and "Value error" not in res.output


def test_the_importer_reads_the_same_formats(tmp_path: Path) -> None:
    for limit, minutes in SLURM_TIMES:
        cfg, _ = import_sbatch(f"#!/bin/bash\n#SBATCH -N 2\n#SBATCH --time={limit}\nsrun python t.py\n", "x",
                               workdir=str(tmp_path))
        assert cfg["resources"]["time_limit_min"] == minutes, limit


@pytest.mark.parametrize("word", ["yes", "true", "on", "no"])
def test_a_yaml_boolean_is_not_a_number_of_minutes(tmp_path: Path, word: str) -> None:
    """`time_limit_min: yes` reads as the boolean true, which pydantic would take as 1 minute (issue 37 F3)."""
    p = _config(tmp_path, word)
    with pytest.raises(ConfigError) as ei:
        load_settings(p)
    assert "resources.time_limit_min: a number is needed, not the boolean" in "\n".join(ei.value.problems)
    with pytest.raises(ConfigError):
        load_settings(_config(tmp_path, "60"), parse_overrides(["resources.time_limit_min=true"]))


def test_no_number_of_any_section_takes_a_boolean(tmp_path: Path) -> None:
    """The same rule for every numeric field: nodes, a poll interval, a cap."""
    cfg = base_config(tmp_path)
    cfg["resources"]["nodes"] = True
    cfg["watch"] = {"poll_interval_s": False}
    cfg["policy"] = {"max_segments": True}
    p = tmp_path / "b.yaml"
    p.write_text(yaml.safe_dump(cfg))
    with pytest.raises(ConfigError) as ei:
        load_settings(p)
    text = "\n".join(ei.value.problems)
    for field in ("resources.nodes", "watch.poll_interval_s", "policy.max_segments"):
        assert f"{field}: a number is needed" in text
    assert "(got True)" not in text and "(got False)" not in text
