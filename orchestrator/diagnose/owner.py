"""Whose process the kernel's OOM killer took, or whose GPU work an Xid failed (offline): a kill in
another job's cgroup, or of a process that is none of the job's while no rank of the job on that
node was killed, and an Xid naming such a process, are context about the node (another workload ran
there), not the verdict. The agent judges the same live by its
ranks' PIDs and cgroup (`agent/oomowner.py`); offline, the text is all there is: the job's id from
its file names and Slurm's own lines, the victim's cgroup and name from the kernel's lines."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable

from orchestrator.evidence import Match, NodeEvidence

_JOB_ID = (re.compile(r"slurm-(\d+)(?:_\d+)?\.(?:out|err|log)"),  # the job's own output file
           re.compile(r"StepId=(\d+)\.|\*\*\* (?:JOB|STEP) (\d+)[. ]"))  # slurmstepd's lines
_CGROUP_JOB = re.compile(r"(?:/job_|StepId=)(\d+)")
# the driver names the process whose GPU work failed (`Xid (...): 79, pid=88214, name=vllm-serve`)
_XID_PROCESS = re.compile(r"NVRM: Xid \([^)]*\): \d+, pid=\d+, name=([^,\s]+)")
_MEMCG_PID = re.compile(r"oom-kill:.*\bpid=(\d+)")
_KILLED_PID = re.compile(r"Killed process (\d+)")
_VICTIM = re.compile(r"Killed process \d+ \(([^)]+)\)|task=([^,\s]+),")
# the processes a training job's ranks run as (the interpreter, torch's renamed threads, launchers)
_JOB_PROCESS = re.compile(r"python|pt_|torch|deepspeed|accelerate|ray[:_]|mpirun|orted|srun|"
                          r"slurmstepd|jax", re.I)


def job_id(files: Iterable[str], nodes: list[NodeEvidence]) -> str | None:
    """The job's id: from `slurm-<id>.out`, else from slurmstepd's lines about its steps."""
    for name in files:
        if m := _JOB_ID[0].search(name):
            return m.group(1)
    for n in nodes:
        for match in n.matches:
            if m := _JOB_ID[1].search(match.text):
                return m.group(1) or m.group(2)
    return None


def _foreign(m: Match, job: str | None, rank_killed: bool, pids: set[str],
             crashed: bool = True) -> bool:
    if (x := _XID_PROCESS.search(m.text)) is not None:  # an Xid of another program's GPU
        return not crashed and not _JOB_PROCESS.search(x.group(1))
    if m.signature != "host_oom":
        return False
    if (c := _CGROUP_JOB.search(m.text)) and job is not None:
        return c.group(1) != job
    if (p := _KILLED_PID.search(m.text)) and p.group(1) in pids:  # its `oom-kill:` line said whose
        return True
    v = _VICTIM.search(m.text)
    name = (v.group(1) or v.group(2)) if v else ""
    return bool(name) and not rank_killed and not _JOB_PROCESS.search(name)


def without_foreign_kills(nodes: list[NodeEvidence], job: str | None) -> list[NodeEvidence]:
    """`nodes` with the OOM kills that were not the job's taken out of their matches (the kernel's
    `oom-kill:` line names the cgroup and pid, the `Killed process PID` line after it the same
    pid)."""
    out = []
    for n in nodes:
        killed = any(m.kind == "killed" for m in n.matches)  # an OOM kill there may be the job's
        crashed = killed or any(m.kind == "crash" for m in n.matches)  # and so may an Xid
        pids = {p.group(1) for m in n.matches if (p := _MEMCG_PID.search(m.text))
                and _foreign(m, job, killed, set())}
        kept = tuple(m for m in n.matches if not _foreign(m, job, killed, pids, crashed))
        out.append(n if len(kept) == len(n.matches) else dataclasses.replace(n, matches=kept))
    return out


_ROW = re.compile(r"\]\s+\d+\s+\d+\s+\d+\s+(\d{7,})(?:\s+-?\d+){2,4}\s+(\S+)\s*$")


def foreign_hog(culprits: list[str], nodes: list[NodeEvidence]) -> str:
    """The process that held the memory when the kernel killed the job's rank on `culprits`: the
    biggest of its OOM report's task table, when it is none of the job's (a leaking daemon) and
    holds more than twice the job's biggest process; "" otherwise."""
    rows = [(int(r.group(1)), r.group(2)) for n in nodes for m in n.matches
            if m.signature == "oom_task_row" and (m.host or n.node) in culprits
            and (r := _ROW.search(m.text))]
    if not rows:
        return ""
    rss, name = max(rows)
    job = max((r for r, p in rows if _JOB_PROCESS.search(p)), default=0)
    if _JOB_PROCESS.search(name) or rss <= 2 * job:
        return ""
    return f"{name} held {rss * 4 // 2**20} GiB"
