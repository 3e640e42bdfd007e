"""The local backend's view of its processes through /proc: alive, ours (by start time), and the
agents of a run found without the job table."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def proc_stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start time in clock ticks) of a process, or None when there is none."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2:].split()
    return (fields[0], int(fields[19])) if len(fields) > 19 else None


def ours(pid: int, start: int | None) -> bool:
    """The process is alive and is the one we started (not another that reuses the PID after a
    reboot or a controller crash); without a recorded start time only liveness can be checked."""
    st = proc_stat(pid)
    return st is not None and st[0] != "Z" and (start is None or st[1] == start)


def alive(pid: int, start: int | None = None) -> bool:
    return ours(pid, start)


def agents_under(segments: Path) -> list[int]:
    """PIDs of live submitit job processes (`python -u -m submitit.core._submit FOLDER`) whose
    folder lies under `segments`: the local backend's agents of this run, found without the job
    table."""
    root, out = str(segments) + os.sep, []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            args = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if ("submitit.core._submit" in args and any(a.startswith(root) for a in args)
            and alive(int(entry.name))):
            out.append(int(entry.name))
    return out


@contextmanager
def deaf_to_ctrl_c() -> Iterator[None]:
    """Processes started inside ignore SIGINT: a job of the local backend outlives a Ctrl-C in the
    controller's terminal, as a Slurm job does (submitit's local executor starts them in the
    terminal's process group, and an ignored signal stays ignored across exec; Python then installs
    no KeyboardInterrupt handler either). The controller itself hears Ctrl-C again as soon as they
    are started."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
