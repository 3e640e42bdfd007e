"""Run configuration: one YAML file, overridden by ORCH_* environment variables, then by CLI flags.

Every problem is reported as one line naming the file and the field path; the caller exits with 2.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, InitSettingsSource, PydanticBaseSettingsSource, SettingsConfigDict

from orchestrator.model import Cause

SAFE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]{0,127}$")
SAFE_VALUE = re.compile(r"^[^\x00-\x1f;`$&|<>\\'\"]*$")
PLACEHOLDERS = ("checkpoint", "segment", "run_dir", "python", "config_dir")


class ConfigError(Exception):
    """A configuration cannot be used. `problems` holds one line per problem."""

    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))
        self.problems = problems


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _safe_token(value: str, what: str) -> str:
    if value.startswith("-"):
        raise ValueError(f"{what} must not start with '-': {value!r}")
    if not SAFE_VALUE.match(value):
        raise ValueError(f"{what} contains a control or shell metacharacter: {value!r}")
    return value


class Resources(Section):
    nodes: int = Field(1, ge=1, description="Nodes per segment.")
    tasks_per_node: int = Field(1, ge=1, description="Training processes the agent starts on each node.")
    gpus_per_node: int = Field(0, ge=0, description="GPUs requested per node (--gpus-per-node).")
    cpus_per_task: int | None = Field(None, ge=1, description="CPUs per agent task (--cpus-per-task).")
    partition: str | None = Field(None, description="Slurm partition.")
    account: str | None = Field(None, description="Slurm account.")
    qos: str | None = Field(None, description="Slurm QOS.")
    time_limit_min: int = Field(60, ge=1, description="Wall-clock limit of one segment (--time), minutes.")
    sbatch_extra: dict[str, str] = Field(
        default_factory=dict, description="Extra sbatch options, e.g. {constraint: h100}. Values are quoted."
    )

    @field_validator("partition", "account", "qos")
    @classmethod
    def _plain(cls, v: str | None) -> str | None:
        return None if v is None else _safe_token(v, "value")

    @field_validator("sbatch_extra")
    @classmethod
    def _extra(cls, v: dict[str, str]) -> dict[str, str]:
        reserved = {"exclude", "nodes", "time", "output", "error", "job-name", "requeue", "no-requeue"}
        for key, val in v.items():
            if not re.fullmatch(r"[a-z][a-z0-9-]*", key):
                raise ValueError(f"sbatch option name {key!r} must look like 'mail-type' (no leading dashes)")
            if key in reserved:
                raise ValueError(f"sbatch option {key!r} is managed by the orchestrator; remove it")
            if "\n" in str(val) or "\x00" in str(val):
                raise ValueError(f"sbatch option {key!r} has a newline or NUL in its value")
        return v


class CheckpointCfg(Section):
    dir: Path = Field(description="Directory the training writes checkpoints into.")
    preset: Literal["megatron", "deepspeed", "hf", "lightning", "glob"] = Field(
        "megatron", description="Layout of the checkpoint directory."
    )
    glob: str | None = Field(None, description="For preset glob: pattern of checkpoint entries, e.g. 'step_*'.")
    marker: str | None = Field(None, description="For preset glob: file that marks an entry complete.")

    @field_validator("dir")
    @classmethod
    def _path(cls, v: Path) -> Path:
        if any(ord(c) < 32 for c in str(v)):
            raise ValueError("a path must not contain newlines or control characters")
        return v

    @model_validator(mode="after")
    def _glob_needs_pattern(self) -> CheckpointCfg:
        if self.preset == "glob" and not self.glob:
            raise ValueError("preset 'glob' needs checkpoint.glob (e.g. 'step_*')")
        return self


class Goal(Section):
    target_iteration: int | None = Field(
        None, ge=1, description="Done when this iteration is reached; null: done when the command exits 0."
    )


class Policy(Section):
    max_segments: int = Field(50, ge=1, description="Hard cap on segments submitted for this run.")
    max_no_progress_segments: int = Field(
        3, ge=1, description="Stop and alert after this many consecutive segments without progress."
    )
    blacklist_expiry_h: float = Field(72.0, gt=0, description="Hours a blacklist entry stays active.")
    strike_threshold: int = Field(2, ge=1, description="Soft strikes before a node is excluded.")
    max_excluded_nodes: int = Field(16, ge=0, description="Never pass more nodes than this to --exclude.")
    wait_before_resubmit_s: float = Field(
        300.0, ge=0, description="For wait_and_resubmit (e.g. filesystem outage): pause before resubmitting."
    )
    stop_on_user_bug: bool = Field(True, description="Stop and alert on user_bug instead of resubmitting.")
    shared_blacklist: Path | None = Field(
        None, description="A blacklist file shared by several runs on one cluster (read and written with a lock)."
    )
    drain_blacklisted: bool = Field(
        False, description="Run `scontrol update NodeName=X State=DRAIN Reason=...` for hardware culprits "
        "(needs the rights; otherwise the line is only printed by `status`)."
    )


class Watch(Section):
    poll_interval_s: float = Field(30.0, gt=0, description="Seconds between polls of job state and logs.")
    stall_timeout_s: float = Field(1200.0, gt=0, description="No progress for this long: the segment is stalled.")
    startup_timeout_s: float = Field(3600.0, gt=0, description="Longer stall timeout before the first progress.")
    cascade_grace_s: float = Field(
        30.0, ge=0, description="After one node's training failed, wait this long for peers' errors, then cancel."
    )
    read_timeout_s: float = Field(10.0, gt=0, description="Timeout for one read of the shared filesystem.")


class LocalBackendCfg(Section):
    nodes: list[str] | int = Field(4, description="Virtual node names, or a count (node1..nodeN).")

    def node_names(self) -> list[str]:
        if isinstance(self.nodes, int):
            return [f"node{i}" for i in range(1, self.nodes + 1)]
        return list(self.nodes)

    @field_validator("nodes")
    @classmethod
    def _names(cls, v: list[str] | int) -> list[str] | int:
        if isinstance(v, int):
            if v < 1:
                raise ValueError("needs at least one virtual node")
            return v
        for n in v:
            if not SAFE_NAME.match(n):
                raise ValueError(f"invalid node name {n!r}")
        if len(set(v)) != len(v):
            raise ValueError("node names repeat")
        return v


class SlurmBackendCfg(Section):
    command_timeout_s: float = Field(30.0, gt=0, description="Timeout of one squeue/sacct/sbatch call.")
    retry_max_s: float = Field(600.0, gt=0, description="Give up retrying one Slurm call after this long.")
    validate_exclude: bool = Field(True, description="Drop --exclude names that sinfo does not know.")
    srun_args: list[str] = Field(default_factory=list, description="Extra arguments for srun.")
    setup: list[str] = Field(default_factory=list, description="Shell lines run in the batch script first.")


class BackendCfg(Section):
    kind: Literal["local", "slurm"] = Field("local", description="local: virtual nodes on this machine; slurm.")
    local: LocalBackendCfg = Field(default_factory=LocalBackendCfg)
    slurm: SlurmBackendCfg = Field(default_factory=SlurmBackendCfg)


class UserSignature(Section):
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
        return v


class NotifyCfg(Section):
    urls: list[str] = Field(default_factory=list, description="apprise URLs (slack://..., mailto://..., json://...).")
    max_per_hour: int = Field(20, ge=1, description="At most this many notifications per hour.")
    dedup_window_s: float = Field(3600.0, ge=0, description="An identical message within this window is not resent.")


class PreflightCfg(Section):
    commands: list[list[str]] = Field(default_factory=list, description="Extra checks, each an argv list.")
    timeout_s: float = Field(20.0, gt=0, description="Timeout of each preflight check.")


class Settings(BaseSettings):
    """One run. Relative paths are relative to the config file's directory."""

    model_config = SettingsConfigDict(
        env_prefix="ORCH_", env_nested_delimiter="__", extra="forbid", validate_default=True
    )

    name: str = Field(description="Run name; also the Slurm job name prefix.")
    run_dir: Path = Field(description="Directory holding the run's state, logs and segment files.")
    command: list[str] = Field(
        min_length=1, description="Training argv. Placeholders: {checkpoint} {segment} {run_dir} {python}."
    )
    workdir: Path | None = Field(None, description="Working directory of the training command.")
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment for the training.")
    resources: Resources = Field(default_factory=Resources)
    checkpoint: CheckpointCfg
    goal: Goal = Field(default_factory=Goal)
    progress_regex: str = Field(
        r"iteration\s+(\d+)\s*/\s*\d+", description="Regex whose first group is the iteration in a log line."
    )
    policy: Policy = Field(default_factory=Policy)
    watch: Watch = Field(default_factory=Watch)
    backend: BackendCfg = Field(default_factory=BackendCfg)
    signatures: list[UserSignature] = Field(default_factory=list, description="Extra diagnosis signatures.")
    preflight: PreflightCfg = Field(default_factory=PreflightCfg)
    notify: NotifyCfg = Field(default_factory=NotifyCfg)
    config_path: Path | None = Field(None, exclude=True, description="Set by the loader.")

    @field_validator("run_dir", "workdir")
    @classmethod
    def _path(cls, v: Path | None) -> Path | None:
        if v is not None and any(ord(c) < 32 for c in str(v)):
            raise ValueError("a path must not contain newlines or control characters")
        return v

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not SAFE_NAME.match(v):
            raise ValueError("must be letters, digits, '_', '.', '+', '-' (not leading), at most 128 characters")
        return v

    @field_validator("command")
    @classmethod
    def _command(cls, v: list[str]) -> list[str]:
        if not v[0].strip():
            raise ValueError("the program (first element) is empty")
        for arg in v:
            if "\x00" in arg:
                raise ValueError("an argument contains a NUL byte")
            for m in re.finditer(r"\{([a-z_]*)\}", arg):
                if m.group(1) not in PLACEHOLDERS:
                    raise ValueError(f"unknown placeholder {{{m.group(1)}}}; known: {', '.join(PLACEHOLDERS)}")
        return v

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, str]) -> dict[str, str]:
        for key in v:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
                raise ValueError(f"invalid environment variable name {key!r}")
        return v

    @field_validator("progress_regex")
    @classmethod
    def _progress(cls, v: str) -> str:
        try:
            rx = re.compile(v)
        except re.error as exc:
            raise ValueError(f"not a valid regular expression: {exc}") from exc
        if rx.groups < 1:
            raise ValueError("needs one capture group for the iteration number")
        return v

    @model_validator(mode="after")
    def _fits(self) -> Settings:
        if self.backend.kind == "local":
            have = len(self.backend.local.node_names())
            if self.resources.nodes > have:
                raise ValueError(f"resources.nodes={self.resources.nodes} but the local backend has {have} nodes")
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings)

    @property
    def config_dir(self) -> Path:
        return self.config_path.parent if self.config_path else Path.cwd()


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError([f"{path}: file not found"]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError([f"{path}: cannot read: {exc}"]) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError([f"{path}: {where}YAML syntax error: {problem}"]) from None
    if data is None:
        raise ConfigError([f"{path}: the file is empty"])
    if not isinstance(data, dict):
        raise ConfigError([f"{path}: the top level must be a mapping of settings, not {type(data).__name__}"])
    return data


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """Turn ['policy.max_segments=5', ...] into a nested dict; values are parsed as YAML scalars."""
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise ConfigError([f"--set {item!r}: expected KEY=VALUE, e.g. watch.poll_interval_s=5"])
        key, raw = item.split("=", 1)
        try:
            value = yaml.safe_load(raw) if raw else ""
        except yaml.YAMLError:
            value = raw
        node = out
        parts = key.strip().split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return out


def _format_errors(path: Path, exc: ValidationError) -> list[str]:
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown field (check the spelling; see the configuration reference in README.md)"
        elif err["type"] == "missing":
            msg = "required field is missing"
        got = err.get("input")
        shown = "" if err["type"] in ("missing", "extra_forbidden") or isinstance(got, dict) else f" (got {got!r})"
        lines.append(f"{path}: {loc}: {msg}{shown}")
    return lines


def _resolve(base: Path, p: Path | None) -> Path | None:
    if p is None:
        return None
    p = p.expanduser()
    return p if p.is_absolute() else (base / p).resolve()


def _with_yaml(data: dict[str, Any]) -> type[Settings]:
    """A Settings class whose lowest-priority source is the YAML mapping (CLI > ORCH_* env > YAML)."""

    class LoadedSettings(Settings):
        @classmethod
        def settings_customise_sources(
            cls,
            settings_cls: type[BaseSettings],
            init_settings: PydanticBaseSettingsSource,
            env_settings: PydanticBaseSettingsSource,
            dotenv_settings: PydanticBaseSettingsSource,
            file_secret_settings: PydanticBaseSettingsSource,
        ) -> tuple[PydanticBaseSettingsSource, ...]:
            return (init_settings, env_settings, InitSettingsSource(settings_cls, init_kwargs=data))

    return LoadedSettings


def check_paths(s: Settings) -> list[str]:
    """Problems a valid file can still have on this machine: paths that exist but cannot be used."""
    where = s.config_path or "config"
    problems = []
    ck = Path(s.checkpoint.dir)
    if ck.exists() and not ck.is_dir():
        problems.append(f"{where}: checkpoint.dir: {ck} exists and is not a directory")
    elif ck.is_dir() and not os.access(ck, os.R_OK | os.X_OK):
        problems.append(f"{where}: checkpoint.dir: {ck} cannot be read (permissions)")
    if s.workdir is not None and not Path(s.workdir).is_dir():
        problems.append(f"{where}: workdir: {s.workdir} is not a directory")
    rd = Path(s.run_dir)
    if rd.exists() and not rd.is_dir():
        problems.append(f"{where}: run_dir: {rd} exists and is not a directory")
    prog = s.command[0]
    if "/" in prog and "{" not in prog and not (Path(s.workdir or ".") / prog).exists():
        problems.append(f"{where}: command.0: program {prog} does not exist (relative to workdir {s.workdir})")
    return problems


def load_settings(path: Path, overrides: dict[str, Any] | None = None) -> Settings:
    """Load and validate a run config; raise ConfigError listing every problem."""
    path = Path(path)
    data = _read_yaml(path)
    loaded = _with_yaml(data)
    try:
        settings = loaded(**(overrides or {}))
    except ValidationError as exc:
        raise ConfigError(_format_errors(path, exc)) from None
    base = path.resolve().parent
    ckpt = settings.checkpoint.model_copy(update={"dir": _resolve(base, settings.checkpoint.dir)})
    return Settings.model_construct(
        **{
            **{k: getattr(settings, k) for k in Settings.model_fields},
            "run_dir": _resolve(base, settings.run_dir),
            "workdir": _resolve(base, settings.workdir) or base,
            "checkpoint": ckpt,
            "config_path": path.resolve(),
        }
    )
