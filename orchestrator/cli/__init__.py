"""The command line: argv -> settings -> objects -> the loop. The only place that sets up
logging."""

import sys

# registers the commands
from orchestrator.cli import blacklist, browse, inspect, resuming, run, stopping  # noqa: F401
from orchestrator.cli.common import app


def main() -> None:
    try:
        app()
    # what no command expected (a path the system refuses, a full disk): one line
    except OSError as exc:
        name = str(exc.filename or "")
        where = (f" ({name[:100]}{'...' if len(name) > 100 else ''}, {len(name)} characters)"
                 if name else "")
        print(f"error: {exc.strerror or exc}{where}", file=sys.stderr)
        raise SystemExit(1) from None


__all__ = ["app", "main"]
