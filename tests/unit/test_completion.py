"""Issue 37: shell completion for bash, zsh and fish, by Click's variable (`_ORCHESTRATOR_COMPLETE=bash_source
orchestrator`, Typer's `source_bash` too) and by `--show-completion`/`--install-completion`; the script completes
the command `orchestrator` even when it runs as `python -m orchestrator`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.cli import app, main
from tests.conftest import REPO


def _main(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], env: dict[str, str]) -> str:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(sys, "argv", [str(REPO / "orchestrator" / "__main__.py")])  # as `python -m orchestrator`
    with pytest.raises(SystemExit) as ei:
        main()
    out, errors = capsys.readouterr()
    assert ei.value.code in (0, None), errors
    return out


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
@pytest.mark.parametrize("spelling", ["{shell}_source", "source_{shell}"])
def test_the_completion_script_is_printed_for_the_command_orchestrator(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], shell: str, spelling: str) -> None:
    out = _main(monkeypatch, capsys, {"_ORCHESTRATOR_COMPLETE": spelling.format(shell=shell)})
    assert f"_ORCHESTRATOR_COMPLETE=complete_{shell}" in out
    assert {"bash": "complete -o default -F _orchestrator_completion orchestrator", "zsh": "#compdef orchestrator",
            "fish": "complete --command orchestrator "}[shell] in out
    assert "python -m" not in out


@pytest.mark.parametrize(("shell", "env"), [
    ("bash", {"COMP_WORDS": "orchestrator blacklist a", "COMP_CWORD": "2"}),
    ("zsh", {"_TYPER_COMPLETE_ARGS": "orchestrator blacklist a"}),
    ("fish", {"_TYPER_COMPLETE_ARGS": "orchestrator blacklist a", "_TYPER_COMPLETE_FISH_ACTION": "get-args"}),
])
def test_a_partial_subcommand_is_completed(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                           shell: str, env: dict[str, str]) -> None:
    out = _main(monkeypatch, capsys, {"_ORCHESTRATOR_COMPLETE": f"{shell}_complete", **env})
    assert "add" in out and "remove" not in out


def test_show_completion_prints_the_script() -> None:
    res = CliRunner().invoke(app, ["--show-completion", "bash"], prog_name="orchestrator")
    assert res.exit_code == 0 and "_ORCHESTRATOR_COMPLETE=complete_bash" in res.output
    res = CliRunner().invoke(app, ["--help"])
    assert "--install-completion" in res.output and "--show-completion" in res.output


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_bash_completes_blacklist_with_the_sourced_script(tmp_path: Path) -> None:
    """End to end: the script bash sources, asking the `orchestrator` command on the PATH."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "orchestrator").write_text(f'#!/bin/sh\nexec {sys.executable} -m orchestrator "$@"\n')
    (bindir / "orchestrator").chmod(0o755)
    script = ('eval "$(_ORCHESTRATOR_COMPLETE=bash_source orchestrator)"\n'
              "COMP_WORDS=(orchestrator bla); COMP_CWORD=1; _orchestrator_completion orchestrator\n"
              'echo "got: ${COMPREPLY[*]}"\n')
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "PYTHONPATH": str(REPO)}
    res = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60,
                         check=False)
    assert res.returncode == 0 and "got: blacklist" in res.stdout, res.stdout + res.stderr
