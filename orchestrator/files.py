"""Opening files that a user, a crashed job or a hostile neighbour may have put in place of the
expected one: never blocking on a FIFO, never following a symlink, never reading more than a
bound. Writing files so that a crash leaves the old or the new one (atomic_write), and private
directories."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

__all__ = ["append_private", "atomic_write", "private_dir", "read_regular", "read_request",
           "require_regular_or_absent"]

REQUEST_LIMIT = 4096  # a request file holds an id: a few bytes


def read_regular(path: Path, limit: int | None = None, follow: bool = False,
                 last: bool = False) -> bytes:
    """A regular file's bytes (at most `limit`: its first, or with `last` its last), opened without
    blocking and (unless `follow`: a user's own config may be a link) without following a
    symlink: a FIFO, device, socket, directory or symlink in its place is refused with an OSError
    that names it, never waited on."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    fd = os.open(path, flags)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = ("a FIFO" if stat.S_ISFIFO(mode) else "a directory" if stat.S_ISDIR(mode)
                    else "a special file")
            raise OSError(errno.EINVAL, f"{kind}, not a regular file", str(path))
        if last and limit is not None:
            os.lseek(fd, max(0, os.fstat(fd).st_size - limit), os.SEEK_SET)
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


def read_request(path: Path, limit: int = REQUEST_LIMIT) -> str:
    """A small request file's text (its first `limit` bytes), or "" when it is missing or not a
    regular file: a FIFO there is never waited on, a huge or sparse one never read whole."""
    try:
        return read_regular(path, limit).decode(errors="replace").strip()
    except OSError:
        return ""


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


def private_dir(path: Path) -> Path:
    """Create `path` private (0700). An existing directory is left as it is: it may be shared."""
    if not path.is_dir():
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(path, 0o700)
    return path


def append_private(path: Path) -> TextIO:
    """`path` opened for appending text, created 0600 (a log holds paths, hosts and the training's
    own output: not for every user of a shared file system); one we own made 0600 too (issue 37).
    A symlink, FIFO or other non-regular file in its place is never followed or written through:
    it is renamed to `NAME.not-a-file` and a new file begins (as events.jsonl does)."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
    with contextlib.suppress(FileNotFoundError):
        mode = os.lstat(path).st_mode
        if not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
            os.replace(path, path.with_name(path.name + ".not-a-file"))
            print(f"warning: {path}: {'a symlink' if stat.S_ISLNK(mode) else 'not a regular file'}"
                  f", not followed: renamed to {path.name}.not-a-file, a new one begins",
                  file=sys.stderr)
    fd = os.open(path, flags, 0o600)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # replaced between the two looks
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        if st.st_uid == os.geteuid():
            os.fchmod(fd, 0o600)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "a", encoding="utf-8")
    except BaseException:
        os.close(fd)
        raise


def atomic_write(path: Path, data: str, failpoint: Callable[[str], None] | None = None) -> None:
    """Write `data` so that a crash at any instant leaves the old or the new file, never a mix."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if failpoint:
            failpoint("state_write")  # written and synced, not yet renamed into place
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
