"""The checkpoint directory from the config files a launch names (`--config x.toml`,
`--config-file x.yaml`, `--job.config_file`, Hydra's `--config-path D --config-name N`), read where
the importer's workdir puts them, and the preset of the framework that writes it; and what an
existing checkpoint directory already holds at import time.

The keys, as each framework reads them (tests/data/checkpoints/README.md cites the sources):
torchtitan TOML `[job] dump_folder` + `[checkpoint] folder`; nanotron YAML
`checkpoints.checkpoints_path` (`<step>/checkpoint_metadata.json`); NeMo YAML
`exp_manager.checkpoint_callback_params.dirpath`, `explicit_log_dir`, or `exp_dir/name[/version]`
+ `checkpoints`; LightningCLI YAML `ModelCheckpoint` `dirpath`, `trainer.default_root_dir`; HF
argument files `output_dir`."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from orchestrator.importer.scan import unquote

_VALUE = r"(?:=|[ \t]+)(\"[^\"\n]*\"|'[^'\n]*'|[^\s\\;|&)'\"]+)"
CONFIG_FLAG = re.compile(r"(?<![\w-])--(config[-_]file|config|job\.config[-_]file|cfg)" + _VALUE)
HYDRA_PATH = re.compile(r"(?<![\w-])(?:--config[-_]path|-cp)" + _VALUE)
HYDRA_NAME = re.compile(r"(?<![\w-])(?:--config[-_]name|-cn)" + _VALUE)
PROGRAM = re.compile(r"(?<![\w/.-])([\w./-]+\.py)\b")
MAX_CONFIG_BYTES = 4 << 20
Found = tuple[dict[str, Any], str]  # (checkpoint section, "FILE: key")


def config_files(text: str, workdir: str | None, resolve: Callable[[str], str]) -> list[Path]:
    """The config files the script's lines name, as paths under `workdir` (Hydra's config path is
    relative to the training program's directory, as Hydra reads it, or to the workdir)."""
    base = Path(workdir or ".")
    out = [base / resolve(unquote(m.group(2))) for m in CONFIG_FLAG.finditer(text)]
    path, name = HYDRA_PATH.search(text), HYDRA_NAME.search(text)
    if path and name:
        d, n = resolve(unquote(path.group(1))), resolve(unquote(name.group(1)))
        n = n if n.endswith((".yaml", ".yml")) else n + ".yaml"
        prog = PROGRAM.search(text)
        dirs = ([base / Path(resolve(prog.group(1))).parent / d] if prog else []) + [base / d]
        out.append(next((x / n for x in dirs if (x / n).is_file()), dirs[0] / n))
    return out


def _read(f: Path) -> Any:
    if not f.is_file():
        raise OSError("does not exist (relative to the workdir)")
    if f.stat().st_size > MAX_CONFIG_BYTES:
        raise OSError(f"over {MAX_CONFIG_BYTES >> 20} MiB")
    text = f.read_text(errors="replace")
    return tomllib.loads(text) if f.suffix == ".toml" else yaml.safe_load(text)


def _get(data: Any, *keys: str) -> Any:
    for k in keys:
        data = data.get(k) if isinstance(data, dict) else None
    return data


def _torchtitan(d: Any) -> tuple[dict[str, Any], str] | None:
    folder, dump = _get(d, "checkpoint", "folder"), _get(d, "job", "dump_folder")
    if not isinstance(folder, str) or not isinstance(dump, str):
        return None
    off = (" (enable_checkpoint = false there: nothing is saved, and no segment can resume, "
           "until it is true)" if _get(d, "checkpoint", "enable_checkpoint") is False else "")
    return {"dir": str(PurePosixPath(dump) / folder), "preset": "torchtitan"}, \
        "[job] dump_folder + [checkpoint] folder" + off


