"""import-sbatch on 19 real public batch scripts (tests/data/sbatch/real/, answer key in expected.json): each
imports to a config that validates once its placeholders are filled, a per-node launch that passes `bash -n`,
notes naming every #SBATCH option not carried over, every undefined variable and the checkpoint path; and,
run by the real agent on two virtual nodes with stub launchers on PATH, the training entry point starts with
its original arguments on every node."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.agent.main import NodeAgent
from orchestrator.importer import dump_config, import_sbatch
from orchestrator.importer.options import sbatch_options
from orchestrator.model import SegmentSpec
from orchestrator.settings import load_settings
from tests.sbatch_launch import (
    EXPECTED,
    REAL,
    calls,
    fill_env,
    launches,
    ran_once_on_the_batch_host,
    run_setup,
    starts_entry,
    write_stubs,
)

SCRIPTS = sorted(EXPECTED)
CARRIED = {"nodes": "nodes", "ntasks-per-node": "tasks_per_node", "ntasks": "tasks_per_node",
           "cpus-per-task": "cpus_per_task", "partition": "partition", "account": "account", "qos": "qos",
           "time": "time_limit_min", "gpus-per-node": "gpus_per_node", "gpus-per-task": "gpus_per_node",
           "job-name": "name", "gres": "gpus_per_node", "gpus": "gpus_per_node"}


def imported(name: str, workdir: Path) -> tuple[dict[str, Any], list[str]]:
    return import_sbatch((REAL / name).read_text(), Path(name).stem, str(workdir))


@pytest.mark.parametrize("name", SCRIPTS)
def test_config_notes_and_bash_n(tmp_path: Path, name: str) -> None:
    cfg, notes = imported(name, tmp_path)
    exp = EXPECTED[name]
    text = "\n".join(notes)
    r = cfg["resources"]
    assert r.get("nodes", 1) == (exp["nodes"] or 1)
    for var in exp["undefined_vars"]:
        assert var in text.split("does not set", 1)[-1], (var, notes)
    assert "checkpoint path found" in text or "no checkpoint path found" in text
    for key, _val in sbatch_options((REAL / name).read_text().splitlines()):
        assert key in CARRIED or key in r.get("sbatch_extra", {}) or f"--{key}" in text, (key, notes)
    script = cfg["command"][2]
    res = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr
    out = tmp_path / "c.yaml"
    body = dump_config(cfg, notes, name).replace("CHANGE-ME", str(tmp_path / "ckpt"))
    out.write_text(body)
    assert yaml.safe_load(body)["command"][2] == script
    s = load_settings(out)
    assert s.backend.kind == "slurm" and s.command[:2] == ["bash", "-c"]


def test_unfilled_placeholder_is_rejected(tmp_path: Path) -> None:
    from orchestrator.settings import ConfigError

    cfg, notes = imported("torchtitan-multinode-trainer.sbatch", tmp_path)
    out = tmp_path / "c.yaml"
    out.write_text(dump_config(cfg, notes, "x"))
    with pytest.raises(ConfigError, match=r"checkpoint.dir \('CHANGE-ME'\)"):
        load_settings(out)


def run_agents(tmp_path: Path, name: str, nodes: int = 2) -> dict[str, str]:
    """The imported launch, run by the real agent on `nodes` virtual nodes: {node: log text}."""
    work = tmp_path / "work"
    work.mkdir()
    cfg, notes = imported(name, work)
    bindir = tmp_path / "bin"
    write_stubs(bindir, work)
    env = fill_env(notes, tmp_path, (REAL / name).read_text())
    hosts = [f"vn{i}" for i in range(1, nodes + 1)]
    saved = dict(os.environ)
    os.environ.update({"PATH": f"{bindir}:{saved['PATH']}", "SLURM_JOB_NODELIST": ",".join(hosts),
                       "SLURM_JOB_NUM_NODES": str(nodes), "SLURM_NNODES": str(nodes), "SLURM_JOB_ID": "4242",
                       "SLURM_JOBID": "4242", "SLURM_CPUS_PER_TASK": "2", "SLURM_GPUS_PER_NODE": "8"})
    try:
        env["ORCH_TEST_CALLS"] = str(tmp_path / "calls.jsonl")
        run_setup({**cfg, "workdir": str(work)}, env, tmp_path)
        for rank, host in enumerate(hosts):
            spec = SegmentSpec(run_name="t", index=1, job_name="t.seg0001", nodes=nodes,
                               tasks_per_node=min(cfg["resources"].get("tasks_per_node", 1), 2), gpus_per_node=0,
                               time_limit_min=5, command=tuple(cfg["command"]), env=tuple(sorted(env.items())),
                               workdir=str(work), run_dir=str(tmp_path / "run"),
                               segment_dir=str(tmp_path / "run" / "segments" / "0001"),
                               progress_regex=load_progress_regex())
            NodeAgent(spec, host, rank, nodes, "4242").run()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    logs = tmp_path / "run" / "segments" / "0001" / "logs"
    return {h: (logs / f"{h}.log").read_text() for h in hosts}


def load_progress_regex() -> str:
    from orchestrator.settings import PROGRESS_REGEX

    return PROGRESS_REGEX


@pytest.mark.parametrize("name", SCRIPTS)
def test_entry_point_starts_on_every_node(tmp_path: Path, name: str) -> None:
    exp = EXPECTED[name]
    logs = run_agents(tmp_path, name)
    for host, text in logs.items():
        found = launches(text)
        assert found, f"{host}: no launch\n{text[-3000:]}"
        if exp["entry_point"] is None:
            continue
        ok = [la for la in found if starts_entry(la, exp["entry_point"], exp["must_args"])]
        assert ok, f"{host}: {exp['entry_point']} {exp['must_args']} not started\n{found}"
        assert "iter=3" in text or "step 3" in text
    assert not ran_once_on_the_batch_host(calls(tmp_path / "calls.jsonl"), exp)
