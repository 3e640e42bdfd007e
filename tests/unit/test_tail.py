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
    assert len(lines) == 2  # NUL padding after a crash starts no line (and is no crash)
    with f.open("ab") as out:
        out.write(b"written after the padding\n")
    tail = LogTail(f)
    assert tail.read_new() and tail.read_new(final=True) == []
    again = LogTail(f).read_new(final=True)
    assert again[-1] == (3, "written after the padding")  # the padding and the text after it: line 3


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


def test_a_sparse_files_holes_are_skipped_and_lines_stay_true(tmp_path: Path) -> None:
    """Second re-run, D1: diagnose of a 2 GB sparse log read all its NULs (5 s; 24 s with 4 GB more). Holes
    are found with SEEK_DATA and skipped: no byte of them is read, and the lines after them keep their numbers."""
    p = tmp_path / "n.log"
    with p.open("wb") as f:
        f.write(b"first\n")
        f.seek(1 << 30, 1)  # a 1 GiB hole
        f.write(b"after the hole\nlast\n")
        f.truncate(f.tell() + (1 << 30))  # and a hole to the end
    tail = LogTail(p)
    got = tail.read_new(final=True, max_bytes=16 << 20)  # far less than the holes: only data is read
    assert [(n, t) for n, t in got if t] == [(1, "first"), (2, "after the hole"), (3, "last")]
    assert tail.offset == p.stat().st_size
