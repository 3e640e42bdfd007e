"""Issue 21, views: a log file's name is not trusted as a host (`-rf.log` is never a culprit), and no text from a
log or a file name reaches the terminal as anything but text (no emoji codes, no bidirectional overrides)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.diagnose.offline import diagnose_dir

runner = CliRunner()
SEGV = "srun: error: task 3: Segmentation fault (core dumped)"


def test_a_file_name_that_is_not_a_host_is_never_a_culprit(tmp_path: Path) -> None:
    (tmp_path / "-rf.log").write_text(f"{SEGV}\n")
    (tmp_path / "node\u202e1.log").write_text(f"{SEGV}\n")
    (tmp_path / "node2.log").write_text(" iteration 5/100 | lm loss: 1.0\n")
    got = diagnose_dir(tmp_path)
    assert not {"-rf", "node\u202e1"} & set(got["culprit_nodes"]), got["culprit_nodes"]
    r = runner.invoke(app, ["diagnose", str(tmp_path), "--json"])
    assert r.exit_code == 0 and "-rf" not in json.loads(r.output)["culprit_nodes"]


def test_evidence_is_printed_as_text(tmp_path: Path) -> None:
    (tmp_path / "node1.log").write_text("RuntimeError: :cross_mark: [bold]boom[/bold] \u202edesrever\n")
    (tmp_path / "node2.log").write_text(" iteration 5/100 | lm loss: 1.0\n")
    r = runner.invoke(app, ["diagnose", str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert ":cross_mark:" in r.output and "[bold]boom[/bold]" in r.output and "\u202e" not in r.output
    assert "\\u202e" in r.output
