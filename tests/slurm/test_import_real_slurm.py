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
from tests.sbatch_launch import EXPECTED, REAL, fill_env, launches, starts_entry, write_stubs
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
               backend={"kind": "slurm", "slurm": {"command_timeout_s": 20}})
    out = tmp / "run.yaml"
    out.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return out


def _started_everywhere(tmp: Path, name: str) -> str:
    """'' when every node started the entry point with its arguments, else what went wrong."""
    cfg = _config(tmp, name)
    res = subprocess.run([sys.executable, "-m", "orchestrator", "run", str(cfg)], capture_output=True, text=True,
                         timeout=300, env=slurm_env(), cwd=REPO, check=False)
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
    return ""


def test_real_scripts_start_their_entry_point_on_every_node(cluster: None, tmp_path: Path) -> None:
    results = {name: _started_everywhere(tmp_path / Path(name).stem, name) for name in sorted(EXPECTED)}
    ok = [n for n, why in results.items() if not why]
    report = "\n".join(f"{'ok  ' if not why else 'FAIL'} {n} {why[:2000]}" for n, why in results.items())
    print(report)
    with_entry = [n for n in ok if EXPECTED[n]["entry_point"]]
    assert len(with_entry) >= 12, report
    assert len(ok) == len(results), report
