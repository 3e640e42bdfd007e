"""Loading a run config: the YAML file, overridden by ORCH_* environment variables, then by `--set
KEY=VALUE` flags; relative paths resolved against the config file's directory; checks of paths on
this machine."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from pydantic_settings import (
    BaseSettings,
    InitSettingsSource,
    PydanticBaseSettingsSource,
    SettingsError,
)

from orchestrator.settings.errors import ConfigError, format_errors
from orchestrator.settings.metricsfile import metrics_path_problem, user_metrics_path
from orchestrator.settings.run import Settings
from orchestrator.settings.source import env_problems, env_sources, parse_overrides, read_yaml
from orchestrator.shellform import SAFE_TEXT, pasted, unsafe_char

__all__ = ["check_paths", "load_settings", "parse_overrides", "path_warnings"]


def _resolve(base: Path, p: Path | None) -> Path | None:
    if p is None:
        return None
    p = p.expanduser()
    return p if p.is_absolute() else (base / p).resolve()


def _with_yaml(data: dict[str, Any]) -> type[Settings]:
    """A Settings class whose lowest-priority source is the YAML mapping (CLI > ORCH_* env >
    YAML)."""

    class LoadedSettings(Settings):
        """Settings with this file's values under the environment and --set (the source order)."""

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
    if (mp := user_metrics_path(s.exports.metrics_path, s.config_dir)) is not None and (
            why := metrics_path_problem(mp, rd, ck)):
        problems.append(f"{where}: {why}")
    prog = s.command[0]
    if "/" in prog and "{" not in prog and not (Path(s.workdir or ".") / prog).exists():
        problems.append(f"{where}: command.0: program {prog} does not exist (relative to workdir "
                        f"{s.workdir})")
    return problems


SAVE_ARG = re.compile(r"--(?:save|save[-_]dir|output[-_]dir|checkpoint[-_]dir|ckpt[-_]dir|"
                      r"default_root_dir)(?:=|\s+)([^\s$'\"`;|&)]+)")


def path_warnings(s: Settings) -> list[str]:
    """Things that are legal but probably wrong: a checkpoint dir that does not exist yet (a typo
    means starting from scratch) or that is not where the command saves."""
    where = s.config_path or "config"
    out = env_problems(list(Settings.model_fields))[1]
    ck = Path(s.checkpoint.dir)
    if not ck.exists():
        out.append(f"{where}: checkpoint.dir: {ck} does not exist (yet): a typo here means every "
                   "segment starts from scratch")
    base = Path(s.workdir or s.config_dir)
    for m in SAVE_ARG.finditer(" ".join(s.command)):
        saved = ((base / m.group(1)).resolve() if not m.group(1).startswith("/")
                 else Path(m.group(1)))
        if "{" not in m.group(1) and saved != ck.resolve():
            out.append(f"{where}: checkpoint.dir: {ck} differs from the path the command saves to "
                       f"({m.group(0).split()[0].split('=')[0]} {saved})")
    return out


def pasted_problems(path: Path, command: list[str],
                    values: dict[str, tuple[str, Path]]) -> list[str]:
    """A placeholder pasted as text into the command (outside a `sh -c` script) whose value holds a
    character a program could run as code (`flock -c`, `script -c`, `env -S`, `python -c`)."""
    out = []
    for i, name in pasted(command):
        key, value = values.get(name, ("", Path()))
        if key and (c := unsafe_char(str(value), command[i] == f"{{{name}}}")) is not None:
            out.append(f"{path}: command.{i}: {{{name}}} is pasted into this argument as text, but "
                       f"{key} ({value}) holds {c!r}: a value pasted as text may hold only "
                       f"{SAFE_TEXT} (a program such as `flock -c`, `script -c`, `env -S` or "
                       "`python -c` would read the rest as code); rename the directory, or use "
                       "the placeholder inside a `bash -c` script, where it is its ORCH_* variable")
    return out


def load_settings(path: Path, overrides: dict[str, Any] | None = None) -> Settings:
    """Load and validate a run config; raise ConfigError listing every problem."""
    path = Path(path)
    data = read_yaml(path)
    loaded = _with_yaml(data)
    fields = list(Settings.model_fields)
    if misspelled := env_problems(fields)[0]:
        raise ConfigError(misspelled)
    sources = {**env_sources(fields), **{k: "--set" for k in overrides or {}}}
    try:
        settings = loaded(**(overrides or {}))
    except ValidationError as exc:
        raise ConfigError(format_errors(path, exc, sources)) from None
    except SettingsError as exc:  # an ORCH_* section that is not JSON
        m = re.search(r'field "([a-z_]+)"', str(exc))
        var = sources.get(m.group(1), "ORCH_*") if m else "ORCH_*"
        raise ConfigError([f"environment: {var}: not valid JSON (a section in one variable is a "
                           "JSON object, e.g. ORCH_RESOURCES='{\"nodes\": 2}'; or set one field: "
                           "ORCH_RESOURCES__NODES=2)"]
                          ) from None
    base = path.resolve().parent
    run_dir = _resolve(base, settings.run_dir)
    # `{run_dir}` / `{config_dir}` in checkpoint.dir (import-sbatch writes '{run_dir}/checkpoints'):
    # the paths
    raw = (str(settings.checkpoint.dir).replace("{run_dir}", str(run_dir))
           .replace("{config_dir}", str(base)))
    ckpt = settings.checkpoint.model_copy(update={"dir": _resolve(base, Path(raw))})
    ck = ("checkpoint.dir", ckpt.dir)
    if unsafe := pasted_problems(path, settings.command, {
            "run_dir": ("run_dir", run_dir or base), "checkpoint_root": ck, "checkpoint": ck,
            "config_dir": ("the config file's directory", base)}):
        raise ConfigError(unsafe)
    return Settings.model_construct(
        **{
            **{k: getattr(settings, k) for k in Settings.model_fields},
            "run_dir": run_dir,
            "workdir": _resolve(base, settings.workdir) or base,
            "checkpoint": ckpt,
            "config_path": path.resolve(),
        }
    )
