"""A blacklist file several runs on one cluster share. Writers take an exclusive flock, re-read,
merge and replace the file atomically, so concurrent writers never lose an entry; readers merge it
into their own."""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

from pydantic import ValidationError

from orchestrator.blacklist import Blacklist
from orchestrator.files import atomic_write, read_regular
from orchestrator.model import BlacklistEntry


class SharedBlacklist:
    """Owns the blacklist file several runs share: locked, re-read and merged on every write."""
    def __init__(self, path: Path):
        self.path = Path(path)
        self.lock_path = self.path.with_name(self.path.name + ".lock")

    def _read(self) -> list[BlacklistEntry]:
        try:
            raw = json.loads(read_regular(self.path, 1 << 26).decode("utf-8"))
        except (FileNotFoundError, json.JSONDecodeError):
            return []
        except (OSError, UnicodeDecodeError, RecursionError) as exc:
            raise ValueError(
                f"{self.path}: unreadable shared blacklist: {str(exc)[:120]}") from None
        if not isinstance(raw, dict) or not isinstance(raw.get("entries", []), list):
            raise ValueError(f"{self.path}: not a shared blacklist (expected {{\"entries\": "
                             f"[...]}})")
        try:
            return [BlacklistEntry.model_validate(e) for e in raw.get("entries", [])]
        except ValidationError as exc:
            raise ValueError(
                f"{self.path}: invalid entry: {str(exc).splitlines()[0][:120]}") from None

    def publish(self, entries: list[BlacklistEntry]) -> None:
        """Add or refresh entries (per node, the newest wins)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            merged = {e.node: e for e in self._read()}
            for e in entries:
                old = merged.get(e.node)
                if old is None or e.since >= old.since:
                    merged[e.node] = e
            data = {"entries": [e.model_dump(mode="json")
                                for e in sorted(merged.values(), key=lambda x: x.node)]}
            atomic_write(self.path, json.dumps(data, indent=1))
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def entries(self) -> list[BlacklistEntry]:
        """Every run's newest entry per node, as the file holds them (none if there is no file)."""
        return self._read()

    def merge_into(self, bl: Blacklist) -> Blacklist:
        """The run's own entries plus the shared ones it does not have (or has older)."""
        own = {e.node: e for e in bl.entries}
        for e in self._read():
            mine = own.get(e.node)
            if mine is None or e.since > mine.since:
                own[e.node] = e
        return Blacklist(entries=tuple(own.values()))
