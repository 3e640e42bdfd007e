"""Issue 13's bar on the real test cluster: the real public batch scripts of tests/data/sbatch/real/, imported
by `orchestrator import-sbatch`, run by `orchestrator run` through Slurm on 2 nodes with stub launchers on PATH
(python, torchrun, deepspeed, accelerate print their argv and rank environment, then progress lines): the
training entry point starts with its original arguments on every node. At least 12 must; each is reported."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO
from tests.sbatch_launch import (
    EXPECTED,
    REAL,
    calls,
    fill_env,
    launches,
    ran_once_on_the_batch_host,
    starts_entry,
    write_stubs,
)
from tests.slurm.conftest import slurm_env

pytestmark = pytest.mark.slurm
NODES = 2


def _config(tmp: Path, name: str) -> Path:
    work = tmp / "work"
    work.mkdir(parents=True)
    bindir = tmp / "bin"
    write_stubs(bindir, work)
    res = subprocess.run([sys.executable, "-m", "orchestrator", "import-sbatch", str(REAL / name),
                          "-o", str(tmp / "imported.yaml")], capture_output=True, text=True, cwd=work, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(REPO)},
                         check=True)
    notes = [ln[len("note: "):] for ln in res.stderr.splitlines() if ln.startswith("note: ")]
    cfg: dict[str, Any] = yaml.safe_load((tmp / "imported.yaml").read_text())
    env = fill_env(notes, tmp, (REAL / name).read_text())
    env.update({"PATH": f"{bindir}:{os.environ['PATH']}", "SLURM_GPUS_PER_NODE": "8"})
    r = cfg["resources"]
    cfg["resources"] = {"nodes": NODES, "tasks_per_node": min(r.get("tasks_per_node", 1), 2), "time_limit_min": 5}
    cfg.update(name=f"imp-{Path(name).stem[:40]}", run_dir=str(tmp / "run"), env=env,
               checkpoint={"dir": str(tmp / "ckpt"), "preset": "megatron"},
               policy={"max_segments": 1, "max_no_progress_segments": 1},
               watch={"poll_interval_s": 1, "stall_timeout_s": 60, "startup_timeout_s": 120, "cascade_grace_s": 2},
               backend={"kind": "slurm", "slurm": {"command_timeout_s": 20, **cfg["backend"].get("slurm", {})}})
    env["ORCH_TEST_CALLS"] = str(tmp / "calls.jsonl")
    out = tmp / "run.yaml"
    out.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return out


# srun of the batch script (submitit's, starting the agents): records its options, and drops the container ones
# (the test cluster has no pyxis) before the real srun runs
SRUN_WRAPPER = """#!/bin/bash
printf '%s\\n' "$*" >> "$ORCH_TEST_SRUN_LOG"
args=()
for a in "$@"; do case "$a" in --container-*|--no-container-*) ;; *) args+=("$a") ;; esac; done
exec /usr/bin/srun "${args[@]}"
"""


def _controller_env(tmp: Path) -> dict[str, str]:
    wrap = tmp / "batch-bin"
    wrap.mkdir()
    (wrap / "srun").write_text(SRUN_WRAPPER)
    (wrap / "srun").chmod(0o755)
    env = slurm_env()
    return {**env, "PATH": f"{wrap}:{env.get('PATH', os.environ['PATH'])}", "ORCH_TEST_SRUN_LOG": str(tmp / "srun.log")}


def _batch_checks(tmp: Path, cfg: dict[str, Any], exp: dict[str, Any]) -> str:
    """'' when the container options reached the batch script's srun and the run-once lines ran once."""
    wanted = cfg["backend"].get("slurm", {}).get("srun_args", [])
    sruns = (tmp / "srun.log").read_text() if (tmp / "srun.log").exists() else ""
    if wanted and not any(all(w in line for w in wanted) for line in sruns.splitlines()):
        return f"container options {wanted} not in the batch script's srun: {sruns[-500:]}"
    return ran_once_on_the_batch_host(calls(tmp / "calls.jsonl"), exp)


def _started_everywhere(tmp: Path, name: str) -> str:
    """'' when every node started the entry point with its arguments, else what went wrong."""
    cfg = _config(tmp, name)
    res = subprocess.run([sys.executable, "-m", "orchestrator", "run", str(cfg)], capture_output=True, text=True,
                         timeout=300, env=_controller_env(tmp), cwd=REPO, check=False)
    logs = sorted((tmp / "run" / "segments" / "0001" / "logs").glob("*.log"))
    if len(logs) != NODES:
        return f"{len(logs)} node logs; run: {res.stdout[-1500:]} {res.stderr[-1500:]}"
    exp = EXPECTED[name]
    for log in logs:
        found = launches(log.read_text())
        if not found:
            return f"{log.name}: nothing launched: {log.read_text()[-1500:]}"
        if exp["entry_point"] and not any(starts_entry(la, exp["entry_point"], exp["must_args"]) for la in found):
            return f"{log.name}: {exp['entry_point']} {exp['must_args']} not in {found}"
    return _batch_checks(tmp, yaml.safe_load(cfg.read_text()), exp)


def test_real_scripts_start_their_entry_point_on_every_node(cluster: None, tmp_path: Path) -> None:
    results = {name: _started_everywhere(tmp_path / Path(name).stem, name) for name in sorted(EXPECTED)}
    ok = [n for n, why in results.items() if not why]
    report = "\n".join(f"{'ok  ' if not why else 'FAIL'} {n} {why[:2000]}" for n, why in results.items())
    print(report)
    with_entry = [n for n in ok if EXPECTED[n]["entry_point"]]
    assert len(with_entry) >= 12, report
    assert len(ok) == len(results), report
