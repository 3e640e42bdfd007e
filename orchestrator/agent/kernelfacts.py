"""The kernel's side of the node's own evidence (nodefacts.py): `dmesg` lines printed since the
agent started, of the families that tell a node failed, bounded. kernel_lines is pure (tested on
real kernel text)."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from datetime import datetime
from typing import Any

DMESG_TIMEOUT_S = 1.5
MAX_KERNEL_LINES = 200
MAX_LINE_CHARS = 500

# The kernel messages that tell what happened to a node; everything else in the ring buffer is
# dropped.
KERNEL_FAMILIES = re.compile("|".join((
    r"NVRM: (?:Xid\b|.*fallen off the bus)",  # GPU: Xid events, a GPU that fell off the bus
    r"\bEDAC\b.*(?:\b[UC]E\b|(?i:error))|mce: .*(?:Hardware Error|temperature)|Machine "
    r"[Cc]heck|\[Hardware Error\]|Memory failure:",  # host memory and CPU
    r"Out of memory|oom-kill|invoked oom-killer|Killed process \d+|oom_reaper:",  # the OOM killer
    r"blk_update_request|I/O error|critical medium error|Medium Error"
    r"|\bnvme\d*(?:n\d+)?\b.*(?i:error|timeout|abort|reset|down|fail)",  # local disks
    r"LustreError|Lustre: .*(?i:evict|lost|timed out|not responding|network error)"
    r"|nfs: server \S+ (?:not responding|OK)|\bevicted\b",  # shared filesystems
    r"\bmlx5_\w+\b.*(?i:err|fail|down|timeout|fatal|health|syndrome)|Port: \d+ Link \w+|port state"
    # InfiniBand / RoCE links
    r"|\bib\w*\d\b.*(?i:link|port).*(?i:down|error)|[Ll]ink (?:is )?[Dd]own",
)))
ISO_TS = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:[,.](\d+))?([+-]\d\d:?\d\d|Z)?\s(.*)$")
RAW_TS = re.compile(r"^\[\s*(\d+\.\d+)\]\s?(.*)$")


def _stamp(line: str) -> tuple[datetime | float | None, str]:
    """(time, message) of one dmesg line: an aware datetime (--time-format iso), seconds since boot
    (raw), or None for a continuation line."""
    m = ISO_TS.match(line)
    if m:
        frac = (m.group(2) or "0")[:6].ljust(6, "0")
        zone = (m.group(3) or "+00:00").replace("Z", "+00:00")
        return datetime.fromisoformat(f"{m.group(1)}.{frac}{zone}"), m.group(4)
    m = RAW_TS.match(line)
    if m:
        return float(m.group(1)), m.group(2)
    return None, line.strip()


def _before(ts: datetime | float, since: datetime | float) -> bool:
    if isinstance(ts, datetime) and isinstance(since, datetime):
        return ts < since
    return isinstance(ts, float) and isinstance(since, float) and ts < since


def _records(lines: list[str]) -> list[str]:
    """Messages, a multi-line record (continuation lines carry no timestamp) joined into one."""
    out: list[str] = []
    for line in lines:
        ts, message = _stamp(line)
        if ts is None and out:
            out[-1] = f"{out[-1]} {message}".strip()
        elif message or ts is not None:
            out.append(message)
    return out


def kernel_lines(text: str, since: datetime | float | None) -> list[str]:
    """The relevant messages of `dmesg` output printed at or after `since` (None: all), without
    their timestamps, a multi-line record as one line, each at most MAX_LINE_CHARS, the last
    MAX_KERNEL_LINES. Pure."""
    lines = text.splitlines()
    start = 0
    if since is not None:  # the ring buffer is in time order: after the last line before the start
        for i in range(len(lines) - 1, -1, -1):
            ts = _stamp(lines[i])[0]
            if ts is not None and _before(ts, since):
                start = i + 1
                while start < len(lines) and _stamp(lines[start])[0] is None:
                    start += 1  # continuation lines of that record
                break
    kept = [m[:MAX_LINE_CHARS] for m in _records(lines[start:]) if KERNEL_FAMILIES.search(m)]
    return kept[-MAX_KERNEL_LINES:]


Runner = Callable[..., Any]  # subprocess.run


def read_dmesg(run: Runner, timeout: float = DMESG_TIMEOUT_S) -> tuple[str | None, str]:
    """(dmesg output, "") with ISO timestamps, else raw (busybox, old util-linux); (None, why) if
    unreadable."""
    why = ""
    for argv in (["dmesg", "--time-format", "iso"], ["dmesg"]):
        try:
            res = run(argv, capture_output=True, timeout=timeout, check=False)
        except FileNotFoundError:
            return None, "dmesg not installed"
        except subprocess.TimeoutExpired:
            return None, f"dmesg did not answer within {timeout:.1f}s"
        except OSError as exc:
            why = str(exc)
            continue
        if res.returncode == 0:
            return res.stdout.decode(errors="replace"), ""
        err = res.stderr.decode(errors="replace").strip().splitlines()
        why = err[-1] if err else f"dmesg exited {res.returncode}"
    return None, why


