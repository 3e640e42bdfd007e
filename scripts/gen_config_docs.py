#!/usr/bin/env python3
"""Generate docs/CONFIGURATION.md from the settings model (the single source of truth).
Usage: python -m scripts.gen_config_docs [--check]"""

from __future__ import annotations

import re
import sys
import typing
from pathlib import Path

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from orchestrator.settings import Settings

OUT = Path(__file__).resolve().parents[1] / "docs" / "CONFIGURATION.md"
HEAD = """# Configuration reference

Generated from `orchestrator/settings/` by `python -m scripts.gen_config_docs`; do not edit by hand.

One YAML file per run. Every key can be overridden by an environment variable `ORCH_<KEY>` with `__`
between levels (`ORCH_WATCH__POLL_INTERVAL_S=5`) and by `--set key.sub=value` on the command line
(command line > environment > file). Relative paths are relative to the config file's directory.
Unknown keys are errors. `orchestrator validate FILE` prints every problem with its field path.

| key | type | default | meaning |
|---|---|---|---|
"""


def _type(ann: object) -> str:
    text = str(ann).replace("typing.", "").replace("pathlib.", "")
    text = re.sub(r"\borchestrator(\.\w+)*\.(?=[A-Z])", "", text)  # orchestrator.settings.sections.X -> X
    text = text.replace("<class '", "").replace("'>", "").replace("NoneType", "null")
    return text.replace("|", "or")


def rows(model: type[BaseModel], prefix: str = "") -> list[str]:
    out = []
    for name, f in model.model_fields.items():
        if f.exclude:
            continue
        key = f"{prefix}{name}"
        ann = f.annotation
        sub = ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None
        if sub is not None:
            out += rows(sub, key + ".")
            continue
        if f.default is not PydanticUndefined:
            default = "null" if f.default is None else repr(f.default)
        elif f.default_factory is not None:
            default = repr(f.default_factory())  # type: ignore[call-arg]
        else:
            default = "**required**"
        desc = (f.description or "").replace("|", "\\|")
        out.append(f"| `{key}` | {_type(ann)} | {default} | {desc} |")
    return out


def render() -> str:
    typing.get_type_hints(Settings)
    return HEAD + "\n".join(rows(Settings)) + "\n"


def main() -> int:
    text = render()
    if "--check" in sys.argv:
        return 0 if OUT.exists() and OUT.read_text() == text else 1
    OUT.write_text(text)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
