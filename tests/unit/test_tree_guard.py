"""Issue 37: tests write only under tmp dirs. A test session that leaves anything new or changed in the
checkout (caches aside) fails; outside a git checkout the check is skipped."""

from __future__ import annotations

import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests import conftest
from tests.tree_guard import changes, snapshot


def _repo(tmp: Path) -> Path:
    root = tmp / "checkout"
    root.mkdir()
    for argv in (["init", "-q"], ["add", "-A"]):
        subprocess.run(["git", "-C", str(root), *argv], check=True, capture_output=True, timeout=30)
    (root / "kept.py").write_text("x = 1\n")
    (root / "pkg").mkdir()
    (root / "pkg" / "mod.py").write_text("y = 2\n")
    (root / ".gitignore").write_text("runs/\n")
    subprocess.run(["git", "-C", str(root), "add", "-A"], check=True, capture_output=True, timeout=30)
    return root


@pytest.mark.parametrize("write", ["ds_config.1234.json", "out/", "runs/demo/state.json", "kept.py", "sub/a.txt"])
def test_anything_a_session_writes_into_the_checkout_is_named(tmp_path: Path, write: str) -> None:
    root = _repo(tmp_path)
    before = snapshot(root)
    target = root / write
    if write.endswith("/"):
        target.mkdir()  # an empty directory: git status alone does not show it
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("changed\n")
    found = changes(before, snapshot(root))
    assert found and write.split("/")[0] in " ".join(found)


def test_caches_are_not_a_change_and_no_checkout_is_no_check(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    before = snapshot(root)
    for cache in ("__pycache__/m.pyc", ".pytest_cache/v", ".hypothesis/x", "pkg/__pycache__/n.pyc"):
        (root / cache).parent.mkdir(parents=True, exist_ok=True)
        (root / cache).write_text("")
    assert changes(before, snapshot(root)) == []
    plain = tmp_path / "unpacked"
    plain.mkdir()
    assert snapshot(plain) is None
    assert changes(None, frozenset({"?? new"})) == []


def test_the_session_hooks_fail_a_session_that_changed_the_tree(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    root = _repo(tmp_path)
    monkeypatch.setattr(conftest, "REPO", root)
    lines: list[str] = []
    reporter = SimpleNamespace(write_line=lambda text, **_: lines.append(text))
    session: Any = SimpleNamespace(stash=pytest.Stash(), exitstatus=0, config=SimpleNamespace(
        pluginmanager=SimpleNamespace(get_plugin=lambda name: reporter)))
    conftest.pytest_sessionstart(session)
    conftest.pytest_sessionfinish(session, 0)
    assert session.exitstatus == 0 and lines == []
    (root / "ds_config.7.json").write_text("{}")
    conftest.pytest_sessionfinish(session, 0)
    assert session.exitstatus == pytest.ExitCode.TESTS_FAILED
    assert "ds_config.7.json" in lines[0] and "tests write only under tmp dirs" in lines[0]
