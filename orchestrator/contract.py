"""The agent <-> controller contract: a segment's files, the agent's marker lines, exit codes and
JSON records; the agent, the watcher, the backends and the fakes all use it (change it here)."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

PREFLIGHT_EXIT = 86  # the agent's exit code when a pre-flight check failed: no training ran
CANNOT_START_EXIT = 127  # the training command could not be started (not found, not executable)

LOG_SUFFIX = ".log"
HEARTBEAT_SUFFIX = ".heartbeat.json"
EXIT_SUFFIX = ".exit.json"
DUMP_SUFFIX = ".dump.json"
PROFILE_SUFFIX = ".profile.json"  # where each rank spent a few seconds (a slow-node search)
FACTS_SUFFIX = ".facts.json"

# Marker lines the agent writes into each node's log (the rank column says "agent").
START_MARKER = "ORCH-AGENT start"
EXIT_MARKER = "ORCH-AGENT exit"
PREFLIGHT_MARKER = "ORCH-PREFLIGHT"
DUMP_MARKER = "ORCH-DUMP"
# the node's own evidence: kernel log, NVML, InfiniBand, cgroup, mounts (nodefacts.py)
NODE_MARKER = "ORCH-NODE"
# Regular-expression fragments the scanner uses to recognise the agent's markers.
START_RE = r"ORCH-AGENT start segment=(?P<seg>\d+) job=(?P<job>\S+)"
EXIT_OK_RE = r"ORCH-AGENT exit segment=\d+ codes=\[0(?:, 0)*\]"


def start_line(segment: int, job_id: str, node: str, node_rank: int, resume: str | None) -> str:
    return (f"{START_MARKER} segment={segment} job={job_id} node={node} node_rank={node_rank} "
            f"resume={resume or '-'}")


def exit_line(segment: int, codes: list[int]) -> str:
    return f"{EXIT_MARKER} segment={segment} codes={codes}"


@dataclass(frozen=True)
class SegmentPaths:
    """The files of one segment under run_dir/segments/NNNN/."""

    root: Path

    @classmethod
    def of(cls, run_dir: Path | str, index: int) -> SegmentPaths:
        return cls(cls.under(run_dir) / f"{index:04d}")

    @staticmethod
    def under(run_dir: Path | str) -> Path:
        """The directory that holds every segment of a run."""
        return Path(run_dir) / "segments"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def nodes(self) -> Path:
        return self.root / "nodes"

    @property
    def dump_request(self) -> Path:
        return self.root / "dump-request"

    @property
    def profile_request(self) -> Path:
        return self.root / "profile-request"

    @property
    def submitit(self) -> Path:
        return self.root / "submitit"

    def log(self, node: str) -> Path:
        return self.logs / f"{node}{LOG_SUFFIX}"

    def heartbeat(self, node: str) -> Path:
        return self.nodes / f"{node}{HEARTBEAT_SUFFIX}"

    def exit(self, node: str) -> Path:
        return self.nodes / f"{node}{EXIT_SUFFIX}"

    def dump(self, node: str) -> Path:
        return self.nodes / f"{node}{DUMP_SUFFIX}"

    def profile(self, node: str) -> Path:
        return self.nodes / f"{node}{PROFILE_SUFFIX}"

    def facts(self, node: str, reason: str = "exit") -> Path:
        """The node's own evidence at the segment's end (reason "exit") or at a dump ("dump")."""
        return self.nodes / (f"{node}{FACTS_SUFFIX}" if reason == "exit"
                             else f"{node}.{reason}{FACTS_SUFFIX}")

    @property
    def spec(self) -> Path:
        """The segment's spec as JSON (a restart inside an allocation reads it from here)."""
        return self.root / "spec.json"

    @property
    def allocation(self) -> Path:
        """The allocation supervisor's files, in the segment that submitted the job (see
        AllocationPaths)."""
        return self.root / "allocation"


@dataclass(frozen=True)
class AllocationPaths:
    """The files of one allocation with spare nodes: the controller's step request and one record
    per step."""

    root: Path

    @property
    def request(self) -> Path:
        return self.root / "request.json"

    def step(self, segment: int) -> Path:
        return self.root / f"step-{segment:04d}.json"


NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,254}")  # a host name as Slurm spells it


def node_of_log(file_name: str) -> str | None:
    """The node a file in logs/ belongs to, or None when it is not an agent log: a name that is no
    host name (`-rf.log`, control or bidirectional characters) never becomes a node, a culprit or a
    drain command."""
    node = file_name[: -len(LOG_SUFFIX)] if file_name.endswith(LOG_SUFFIX) else ""
    return node if NODE_NAME.fullmatch(node) else None


def node_of_record(file_name: str) -> str | None:
    """The node whose agent wrote this file in nodes/ (heartbeat, exit record, dump), or None."""
    for suffix in (HEARTBEAT_SUFFIX, EXIT_SUFFIX, DUMP_SUFFIX):
        if file_name.endswith(suffix):
            node = file_name[: -len(suffix)]
            return node if NODE_NAME.fullmatch(node) else None
    return None


