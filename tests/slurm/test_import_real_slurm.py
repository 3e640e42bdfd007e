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
    LABELS,
    REAL,
    REAL2,
    array_ids,
    array_task,
    calls,
    entry_of,
    fill_env,
    launches,
    positional_args,
    ran_once_on_the_batch_host,
    run_once_counts,
    starts_entry,
    write_stubs,
)
from tests.slurm.conftest import slurm_env

pytestmark = pytest.mark.slurm
NODES = 2


def _site_script(tmp: Path, script: Path, label: dict[str, Any]) -> Path:
    """The script with its site's node names put to this cluster's: its --exclude names node1,node2 and its
    --nodelist node3,node4 (nothing else changes)."""
    text = script.read_text()
    if label.get("exclude"):
        text = text.replace(f"--exclude={label['exclude']}", "--exclude=node1,node2")
    if label.get("nodelist"):
        text = text.replace(f"--nodelist={label['nodelist']}", "--nodelist=node3,node4")
    out = tmp / script.name
    out.write_text(text)
    return out


def _config(tmp: Path, script: Path, label: dict[str, Any]) -> Path:
    work = tmp / "work"
    work.mkdir(parents=True)
    bindir = tmp / "bin"
    write_stubs(bindir, work)
    site = _site_script(tmp, script, label)
    task = array_task(label)  # a sweep: its first task, as its own run
    res = subprocess.run([sys.executable, "-m", "orchestrator", "import-sbatch", str(site),
                          *positional_args(label, tmp), "-o", str(tmp / "imported.yaml"),
                          *([] if task is None else ["--array-task", str(task)])], capture_output=True,
                         text=True, cwd=work, timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)}, check=True)
    notes = [ln[len("note: "):] for ln in res.stderr.splitlines() if ln.startswith("note: ")]
    cfg: dict[str, Any] = yaml.safe_load((tmp / "imported.yaml").read_text())
    env = fill_env(notes, tmp, script.read_text())
    env.update({"PATH": f"{bindir}:{os.environ['PATH']}", "SLURM_GPUS_PER_NODE": "8",
                "ORCH_TEST_CALLS": str(tmp / "calls.jsonl"), "USER": os.environ.get("USER", "root")})
    r = cfg["resources"]
    pinned = {k: v for k, v in r.get("sbatch_extra", {}).items() if k == "nodelist"}
    cfg["resources"] = {"nodes": NODES, "tasks_per_node": min(r.get("tasks_per_node", 1), 2), "time_limit_min": 5,
                        "exclude": r.get("exclude", []), "sbatch_extra": pinned}
    if not Path(cfg.get("workdir", work)).is_dir():
        cfg["workdir"] = str(work)  # the site's own --chdir, as a user of this cluster would change it
    cfg.update(name=f"imp-{script.stem[:40]}", run_dir=str(tmp / "run"), env=env,
               checkpoint={"dir": str(tmp / "ckpt"), "preset": "megatron"},
               policy={"max_segments": 1, "max_no_progress_segments": 1},
               watch={"poll_interval_s": 1, "stall_timeout_s": 60, "startup_timeout_s": 120, "cascade_grace_s": 2},
               backend={"kind": "slurm", "slurm": {"command_timeout_s": 20, **cfg["backend"].get("slurm", {})}})
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
    return {**env, "PATH": f"{wrap}:{env.get('PATH', os.environ['PATH'])}", "ORCH_TEST_SRUN_LOG": str(tmp / "srun.log"),
            "PYTHONPATH": str(REPO)}


def _batch_checks(tmp: Path, cfg: dict[str, Any], exp: dict[str, Any]) -> str:
    """'' when the container options reached the batch script's srun and the run-once lines ran once."""
    wanted = cfg["backend"].get("slurm", {}).get("srun_args", [])
    sruns = (tmp / "srun.log").read_text() if (tmp / "srun.log").exists() else ""
    if wanted and not any(all(w in line for w in wanted) for line in sruns.splitlines()):
        return f"container options {wanted} not in the batch script's srun: {sruns[-500:]}"
    return ran_once_on_the_batch_host(calls(tmp / "calls.jsonl"), exp)


def _started_everywhere(tmp: Path, script: Path, label: dict[str, Any]) -> str:
    """'' when every node started the entry point with its arguments, and the batch script did what sbatch
    would have (container options on its srun, run-once lines once, the array id, no excluded node)."""
    cfg = _config(tmp, script, label)
    submit = tmp / "checkout"  # where the user submits from: a checkout of the script's repository, whose
    (submit / "configs").mkdir(parents=True)  # configs/ some scripts write into (cat > configs/ds_config.json)
    res = subprocess.run([sys.executable, "-m", "orchestrator", "run", str(cfg)], capture_output=True, text=True,
                         timeout=300, env=_controller_env(tmp), cwd=submit, check=False)  # sbatch's submit dir
    logs = sorted((tmp / "run" / "segments" / "0001" / "logs").glob("*.log"))
    if len(logs) != NODES:
        return f"{len(logs)} node logs; run: {res.stdout[-1500:]} {res.stderr[-1500:]}"
    entry, must = entry_of(label), label.get("must_args", [])
    for log in logs:
        found = [la for la in launches(log.read_text()) if not entry or starts_entry(la, entry, must)]
        if not found:
            return f"{log.name}: {entry} {must} not started: {log.read_text()[-1500:]}"
        if label.get("uses_array_task_id") and found[0]["env"]["SLURM_ARRAY_TASK_ID"] != str(
                array_ids(label["array"])[0]):
            return f"{log.name}: SLURM_ARRAY_TASK_ID {found[0]['env']['SLURM_ARRAY_TASK_ID']}, not the first task's"
    used = {log.stem for log in logs}
    if label.get("exclude") and used & {"node1", "node2"}:
        return f"excluded nodes used: {sorted(used)}"
    if label.get("nodelist") and used != {"node3", "node4"}:
        return f"the pinned nodes node3,node4 not used: {sorted(used)}"
    return _batch_checks(tmp, yaml.safe_load(cfg.read_text()), {**label, "entry_point": entry}) or \
        (run_once_counts(calls(tmp / "calls.jsonl"), label) if "run_once" in label else "")


def _report(results: dict[str, str]) -> str:
    report = "\n".join(f"{'ok  ' if not why else 'FAIL'} {n} {why[:2000]}" for n, why in results.items())
    print(report)
    return report


def test_real_scripts_start_their_entry_point_on_every_node(cluster: None, tmp_path: Path) -> None:
    # a script bash rejects (refused_line) is refused at import: tests/unit/test_import_real.py
    results = {n: _started_everywhere(tmp_path / Path(n).stem, REAL / n, EXPECTED[n]) for n in sorted(EXPECTED)
               if not EXPECTED[n].get("refused_line")}
    report = _report(results)
    with_entry = [n for n, why in results.items() if not why and EXPECTED[n]["entry_point"]]
    assert len(with_entry) >= 12, report
    assert not any(results.values()), report


def test_containers_run_once_lines_arrays_and_excludes_behave_as_under_sbatch(cluster: None, tmp_path: Path) -> None:
    """Set 2 (tests/data/sbatch/real2, answer key written before the first run): every script, run through
    Slurm, starts its entry point on every node; its container options reach the batch script's srun (or were
    refused with a note at import), its run-once lines ran once on the batch host and never on a node, the
    array task id is the first task's, and its excluded nodes are never used."""
    results = {n: _started_everywhere(tmp_path / Path(n).stem, REAL2 / n, LABELS[n]) for n in sorted(LABELS)}
    assert not any(results.values()), _report(results)
