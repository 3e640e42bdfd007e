"""import-sbatch's reading of the script and its output path, and the translation with its
refusals turned into one error line each."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orchestrator.cli.common import fail


def check_output(output: Path | None) -> None:
    """`-o PATH` names a regular file or nothing yet, or a one-line error."""
    from orchestrator.files import require_regular_or_absent

    if output is not None and output.is_dir():
        raise fail([f"-o {output}: is a directory; give the config file's path"])
    try:
        require_regular_or_absent(output) if output is not None else None
    except OSError as exc:
        raise fail([f"-o {output}: {exc.strerror}; give a regular file's path"]) from None


def translate(script: Path, args: tuple[str, ...],
              array_task: int | None) -> tuple[dict[str, Any], list[str]]:
    """(config, notes) of the script, or one error line: a refusal names the script's line."""
    from orchestrator.importer import Refused, import_sbatch

    text = script_text(script)
    if "#SBATCH" not in text and "srun" not in text:
        raise fail([f"{script}: no #SBATCH line and no srun line: is this a Slurm batch script?"])
    try:
        return import_sbatch(text, script.stem, str(Path.cwd()), args, array_task)
    except Refused as exc:  # the script cannot run as sbatch runs it: said, nothing written
        raise fail([f"{exc.where(str(script))}: {exc}"]) from None
    # a script we cannot read is the user's input, not our crash
    except Exception as exc:  # noqa: BLE001
        raise fail([f"{script}: cannot translate this script: {type(exc).__name__}: "
                    f"{str(exc)[:200]}"]) from None


MAX_SCRIPT_BYTES = 32 << 20


def script_text(script: Path) -> str:
    from orchestrator.files import read_regular

    try:  # a FIFO or /dev/zero is refused, not waited on
        raw = read_regular(script, MAX_SCRIPT_BYTES + 1, follow=True)
    except OSError as exc:
        raise fail([f"{script}: cannot read: {exc.strerror or exc}"]) from None
    if len(raw) > MAX_SCRIPT_BYTES:
        raise fail([f"{script}: over {MAX_SCRIPT_BYTES >> 20} MiB: not a batch script"])
    return raw.decode("utf-8", errors="replace")
