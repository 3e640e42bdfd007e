"""What a run directory holds, and the test that a directory is not some other directory (a home,
/tmp)."""

from __future__ import annotations

from pathlib import Path

from orchestrator.state import BACKUP_FILE, EVIDENCE_DIR, SET_ASIDE, STATE_FILE

RUN_DIR_ENTRIES = frozenset({STATE_FILE, BACKUP_FILE, "segments", "requests", "controller.lock",
                             "blacklist-edit.lock",
                             "controller.log", "stop-request", "local-backend", "report",
                             "metrics.prom", "events.jsonl", EVIDENCE_DIR})


def foreign_entries(run_dir: Path) -> list[str]:
    """Entries of an existing directory that a run does not create: a shared directory (a home,
    /tmp) is not a run directory, and no command of the orchestrator chmods it or leaves a lock in
    it. Empty when `run_dir` is new, empty, holds a state.json, or holds only what a run writes."""
    try:
        names = [p.name for p in run_dir.iterdir()]
    except FileNotFoundError:
        return []
    except NotADirectoryError:
        return [run_dir.name]
    if STATE_FILE in names:
        return []
    own = ("controller.log.", f".{STATE_FILE}.", f".{BACKUP_FILE}.", SET_ASIDE, "metrics.prom.")
    return sorted(n for n in names if n not in RUN_DIR_ENTRIES and not n.startswith(own))
