"""kill -9 of the controller at 20 distinct points of a real run (local backend), each followed by a
restart: the run completes, no segment is submitted twice, no blacklist entry is lost."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO

pytestmark = pytest.mark.integration

POINTS = [("after_intent", 1), ("after_intent", 2), ("after_submit", 1), ("after_submit", 2),
          ("after_record", 1), ("after_record", 2), ("poll", 1), ("poll", 3), ("poll", 8), ("poll", 14),
          ("state_write", 1), ("state_write", 2), ("state_write", 3), ("state_write", 6), ("state_write", 12),
          ("before_decide", 1), ("before_decide", 2), ("after_blacklist", 1), ("after_conclude", 1),
          ("after_conclude", 2)]


def config(tmp_path: Path) -> Path:
    cfg = yaml.safe_load((REPO / "configs" / "demo.yaml").read_text())
    cfg["run_dir"] = str(tmp_path / "run")
    cfg["checkpoint"]["dir"] = str(tmp_path / "run" / "checkpoints")
    cfg["workdir"] = str(REPO)
    cfg["command"] = [a for a in cfg["command"] if not a.startswith(("--iters", "--step-time", "--fault",
                                                                      "--ckpt-every"))]
    cfg["command"] += ["--iters=30", "--step-time=0.02", "--fault=ecc:node3:17", "--ckpt-every=5"]
    cfg["goal"]["target_iteration"] = 30
    cfg["watch"]["poll_interval_s"] = 0.3
    p = tmp_path / "crash.yaml"
    p.write_text(yaml.safe_dump(cfg))
    return p


def run(cfg: Path, failpoint: str | None) -> tuple[int, str]:
    """Run the CLI with its output in a file: jobs left behind by a killed controller keep its pipes open."""
    env = dict(os.environ)
    env.pop("ORCH_FAILPOINT", None)
    if failpoint:
        env["ORCH_FAILPOINT"] = failpoint
    log = cfg.parent / f"ctl-{failpoint or 'restart'}.log"
    with log.open("w") as fh:
        rc = subprocess.run([sys.executable, "-m", "orchestrator", "run", str(cfg)], stdout=fh, stderr=fh,
                            timeout=180, env=env, cwd=REPO).returncode
    return rc, log.read_text()[-3000:]


@pytest.mark.parametrize("point,n", POINTS, ids=[f"{p}-{n}" for p, n in POINTS])
def test_kill_and_restart(tmp_path: Path, point: str, n: int) -> None:
    cfg = config(tmp_path)
    rc, out = run(cfg, f"{point}:{n}")
    assert rc == 137, f"the failpoint {point}:{n} was not reached\n{out}"
    rc, out = run(cfg, None)
    assert rc == 0, out
    state = json.loads((tmp_path / "run" / "state.json").read_text())
    assert state["status"] == "done"
    assert [e["node"] for e in state["blacklist"]["entries"]] == ["node3"]
    jobs = json.loads((tmp_path / "run" / "local-backend" / "jobs.json").read_text())["jobs"]
    per_name = Counter(j["job_name"] for j in jobs.values())
    assert all(c == 1 for c in per_name.values()), per_name  # no segment was submitted twice
    assert len(per_name) == len(state["segments"])
    assert {s["job_id"] for s in state["segments"]} == set(jobs)
