"""Slurm's command line as text: running one command (argv list, timeout), telling a transient
failure from a rejection, and parsing what sacct and squeue print into JobStatus values; the PATH
and temporary directory a rehearsed sbatch sees. Pure apart from run_command and path_first."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path

from loguru import logger
from tenacity import RetryCallState

from orchestrator.blacklist import compress, expand
from orchestrator.model import JobRef, JobState, JobStatus

Runner = Callable[[list[str], float], str]
SACCT_FIELDS = "JobIDRaw,JobName,State,ExitCode,NodeList,Submit,Start,End"
class CommandFailed(Exception):
    """A Slurm command exited non-zero or timed out (its argv and what it printed)."""
    def __init__(self, argv: list[str], detail: str):
        super().__init__(f"{argv[0]}: {detail.strip()[:300]}")
        self.detail = detail


def run_command(argv: list[str], timeout: float) -> str:
    try:
        res = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                             check=False)  # noqa: S603
    except subprocess.TimeoutExpired:
        raise CommandFailed(argv, f"timed out after {timeout:.0f}s") from None
    except OSError as exc:
        raise CommandFailed(argv, str(exc)) from None
    if res.returncode != 0:
        raise CommandFailed(argv, res.stderr or res.stdout or f"exit {res.returncode}")
    return res.stdout


def parse_state(raw: str) -> JobState:
    word = raw.split()[0] if raw.strip() else ""
    if word in JobState.__members__:
        return JobState(word)
    return {
        "CONFIGURING": JobState.PENDING, "REQUEUED": JobState.PENDING,
        "REQUEUE_HOLD": JobState.PENDING,
        "RESIZING": JobState.RUNNING, "SUSPENDED": JobState.RUNNING, "STOPPED": JobState.RUNNING,
        "SIGNALING": JobState.RUNNING, "STAGE_OUT": JobState.COMPLETING,
        "BOOT_FAIL": JobState.NODE_FAIL,
        "DEADLINE": JobState.TIMEOUT, "REVOKED": JobState.CANCELLED,
        "SPECIAL_EXIT": JobState.FAILED,
    }.get(word, JobState.UNKNOWN)


def parse_time(raw: str) -> datetime | None:
    if not raw or raw in ("Unknown", "None"):
        return None
    try:
        return datetime.fromisoformat(raw).astimezone()
    except ValueError:
        return None


def parse_sacct(text: str, refs: list[JobRef]) -> dict[str, JobStatus]:
    """Parse `sacct -X -n -P -o SACCT_FIELDS`; pick the row whose submit time matches each ref."""
    rows: dict[str, list[list[str]]] = {}
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) >= 8:
            rows.setdefault(parts[0], []).append(parts)
    out = {}
    for ref in refs:
        cands = rows.get(ref.job_id, [])
        # a reused job id: keep the row submitted at (or after) our submission, never an older job's
        ok = [r for r in cands
              if (parse_time(r[5]) or ref.submitted_at) >= ref.submitted_at - timedelta(minutes=10)]
        if not ok:
            continue
        r = ok[-1]
        code, _, sig = r[3].partition(":")
        out[ref.job_id] = JobStatus(
            state=parse_state(r[2]),
            exit_code=int(code) if code.isdigit() else None,
            nodes=tuple(expand(r[4])) if r[4] and r[4] != "None assigned" else (),
            reason=f"signal {sig}" if sig not in ("", "0") else "",
            started_at=parse_time(r[6]),
            ended_at=parse_time(r[7]),
        )
    return out


def parse_squeue(text: str) -> dict[str, JobStatus]:
    out = {}
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) >= 4:
            state = parse_state(parts[1])
            out[parts[0]] = JobStatus(state=state, nodes=tuple(expand(parts[2])) if parts[2]
                                      else (),
                                      reason=parts[3], nodes_final=state == JobState.RUNNING)
    return out


# sinfo's compact states of a node that cannot run a job now (a trailing *, ~, #, !, %: not
# responding, powered off, powering up, powering down, ...)
# (drng: draining, an allocated node an admin or a health check drained; failg: failing;
# pow_dn/pow_up: power states)
NOT_USABLE = ("down", "drain", "drng", "fail", "maint", "unk", "resv", "inval", "futr", "boot",
              "plnd", "npc", "pow")


def parse_node_states(text: str) -> list[tuple[str, str]] | None:
    """`sinfo -h -N -o "%N %t"` as (node, compact state) rows; None when the answer is not that
    (unknown: never "no node")."""
    rows = [ln.split() for ln in text.splitlines() if ln.strip()]
    if not rows or any(len(r) != 2 for r in rows):
        return None
    return [(r[0], r[1]) for r in rows]


# drained (drain, drng, drained) or failing (fail, failg): an admin's or a health check's word
DRAINED = ("drain", "drng", "fail")


def drained_reasons(text: str, nodes: frozenset[str]) -> dict[str, str] | None:
    """`sinfo -h -N -o "%N|%t|%E"`: of `nodes`, those drained or failing, with their reason (NHC,
    Slurm's `Kill task failed`, `Not responding`, a health system's prefix); None when the answer is
    not that table (unknown)."""
    rows = [ln.split("|", 2) for ln in text.splitlines() if ln.strip()]
    if not rows or any(len(r) != 3 or not r[0] or not r[1] for r in rows):
        return None
    return {n: (reason.strip() if reason.strip() not in ("", "none") else state)[:200]
            for n, state, reason in rows if n in nodes and state.startswith(DRAINED)}


def usable(rows: list[tuple[str, str]]) -> list[str]:
    return sorted({n for n, st in rows if not st.startswith(NOT_USABLE)
                   and not st.endswith(("*", "~", "#", "!", "%"))})


def unreachable(rows: list[tuple[str, str]], nodes: frozenset[str]) -> frozenset[str]:
    """Of `nodes`, those slurmctld cannot reach: not responding (a trailing *) or down."""
    return frozenset(n for n, st in rows
                     if n in nodes and (st.endswith("*") or st.startswith("down")))


def ping_window(config: str) -> float:
    """`scontrol show config`: how long slurmctld may take to flag a node that stopped answering.
    It sets a node not responding (and down) once its last answer is SlurmdTimeout old, checked on
    a ping cycle of SlurmdTimeout/3, and a ping fails after MessageTimeout; measured on the test
    cluster (20 s, 10 s): 43 s from the node's crash. 2 x SlurmdTimeout + MessageTimeout, bounded
    at 5 minutes (Slurm's default SlurmdTimeout is 300 s). 0 when the values are not there."""
    vals = dict(re.findall(r"^(SlurmdTimeout|MessageTimeout)\s*=\s*(\d+)", config, re.MULTILINE))
    if len(vals) < 2:
        return 0.0
    return min(300.0, 2 * int(vals["SlurmdTimeout"]) + int(vals["MessageTimeout"]))


def queue_position_of(squeue: str, job_id: str) -> str:
    """`squeue -t PD --sort=-p -o %i|%P|%S`: where the job stands among its partition's pending."""
    rows = [ln.split("|") for ln in squeue.splitlines() if ln.count("|") >= 2]
    mine = next((r for r in rows if r[0] == job_id), None)
    if mine is None:
        return ""
    ahead = [r for r in rows if r[1] == mine[1]]
    pos = ahead.index(mine) + 1
    start = mine[2] if mine[2] not in ("N/A", "") else "unknown"
    return f"position {pos} of {len(ahead)} pending in {mine[1]}, expected start {start}"


def found_jobs(squeue: str, now: datetime, backend: str) -> list[JobRef]:
    """`squeue -n NAME -o %i|%V|%T`: the jobs, oldest submission first."""
    out = []
    for line in squeue.splitlines():
        parts = line.split("|")
        if len(parts) >= 2 and parts[0]:
            sub = parse_time(parts[1]) or now
            out.append(JobRef(job_id=parts[0], submitted_at=sub, backend=backend))
    return sorted(out, key=lambda r: r.submitted_at)


def without_excluded(extra: dict[str, str], exclude: tuple[str, ...]) -> dict[str, str]:
    """sbatch_extra with the excluded nodes taken out of a pinned `nodelist` (sbatch refuses a node
    both listed and excluded; Slurm adds other nodes when fewer are listed than asked for, as it
    does under sbatch -w)."""
    if "nodelist" not in extra or not exclude:
        return extra

    kept = [n for n in expand(extra["nodelist"]) if n not in set(exclude)]
    rest = {k: v for k, v in extra.items() if k != "nodelist"}
    return {**rest, "nodelist": compress(kept)} if kept else rest


def first_failure(program: str, limit_s: float) -> Callable[[RetryCallState], None]:
    """tenacity's before_sleep: the first failure of a command is said at once (an unreachable
    scheduler was silent for the minutes its retries took), the later ones only if they all fail."""
    def say(rs: RetryCallState) -> None:
        if rs.attempt_number == 1:
            err = rs.outcome.exception() if rs.outcome is not None else None
            logger.warning("{} failed ({}); retrying for up to {:.0f} s", program,
                           " ".join(str(err).split())[:300], limit_s)
    return say


# The scheduler (or its configuration) could not be reached: wait and retry, never "the job was
# rejected". Matched case-insensitively. A rejection of the job itself (invalid option, account,
# partition) is not here.
TRANSIENT = ("Socket timed out", "Unable to contact slurm controller", "slurm_persist_conn_open",
             "Connection refused", "Zero Bytes were transmitted", "Transport endpoint", "timed out",
             "resolve_ctls_from_dns_srv", "DNS SRV lookup failed",
             "Could not establish a configuration source",
             "failed to fetch config", "fetch_config", "Temporary failure in name resolution",
             "Network is unreachable", "No route to host", "Communication connection failure",
             "Slurm temporarily unable to accept job", "Resource temporarily unavailable",
             "Unable to resolve", "slurm_load_ctl_conf")


def transient(text: str) -> bool:
    low = text.lower()
    return any(t.lower() in low for t in TRANSIENT)


def plain_tmp() -> str:
    """A temporary directory whose path needs no shell quoting (render() relies on that)."""
    tmp = tempfile.gettempdir()
    return tmp if shlex.quote(tmp) == tmp else "/tmp"


@contextmanager
def path_first(bindir: Path) -> Iterator[None]:
    """Put `bindir` first on PATH for the duration (submitit looks up srun and sbatch on PATH)."""
    old = os.environ.get("PATH", "")
    os.environ["PATH"] = f"{bindir}{os.pathsep}{old}"
    try:
        yield
    finally:
        os.environ["PATH"] = old
