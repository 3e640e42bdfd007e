"""Evidence value types: what a scan found in one node's output, shared by diagnose/ and watch/."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from orchestrator.model import Cause, LossAnomaly


@dataclass(frozen=True)
class Match:
    """One flagged line: which signature matched, its cause and role, rank/task/host it came
    from."""
    line: int
    text: str
    signature: str
    cause: Cause
    blame: bool
    cascade: bool
    rank: int | None = None
    ts: datetime | None = None
    named_node: str | None = None
    file: str = ""
    peer_ip: str | None = None
    # the host that printed the line, when the line says so (pdsh, NCCL, kernel prefixes)
    host: str | None = None
    kind: str = ""  # "" evidence | "done": the training reached its end
    task: int | None = None  # srun --label task id, when the line had one


@dataclass(frozen=True)
class NodeEvidence:
    """What one node's output (or one job-wide file) showed: matches, progress, exit, dumps,
    hosts."""
    node: str
    file: str = ""
    matches: tuple[Match, ...] = ()
    first_iteration: int | None = None
    last_iteration: int | None = None
    last_progress_ts: datetime | None = None
    exit_code: int | None = None
    tail: tuple[tuple[int, str], ...] = ()
    stuck_detail: str = ""  # e.g. "pid 123 state D wchan=..." from a stall dump
    top_frames: tuple[str, ...] = ()  # innermost Python frame of each training process (py-spy)
    # the flight recorders: this node's ranks enqueued fewer collectives than the others (why)
    flight_detail: str = ""
    addresses: frozenset[str] = frozenset()  # IP addresses this host announced in NCCL INFO lines
    # the stuck process waits in filesystem code, or the fs probe timed out
    fs_suspect: bool = False
    abrupt_end: bool = False  # the output ends in NUL padding: the node went down mid-write
    # hosts named by line prefixes (a job-wide file holds several)
    hosts: frozenset[str] = frozenset()
    job_wide: bool = False  # one file for the whole job: its name is not a host
    address_hosts: tuple[tuple[str, str], ...] = ()  # (IP, host) pairs a job-wide file announced
    # the allocation's nodes as its own start line lists them (`==== job 7 nodes: gn[101-102] ====`)
    listed: frozenset[str] = frozenset()
    gpus: tuple[tuple[str, int], ...] = ()  # (host, GPUs it showed): "" is the file's own host
    loss: LossAnomaly | None = None  # its printed loss went NaN/Inf or spiked (orchestrator/losses)
    loss_sound_to: int | None = None  # the step of its newest sound printed loss
    signalled_at: datetime | None = None  # when the training was told to stop (its own clock)
