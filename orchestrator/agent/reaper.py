"""Keep a rank's whole process tree under the agent, containers included.

`podman run` and `docker run` start the container through a monitor (conmon, containerd-shim)
that double-forks away from the client: the container's processes are parented by PID 1, outside
the rank's tree and the Slurm step, so stack dumps never saw the rank and a cancel left it running.
A child subreaper (Linux `PR_SET_CHILD_SUBREAPER`) adopts the orphans of its subtree instead of
PID 1: set on the rank's own process (it survives exec) and on the agent, the monitor and the
container's processes stay descendants of the rank, where the dumps, the profiles and the stop
find them. Apptainer and enroot need none of this (no daemon, the host's PID namespace)."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import subprocess
import time
from collections.abc import Callable

from orchestrator.agent.dump import descendants, read_stat

PR_SET_CHILD_SUBREAPER = 36
CONTAINER_GRACE_S = 3.0  # a container's processes after SIGTERM (Slurm's KillWait: 30 s by default)
MONITOR_GRACE_S = 3.0  # a container's monitor cleaning up after its container was killed


def _prctl() -> Callable[..., int] | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        prctl: Callable[..., int] = libc.prctl
        return prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _prctl()  # looked up before any fork: the child only calls it
IS_SUBREAPER = False  # this process adopts its subtree's orphans (the agent's own process)


def become_subreaper() -> bool:
    """This process adopts the orphans of its subtree; False where the kernel has no such call."""
    global IS_SUBREAPER
    IS_SUBREAPER = _PRCTL is not None and _PRCTL(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    return IS_SUBREAPER


def rank_preexec() -> None:
    """In the rank's process between fork and exec (`Popen(preexec_fn=...)`): one call into libc,
    resolved before the fork; nothing that takes a lock."""
    if _PRCTL is not None:
        _PRCTL(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def outside_group(pids: list[int], groups: set[int]) -> list[int]:
    """The processes among `pids` that a signal to the ranks' process groups misses: a container's
    monitor and its processes run in sessions of their own."""
    out = []
    for pid in pids:
        try:
            if os.getpgid(pid) not in groups:
                out.append(pid)
        except (ProcessLookupError, PermissionError):
            continue
    return out


# the processes that watch a container and clean up after it (podman's conmon, containerd's shim)
MONITORS = ("conmon", "containerd-shim")


def is_monitor(pid: int) -> bool:
    return _comm(pid).startswith(MONITORS)


# what the agent itself runs beside the ranks (stacks, profiles, node facts)
HELPERS = ("py-spy", "nvidia-smi", "dmesg", "journalctl", "nhc", "ibstat", "timeout")


def is_helper(pid: int) -> bool:
    return _comm(pid).startswith(HELPERS)


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return ""


def signal_each(pids: list[int], sig: signal.Signals) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            continue


def killpg(p: subprocess.Popen[bytes], sig: int) -> None:
    if p.poll() is None:
        try:
            os.killpg(p.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def alive(pids: list[int]) -> bool:
    return any((st := read_stat(pid)) and st[0] not in "ZX" for pid in pids)


def wait_for(pids: list[int], deadline: float) -> None:
    while time.monotonic() < deadline and alive(pids):
        time.sleep(0.2)


def tree(procs: list[subprocess.Popen[bytes]]) -> list[int]:
    """The ranks' processes and everything under them (adopted container processes too), none of
    them a zombie."""
    return [pid for pid in descendants([p.pid for p in procs])
            if (st := read_stat(pid)) and st[0] not in "ZX"]


def stop_ranks(procs: list[subprocess.Popen[bytes]], grace_s: float) -> None:
    """SIGTERM to the ranks' process groups and to every process of their tree outside them (a
    container's monitor and processes, in sessions of their own, or a cancel would leave the rank
    running in its container); the container's processes get SIGKILL after a short grace, well
    inside Slurm's KillWait (the step's own SIGKILL would hit the monitor first and leave the
    container behind: a container's first process ignores SIGTERM unless it handles it), the
    monitor last, so it removes the container itself; the ranks' groups after `grace_s`."""
    groups = {p.pid for p in procs}
    apart = outside_group(tree(procs), groups)
    for p in procs:
        killpg(p, signal.SIGTERM)
    signal_each(apart, signal.SIGTERM)
    start = time.monotonic()
    wait_for(apart, start + CONTAINER_GRACE_S)
    # a rank that exits first leaves its container's monitor to the agent: the first look counts
    left = sorted(set(outside_group(tree(procs), groups)) | set(apart))
    monitors = [p for p in left if is_monitor(p)]
    signal_each([p for p in left if p not in monitors], signal.SIGKILL)
    wait_for(monitors, time.monotonic() + MONITOR_GRACE_S)
    while time.monotonic() < start + grace_s and any(p.poll() is None for p in procs):
        time.sleep(0.2)
    signal_each(sorted(set(outside_group(tree(procs), groups)) | set(left)), signal.SIGKILL)
    for p in procs:
        killpg(p, signal.SIGKILL)


def leftovers() -> list[int]:
    """What the exited ranks left running below the agent (a container whose client exited): the
    agent's live descendants other than its own helpers. Only meaningful in a subreaper."""
    me = os.getpid()
    return [pid for pid in descendants([me]) if pid != me
            and (st := read_stat(pid)) and st[0] not in "ZX" and not is_helper(pid)]


def stop_each(pids: list[int]) -> None:
    """SIGTERM, SIGKILL after a short grace (a container's monitor last)."""
    signal_each(pids, signal.SIGTERM)
    wait_for(pids, time.monotonic() + CONTAINER_GRACE_S)
    monitors = [p for p in pids if is_monitor(p)]
    signal_each([p for p in pids if p not in monitors], signal.SIGKILL)
    wait_for(monitors, time.monotonic() + MONITOR_GRACE_S)
    signal_each(pids, signal.SIGKILL)
