"""How configuration problems are reported: one line per problem, naming the file and the field
path."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from orchestrator.redact import redacted, shown_url


def cut(value: object, limit: int = 80) -> str:
    """repr of a value, cut to `limit` characters (a 10 MB value is never echoed); the count is
    the value's own length (a string's, without repr's quotes)."""
    text = repr(value)
    size = len(value) if isinstance(value, str) else len(text)
    return text if len(text) <= limit else f"{text[:limit]}... ({size} characters)"


class ConfigError(Exception):
    """A configuration cannot be used. `problems` holds one line per problem."""

    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))
        self.problems = problems


# pydantic's words before a validator's own message
PYDANTIC_PREFIXES = ("Value error, ", "Assertion failed, ")


def error_message(err: Mapping[str, Any]) -> str:
    """What is wrong, in the orchestrator's words: the validator's own message without pydantic's
    prefix, a plain line for a missing or unknown field."""
    if err["type"] == "extra_forbidden":
        return ("unknown field (check the spelling; see the configuration reference in "
                "docs/CONFIGURATION.md)")
    if err["type"] == "missing":
        return "required field is missing"
    if err["type"] in ("model_type", "dict_type", "model_attributes_type"):
        return ("a section is needed here (its fields indented below it), not a single value: "
                "check the indentation")
    msg = str(err["msg"])
    for prefix in PYDANTIC_PREFIXES:
        msg = msg.removeprefix(prefix)
    return msg


def format_errors(path: Path, exc: ValidationError,
                  sources: dict[str, str] | None = None) -> list[str]:
    """One line per error, naming where the value came from: the file, `--set` or an ORCH_*
    variable."""
    lines = []
    for err in exc.errors():
        where = (sources or {}).get(str(err["loc"][0]) if err["loc"] else "", str(path))
        where = where if where in (str(path), "--set") else f"environment {where}"
        loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
        msg = error_message(err)
        got = _unsecret(err["loc"], err.get("input"))
        shown = "" if err["type"] in ("missing", "extra_forbidden") or isinstance(
                                          got, dict | bool) else f" (got {cut(got)})"
        lines.append(f"{where}: {loc}: {msg[:300]}{shown}")
    return lines


def _unsecret(loc: tuple[int | str, ...], got: object) -> object:
    """A URL setting's value (`notify.urls`, `exports.heartbeat_url`) as `shown_url` shows it, and
    any URL in a value given elsewhere (a URL pasted where a section or a number goes) as
    `redacted` shows it: pydantic's error carries the whole input, token and password included
    (issue 37)."""
    url_field = any(str(p).endswith(("url", "urls")) for p in loc)
    if isinstance(got, list | tuple):
        return [_unsecret(loc, u) for u in got]
    if url_field:
        return shown_url(got)
    return redacted(got) if isinstance(got, str) and "://" in got else got
