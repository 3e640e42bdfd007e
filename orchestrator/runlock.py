"""One controller per run: an exclusive flock on run_dir/controller.lock, released by the kernel
when the holder dies; the file names the holder (pid, host, role) so `stop` and `blacklist` can tell
a running controller (signal it, queue for it) from another short-lived command holding the lock for
a moment."""

from __future__ import annotations

import fcntl
import os
import socket
import stat
import time
from collections.abc import Callable
from pathlib import Path

from orchestrator.files import private_dir, read_regular

LOCK_FILE = "controller.lock"
EDIT_LOCK_FILE = "blacklist-edit.lock"  # serialises `orchestrator blacklist` edits among themselves
CONTROLLER = "controller"


class LockHeld(Exception):
    """Another controller (or command) holds the run."""
    pass


class LockUnavailable(LockHeld):
    """The lock cannot be taken at all (a directory in its place, a read-only run directory):
    waiting will not help, so nothing waits for it."""


class RunLock:
    """An exclusive flock, released by the kernel when the holder dies. `write` writes the holder's
    line into the lock file (os.write; a test passes one that fails as a full disk does)."""

    def __init__(self, run_dir: Path, name: str = LOCK_FILE,
                 write: Callable[[int, bytes], int] = os.write):
        self.path = Path(run_dir) / name
        self.write = write
        self._fd: int | None = None

    def acquire(self, role: str = "tool") -> None:
        private_dir(self.path.parent)
        try:
            fd = os.open(self.path,
                         os.O_RDWR | os.O_CREAT | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC,
                         0o600)
        except OSError as exc:  # a directory or a symlink in its place, a read-only run directory
            raise LockUnavailable(
                f"{self.path}: cannot take the run lock ({exc.strerror or exc})") from None
        # a FIFO or a device: never written to, never waited on
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise LockUnavailable(f"{self.path}: cannot take the run lock (not a regular file)")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 256).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise LockHeld(
                f"another controller is running this run ({holder}); stop it with 'orchestrator "
                "stop' first"
            ) from None
        try:
            os.ftruncate(fd, 0)
            self.write(fd, f"pid={os.getpid()} host={socket.gethostname()} role={role}\n".encode())
        except OSError as exc:  # a full disk: the lock is not taken, nothing was changed
            os.close(fd)
            raise LockUnavailable(
                f"{self.path}: cannot take the run lock ({exc.strerror or exc})") from None
        self._fd = fd

    def acquire_within(self, seconds: float, role: str = "tool") -> None:
        """acquire(), retried until `seconds` have passed (for holders that keep it for a
        moment)."""
        deadline = time.monotonic() + seconds
        while True:
            try:
                self.acquire(role)
                return
            except LockUnavailable:
                raise
            except LockHeld:
                if time.monotonic() >= deadline:
                    raise
            time.sleep(0.02)

    def is_held(self) -> bool:
        """True while a live process holds the lock. Creates nothing and rewrites nothing."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
        return False

    def holder(self) -> str | None:
        try:
            return read_regular(self.path, 4096).decode(errors="replace").strip() or None
        except OSError:
            return None

    def _fields(self) -> dict[str, str]:
        return dict(f.split("=", 1) for f in (self.holder() or "").split() if "=" in f)

    def holder_is_controller(self) -> bool:
        """The lock is held by a controller (`orchestrator run`), not by a command holding it for a
        moment."""
        return self.is_held() and self._fields().get("role") == CONTROLLER

    def holder_pid(self) -> int | None:
        """The holding controller's PID if it runs on this host (a signal can reach it), else
        None."""
        fields = self._fields()
        if fields.get("host") != socket.gethostname() or not fields.get("pid", "").isdigit():
            return None
        if fields.get("role") != CONTROLLER or not self.is_held():
            return None  # never signal a short-lived command or a PID the kernel may have reused
        return int(fields["pid"])

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
