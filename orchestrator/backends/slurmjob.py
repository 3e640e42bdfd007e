"""`orchestrator diagnose JOBID`: where a finished Slurm job's output is, found the way an operator
would. `scontrol show job` names its StdOut/StdErr while slurmctld still holds the job (MinJobAge);
after that `sacct` gives its nodes, state and working directory, and its batch script where the site
keeps it (`sacct -B`, AccountingStoreFlags=job_script), whose `#SBATCH --output/--error` is expanded
as sbatch does (%j %x %u %A %a %N %%); else Slurm's default `slurm-%j.out` in the working directory.
Every command is an argv list; the job id is checked before it reaches one. Pure but for `run`."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.backends.slurm_commands import CommandFailed, Runner, parse_state, run_command
from orchestrator.blacklist import expand
from orchestrator.model import JobState

JOB_ID = re.compile(r"^\d{1,12}(?:_\d{1,9})?$")
TIMEOUT_S = 30.0
OUTPUT_OPT = re.compile(r"^#SBATCH\s+(?:--(output|error)[=\s]|-(o|e)\s*)(\S+)", re.MULTILINE)


class JobNotFound(Exception):
    """The job, or any file of its output, could not be found; the message says what was tried."""


@dataclass
class JobLogs:
    """One finished job: its output files (those that exist), nodes, end state, where they were
    looked for."""
    job_id: str
    name: str = ""
    state: JobState = JobState.UNKNOWN
    nodes: list[str] = field(default_factory=list)
    workdir: str = ""
    user: str = ""
    files: list[Path] = field(default_factory=list)
    tried: list[str] = field(default_factory=list)


def _fields(text: str) -> dict[str, str]:
    """`scontrol show job -o`: KEY=VALUE tokens (a value runs to the next ` KEY=`)."""
    out: dict[str, str] = {}
    for m in re.finditer(r"(?:^|\s)([A-Za-z:/]+)=(.*?)(?=\s[A-Za-z:/]+=|$)", text.strip()):
        out.setdefault(m.group(1), m.group(2))
    return out


def expand_pattern(pattern: str, job: JobLogs) -> str:
    """sbatch's filename pattern for one job (man sbatch, "filename pattern")."""
    array, _, task = job.job_id.partition("_")
    subs = {"j": job.job_id.split("_")[0], "J": job.job_id, "x": job.name, "u": job.user,
            "A": array, "a": task or "4294967294", "N": job.nodes[0] if job.nodes else "",
            "n": "0", "t": "0", "s": "batch", "%": "%"}
    out = re.sub(r"%(\d*)([jJxuAaNnts%])", lambda m: subs[m.group(2)].zfill(int(m.group(1) or 0)),
                 pattern)
    return out if out.startswith("/") else str(Path(job.workdir or ".") / out)


def _from_scontrol(job: JobLogs, run: Runner) -> list[str]:
    try:
        f = _fields(run(["scontrol", "show", "job", "-o", job.job_id], TIMEOUT_S))
    except CommandFailed as exc:
        job.tried.append(f"scontrol show job: {exc}")
        return []
    job.name, job.workdir = f.get("JobName", ""), f.get("WorkDir", "")
    job.state = parse_state(f.get("JobState", ""))
    job.user = f.get("UserId", "").split("(")[0]
    job.nodes = expand(f["NodeList"]) if f.get("NodeList", "(null)") != "(null)" else []
    return [p for p in (f.get("StdOut", ""), f.get("StdErr", "")) if p]


def _from_sacct(job: JobLogs, run: Runner) -> list[str]:
    argv = ["sacct", "-X", "-n", "-P", "-j", job.job_id, "--format=JobID,JobName,State,NodeList,"
            "WorkDir,User"]
    try:
        rows = [r.split("|") for r in run(argv, TIMEOUT_S).splitlines() if r.count("|") >= 5]
    except CommandFailed as exc:
        job.tried.append(f"sacct: {exc}")
        return []
    if not rows:
        job.tried.append(f"sacct: no job {job.job_id}")
        return []
    _, job.name, state, nodes, job.workdir, job.user = rows[-1][:6]
    job.state = parse_state(state)
    job.nodes = expand(nodes) if nodes and nodes != "None assigned" else []
    return _from_script(job, run) or [expand_pattern("slurm-%j.out" if "_" not in job.job_id
                                                     else "slurm-%A_%a.out", job)]


def _from_script(job: JobLogs, run: Runner) -> list[str]:
    """`#SBATCH --output/--error` of the batch script sacct kept, if the site keeps it."""
    try:
        script = run(["sacct", "-B", "-j", job.job_id], TIMEOUT_S)
    except CommandFailed:
        return []
    found = [m.group(3) for m in OUTPUT_OPT.finditer(script)]
    return [expand_pattern(shlex.split(p)[0] if p[:1] in "'\"" else p, job) for p in found]


def find_job_logs(job_id: str, run: Runner = run_command) -> JobLogs:
    """The job's output files and facts; JobNotFound says what was tried."""
    if not JOB_ID.fullmatch(job_id):
        raise JobNotFound(f"{job_id!r} is not a Slurm job id (digits, or ARRAYID_TASK)")
    job = JobLogs(job_id=job_id)
    paths = _from_scontrol(job, run) or _from_sacct(job, run)
    for p in dict.fromkeys(paths):
        if Path(p).is_file():
            job.files.append(Path(p))
        else:
            job.tried.append(f"{p}: no such file")
    if not job.files:
        raise JobNotFound(f"job {job_id}: no output file found "
                          f"({'; '.join(job.tried) or 'nothing'})")
    return job
