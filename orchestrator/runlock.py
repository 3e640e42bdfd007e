"""One controller per run: an exclusive flock on run_dir/controller.lock, released by the kernel when
the holder dies; the file names the holder (pid, host) so `stop` can signal it."""

from __future__ import annotations

import fcntl
import os
import socket
from pathlib import Path

from orchestrator.state import private_dir

LOCK_FILE = "controller.lock"


class LockHeld(Exception):
    pass


class RunLock:
    """One controller per run: an exclusive flock, released by the kernel when the holder dies."""

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> None:
        private_dir(self.path.parent)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 256).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise LockHeld(
                f"another controller is running this run ({holder}); stop it with 'orchestrator stop' first"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"pid={os.getpid()} host={socket.gethostname()}\n".encode())
        self._fd = fd

    def is_held(self) -> bool:
        """True while a live controller holds the run (checked by trying the lock)."""
        try:
            self.acquire()
        except LockHeld:
            return True
        self.release()
        return False

    def holder(self) -> str | None:
        try:
            return self.path.read_text().strip() or None
        except OSError:
            return None

    def holder_pid(self) -> int | None:
        """The holder's PID if it runs on this host (a signal can reach it), else None."""
        text = self.holder() or ""
        fields = dict(f.split("=", 1) for f in text.split() if "=" in f)
        if fields.get("host") != socket.gethostname() or not fields.get("pid", "").isdigit():
            return None
        return int(fields["pid"])

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