def _nemo(d: Any) -> tuple[dict[str, Any], str] | None:
    em = _get(d, "exp_manager")
    if not isinstance(em, dict):
        return None
    if isinstance(p := _get(em, "checkpoint_callback_params", "dirpath"), str):
        return {"dir": p, "preset": "nemo"}, "exp_manager.checkpoint_callback_params.dirpath"
    if isinstance(p := em.get("explicit_log_dir"), str):
        return {"dir": f"{p}/checkpoints", "preset": "nemo"}, "exp_manager.explicit_log_dir"
    parts = [str(em.get("exp_dir") or "nemo_experiments"), str(em.get("name") or "default")]
    if em.get("version") or em.get("resume_if_exists"):  # no dated version folder
        parts += [str(em["version"])] if em.get("version") else []
        parts.append("checkpoints")
    return {"dir": "/".join(parts), "preset": "nemo"}, "exp_manager.exp_dir + name"


def _lightning(d: Any) -> tuple[dict[str, Any], str] | None:
    for cb in _get(d, "trainer", "callbacks") or []:
        if (isinstance(cb, dict) and str(cb.get("class_path", "")).endswith("ModelCheckpoint")
                and isinstance(p := _get(cb, "init_args", "dirpath"), str)):
            return {"dir": p, "preset": "lightning"}, "trainer.callbacks ModelCheckpoint dirpath"
    if isinstance(p := _get(d, "trainer", "default_root_dir"), str):
        return {"dir": p, "preset": "lightning"}, "trainer.default_root_dir"
    return None


def _keys(d: Any) -> tuple[dict[str, Any], str] | None:
    if isinstance(p := _get(d, "checkpoints", "checkpoints_path"), str):
        marker = "checkpoint_metadata.json"
        return ({"dir": p, "preset": "glob", "glob": "[0-9]*", "marker": marker},
                "checkpoints.checkpoints_path (nanotron)")
    if isinstance(p := _get(d, "output_dir"), str):
        return {"dir": p, "preset": "hf"}, "output_dir"
    return _torchtitan(d) or _nemo(d) or _lightning(d)


def from_configs(text: str, workdir: str | None, resolve: Callable[[str], str],
                 notes: list[str]) -> dict[str, Any] | None:
    """The checkpoint section from the first config file the script names that gives one, with a
    note naming the file and key; a missing or unreadable file is a note, never an error."""
    for f in config_files(text, workdir, resolve):
        try:
            found = _keys(_read(f))
        except (OSError, ValueError, yaml.YAMLError) as exc:  # tomllib's error is a ValueError
            notes.append(f"config file {f}: not read ({str(exc).splitlines()[0][:150]}): the "
                         "checkpoint directory it may name is not known")
            continue
        if found is None:
            continue
        ck, key = found
        if "${" in ck["dir"] or "$" in ck["dir"]:
            notes.append(f"checkpoint path in {f} ({key}) = {ck['dir']}: needs interpolation; "
                         "set checkpoint.dir by hand")
            continue
        if not ck["dir"].startswith("/"):
            ck["dir"] = str(PurePosixPath(workdir or ".") / ck["dir"])
        notes.append(f"checkpoint path found in {f}: {key} = {ck['dir']} (preset {ck['preset']})")
        return ck
    return None


def existing(ck: dict[str, Any], notes: list[str], workdir: str | None) -> None:
    """At import time: the checkpoint the first segment would resume from, when the directory
    holds one; a preset that reads none of what is there is changed to one that does (noted)."""
    from orchestrator.checkpoint import PRESETS, find_latest, preset_problem, recognises
    from orchestrator.settings import CheckpointCfg

    try:
        cfg = CheckpointCfg(**(ck | {"dir": Path(workdir or ".") / ck["dir"]}))
        if preset_problem(cfg):
            fits = [p for p in PRESETS if p != "glob" and recognises(p, cfg)]
            if not fits:
                notes.append(preset_problem(cfg))
                return
            notes.append(f"checkpoint.dir {ck['dir']} holds checkpoints preset {ck['preset']} "
                         f"does not recognise: preset {fits[0]} does, and is used")
            ck["preset"] = fits[0]
            ck.pop("glob", None), ck.pop("marker", None)
            cfg = CheckpointCfg(**(ck | {"dir": cfg.dir}))
        if latest := find_latest(cfg):
            notes.append(f"checkpoint.dir {ck['dir']} already holds checkpoints: the first segment "
                         f"resumes from {latest.path}")
    except (OSError, ValueError) as exc:
        notes.append(f"checkpoint.dir {ck['dir']}: not looked at ({str(exc)[:150]})")
