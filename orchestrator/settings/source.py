"""Where a config's values come from, checked before the model sees them: the YAML file (no
duplicate keys, bounded size and depth, so a YAML bomb or 5000-deep nesting is one clear error),
`--set` overrides (a key cannot be both a value and a section) and ORCH_* environment variables
(errors name the variable, a misspelled one is reported)."""

from __future__ import annotations

import difflib
import os
import re
from pathlib import Path
from typing import Any

import yaml

from orchestrator.files import read_regular
from orchestrator.redact import redacted
from orchestrator.settings.errors import ConfigError, cut

MAX_NODES_IN_CONFIG = 100_000  # values after expanding YAML aliases
MAX_DEPTH = 32
# ORCH_* variables that are not settings: set by the orchestrator for the training, or by its tests
# and scripts
NOT_SETTINGS = ("ORCH_RESUME", "ORCH_SEGMENT", "ORCH_RUN_DIR", "ORCH_FAILPOINT", "ORCH_FAKE_",
                "ORCH_NODE",
                "ORCH_NO_VENV", "ORCH_TESTBED", "ORCH_REQUIRE", "ORCH_UPDATE_GOLDEN", "ORCH_RANK",
                "ORCH_LOCAL",
                "ORCH_WORLD", "ORCH_NNODES", "ORCH_JOB", "ORCH_EXTENSIONS", "ORCH_DIST",
                "ORCH_CUDA", "ORCH_USE_",
                "ORCH_NCCL", "ORCH_PYTHON", "ORCH_CONFIG_DIR", "ORCH_NVML", "ORCH_BATCH_HOST",
                "ORCH_CHECKPOINT_INTERVAL", "ORCH_CHECKPOINT_DIR", "ORCH_SETUP_ENV", "ORCH_CRASH_",
                "ORCH_SERIAL_TESTS", "ORCH_TEST_")


