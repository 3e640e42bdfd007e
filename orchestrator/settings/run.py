"""`Settings`: the top-level model of one run, made of the sections in `sections.py`."""

from __future__ import annotations

import os
import re
from pathlib import Path

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from orchestrator.patterns import catastrophic, python_unbounded, too_slow
from orchestrator.progress import PROGRESS_REGEX
from orchestrator.settings.backend import BackendCfg
from orchestrator.settings.checks import PreflightCfg
from orchestrator.settings.exports import ExportsCfg
from orchestrator.settings.loss import LossCfg
from orchestrator.settings.nodes import SAFE_NAME
from orchestrator.settings.sections import (
    CheckpointCfg,
    Goal,
    NotifyCfg,
    Policy,
    Resources,
    UserSignature,
    Watch,
    plain_path,
)
from orchestrator.shellform import env_cleared, foreign_shell, script_indexes

PLACEHOLDERS = ("checkpoint", "checkpoint_root", "checkpoint_interval", "segment", "run_dir",
                "python", "config_dir")
# a placeholder as the command uses it: ${name} is a shell variable, {{name}} a literal {name}
PLACEHOLDER_USE = re.compile(r"(?<![${])\{([a-z_]+)\}(?!\})")
# Values that mean "fill me in" (import-sbatch writes CHANGE-ME); a config holding one is rejected.
UNFILLED = re.compile(r"CHANGE[-_ ]?ME|<[A-Za-z_ -]*>|\bTODO\b|/path/to/", re.I)
FT_LAUNCHER = re.compile(r"(?:^|[\s/])ft_launcher(?:\s|$)")


