from __future__ import annotations

from pathlib import Path

from orchestrator.tail import MAX_LINE, LogTail


def test_incremental_and_partial_lines(tmp_path: Path) -> None:
    f = tmp_path / "n.log"
    f.write_bytes(b"one\ntw")
    t = LogTail(f)
    assert t.read_new() == [(1, "one")]
    assert t.read_new() == []  # nothing new; the half line waits
    with f.open("ab") as fh:
        fh.write(b"o\nthree\n")
    assert t.read_new() == [(2, "two"), (3, "three")]
    with f.open("ab") as fh:
        fh.write(b"half")
    assert t.read_new(final=True) == [(4, "half")]


def test_garbage_bytes(tmp_path: Path) -> None:
    f = tmp_path / "n.log"
    f.write_bytes(b"\xff\xfeok\x00\x00\nloss 10%\rloss 50%\rloss 100%\n\x00\x00\x00\x00")
    lines = LogTail(f).read_new(final=True)
    assert lines[0][1] == "\ufffd\ufffdok"
    assert lines[1][1] == "loss 100%"
    assert lines[2][1] == ""  # NUL padding after a crash leaves an empty line, not a crash


def test_monster_line_is_cut(tmp_path: Path) -> None:
    f = tmp_path / "n.log"
    f.write_bytes(b"a" * (3 * MAX_LINE) + b"\nnext\n")
    lines = LogTail(f).read_new()
    assert len(lines[0][1]) == MAX_LINE
    assert lines[-1][1] == "next"


def test_truncated_file_restarts(tmp_path: Path) -> None:
    f = tmp_path / "n.log"
    f.write_text("a\nb\n")
    t = LogTail(f)
    t.read_new()
    f.write_text("c\n")
    assert [x[1] for x in t.read_new()] == ["c"]


def test_missing_file(tmp_path: Path) -> None:
    assert LogTail(tmp_path / "none.log").read_new() == []