class _UniqueKeyLoader(yaml.SafeLoader):
    """safe_load that refuses a key given twice in one mapping (the later one would silently
    win)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, str | int | float | bool) and key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {str(key)[:80]!r}", key_node.start_mark)
            if isinstance(key, str | int | float | bool):
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _no_base_60(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
    """YAML 1.1 reads `30:00` as 1800 (base 60): a Slurm time in a config would become hours of
    minutes. Such a scalar stays text, as in YAML 1.2; the setting that takes it reads it."""
    text = loader.construct_scalar(node)  # type: ignore[arg-type]
    if isinstance(text, str) and ":" in text:
        return text
    if node.tag.endswith(":int"):
        return yaml.SafeLoader.construct_yaml_int(loader, node)  # type: ignore[arg-type]
    return yaml.SafeLoader.construct_yaml_float(loader, node)  # type: ignore[arg-type]


_UniqueKeyLoader.add_constructor("tag:yaml.org,2002:int", _no_base_60)
_UniqueKeyLoader.add_constructor("tag:yaml.org,2002:float", _no_base_60)


def check_size(data: object, where: str) -> None:
    """Refuse configs too large or deep once aliases are expanded (what validation would walk)."""
    budget = MAX_NODES_IN_CONFIG
    stack: list[tuple[object, int]] = [(data, 0)]
    while stack:
        node, depth = stack.pop()
        budget -= 1
        if budget < 0 or depth > MAX_DEPTH:
            what = (f"more than {MAX_NODES_IN_CONFIG} values" if budget < 0
                    else f"nested deeper than {MAX_DEPTH}")
            raise ConfigError([f"{where}: the configuration has {what} (YAML aliases expanded); "
                               "refused"])
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node)


# an imported config holds its batch script: 20 MB scripts exist, 64 MiB do not
MAX_CONFIG_BYTES = 64 << 20


def read_yaml(path: Path) -> dict[str, Any]:
    try:
        # a FIFO or /dev/zero: refused, not waited on
        raw = read_regular(path, MAX_CONFIG_BYTES + 1, follow=True)
        if len(raw) > MAX_CONFIG_BYTES:
            raise ConfigError([f"{path}: over {MAX_CONFIG_BYTES >> 20} MiB: not a run config"])
        text = raw.decode("utf-8")
    except FileNotFoundError:
        raise ConfigError([f"{path}: file not found"]) from None
    except OSError as exc:
        raise ConfigError([f"{path}: cannot read: {exc.strerror or exc}"]) from None
    except UnicodeDecodeError as exc:
        raise ConfigError([
            f"{path}: cannot read: not UTF-8 text ({exc.reason} at byte {exc.start})"]) from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError([f"{path}: {where}YAML syntax error: {problem}"]) from None
    except RecursionError:
        raise ConfigError([f"{path}: nested too deeply (at most {MAX_DEPTH} levels)"]) from None
    # e.g. an integer of more than 4300 digits: say where, not Python's advice
    except ValueError as exc:
        long = re.search(r"\d{4000,}", text)
        if long:
            line = text.count("\n", 0, long.start()) + 1
            key = re.search(r"([\w.-]+)\s*:\s*[-+]?$",
                            text[text.rfind("\n", 0, long.start()) + 1:long.start()])
            raise ConfigError([f"{path}: line {line}: {key.group(1) + ': ' if key else ''}a number "
                               f"of {long.end() - long.start()} digits; no setting takes one"]
                              ) from None
        raise ConfigError([f"{path}: a value cannot be read: {str(exc)[:200]}"]) from None
    if data is None:
        raise ConfigError([f"{path}: the file is empty"])
    if not isinstance(data, dict):
        raise ConfigError([f"{path}: the top level must be a mapping of settings, not "
                           f"{type(data).__name__}"])
    check_size(data, str(path))
    return data


def _scalar(raw: str) -> Any:
    try:
        value = (yaml.load(raw, Loader=_UniqueKeyLoader) if raw
                 else "")  # noqa: S506 - a SafeLoader subclass
    except (yaml.YAMLError, ValueError, RecursionError):
        return raw
    check_size(value, f"--set {redacted(raw)[:40]!r}")
    return value


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """Turn ['policy.max_segments=5', ...] into a nested dict; values are parsed as YAML scalars."""
    out: dict[str, Any] = {}
    for item in items:
        shown = cut(redacted(item))  # a URL's token is never echoed
        if "=" not in item:
            raise ConfigError([f"--set {shown}: expected KEY=VALUE, e.g. "
                               "watch.poll_interval_s=5"])
        key, raw = item.split("=", 1)
        node = out
        parts = key.strip().split(".")
        for i, part in enumerate(parts[:-1]):
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError([f"--set {shown}: {'.'.join(parts[:i + 1])} was given a "
                                   "value by an earlier --set; it cannot also be a section"])
        if isinstance(node.get(parts[-1]), dict):
            raise ConfigError([f"--set {shown}: {key.strip()} is a section with keys set by an "
                               "earlier --set"])
        node[parts[-1]] = _scalar(raw)
    return out


def env_sources(fields: list[str]) -> dict[str, str]:
    """Top-level setting -> the ORCH_* variable that gives it (pydantic-settings ignores the
    case)."""
    out = {}
    for var in os.environ:
        top = var[5:].lower().split("__")[0] if var.upper().startswith("ORCH_") else ""
        if top in fields:
            out[top] = var
    return out


def env_problems(fields: list[str]) -> tuple[list[str], list[str]]:
    """(errors, warnings) for ORCH_* variables that are no setting. One that was clearly meant as
    one (a section `ORCH_X__Y`, a name close to a setting, a setting's name run into its field) is
    an error: ignored, it would silently leave the value it meant to set. Any other is a warning
    (perhaps a variable of your own)."""
    errors, warnings = [], []
    for var in sorted(os.environ):
        up = var.upper()
        if not up.startswith("ORCH_") or up.startswith(NOT_SETTINGS):
            continue
        top = up[5:].lower().split("__")[0]
        if top in fields:
            continue
        near = difflib.get_close_matches(top, fields, n=1, cutoff=0.6)
        run_in = next((f for f in fields if top.startswith(f + "_")), None)
        if near or run_in:
            rest = up[5:].split("__", 1)[1] if "__" in up else ""
            meant = (f"ORCH_{near[0].upper()}" + (f"__{rest}" if rest else "") if near
                     else f"ORCH_{(run_in or '').upper()}__{up[6 + len(run_in or ''):]}")
            errors.append(f"environment: {var} is not a setting (did you mean {meant}?); unset it "
                          "or correct it")
        elif "__" in up:
            errors.append(f"environment: {var} is not a setting: there is no section {top!r}; "
                          "unset it or correct it")
        else:
            warnings.append(f"environment: {var} is not a setting; it is ignored")
    return errors, warnings
