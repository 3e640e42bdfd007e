"""Frozen value types shared by every layer: causes, actions, job states, specs, verdicts,
decisions."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field


class Frozen(BaseModel):
    """Base of the immutable value types: frozen, unknown fields rejected."""
    model_config = ConfigDict(frozen=True, extra="forbid")


class Cause(StrEnum):
    """Why a segment ended (the vocabulary of docs/CAUSES.md)."""
    GPU_ECC = "gpu_ecc"
    GPU_LOST = "gpu_lost"
    GPU_OOM_STARTUP = "gpu_oom_startup"
    USER_OOM = "user_oom"
    NCCL_TIMEOUT = "nccl_timeout"
    NETWORK = "network"
    HANG = "hang"
    NODE_FAIL = "node_fail"
    FILESYSTEM = "filesystem"
    HOST_OOM = "host_oom"
    PREEMPTED = "preempted"
    TIMELIMIT = "timelimit"
    USER_BUG = "user_bug"
    SEGFAULT = "segfault"
    BUS_ERROR = "bus_error"
    SLOW_NODE = "slow_node"  # one node slowed the lock-step job: swapped for a spare
    LOSS_ANOMALY = "loss_anomaly"  # the printed loss went NaN/Inf or spiked: roll back (issue 41)
    CANCELLED = "cancelled"  # an operator cancelled the job (orchestrator cancel, --cancel-on-exit)
    SUCCESS = "success"
    UNKNOWN = "unknown"
    MANUAL = "manual"  # an operator blacklisted the node (`blacklist add`); ends no segment


HARDWARE_CAUSES = frozenset({Cause.GPU_ECC, Cause.GPU_LOST, Cause.GPU_OOM_STARTUP, Cause.NODE_FAIL})


class Owner(StrEnum):
    """Whose fault a segment's end is, by DECISIONS.md; the policy turns it into an action with the
    history."""
    NODE = "node"  # strong evidence that a node failed: exclude it at the first occurrence
    NODE_SUSPECT = "node_suspect"  # weak node evidence: a strike on it
    JOB = "job"  # the job's own fault, which repeats: stop and say what to change
    SHARED = "shared"  # the shared environment's passing fault (filesystem outage, requeue): wait
    # nobody stands out (a collective timeout, a preemption, the time limit): resubmit
    NOBODY = "nobody"
    FINISHED = "finished"  # the training reached its end


JOB_CAUSES = frozenset({Cause.USER_BUG, Cause.USER_OOM, Cause.HOST_OOM, Cause.LOSS_ANOMALY})
SUSPECT_CAUSES = frozenset({Cause.SEGFAULT, Cause.BUS_ERROR, Cause.NETWORK, Cause.NCCL_TIMEOUT,
                            Cause.UNKNOWN})


def default_owner(cause: Cause, blame: bool) -> Owner:
    """Whose fault a cause usually is (DECISIONS.md), when the classifier did not say more."""
    if cause == Cause.SUCCESS:
        return Owner.FINISHED
    if cause in JOB_CAUSES:
        return Owner.JOB
    if cause == Cause.FILESYSTEM:
        return Owner.SHARED
    if cause in HARDWARE_CAUSES or cause in (Cause.HANG, Cause.SLOW_NODE):
        return Owner.NODE if blame else Owner.NOBODY
    if cause in SUSPECT_CAUSES:
        return Owner.NODE_SUSPECT if blame else Owner.NOBODY
    return Owner.NOBODY


class Action(StrEnum):
    """What the policy does next."""
    RESUBMIT_EXCLUDE = "resubmit_exclude"
    RESUBMIT = "resubmit"
    WAIT_AND_RESUBMIT = "wait_and_resubmit"
    STOP_AND_ALERT = "stop_and_alert"
    DONE = "done"


class JobState(StrEnum):
    """A scheduler job's state, as Slurm names it."""
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    COMPLETING = "COMPLETING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    TIMEOUT = "TIMEOUT"
    NODE_FAIL = "NODE_FAIL"
    CANCELLED = "CANCELLED"
    PREEMPTED = "PREEMPTED"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    UNKNOWN = "UNKNOWN"

    @property
    def terminal(self) -> bool:
        return self not in {JobState.PENDING, JobState.RUNNING, JobState.COMPLETING,
                            JobState.UNKNOWN}


class RunStatus(StrEnum):
    """The whole run: running, done (goal reached) or stopped (needs a human)."""
    RUNNING = "running"
    DONE = "done"
    STOPPED = "stopped"


class CancelReason(StrEnum):
    """Why the controller cancelled a running segment (the detail sentence is kept beside it, for
    people)."""
    STALL = "stall"  # no progress for the stall or start-up limit: a hang
    PREFLIGHT = "preflight"  # a node failed its start-up checks: no training can run there
    PEER_FAILED = "peer_failed"  # a rank failed; its peers would wait forever
    OPERATOR = "operator"  # --cancel-on-exit or `orchestrator cancel`
    SLOW_NODE = "slow_node"  # a node slows the job and a spare can take its place
    # a node's agent fell silent and slurmctld cannot reach the node either: it failed
    NODE_DOWN = "node_down"
    DRAINED = "drained"  # an admin or a health check drained a node of the step: a spare takes it
    LOSS_ANOMALY = "loss_anomaly"  # the printed loss went NaN/Inf or spiked: roll back


# The spec is what the controller hands each node's agent (pickled by submitit): a node whose
# orchestrator reads another version refuses it in one line instead of misreading it (issue 42).
SPEC_VERSION = 1


