"""The command line: argv -> settings -> objects -> the loop. The only place that sets up
logging."""

import os
import sys

# registers the commands
from orchestrator.cli import (  # noqa: F401
    blacklist,
    browse,
    diagnosing,
    inspect,
    nodes,
    resuming,
    run,
    stopping,
)
from orchestrator.cli.common import app

COMPLETE_VAR = "_ORCHESTRATOR_COMPLETE"
SHELLS = ("bash", "zsh", "fish", "powershell", "pwsh")


def _click_spelling() -> None:
    """Shell completion answers Click's documented spelling (`bash_source`, `zsh_complete`) as
    well as Typer's own (`source_bash`)."""
    shell, _, instruction = os.environ.get(COMPLETE_VAR, "").partition("_")
    if shell in SHELLS and instruction in ("source", "complete"):
        os.environ[COMPLETE_VAR] = f"{instruction}_{shell}"


def main() -> None:
    _click_spelling()
    try:
        # the same name and variable whether it runs as `orchestrator` or `python -m
        # orchestrator`: a completion script completes the command `orchestrator`
        app(prog_name="orchestrator", complete_var=COMPLETE_VAR)
    # what no command expected (a path the system refuses, a full disk): one line
    except OSError as exc:
        name = str(exc.filename or "")
        where = (f" ({name[:100]}{'...' if len(name) > 100 else ''}, {len(name)} characters)"
                 if name else "")
        print(f"error: {exc.strerror or exc}{where}", file=sys.stderr)
        raise SystemExit(1) from None


__all__ = ["app", "main"]
