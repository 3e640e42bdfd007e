"""How configuration problems are reported: one line per problem, naming the file and the field path."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError


class ConfigError(Exception):
    """A configuration cannot be used. `problems` holds one line per problem."""

    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))
        self.problems = problems


def format_errors(path: Path, exc: ValidationError) -> list[str]:
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
