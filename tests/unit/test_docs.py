"""The docs stay true: the configuration reference matches the settings model; every cause is documented;
every command has --help with examples."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.model import Action, Cause
from scripts.gen_config_docs import OUT, render

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_configuration_reference_is_generated_from_the_model() -> None:
    assert OUT.read_text() == render(), "run: python -m scripts.gen_config_docs"


def test_every_cause_and_action_documented() -> None:
    text = (DOCS / "CAUSES.md").read_text()
    for c in Cause:
        assert f"| `{c.value}` |" in text, c
    for a in Action:
        assert f"`{a.value}`" in text, a


@pytest.mark.parametrize("cmd", ["run", "status", "diagnose", "report", "stop", "validate", "import-sbatch",
                                 "blacklist add", "blacklist remove", "blacklist list", "blacklist clear"])
def test_help_has_examples(cmd: str) -> None:
    res = CliRunner().invoke(app, [*cmd.split(), "--help"])
    assert res.exit_code == 0 and ("Example" in res.output), res.output
