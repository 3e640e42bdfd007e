"""Tests write only under tmp dirs (issue 37): the checkout's `git status` before the test session and
after it must be the same, caches aside. Wired into tests/conftest.py's session hooks."""

from __future__ import annotations

import subprocess
from pathlib import Path

# what running the tools leaves behind by design; anything else new in the checkout is a test's doing
CACHES = frozenset({"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".hypothesis",
                    ".import_linter_cache"})


def snapshot(root: Path) -> frozenset[str] | None:
    """`git status --porcelain --ignored` of the checkout at `root`, plus the names at its top (git
    shows no empty directory, such as a `mkdir -p out` in the cwd), caches left out; None when `root` is
    not a git checkout (an unpacked sdist) or git is missing."""
    try:
        res = subprocess.run(["git", "-C", str(root), "status", "--porcelain=v1", "-z", "--ignored"],
                             capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if res.returncode != 0:
        return None
    entries = {e for e in res.stdout.split("\0") if len(e) > 3 and not CACHES.intersection(Path(e[3:]).parts)}
    return frozenset(entries | {f"top {p.name}" for p in root.iterdir() if p.name not in CACHES})


def changes(before: frozenset[str] | None, after: frozenset[str] | None) -> list[str]:
    """What the session changed in the checkout, one `git status` line each, sorted."""
    if before is None or after is None:
        return []
    return sorted(after.symmetric_difference(before))
