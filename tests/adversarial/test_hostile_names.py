"""Issue 21, views: a log file's name is not trusted as a host (`-rf.log` is never a culprit), and no text from a
log or a file name reaches the terminal as anything but text (no emoji codes, no bidirectional overrides)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.offline.diagnosis import diagnose_dir

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


def test_a_live_watch_never_takes_a_hostile_name_for_a_node(tmp_path: Path) -> None:
    """Issue 21 (re-run): in a live run `-rf.log` and a name with U+202E became culprits (and drain commands).
    A log name that is no host name is never a node of the watch, whatever it holds."""
    import re as re_mod
    from datetime import UTC, datetime

    from orchestrator.diagnose.signatures import build_table
    from orchestrator.watch.segment import SegmentWatch

    logs = tmp_path / "logs"
    logs.mkdir()
    ecc = "0: RuntimeError: CUDA error: uncorrectable ECC error encountered\n"
    (tmp_path / "nodes").mkdir()
    for name in ("node1.log", "node2.log", "-rf.log", "evil\u202enode.log", "node4\u202e.log", "a;b.log"):
        (logs / name).write_text(ecc)
        (tmp_path / "nodes" / name.replace(".log", ".heartbeat.json")).write_text("{}")  # as if an agent ran there
    watch = SegmentWatch(tmp_path, build_table(), re_mod.compile(r"iteration (\d+)"), 10.0)
    try:
        watch.poll(datetime.now(UTC))
    finally:
        watch.close()
    assert sorted(watch.nodes) == ["node1", "node2"]
    assert {e.node for e in watch.evidence()} == {"node1", "node2"}
