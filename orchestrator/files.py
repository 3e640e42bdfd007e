"""Opening files that a user, a crashed job or a hostile neighbour may have put in place of the
expected one: never blocking on a FIFO, never following a symlink, never reading more than a
bound."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

__all__ = ["read_regular", "require_regular_or_absent"]


def read_regular(path: Path, limit: int | None = None, follow: bool = False) -> bytes:
    """A regular file's bytes (at most `limit`), opened without blocking and (unless `follow`: a
    user's own config may be a link) without following a symlink: a FIFO, device, socket, directory
    or symlink in its place is refused with an OSError that names it, never waited on."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    fd = os.open(path, flags)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = ("a FIFO" if stat.S_ISFIFO(mode) else "a directory" if stat.S_ISDIR(mode)
                    else "a special file")
            raise OSError(errno.EINVAL, f"{kind}, not a regular file", str(path))
        chunks: list[bytes] = []
        left = -1 if limit is None else limit
        while left != 0:
            chunk = os.read(fd, 1 << 20 if left < 0 else min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left = left - len(chunk) if left > 0 else left
        return b"".join(chunks)
    finally:
        os.close(fd)


def require_regular_or_absent(path: Path) -> None:
    """Raise an OSError naming `path` unless it is missing or a regular file (a FIFO or device there
    would block or swallow a write)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISREG(mode):
        kind = ("a FIFO" if stat.S_ISFIFO(mode) else "a directory" if stat.S_ISDIR(mode)
                else "a special file")
        raise OSError(errno.EINVAL, f"{kind}, not a regular file", str(path))
