from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.tree_guard import changes, snapshot

REPO = Path(__file__).resolve().parents[1]
_TREE_BEFORE = pytest.StashKey[frozenset[str] | None]()


def pytest_sessionstart(session: pytest.Session) -> None:
    session.stash[_TREE_BEFORE] = snapshot(REPO)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Tests write only under tmp dirs: a session that changed the checkout fails (issue 37)."""
    changed = changes(session.stash.get(_TREE_BEFORE, None), snapshot(REPO))
    if not changed:
        return
    lines = "\n".join(f"  {c}" for c in changed[:20])
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    message = (f"the test session changed the source tree {REPO} (tests write only under tmp dirs):\n"
               f"{lines}\n")
    if reporter is not None:
        reporter.write_line(message, red=True)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


def base_config(tmp: Path, **over: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "name": "t",
        "run_dir": str(tmp / "run"),
        "command": ["python", "train.py", "--resume={checkpoint}"],
        "resources": {"nodes": 3, "time_limit_min": 60},
        "checkpoint": {"dir": str(tmp / "ckpt"), "preset": "megatron"},
        "goal": {"target_iteration": 50},
        "watch": {"poll_interval_s": 1, "stall_timeout_s": 30, "startup_timeout_s": 60, "cascade_grace_s": 2},
        "backend": {"kind": "local", "local": {"nodes": 4}},
    }
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(cfg.get(k), dict):
            cfg[k] = {**cfg[k], **v}
        else:
            cfg[k] = v
    return cfg


def write_config(tmp: Path, cfg: dict[str, Any], name: str = "run.yaml") -> Path:
    p = tmp / name
    p.write_text(yaml.safe_dump(cfg))
    return p


@pytest.fixture
def cfg_path(tmp_path: Path) -> Path:
    return write_config(tmp_path, base_config(tmp_path))


@pytest.fixture
def fake_slurm_bin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """sbatch/srun/sinfo stand-ins that record exactly what they were given."""
    bindir, rec = tmp_path / "bin", tmp_path / "rec"
    bindir.mkdir()
    rec.mkdir()
    scripts = {
        "sbatch": f'#!/bin/sh\ncp "$1" {rec}/script.sh\nprintf "%s\\n" "$@" > {rec}/sbatch.argv\n'
                  'echo "Submitted batch job 4242"\n',
        "srun": f"#!/usr/bin/env python3\nimport json, sys\njson.dump(sys.argv[1:], open('{rec}/srun.json', 'w'))\n",
        "sinfo": "#!/bin/sh\nprintf 'node1\\nnode2\\nnode3\\nnode4\\n'\n",
    }
    for name, text in scripts.items():
        (bindir / name).write_text(text)
        (bindir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    return rec
