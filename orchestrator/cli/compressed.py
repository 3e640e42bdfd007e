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


class CompressedLogError(Exception):
    """A compressed log that cannot be read; the message names it."""


def is_compressed(path: Path) -> bool:
    return path.suffix.lower() in OPENERS


def decompressed(files: list[Path], scratch: Path) -> list[Path]:
    """`files` with each compressed one replaced by its text in `scratch` (same name without the
    suffix); the others as they are."""
    out = []
    for f in files:
        if not is_compressed(f):
            out.append(f)
            continue
        target = scratch / f.name[: -len(f.suffix)]
        _inflate(f, target)
        out.append(target)
    return out


def _inflate(source: Path, target: Path) -> None:
    opener: Any = OPENERS[source.suffix.lower()]
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
