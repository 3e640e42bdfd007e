"""The sections of a run config (resources, checkpoint, goal, policy, watch, signatures, notify;
the backend's are in backend.py) and the value checks they share."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from orchestrator.model import Cause
from orchestrator.patterns import catastrophic, python_unbounded, too_slow
from orchestrator.settings.base import Section
from orchestrator.settings.causes import known_causes
from orchestrator.settings.nodes import node_list
from orchestrator.settings.slurmtime import minutes_value
from orchestrator.settings.urls import apprise_urls

SAFE_VALUE = re.compile(r"^[^\x00-\x1f;`$&|<>\\'\"]*$")

YEAR_S = 31_536_000.0  # no duration in seconds may exceed a year
MAX_NODES = 100_000
MAX_LOCAL_NODES = 1024
# Options the orchestrator (or submitit) sets itself; a key that is a prefix of one of them is
# refused too.
RESERVED_SBATCH = ("exclude", "nodes", "time", "output", "error", "job-name", "requeue",
                   "no-requeue", "array",
                   "signal", "comment", "open-mode", "ntasks-per-node", "ntasks", "parsable",
                   "wrap", "wait", "test-only")


# Linux limits, in bytes: longer paths fail every system call that takes them
NAME_MAX, PATH_MAX = 255, 4095


def plain_path(v: Path | None) -> Path | None:
    """A path without NUL, newlines or other control characters, within the system's length
    limits."""
    if v is None:
        return v
    text = str(v)
    if any(ord(c) < 32 for c in text):
        raise ValueError("a path must not contain NUL, newlines or control characters")
    longest = max((len(part.encode()) for part in Path(text).parts), default=0)
    if longest > NAME_MAX:
        raise ValueError(f"a path component is {longest} bytes long; the limit is {NAME_MAX}")
    if len(text.encode()) > PATH_MAX:
        raise ValueError(f"the path is {len(text.encode())} bytes long; the limit is {PATH_MAX}")
    return v


def _safe_token(value: str, what: str) -> str:
    if value.startswith("-"):
        raise ValueError(f"{what} must not start with '-': {value!r}")
    if not SAFE_VALUE.match(value):
        raise ValueError(f"{what} contains a control or shell metacharacter: {value!r}")
    return value


class Resources(Section):
    """What each segment asks Slurm for."""
    nodes: int = Field(1, ge=1, le=MAX_NODES, description="Nodes per segment.")
    tasks_per_node: int = Field(1, ge=1, le=4096, description="Training processes the agent starts "
                                                              "on each node.")
    launch_nodes: Literal["all", "first"] = Field("all", description="`all` nodes run the command "
                                                  "(srun's way), or the `first` only, the others "
                                                  "idle (a batch script's launch without srun).")
    gpus_per_node: int = Field(0, ge=0, le=4096, description="GPUs requested per node "
                                                             "(--gpus-per-node).")
    cpus_per_task: int | None = Field(None, ge=1, le=1_000_000,
                                      description="CPUs per agent task (--cpus-per-task).")
    partition: str | None = Field(None, description="Slurm partition.")
    account: str | None = Field(None, description="Slurm account.")
    qos: str | None = Field(None, description="Slurm QOS.")
    time_limit_min: int = Field(60, ge=1, le=525_600, description="Wall-clock limit of one segment "
                                "(--time): minutes, or a Slurm time (30:00, 12:00:00, 1-12, "
                                "2-00:00:00).")
    _minutes = field_validator("time_limit_min", mode="before")(
        classmethod(lambda cls, v: minutes_value(v)))
    spare_nodes: int | Literal["auto"] = Field(
        0, description="Spare nodes allocated with each segment (Slurm, --no-kill), 0 to 64: a "
        "failed node is replaced by a spare and training restarts inside the same job, without a "
        "new queue wait. `auto` sizes them from the observed failure rate so that running out "
        "within the time limit is below 1% (the dry run says how many and why).")
    sbatch_extra: dict[str, str] = Field(
        default_factory=dict, description="Extra sbatch options, e.g. {constraint: h100}. Values "
                                          "are quoted."
    )
    first_dependency: str | None = Field(
        None, pattern=r"^[A-Za-z0-9_:,?+]+$",
        description="A Slurm dependency that holds the first segment (sbatch --dependency, e.g. "
                    "afterany:4242: the job the run waits for); later segments follow the "
                    "controller. import-sbatch takes the script's --dependency.")
    exclude: list[str] = Field(default_factory=list, description="Nodes never used, on top of the "
                               "blacklist (a list or a hostlist, e.g. 'gpu[017,203]'; "
                               "import-sbatch takes the script's --exclude).")
    _nodes = field_validator("exclude", mode="before")(classmethod(lambda cls, v: node_list(v)))

    @field_validator("spare_nodes", mode="before")
    @classmethod
    def _spares_not_bool(cls, v: object) -> object:
        """One clear line for every wrong value; YAML's yes/no/on/off are booleans, never 1/0
        spares."""
        why = "spare_nodes must be a number from 0 to 64, or auto"
        if isinstance(v, bool):
            raise ValueError(why + " (not yes/no/true/false)")
        if isinstance(v, str):  # --set and ORCH_* give text: 'AUTO', ' 2 '
            text = v.strip().lower()
            if text == "auto" or text.isdigit():
                return "auto" if text == "auto" else int(text)
            raise ValueError(f"{why}, not {v[:40]!r}")
        return v

    @field_validator("spare_nodes")
    @classmethod
    def _spares(cls, v: int | str) -> int | str:
        if isinstance(v, int) and not 0 <= v <= 64:
            raise ValueError("spare_nodes must be between 0 and 64, or auto")
        return v

    @field_validator("partition", "account", "qos")
    @classmethod
    def _plain(cls, v: str | None) -> str | None:
        return None if v is None else _safe_token(v, "value")

    @field_validator("sbatch_extra")
    @classmethod
    def _extra(cls, v: dict[str, str]) -> dict[str, str]:
        for key, val in v.items():
            if not re.fullmatch(r"[a-z][a-z0-9-]*", key):
                raise ValueError(f"sbatch option name {key[:80]!r} must look like 'mail-type' (no "
                                 "leading dashes)")
            # sbatch takes any unambiguous prefix of a long option: `outp` is --output
            if clash := [r for r in RESERVED_SBATCH if r.startswith(key)]:
                raise ValueError(f"sbatch option {key!r} (--{clash[0]}) is managed by the "
                                 "orchestrator; remove it")
            if "\n" in str(val) or "\x00" in str(val):
                raise ValueError(f"sbatch option {key!r} has a newline or NUL in its value")
        return v


class CheckpointCfg(Section):
    """Where the training writes checkpoints and how to tell a complete one."""
    dir: Path = Field(description="Directory the training writes checkpoints into.")
    preset: Literal["megatron", "deepspeed", "hf", "lightning", "accelerate", "dcp", "torchtitan",
                    "nemo", "glob"] = Field("megatron", description=(
        "Layout of the checkpoint directory: megatron, deepspeed, hf (Trainer), lightning, "
        "accelerate (save_state), dcp or torchtitan (step-N/.metadata), nemo, glob (see README)."))
    glob: str | None = Field(None, description="For preset glob: pattern of checkpoint entries, "
                                               "e.g. 'step_*'.")
    marker: str | None = Field(None, description="For preset glob: file that marks an entry "
                                                 "complete.")
    write_time_s: float = Field(120.0, ge=0.1, le=86400, allow_inf_nan=False, description=(
        "How long one checkpoint takes to write; with the observed failure rate it gives the "
        "advised interval ({checkpoint_interval}, ORCH_CHECKPOINT_INTERVAL_S)."))
    interval_s: float | None = Field(None, gt=0, le=31536000, allow_inf_nan=False, description=(
        "The interval the training uses now, to compare with the advice in `status` (default: 1 "
        "hour)."))

    _path = field_validator("dir")(plain_path)

    @field_validator("glob", "marker")
    @classmethod
    def _relative(cls, v: str | None) -> str | None:
        if v is not None and (v.startswith(("/", "~")) or ".." in v.split("/") or "\x00" in v):
            raise ValueError("must be a pattern relative to checkpoint.dir (e.g. 'step_*'), not "
                             f"{v[:80]!r}")
        return v

    @model_validator(mode="after")
    def _glob_needs_pattern(self) -> CheckpointCfg:
        if self.preset == "glob" and not self.glob:
            raise ValueError("preset 'glob' needs checkpoint.glob (e.g. 'step_*')")
        return self


class Goal(Section):
    """When the run is done."""
    target_iteration: int | None = Field(
        None, ge=1, description="Done when this iteration is reached; null: done when the command "
                                "exits 0."
    )


class Policy(Section):
    """Budgets, strikes, exclusions and waits: what the controller may do on its own."""
    max_segments: int = Field(50, ge=1, le=1_000_000, description="Hard cap on segments submitted "
                                                                  "for this run.")
    max_no_progress_segments: int = Field(
        3, ge=1, le=1_000_000, description="Stop and alert after this many consecutive segments "
                                           "without progress."
    )
    blacklist_expiry_h: float = Field(72.0, gt=0, le=87_600,
                                      description="Hours a blacklist entry stays active.")
    strike_threshold: int = Field(2, ge=1, le=1_000_000,
                                  description="Soft strikes before a node is excluded.")
    max_excluded_nodes: int = Field(16, ge=0, le=MAX_NODES,
                                    description="Never pass more nodes than this to --exclude.")
    wait_before_resubmit_s: float = Field(
        300.0, ge=0, le=YEAR_S, description="For wait_and_resubmit (e.g. filesystem outage): pause "
                                            "before resubmitting."
    )
    stop_on_user_bug: bool = Field(True, description="Stop and alert on user_bug instead of "
                                                     "resubmitting.")
    nan_rollbacks: int = Field(2, ge=0, le=100, description="Times a loss gone NaN or spiked rolls "
                               "back to a checkpoint before it, then stop (0: stop at once).")
    max_infra_failures: int = Field(
        100, ge=1, le=1_000_000, description="Stop and alert after this many segments ended by "
        "nodes or the shared environment (a node's strong fault, excluded at once; a filesystem "
        "outage; a preemption); those do not spend max_segments nor the no-progress budget.")
    on_cause: dict[str, Literal["stop", "resubmit", "wait"]] = Field(
        default_factory=dict, description="The action for a cause, over the policy's: e.g. "
        "{nccl_timeout: stop}; the key `any` covers every cause but success ({any: stop}: never "
        "run a second time, for a job with side effects).")
    _causes = field_validator("on_cause")(known_causes)
    shared_blacklist: Path | None = Field(
        None, description="A blacklist file shared by several runs on one cluster (read and "
                          "written with a lock); a node's strikes in every run add up.")
    scheduler_outage_max_s: float = Field(
        21600.0, gt=0, le=YEAR_S, description="Stop the run (after one alert) when sbatch cannot "
        "reach the scheduler for longer than this."
    )
    filesystem_stall_max_s: float = Field(
        21600.0, gt=0, le=YEAR_S, description="Stop the run (after one alert) when the checkpoint "
        "file system stalls or is missing for longer than this."
    )
    _shared = field_validator("shared_blacklist")(plain_path)
    drain_blacklisted: bool = Field(
        False, description="Run `scontrol update NodeName=X State=DRAIN Reason=...` for hardware "
        "culprits (needs the rights; otherwise the line is only printed by `status`)."
    )


class Watch(Section):
    """How often to look and how long silence may last."""
    poll_interval_s: float = Field(5.0, gt=0, le=86_400, description="Seconds between reads of "
                                   "the nodes' logs and records.")
    scheduler_poll_s: float = Field(
        30.0, gt=0, le=86_400,
        description="Seconds between scheduler queries (sacct) about the running job; sooner when "
                    "a node's agent exits or a node begins writing, and after a cancel.")
    stall_timeout_s: float = Field(1200.0, gt=0, le=YEAR_S,
                                   description="No progress for this long: the segment is stalled.")
    startup_timeout_s: float = Field(3600.0, gt=0, le=YEAR_S,
                                     description="Longer stall timeout before the first progress.")
    cascade_grace_s: float = Field(30.0, ge=0, le=86_400, description="After one node's training "
                                   "failed, wait this long for peers' errors, then cancel.")
    read_timeout_s: float = Field(10.0, gt=0, le=3600,
                                  description="Timeout for one read of the shared filesystem.")
    pace_window_s: float = Field(20.0, ge=2, le=3600, description="Seconds of progress per pace "
        "window: a slowdown is 2 slow windows after 3 to learn the pace (then the agents profile "
        "the ranks to name the slow node).")
    survey_every_s: float = Field(30.0, ge=0, le=86_400, description="Seconds between the agents' "
        "profiles that compare the nodes with each other (a node slow from the start); 0: none.")
    survey_after_s: float = Field(15.0, ge=0, le=86_400, description="Seconds of progress "
        "before the first of those profiles.")
    swap_drained: bool = Field(True, description="A node of the running step that an admin or a "
        "health check drains (sinfo) is swapped for a free spare after the next complete "
        "checkpoint.")


class UserSignature(Section):
    """A site's own failure message: a pattern, its cause, and whether it blames the node."""
    name: str
    pattern: str
    cause: Cause
    blame: bool = False
    cascade: bool = False

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, v: str) -> str:
        try:
            re.compile(v)
        except re.error as exc:
            raise ValueError(f"not a valid regular expression: {exc}") from exc
        # patterns are joined into one prefilter: flags must be scoped
        if re.search(r"\(\?[aiLmsux]+\)", v):
            raise ValueError("a global inline flag such as (?i) breaks the joined table; use "
                             "(?i:...) instead")
        if why := catastrophic(v):
            raise ValueError(f"{why}; rewrite it without nesting (e.g. a+ instead of (a+)+)")
        if why := python_unbounded(v) or too_slow(v):
            raise ValueError(why)
        return v


class NotifyCfg(Section):
    """Where alerts go (apprise URLs), de-duplicated and rate-limited."""
    urls: list[str] = Field(default_factory=list, description="apprise URLs (slack://..., "
                                                              "mailto://..., json://...).")
    max_per_hour: int = Field(20, ge=1, le=1_000_000, description="At most this many notifications "
                                                                  "per hour.")
    dedup_window_s: float = Field(3600.0, ge=0, le=YEAR_S, description="An identical message "
                                  "within this window is not resent.")

    _urls = field_validator("urls")(apprise_urls)
