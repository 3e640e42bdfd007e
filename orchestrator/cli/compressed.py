"""Logs kept compressed (`slurm-4242.out.gz`, `node7.log.xz`: how clusters archive them), read by
`diagnose` as their text: each is decompressed into a private scratch directory under its own name
without the suffix, bounded in size; one it cannot decompress is said in one line."""

from __future__ import annotations

import bz2
import gzip
import lzma
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

OPENERS: dict[str, Callable[..., Any]] = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}
LIMIT = 4 << 30  # bytes of text one compressed log may hold
# what a file's first bytes say it is, whatever its name (`renamed.log` that is a gzip)
MAGIC = ((b"\x1f\x8b", ".gz"), (b"BZh", ".bz2"), (b"\xfd7zXZ\x00", ".xz"), (b"(\xb5/\xfd", ".zst"))


class CompressedLogError(Exception):
    """A compressed log that cannot be read; the message names it."""


def kind(path: Path) -> str | None:
    """The compression `path` holds: its suffix says (a damaged `.gz` is still one), else its
    first bytes do."""
    if path.suffix.lower() in OPENERS:
        return path.suffix.lower()
    try:
        with path.open("rb") as f:
            head = f.read(6)
    except OSError:
        return None
    return next((k for magic, k in MAGIC if head.startswith(magic)), None)


def is_compressed(path: Path) -> bool:
    return kind(path) is not None


def decompressed(files: list[Path], scratch: Path) -> list[Path]:
    """`files` with each compressed one replaced by its text in `scratch` (same name without the
    suffix); the others as they are."""
    out = []
    for f in files:
        if not is_compressed(f):
            out.append(f)
            continue
        how = kind(f) or ""
        if how not in OPENERS:  # zstd: not in Python's standard library
            raise CompressedLogError(f"{f}: {how.lstrip('.')}-compressed: decompress it first "
                                     f"(zstd -d {f.name})")
        target = scratch / (f.name[: -len(f.suffix)] if f.suffix.lower() == how else f.name)
        _inflate(f, target, OPENERS[how])
        out.append(target)
    return out


def _inflate(source: Path, target: Path, opener: Any) -> None:
    written = 0
    try:
        with opener(source, "rb") as src, target.open("xb") as dst:
            while chunk := src.read(1 << 20):
                written += len(chunk)
                if written > LIMIT:
                    raise CompressedLogError(f"{source}: holds over {LIMIT >> 30} GiB of text: "
                                             "decompress the part to read yourself")
                dst.write(chunk)
    except (OSError, EOFError, lzma.LZMAError) as exc:
        raise CompressedLogError(f"{source}: cannot be decompressed ({exc})") from None


def scratch_dir() -> tempfile.TemporaryDirectory[str]:
    return tempfile.TemporaryDirectory(prefix="orch-diagnose-")
