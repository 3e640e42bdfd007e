"""Whose process the kernel's OOM killer ended. A kill line names its victim (`Killed process PID
(NAME)`, `oom-kill:...,task_memcg=CGROUP,...,pid=PID`); on a shared host it is often another
workload's, and the same kernel log is read by every node's agent. A kill that is not the job's is
context, not evidence: it must not turn a hang or a node's fault into the job's own memory use.

The victim is the job's when its PID is one of the ranks', or its memory cgroup lies under the
job's Slurm cgroup. It is another workload's when its cgroup lies outside the job's, or (no cgroup
to go by) when it is no rank and no rank of this node was killed by a signal the agent did not
send (a killed child of a rank, a DataLoader worker, makes the rank print its own error); the
agent's tree, sampled while the ranks run (JobTree), counts as the ranks'. The functions are pure:
tested on real kernel text."""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from pathlib import Path

from orchestrator.agent import sysfacts

VICTIM = re.compile(r"\bKilled process (\d+) \(([^)]*)\)")
MEMCG_KILL = re.compile(r"\boom-kill:.*?\btask_memcg=([^,\s]*)(?:.*?\btask=([^,\s]*))?"
                        r".*?\bpid=(\d+)")
OOM_FAMILY = re.compile(r"Out of memory|oom-kill|invoked oom-killer|Killed process \d+|oom_reaper:"
                        r"|Memory cgroup out of memory", re.IGNORECASE)
TREE_SAMPLE_S = 5.0
MAX_PIDS = 100_000
SIGKILL_CODES = frozenset({-9, 137})  # a rank killed by SIGKILL, itself or under a shell/container


@dataclass(frozen=True)
class Victim:
    """One process the OOM killer ended: its PID, name and memory cgroup (if the line says)."""
    pid: int
    name: str = ""
    memcg: str = ""


def victims(lines: list[str]) -> list[Victim]:
    """Every victim the kernel lines name (a PID named twice, by the kill and its memcg line,
    once)."""
    found: dict[int, Victim] = {}
    for line in lines:
        if m := MEMCG_KILL.search(line):
            pid = int(m.group(3))
            found[pid] = Victim(pid, m.group(2) or found.get(pid, Victim(pid)).name, m.group(1))
        for m in VICTIM.finditer(line):
            pid = int(m.group(1))
            old = found.get(pid)
            found[pid] = Victim(pid, m.group(2), old.memcg if old else "")
    return list(found.values())


def is_foreign(v: Victim, rank_pids: set[int], job_cgroup: str | None,
               rank_killed: bool) -> bool:
    """True when the victim is positively another workload's (module docstring)."""
    if v.pid in rank_pids:
        return False
    if job_cgroup and v.memcg:
        return not (v.memcg == job_cgroup or v.memcg.startswith(job_cgroup.rstrip("/") + "/"))
    return not rank_killed


def foreign_kills(lines: list[str], rank_pids: set[int], job_cgroup: str | None,
                  rank_exit_codes: list[int] | None, agent_stopped: bool) -> list[Victim]:
    """The victims, when every one the lines name is another workload's; [] when any is the job's
    or none is named (then the OOM lines stay evidence). `rank_exit_codes`: None while the ranks
    run; `agent_stopped`: the agent itself sent the signals that ended them."""
    named = victims([ln for ln in lines if OOM_FAMILY.search(ln)])
    killed = bool(rank_exit_codes) and not agent_stopped and any(
        c in SIGKILL_CODES for c in rank_exit_codes or [])
    if named and all(is_foreign(v, rank_pids, job_cgroup, killed) for v in named):
        return named
    return []


def context_line(found: list[Victim]) -> str:
    """What the node log says instead of the kill lines (no word of it reads as an OOM kill)."""
    who = ", ".join(f"pid {v.pid}" + (f" ({v.name})" if v.name else "") for v in found[:5])
    more = f" and {len(found) - 5} more" if len(found) > 5 else ""
    return (f"note: the kernel's memory killer ended {who}{more}, not a process of this job: "
            "context, not evidence")


class JobTree:
    """The PIDs the agent's process tree held, sampled every `every_s` while the ranks run: a
    victim ended between the samples and the end is known by them (the kill leaves no /proc
    entry). Bounded; a failed sample is skipped."""

    def __init__(self, root_pid: int, proc: Path, every_s: float = TREE_SAMPLE_S):
        self.root_pid, self.proc, self.every_s = root_pid, proc, every_s
        self.seen: set[int] = set()
        self._done = threading.Event()

    def sample(self) -> None:
        try:
            tree = sysfacts.descendants(self.root_pid, sysfacts.process_parents(self.proc))
        except OSError:
            return
        if len(self.seen) < MAX_PIDS:
            self.seen |= tree

    def start(self) -> None:
        def loop() -> None:
            while not self._done.wait(self.every_s):
                self.sample()
        self.sample()
        threading.Thread(target=loop, name="job-tree", daemon=True).start()

    def stop(self) -> None:
        self.sample()
        self._done.set()
