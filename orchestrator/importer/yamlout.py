"""The imported config as YAML: notes as comments at the top, the launch script as a literal
block."""

from __future__ import annotations

from typing import Any

import yaml


class _Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
    """YAML dumper (libyaml's emitter where PyYAML has it: a 20 MB script in seconds) that writes
    multi-line strings (the launch script) as literal blocks."""
    pass


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def dump_config(cfg: dict[str, Any], notes: list[str], source: str) -> str:
    head = "".join(f"# NOTE: {n}\n" for n in notes)
    return (f"# imported from {source} by orchestrator import-sbatch; check the notes and any "
            "CHANGE-ME value\n"
            + head + yaml.dump(cfg, Dumper=_Dumper, sort_keys=False, width=110, allow_unicode=True))
