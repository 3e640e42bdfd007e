"""Shared by every command: the typer app, consoles, one-line errors (exit 2), loading a config,
building a backend, finding a run's state from a config file or a run directory."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from logging.handlers import RotatingFileHandler
from pathlib import Path
from typing import Annotated, Any

import typer
from loguru import logger
from rich.console import Console

from orchestrator.backends.base import Backend
from orchestrator.clock import Clock, RealClock
from orchestrator.files import append_private, private_dir
from orchestrator.rundir import foreign_entries
from orchestrator.settings import ConfigError, Settings, check_paths, load_settings, parse_overrides
from orchestrator.state import RunState, StateError, StateStore

app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                  help="Keep long multi-node training on Slurm moving: diagnose, blacklist, "
                  "resume.")
# no emoji codes: text such as `H:M:S` or `:cross_mark:` in a note, a log line or a path is printed
# as it is
# COLUMNS, when set, is the width (a pipe's default stays 200: drain lines whole)
out = Console(width=None if sys.stdout.isatty() or os.environ.get("COLUMNS", "").isdigit() else 200,
              emoji=False)
err = Console(stderr=True, soft_wrap=True, emoji=False)

EXIT_CONFIG = 2
# what the user reads on the terminal; controller.log adds milliseconds and the record's extras
TERMINAL_FORMAT = "{time:YYYY-MM-DD HH:mm:ss} {level: <7} {message}"


@dataclass(frozen=True)
class Wiring:
    """What the commands are built from besides their arguments, set from Python only (no option
    reaches it): the clock `run`, `cancel`, `status --watch` and `logs -f` wait by. A test passes
    its own as the context object, `CliRunner().invoke(app, argv, obj=Wiring(clock=...))`."""
    clock: Callable[[], Clock] = RealClock


def wiring(ctx: typer.Context) -> Wiring:
    return ctx.obj if isinstance(ctx.obj, Wiring) else Wiring()


def _version(value: bool) -> None:
    if value:
        from orchestrator import __version__

        print(f"orchestrator {__version__}")
        raise typer.Exit(0)


@app.callback()
def _main(version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                                help="Print the version and exit.")]
          = False) -> None:
    """Keep long multi-node training on Slurm moving: diagnose, blacklist, resume."""
    # every command's warnings in the one terminal format, not loguru's default (its module,
    # function and line are for controller.log readers, not for the user) (issue 37)
    with contextlib.suppress(ValueError):
        logger.remove(0)  # loguru's own sink, there until the first command replaces it
        logger.add(_to_stderr, level="INFO", format=TERMINAL_FORMAT)


def _to_stderr(message: str) -> None:
    """The terminal sink: the sys.stderr of the moment (a test's runner swaps it)."""
    sys.stderr.write(message)


def fail(lines: list[str], code: int = EXIT_CONFIG) -> typer.Exit:
    from orchestrator.views.text import clean

    for line in lines:
        err.print(f"error: {clean(line)}", markup=False, highlight=False)
    return typer.Exit(code)


class _LogFile(RotatingFileHandler):
    """controller.log, rotated at 20 MB with 5 kept. A write that fails (a full disk) is said once
    on stderr and the controller goes on; loguru's own file sink printed a traceback per record and
    one more at exit."""

    def __init__(self, path: Path):
        super().__init__(path, maxBytes=20 << 20, backupCount=5, encoding="utf-8", delay=False)
        self.failed = False

    # created 0600, the rotated ones too (issue 37): it holds hosts, paths and the job's messages
    def _open(self) -> Any:
        return append_private(Path(self.baseFilename))

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 - logging's name
        if not self.failed:
            self.failed = True
            print(f"warning: {self.baseFilename}: cannot be written ({sys.exc_info()[1]}); the "
                  "controller goes on logging to the terminal only", file=sys.stderr)

    def flush(self) -> None:
        with contextlib.suppress(OSError):
            super().flush()

    # at exit, a buffer the full disk cannot take is dropped, not a traceback
    def close(self) -> None:
        with contextlib.suppress(OSError):
            super().close()


def setup_logging(run_dir: Path | None, verbose: bool) -> None:
    logger.remove()
    logger.add(_to_stderr, level="DEBUG" if verbose else "INFO", format=TERMINAL_FORMAT)
    if run_dir is not None:
        try:
            private_dir(run_dir)
            logger.add(_LogFile(run_dir / "controller.log"), level="DEBUG",
                       format="{time:YYYY-MM-DDTHH:mm:ss.SSSZ} {level} {message} {extra}")
        except OSError as exc:  # a read-only or full run directory: one line, not a traceback
            raise fail([f"{run_dir}: cannot write the controller's log there "
                        f"({exc.strerror or exc})"], 1) from None


def load(config: Path, overrides: list[str]) -> Settings:
    try:
        s = load_settings(config, parse_overrides(overrides))
    except ConfigError as exc:
        raise fail(exc.problems) from None
    problems = check_paths(s)
    if problems:
        raise fail(problems)
    return s


def build_backend(s: Settings, clock: Clock) -> Backend:
    if s.backend.kind == "local":
        from orchestrator.backends.local import LocalBackend

        return LocalBackend(s.backend.local.node_names(), s.run_dir / "local-backend", clock)
    from orchestrator.backends.slurm import SlurmBackend

    return SlurmBackend(s.backend.slurm, clock, s.run_dir)


SetOpt = Annotated[list[str], typer.Option("--set", help="Override a setting: --set "
                                                         "watch.poll_interval_s=5")]


def _state_for(target: Path) -> tuple[StateStore, str]:
    if target.is_dir():
        return StateStore(target), str(target)
    s = load(target, [])
    return StateStore(s.run_dir), str(s.run_dir)


def require_run_dir(run_dir: Path, where: str, own: tuple[Path, ...] = ()) -> None:
    """Refuse (exit 2) a directory that holds other things than a run: nothing is chmodded or locked
    in it. `own`: paths of the run's config that may live inside it (the checkpoint directory of the
    demo layout)."""
    mine = {q.relative_to(run_dir).parts[0] for q in own if q != run_dir
            and q.is_relative_to(run_dir)}
    foreign = [n for n in foreign_entries(run_dir) if n not in mine]
    if foreign:
        shown = ", ".join(repr(n) for n in foreign[:3]) + (", ..." if len(foreign) > 3 else "")
        raise fail([f"{where}: not a run directory (no state.json, and it holds {shown}); "
                    "use a new or empty directory for run_dir"])


def loaded(store: StateStore, where: str, hint: str = "") -> RunState:
    """The run's state, or a one-line error: unreadable (exit 1) or none yet (exit 1, with
    `hint`)."""
    try:
        state = store.load()
    except StateError as exc:
        raise fail([str(exc)], 1) from None
    if state is None:
        raise fail([f"{where}: no run state yet{hint}"], 1)
    return state