class SegmentSpec(Frozen):
    """Everything needed to submit one segment; produced by plan, consumed by a backend."""

    version: int = SPEC_VERSION
    run_name: str
    index: int = Field(ge=1)
    job_name: str
    nodes: int = Field(ge=1)
    tasks_per_node: int = Field(ge=1)
    # "first": only the first node runs the command; the others idle (resources.launch_nodes)
    launch_nodes: str = "all"
    gpus_per_node: int = Field(ge=0)
    cpus_per_task: int | None = None
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time_limit_min: int = Field(ge=1)
    exclude: tuple[str, ...] = ()
    exclude_hostlist: str = ""
    resume_from: str | None = None
    start_iteration: int = 0
    command: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()
    workdir: str
    run_dir: str
    segment_dir: str
    sbatch_extra: tuple[tuple[str, str], ...] = ()
    progress_regex: str
    preflight_commands: tuple[tuple[str, ...], ...] = ()
    preflight_timeout_s: float = 20.0
    preflight_nhc: str = "auto"  # run LBNL NHC where installed (settings preflight.nhc)
    # the advised checkpoint interval and the expected effective training time
    interval_advice: str = ""
    # spare nodes allocated beyond `nodes` (--no-kill; restarts inside the job)
    spares: int = Field(0, ge=0)
    allocation_dir: str = ""  # with spares: where the allocation supervisor and the controller talk
    # with spares: how long the supervisor waits for a decision
    request_wait_s: float = Field(0.0, ge=0)


class JobRef(Frozen):
    """A submitted job: its id and when it was submitted (ids are reused after a scheduler
    restart)."""
    job_id: str
    submitted_at: datetime
    backend: str


class JobStatus(Frozen):
    """One poll's view of a job."""
    state: JobState
    exit_code: int | None = None
    nodes: tuple[str, ...] = ()
    # False when `nodes` may be part of the allocation (squeue while completing)
    nodes_final: bool = True
    reason: str = ""
    started_at: datetime | None = None
    ended_at: datetime | None = None


class Role(StrEnum):
    """What a line of evidence is to its verdict."""
    ROOT = "root"  # the error the verdict rests on
    SECONDARY = "secondary"  # a consequence, or an error that lost the precedence
    CONTEXT = "context"
    EXIT = "exit"  # a node that exited non-zero


class LossAnomaly(Frozen):
    """The printed loss gone bad (orchestrator/losses.py): `nan` (NaN or Inf) or `spike`, from
    which iteration (None: the line named none), the value, the baseline median it was judged
    against, the line that began it and the node that printed it."""
    kind: str
    onset: int | None
    value: float
    baseline: float | None = None
    line: str = ""
    node: str = ""

    def sentence(self) -> str:
        """For people (the verdict, the alert): what the loss did, where and from when."""
        at = f"iteration {self.onset}" if self.onset is not None else "an unknown iteration"
        where = f" on {self.node}" if self.node else ""
        if self.kind == "nan":
            what = f"went {self.value}"
        else:
            base = f" (median {self.baseline:.4g} before)" if self.baseline is not None else ""
            what = f"spiked to {self.value:.4g}{base}"
        return f"the loss {what} at {at}{where}: {self.line.strip()[:200]}"


class EvidenceSource(StrEnum):
    """Who printed a line of evidence."""
    LOG = "log"  # the training's own output
    # the node reported it (kernel log, NVML, IB counters, cgroup: the agent's ORCH-NODE lines)
    NODE = "node"


class EntrySource(StrEnum):
    """How a node came onto the blacklist."""
    AUTO = "auto"  # a verdict blamed it
    MANUAL = "manual"  # `orchestrator blacklist add`


class Evidence(Frozen):
    """One line that supports a verdict, with where it was printed and its role (root, secondary),
    and whether the node itself reported it (kernel log, NVML, IB counters, cgroup: the agent's
    ORCH-NODE lines)."""
    node: str
    file: str = ""
    line: int = 0
    text: str
    role: Role = Role.ROOT
    cause: Cause = Cause.UNKNOWN
    source: EvidenceSource = EvidenceSource.LOG
    rank: int | None = None  # the rank (or srun task) that printed it, when the line says so


class Verdict(Frozen):
    """The diagnosis of one segment: cause, culprits, whether to blame them, evidence. No action:
    the policy picks that."""
    cause: Cause
    culprit_nodes: tuple[str, ...] = ()
    blame: bool = False
    confidence: float = Field(ge=0.0, le=1.0)
    evidence: tuple[Evidence, ...] = ()
    summary: str = ""
    owner: Owner | None = None  # None: the cause's usual owner (default_owner)
    rule: str = ""  # the rule of docs/CAUSES.md that fired
    loss: LossAnomaly | None = None  # loss_anomaly: what the loss did (the rollback's onset)

    @property
    def fault_owner(self) -> Owner:
        return self.owner if self.owner is not None else default_owner(self.cause, self.blame)


class Decision(Frozen):
    """The policy's decision: the action, why, whom to blame, how long to wait."""
    action: Action
    reason: str
    blame_nodes: tuple[str, ...] = ()
    hard: bool = False
    wait_s: float = 0.0
    # the segment died loading this checkpoint (counted in the ledger)
    checkpoint_failed: str | None = None
    rule: str = ""  # the policy's rule that decided (docs/CAUSES.md)
    # the loss went NaN at this iteration: the next segment resumes from a checkpoint before it
    rollback_below: int | None = None


class BlacklistEntry(Frozen):
    """One blacklisted node: cause, evidence, strikes, expiry, hard or soft, auto or manual."""
    node: str
    cause: Cause
    evidence: str
    job_id: str
    since: datetime
    expires: datetime
    strikes: int = 1
    hard: bool = True
    source: EntrySource = EntrySource.AUTO
    run: str = ""  # the run whose verdict it was, when it came from the shared blacklist
    run_created: datetime | None = None  # when that run began: runs of one name told apart