class Settings(BaseSettings):
    """One run. Relative paths are relative to the config file's directory."""

    model_config = SettingsConfigDict(
        env_prefix="ORCH_", env_nested_delimiter="__", extra="forbid", validate_default=True
    )

    name: str = Field(description="Run name; also the Slurm job name prefix.")
    run_dir: Path = Field(description="Directory holding the run's state, logs and segment files.")
    command: list[str] = Field(
        min_length=1, description="Training argv. Placeholders: {checkpoint} (newest complete "
        "checkpoint), {checkpoint_root} (its directory), {checkpoint_interval} (advised seconds), "
        "{segment} {run_dir} {python} {config_dir}; `{{x}}` is a literal `{x}`. In the script of "
        "a POSIX shell launch (`bash -c SCRIPT`, `bash -lc`, `env bash -e -c`, `dash -c`, ...) a "
        "placeholder becomes its quoted variable (\"${ORCH_RUN_DIR}\"); anywhere else its value is "
        "pasted as text (`flock -c`, `script -c`, `env -S`, `python -c` would run it as code), so "
        "inside a longer argument it may hold only letters, digits and _ . , / : = + @ % - (no "
        "space): any other character is a config error naming the key and the character; a "
        "placeholder that is the whole argument is that one argument, whatever it holds."
    )
    workdir: Path | None = Field(None, description="Working directory of the training command.")
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment for the "
                                                                  "training.")
    resources: Resources = Field(default_factory=Resources)
    checkpoint: CheckpointCfg
    goal: Goal = Field(default_factory=Goal)
    progress_regex: str = Field(
        PROGRESS_REGEX, description="Regex whose first group is the iteration in a log line; the "
        "default knows Megatron, DeepSpeed, HF Trainer, Lightning, torchtitan, NeMo, accelerate, "
        "nanotron, fairseq, OLMo, composer and plain `step N` / `iter N` lines."
    )
    policy: Policy = Field(default_factory=Policy)
    watch: Watch = Field(default_factory=Watch)
    backend: BackendCfg = Field(description="Where segments run: `kind: slurm` on a cluster; "
                                "`kind: local` (virtual nodes on this machine) for demos and "
                                "tests. Required: no silent default.")
    signatures: list[UserSignature] = Field(default_factory=list,
                                            description="Extra diagnosis signatures.")
    preflight: PreflightCfg = Field(default_factory=PreflightCfg)
    notify: NotifyCfg = Field(default_factory=NotifyCfg)
    exports: ExportsCfg = Field(default_factory=ExportsCfg)
    loss: LossCfg = Field(default_factory=LossCfg)
    config_path: Path | None = Field(None, exclude=True, description="Set by the loader.")

    @field_validator("run_dir", "workdir")
    @classmethod
    def _path(cls, v: Path | None) -> Path | None:
        return plain_path(v)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not SAFE_NAME.match(v):
            raise ValueError("must be letters, digits, '_', '.', '+', '-' (not leading), at most "
                             "128 characters")
        return v

    @field_validator("command")
    @classmethod
    def _command(cls, v: list[str]) -> list[str]:
        if not v[0].strip():
            raise ValueError("the program (first element) is empty")
        for arg in v:
            if "\x00" in arg:
                raise ValueError("an argument contains a NUL byte")
            # ${name} is a shell variable, {{name}} a literal {name}
            for m in PLACEHOLDER_USE.finditer(arg):
                if m.group(1) not in PLACEHOLDERS:
                    raise ValueError(f"unknown placeholder {{{m.group(1)}}}; known: "
                                     f"{', '.join(PLACEHOLDERS)}")
        if why := unsafe_in_shell(v):
            raise ValueError(why)
        return v

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, str]) -> dict[str, str]:
        bad = [key for key in v if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key)]
        if bad:  # every bad name at once, not the first only
            raise ValueError("invalid environment variable name(s) "
                             f"{', '.join(repr(k) for k in bad)}: letters, digits and _ only, not "
                             "starting with a digit")
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
        # it meets every line of output
        if v != PROGRESS_REGEX and (why := catastrophic(v) or python_unbounded(v)
                                     or too_slow(v)):
            raise ValueError(why)
        return v

    @model_validator(mode="after")
    def _filled_in(self) -> Settings:
        fields = {"name": self.name, "run_dir": str(self.run_dir),
                  "workdir": str(self.workdir or ""), "checkpoint.dir": str(self.checkpoint.dir),
                  "resources.partition": self.resources.partition or "",
                  "resources.account": self.resources.account or ""}
        fields.update({f"command.{i}": a for i, a in enumerate(self.command) if "\n" not in a})
        fields.update({f"env.{k}": v for k, v in self.env.items()})
        bad = [k for k, v in fields.items() if UNFILLED.search(v)]
        if bad:
            # the command's words are filled in the file; the other fields also with --set
            sets = " ".join(f"--set {k}=VALUE" for k in bad if not k.startswith("command."))
            raise ValueError("placeholder values still to be filled in: "
                             + ", ".join(f"{k} ({fields[k]!r})" for k in bad)
                             + (f": edit the file, or give {sets}" if sets else ": edit the file"))
        limit_s = self.resources.time_limit_min * 60
        if ("write_time_s" in self.checkpoint.model_fields_set
            and self.checkpoint.write_time_s * 2 > limit_s):
            raise ValueError(f"checkpoint.write_time_s={self.checkpoint.write_time_s:g} is more "
                             f"than half the {self.resources.time_limit_min} min time limit: no "
                             "segment could save in time")
        return self

    @model_validator(mode="after")
    def _apart(self) -> Settings:
        """The run directory inside the checkpoint directory would be taken for a checkpoint (and
        the other way round, the run's files would be mixed with the training's)."""
        run, ckpt = (Path(os.path.normpath(p)) for p in (self.run_dir, self.checkpoint.dir))
        if run == ckpt or ckpt in run.parents:
            raise ValueError(f"run_dir {run} is inside checkpoint.dir {ckpt}: give them separate "
                             "directories")
        return self

    @model_validator(mode="after")
    def _one_restart_owner(self) -> Settings:
        """NVRx's ft_launcher restarts ranks inside the job: spare nodes would make the controller
        restart inside the same job too (issue 40: never two owners)."""
        if self.resources.spare_nodes != 0 and any(FT_LAUNCHER.search(a) for a in self.command):
            raise ValueError(f"resources.spare_nodes={self.resources.spare_nodes} with a command "
                             "that runs NVRx's ft_launcher: it restarts the ranks inside the job "
                             "itself; set resources.spare_nodes: 0 (the controller then resubmits "
                             "segments only), or launch with torchrun")
        return self

    @model_validator(mode="after")
    def _fits(self) -> Settings:
        if self.backend.kind == "local":
            have = len(self.backend.local.node_names())
            if self.resources.nodes > have:
                raise ValueError(f"resources.nodes={self.resources.nodes} but the local backend "
                                 f"has {have} nodes")
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


def unsafe_in_shell(argv: list[str]) -> str:
    """Why a placeholder in `argv` cannot reach a shell safely (issue 37), or "": after a csh or
    fish (their quoting is not the POSIX one the placeholder's variable reference is written in),
    or in a `sh -c` script behind `env -i` (the variable would be gone)."""
    def has(a: str) -> bool:
        return any(m.group(1) in PLACEHOLDERS for m in PLACEHOLDER_USE.finditer(a))

    j = foreign_shell(argv)
    if j is not None and any(has(a) for a in argv[j:]):
        return (f"a placeholder after {argv[j]!r}: only a POSIX shell (sh, bash, dash, zsh, ksh) "
                "gets one safely; use its ORCH_* variable ($ORCH_RUN_DIR, ...) instead")
    cleared = [i for i in script_indexes(argv) if has(argv[i]) and env_cleared(argv, i)]
    if cleared:
        return ("a placeholder in a shell script behind `env -i`, `env -u ORCH_...` or `sudo` "
                "(without -E): the script reads it from its ORCH_* variable, which would be gone")
    return ""
