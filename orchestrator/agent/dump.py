"""State of possibly hung processes: /proc/PID/stat (state field) and wchan, read with a timeout,
plus a py-spy stack dump where py-spy is installed. Never reads /proc/PID/cmdline of a suspect:
that read can itself hang on a process stuck in the kernel."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from orchestrator.contract import ProcessDump
from orchestrator.timeout import call_with_timeout

READ_TIMEOUT_S = 2.0
AGAIN_AFTER_S = 1.0  # the second stack sample
PYSPY_TIMEOUT_S = 10.0


def read_stat(pid: int) -> tuple[str, int] | None:
    """(state letter, ppid) from /proc/PID/stat; None if gone or unreadable in time."""
    done, raw = call_with_timeout(lambda: Path(f"/proc/{pid}/stat").read_text(), READ_TIMEOUT_S)
    if not done or not isinstance(raw, str):
        return None
    rest = raw[raw.rfind(")") + 2 :].split()
    return (rest[0], int(rest[1])) if len(rest) > 1 else None


def children(pid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            st = read_stat(int(d.name))
            if st and st[1] == pid:
                out.append(int(d.name))
    return out


def descendants(pids: list[int]) -> list[int]:
    seen: list[int] = []
    todo = list(pids)
    while todo:
        p = todo.pop()
        if p not in seen:
            seen.append(p)
            todo.extend(children(p))
    return seen


def pyspy_exe() -> str | None:
    beside = Path(sys.executable).parent / "py-spy"  # installed in the same virtualenv
    return str(beside) if beside.is_file() else shutil.which("py-spy")


def pyspy(pid: int) -> str:
    exe = pyspy_exe()
    if not exe:
        return "py-spy not installed"
    try:
        res = subprocess.run([exe, "dump", "--pid", str(pid)], capture_output=True,  # noqa: S603
                             timeout=PYSPY_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return f"py-spy timed out after {PYSPY_TIMEOUT_S:.0f}s"
    text = (res.stdout + res.stderr).decode(errors="replace")
    return (text[-4000:] + ptrace_hint(text))[-4400:]


YAMA = Path("/proc/sys/kernel/yama/ptrace_scope")


def ptrace_hint(text: str, yama: Path = YAMA) -> str:
    """Why py-spy may not attach, when it says so: under Yama's ptrace_scope 1 (Ubuntu's default)
    only a process's ancestors may trace it, and the agent's py-spy is a sibling of the ranks."""
    if not any(w in text for w in ("Permission Denied", "Permission denied", "not permitted")):
        return ""
    try:
        scope = yama.read_text().strip()
    except OSError:
        scope = "?"
    return (f"\n[orchestrator] py-spy was refused (kernel.yama.ptrace_scope={scope}; at 1 only a "
            "process's ancestors may trace it): call orchestrator.flight.dump_on_request() in the "
            "training script (it lets the user's own processes trace it), give py-spy "
            "cap_sys_ptrace, or set kernel.yama.ptrace_scope=0")


FS_WCHAN = ("nfs", "rpc_wait", "fuse", "lustre", "ll_", "osc_", "gpfs", "mmfs", "cifs", "smb",
            "ceph", "beegfs",
            "wait_on_page", "folio_wait", "io_schedule", "jbd2", "xfs_", "ext4_", "vfs_")


def top_frame(stack: str) -> str:
    """Innermost Python frame of the main thread in a py-spy dump (the first thread listed when
    none is named MainThread), without the line number."""
    lines = stack.splitlines()
    heads = [i for i, line in enumerate(lines) if line.startswith("Thread ")
             and i + 1 < len(lines) and lines[i + 1].startswith("    ")]
    main = [i for i in heads if '"MainThread"' in lines[i]]
    for i in main or heads:
        frame = lines[i + 1].strip()
        return frame.split(":")[0] + ")" if ":" in frame else frame
    return ""


def fs_suspect(wchan: str) -> bool:
    return any(w in wchan for w in FS_WCHAN)


def dump_processes(pids: list[int], again_after_s: float = AGAIN_AFTER_S,
                   sleep: Callable[[float], None] = time.sleep) -> list[ProcessDump]:
    """Every process under `pids`: state, wchan and stack; the stacks sampled a second time
    `again_after_s` later (a hang shows the same innermost frame in both)."""
    records = []
    for pid in descendants(pids):
        st = read_stat(pid)
        if st is None:
            continue
        wchan_path = Path(f"/proc/{pid}/wchan")
        done, wchan = call_with_timeout(wchan_path.read_text, READ_TIMEOUT_S)
        stack = pyspy(pid) if st[0] != "Z" else ""
        summary = next((ln.strip() for ln in stack.splitlines()
                        if ln.strip().startswith(("Thread", "Error"))), "")
        wchan_s = wchan if done and isinstance(wchan, str) else "unreadable"
        records.append(ProcessDump(pid=pid, state=st[0], ppid=st[1], wchan=wchan_s,
                                   fs_suspect=fs_suspect(wchan_s),
                                   stack=stack, stack_summary=summary[:200],
                                   top_frame=top_frame(stack)))
    if again_after_s <= 0 or not any(r.top_frame for r in records):
        return records
    sleep(again_after_s)
    return [r.model_copy(update={"top_frame_again": top_frame(pyspy(r.pid))}) if r.top_frame
            else r for r in records]
