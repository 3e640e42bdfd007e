"""For the training program: PyTorch's flight recorder written on the controller's dump request.

NCCL writes its flight recorder on a collective timeout by itself (the agent sets
`TORCH_NCCL_DUMP_ON_TIMEOUT`); Gloo does not, and nothing outside a process can make it write one. A
program that calls `dump_on_request()` once after `init_process_group` gets a daemon thread that
watches the agent's dump request and writes the recorder (its JSON form) beside the stack dumps:
`$TORCH_FR_DUMP_TEMP_FILE<rank>.json`, with the request's id. The thread runs while the main thread
waits in a collective (PyTorch releases the GIL there), so a rank that waits answers; a rank that
never reached the collective answers with one collective fewer, and the controller names it. Only
the standard library and torch; nothing happens outside an orchestrated segment.
"""

from __future__ import annotations

import json
import os
import stat
import threading
import time
from pathlib import Path

POLL_S = 1.0
FLIGHT_DIR = "flight"  # under the segment's directory: NODE.rank-RANK[.json]


REQUEST_LIMIT = 4096  # a request holds an id


def _read(path: Path) -> str:
    """The request's first few KB; "" unless a regular file (a FIFO is never waited on)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return ""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return ""
        return os.read(fd, REQUEST_LIMIT).decode(errors="replace").strip()
    except OSError:
        return ""
    finally:
        os.close(fd)


def write_trace(out: Path, request: str, rank: int) -> None:
    """The recorder of this process, as JSON, written atomically."""
    from torch._C._distributed_c10d import _dump_fr_trace_json  # type: ignore[attr-defined,import-not-found,unused-ignore]

    record = {"request": request, "rank": rank, "time_ns": time.time_ns(),
              "trace": json.loads(_dump_fr_trace_json(includeCollectives=True))}
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(record))
    os.replace(tmp, out)


PR_SET_PTRACER = 0x59616D61  # linux/prctl.h (Yama)


def allow_tracing(tracer: int) -> bool:
    """Let `tracer` and its descendants trace this process (the agent, whose py-spy takes the stack
    dumps): under Yama's ptrace_scope 1, the default on Ubuntu, only ancestors could, and the
    agent's py-spy is none. False where the kernel has no Yama (nothing to allow) or no Linux."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(PR_SET_PTRACER, ctypes.c_ulong(tracer), 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def dump_on_request(poll_s: float = POLL_S) -> threading.Thread | None:
    """Let the agent's py-spy attach, and start the watcher (None outside a segment: no request
    file or dump path set, and nothing done)."""
    request_file, prefix = os.environ.get("ORCH_DUMP_REQUEST"), os.environ.get(
        "TORCH_FR_DUMP_TEMP_FILE")
    if not request_file or not prefix:
        return None
    if (agent := os.environ.get("ORCH_AGENT_PID", "")).isdigit():
        allow_tracing(int(agent))
    rank = int(os.environ.get("RANK", "0"))
    out, request = Path(f"{prefix}{rank}.json"), Path(request_file)

    def watch() -> None:
        done = _read(request)  # a request older than this process is not for it
        while True:
            time.sleep(poll_s)
            current = _read(request)
            if current and current != done:
                done = current
                try:
                    write_trace(out, current, rank)
                except Exception:  # noqa: BLE001 - the training must never die of its recorder
                    pass

    t = threading.Thread(target=watch, name="orch-flight-recorder", daemon=True)
    t.start()
    return t
