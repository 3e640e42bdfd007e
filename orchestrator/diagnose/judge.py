"""Pure helpers of the verdict: which root came first in time, which hosts reported their own
hardware, whether a full disk is node-local, whether progress stopped long before the time limit,
and CUDA OOM at start-up."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from orchestrator.diagnose.culprits import all_hosts, origin
from orchestrator.evidence import Match, NodeEvidence
from orchestrator.model import Cause

NodeMatch = tuple[NodeEvidence, Match]
# clocks of different hosts differ a little: a lead smaller than this is a tie
EARLIER_BY = timedelta(seconds=1)
# progress stopped this long before the time limit: a hang, not the time limit
HANG_GAP = timedelta(minutes=20)
CANCELLED_AT = re.compile(r"CANCELLED AT (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)")
LOCAL_PATH = re.compile(r"(?:^|[\s'\"(=:\[])/(?:tmp|var/tmp|run)\b"
                        r"|/(?:[\w.-]+/)*(?:nvme\w*|local(?:scratch|_?disk|_?ssd)?|scratch_local|"
                        r"lscratch|raid\d*|ssd\d*)(?:/|\b)")

# PyTorch's OOM message: the processes NVML lists on the GPU (the rank's own too, under another pid
# namespace), and what the caching allocator holds ("...by PyTorch, and X is reserved by PyTorch")
HELD = re.compile(r"Process (\d+) has ([\d.]+) (bytes|[KMGT]iB) memory in use")
BY_PYTORCH = re.compile(r"([\d.]+) (bytes|[KMGT]iB) is (?:allocated|reserved) by PyTorch")
JOB_PID = re.compile(r"\(pid: (\d+)\)")
UNITS = {"bytes": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}


def held_by_the_job(text: str, nodes: list[NodeEvidence]) -> bool:
    """The one process an OOM message lists is the job's own rank: torchrun's failure summary names
    its pid, or PyTorch's own allocations account for the memory it holds (a container's rank seen
    under its host pid)."""
    held = HELD.findall(text)
    if len(held) != 1 or "this process has" in text:
        return False
    pid, amount, unit = held[0]
    if any(pid in JOB_PID.findall(m.text) for n in nodes for m in n.matches
           if m.signature == "rank_exit"):
        return True
    listed = float(amount) * UNITS[unit]
    ours = sum(float(a) * UNITS[u] for a, u in BY_PYTORCH.findall(text))
    return listed > 0 and 0.8 <= ours / listed <= 1.05


def earliest_root(roots: list[NodeMatch], best: NodeMatch) -> NodeMatch | None:
    """The root printed first, on another host, when it leads the precedence pick by more than clock
    skew. A generic Python exception never outranks a specific error by time alone (it may be a
    caught warning)."""
    if best[1].ts is None:
        return None
    timed = [(n, m) for n, m in roots if m.ts is not None and m.signature != "python_exception"
             and m.cause != best[1].cause]
    if not timed:
        return None
    first = min(timed, key=lambda nm: nm[1].ts or datetime.max.replace(tzinfo=UTC))
    lead = best[1].ts - (first[1].ts or best[1].ts)
    return first if lead > EARLIER_BY and origin(*first) != origin(*best) else None


def hardware_hosts(kinds: list[NodeMatch]) -> dict[str, Cause]:
    """Hosts whose own hardware report (kernel log, NVML, disk) says something broke, with its
    cause."""
    out: dict[str, Cause] = {}
    for n, m in kinds:
        host = origin(n, m)
        if m.kind == "hw" and host:
            cause = m.cause
            if host not in out or out[host] == Cause.UNKNOWN:
                out[host] = cause
    return out


def local_disk(text: str) -> bool:
    """The full filesystem is a node-local one (/tmp, local NVMe), not the shared one or
    /dev/shm."""
    return bool(LOCAL_PATH.search(text))


def banner_time(text: str) -> datetime | None:
    m = CANCELLED_AT.search(text)
    if not m:
        return None
    try:
        return datetime.fromisoformat(m.group(1)).replace(tzinfo=UTC)
    except ValueError:
        return None


def progress_stopped_early(nodes: list[NodeEvidence],
                           secondary: list[NodeMatch]) -> timedelta | None:
    """How long before the time-limit banner the last progress line came, when that is long (a
    hang)."""
    end = max((t for _, m in secondary if m.signature == "job_timelimit"
               and (t := banner_time(m.text) or m.ts)), default=None)
    last = max((n.last_progress_ts for n in nodes if n.last_progress_ts), default=None)
    if end is not None and last is None:  # progress lines without a time of their own
        quiet = last_sign_of_life(nodes, end)
        return end - quiet if quiet is not None and end - quiet > SILENT_GAP else None
    if end is None or last is None:
        return None
    signalled = [n.signalled_at for n in nodes if n.signalled_at]
    if any(abs(s - last) < HANG_GAP for s in signalled):
        # the ranks were told to stop right after their last progress: that was the end, on their
        # clock
        return None
    gap = end - last
    return gap if gap > HANG_GAP else None


# what the program raises itself (a node's or the filesystem's trouble that stalls it is a hang's)
OWN_ERRORS = frozenset({Cause.USER_OOM, Cause.USER_BUG, Cause.SEGFAULT, Cause.BUS_ERROR})


def own_error_then_idle(nodes: list[NodeEvidence], roots: list[NodeMatch],
                        secondary: list[NodeMatch]) -> bool:
    """The job's own error after its last progress, then nothing until the time limit: not a
    hang, that error."""
    errors = [m for n, m in roots if m.cause in OWN_ERRORS
              and (m.ts is None or n.last_progress_ts is None or m.ts >= n.last_progress_ts)]
    return bool(errors) and progress_stopped_early(nodes, secondary) is not None


# a date and time anywhere at a line's start (`[NeMo I 2026-03-05 14:27:00 ...]`, ISO stamps)
_ANY_TS = re.compile(r"(\d{4}-\d\d-\d\d)[ T](\d\d:\d\d:\d\d)")
# a phase announced at a step (`Starting validation at step N`, a save): a sign of life, no progress
_PHASE = re.compile(r"[Vv]alidat|[Ee]valuat|[Ss]aving|[Cc]heckpoint")
# with no time on the progress lines, only a longer silence before the limit is read as a hang
SILENT_GAP = timedelta(hours=1)


def last_sign_of_life(nodes: list[NodeEvidence], end: datetime) -> datetime | None:
    """The time of the last line before `end` that carries one and is no progress line, when no
    progress line follows it in the node's tail (the job printed nothing after it until the
    end)."""
    from orchestrator.progress import PROGRESS_REGEX  # noqa: PLC0415 - the default progress lines

    progress = re.compile(PROGRESS_REGEX)
    latest: datetime | None = None
    for n in nodes:
        seen: datetime | None = None
        for _, text in sorted(set(n.tail)):  # matched lines and the last lines, in line order
            if " CANCELLED AT " in text:  # Slurm's end banner: an epilog's times follow (`Start :`)
                break
            m = _ANY_TS.search(text[:80])
            if progress.search(text) and not _PHASE.search(text):
                seen = None  # progress after it: its time is the progress line's own, unread
            elif m and (t := datetime.fromisoformat(f"{m.group(1)}T{m.group(2)}").replace(
                    tzinfo=UTC)) < end:
                seen = t
        latest = max(latest, seen) if latest and seen else (latest or seen)
    return latest


def refine_oom(nodes: list[NodeEvidence], oom_nodes: list[str], recent_hardware: frozenset[str],
               start_iteration: int, underway: bool = False) -> tuple[Cause, bool, str]:
    """CUDA OOM on a node with a recent hardware strike, or at start-up (no progress anywhere in the
    job yet) on some nodes only: a poisoned GPU. After the job trained, an OOM is the job's own
    allocations (an eval, an optimizer step, a gather), whichever rank raised it."""
    if any(x in recent_hardware for x in oom_nodes):
        return Cause.GPU_OOM_STARTUP, True, "CUDA OOM on a node with a recent hardware fault"
    progressed = max((n.last_iteration or 0 for n in nodes), default=0)
    everyone = all_hosts(nodes)
    if progressed <= start_iteration and not underway and 0 < len(oom_nodes) < len(everyone):
        return (Cause.GPU_OOM_STARTUP, True, "CUDA OOM at start-up on some nodes only while the "
                                             "others were fine")
    return Cause.USER_OOM, False, ("CUDA OOM of the job's own allocations (on every node, or after "
                                   "training progressed): change the batch size, sharding or "
                                   "activation checkpointing")