class Record(BaseModel):
    """A JSON record on the shared filesystem: unknown keys from newer agents are ignored."""

    model_config = ConfigDict(extra="ignore")


class CheckRecord(Record):
    """One pre-flight check's result."""
    name: str
    ok: bool
    detail: str = ""
    unknown: bool = False  # the check could not run: not a failure, and never a sign of health

    @property
    def verdict(self) -> str:
        return "unknown" if self.unknown else "ok" if self.ok else "FAILED"


class Heartbeat(Record):
    """The agent is alive: its last progress and the training PIDs (rewritten every few seconds)."""
    node: str
    job_id: str = ""
    iteration: int | None = None
    progress_time: str | None = None
    alive_time: str = ""
    pids: list[int] = []


class ExitRecord(Record):
    """How the node's training ended: exit codes, signals, last lines, pre-flight results."""
    node: str
    job_id: str = ""
    exit_code: int
    rank_exit_codes: list[int] = []
    signals: list[str] = []
    iteration: int | None = None
    time: str = ""
    last_lines: list[str] = []
    preflight: list[CheckRecord] = []
    stopped_by_signal: bool = False
    # checkpoint saves the agent timed from the training's own lines, and the directories they named
    checkpoint_write_s: list[float] = []
    checkpoint_dirs: list[str] = []


class ProcessDump(Record):
    """One training process at a dump request: /proc state, wchan and its py-spy stack."""
    pid: int
    state: str
    ppid: int = 0
    wchan: str = ""
    fs_suspect: bool = False
    stack: str = ""
    stack_summary: str = ""
    top_frame: str = ""
    top_frame_again: str = ""  # the innermost frame in a second sample a second later ("": none)
    samples: int = 0  # a profile (py-spy record): its main thread's samples...
    waiting: int = 0  # ...and those inside a collective
    pausing: int = 0  # ...and those in a save or an eval (the profile says nothing of the pace)


class DumpRecord(Record):
    """The agent's answer to one dump or profile request (its id tells fresh answers from old)."""
    node: str
    time: str = ""
    request: str = ""
    processes: list[ProcessDump] = []
    left_out: list[str] = []  # a profile's processes that are no rank or gave no samples, and why


class NodeFact(Record):
    """One thing the node itself knows: a kernel line, an NVML reading, a port state, a cgroup
    counter, a mount's answer. severity: "abnormal" (also printed in the node's log after
    NODE_MARKER), "context" (printed too, never evidence), "normal" or "unavailable"."""
    source: str
    text: str
    severity: str = "normal"


class NodeFactsRecord(Record):
    """The node's own evidence, collected by the agent at the segment's end ("exit") or a stall dump
    ("dump")."""
    node: str
    time: str = ""
    reason: str = "exit"
    facts: list[NodeFact] = []


class StepRequest(Record):
    """The controller asks the allocation supervisor to run segment `segment` (its spec in
    `spec_file`) as a new job step on exactly `nodes`; the step running now, if any, is stopped
    first."""
    segment: int
    nodes: list[str]
    spec_file: str
    time: str = ""


STEP_SIGNAL_NOTE = "stopped by a signal"  # the note (for people) of a step ended StepEnd.SIGNALLED


def write_private(path: Path, text: str) -> None:
    """Atomic and private (0600): a spec holds the config's environment."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


class StepEnd(StrEnum):
    """How a job step inside an allocation ended (StepRecord.end)."""
    EXITED = "exited"  # the training exited by itself (its code in exit_code)
    # the supervisor stopped it on a signal: the job is ending (scancel, preemption)
    SIGNALLED = "signalled"
    SUPERSEDED = "superseded"  # stopped because the controller started the next segment in the job
    REFUSED = "refused"  # a requested step that could not run in this allocation
    LOST = "lost"  # a node of the step left the job (Slurm removed it): the step is dead


class StepRecord(Record):
    """One job step the allocation supervisor ran: where, when, how it ended, and which nodes the
    allocation lost meanwhile (Slurm removes a failed node from a --no-kill job and kills the step
    that used it)."""
    segment: int
    job_id: str = ""
    nodes: list[str] = []
    allocation: list[str] = []
    started: str = ""
    ended: str = ""
    exit_code: int | None = None
    lost_nodes: list[str] = []
    note: str = ""
    end: StepEnd | None = None  # None while the step runs


R = TypeVar("R", bound=Record)


def write_record(path: Path, record: Record) -> None:
    """Atomic: readers see the old record or the new one, never half of one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(record.model_dump_json())
    os.replace(tmp, path)


def read_record(path: Path, kind: type[R]) -> R | None:
    """The record, or None when it is missing, half-written or not one of `kind`."""
    try:
        return kind.model_validate(json.loads(path.read_text()))
    except (OSError, ValueError, ValidationError):
        return None
