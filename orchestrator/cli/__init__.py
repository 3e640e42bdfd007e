"""The command line: argv -> settings -> objects -> the loop. The only place that sets up logging."""

from orchestrator.cli import blacklist, inspect, run  # noqa: F401 - registers the commands
from orchestrator.cli.common import app


def main() -> None:
    app()


__all__ = ["app", "main"]
