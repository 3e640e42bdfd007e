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


def test_a_line_longer_than_a_chunk_is_still_one_line(tmp_path: Path) -> None:
    """Issue 21 re-run (D10): evidence after a 200 MB line said line 49; a line handed over in pieces counts once."""
    from orchestrator.tail import CHUNK

    f = tmp_path / "n.log"
    f.write_bytes(b"x" * (2 * CHUNK + 10) + b"\nERR uncorrectable ECC\n" + b"\x00" * (CHUNK + 5) + b"\nlast\n")
    tail, found = LogTail(f), {}
    while blocks := tail.read_chunks(final=True):
        for first, block, _ in blocks:
            for word in (b"ERR", b"last"):
                at = block.find(word)
                if at >= 0:
                    found[word] = first + block.count(b"\n", 0, at)
    assert found == {b"ERR": 2, b"last": 4}
