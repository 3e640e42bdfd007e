"""A blacklist file several runs on one cluster share. Writers take an exclusive flock, re-read,
merge and replace the file atomically, so concurrent writers never lose an entry; readers merge it
into their own. The file keeps each run's newest entry per node, so a node's reputation adds up
across runs: one strike in each of two runs is two strikes (a lemon node, issue 40)."""

from __future__ import annotations

import fcntl
import json
import os
from datetime import datetime
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
        """Add or refresh entries (per node and run, the newest wins)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            merged = {_key(e): e for e in self._read()}
            for e in entries:
                old = merged.get(_key(e))
                if old is None or e.since >= old.since:
                    merged[_key(e)] = e
            data = {"entries": [e.model_dump(mode="json")
                                for e in sorted(merged.values(), key=lambda x: (x.node, x.run))]}
            atomic_write(self.path, json.dumps(data, indent=1))
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def entries(self) -> list[BlacklistEntry]:
        """Every run's newest entry per node, as the file holds them (none if there is no file)."""
        return self._read()

    def merge_into(self, bl: Blacklist, run: tuple[str, datetime] | None = None,
                   now: datetime | None = None) -> Blacklist:
        """The run's own entries with the other runs' added up per node: a hard entry of any run
        excludes; the strikes of every run still in force add up (`run`: the run's name and
        start; its own entries in the file are its ledger's, counted once)."""
        own = {e.node: e for e in bl.entries}
        others: dict[str, list[BlacklistEntry]] = {}
        for e in self._read():
            if run is None or (e.run, e.run_created) != run:
                others.setdefault(e.node, []).append(e)
        for node, theirs in others.items():
            own[node] = _combined([own[node], *theirs] if node in own else theirs, now)
        return Blacklist(entries=tuple(own.values()))


def _key(e: BlacklistEntry) -> tuple[str, str, str]:
    return e.node, e.run, e.run_created.isoformat() if e.run_created else ""


def _combined(entries: list[BlacklistEntry], now: datetime | None) -> BlacklistEntry:
    """One node's entries of several runs as one: the newest (a hard one first) with the strikes
    of all that are still in force, lasting as long as the soonest of them (then they are fewer)."""
    live = [e for e in entries if now is None or e.expires > now] or entries
    top = max(live, key=lambda e: (e.hard, e.since))
    if len(live) == 1:
        return top
    runs = sorted({e.run or "this run" for e in live if e is not top})
    return top.model_copy(update={
        "strikes": sum(e.strikes for e in live), "hard": any(e.hard for e in live),
        "expires": top.expires if top.hard else min(e.expires for e in live),
        "evidence": f"{top.evidence} (also struck in {', '.join(runs)[:200]})"[:1000]})
