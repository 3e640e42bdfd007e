"""import-sbatch on 19 real public batch scripts (tests/data/sbatch/real/, answer key in expected.json): each
imports to a config that validates once its placeholders are filled, a per-node launch that passes `bash -n`,
notes naming every #SBATCH option not carried over, every undefined variable and the checkpoint path; and,
run by the real agent on two virtual nodes with stub launchers on PATH, the training entry point starts with
its original arguments on every node."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.importer import Refused, dump_config, import_sbatch
from orchestrator.importer.options import sbatch_options
from orchestrator.settings import load_settings
from tests.sbatch_launch import (
    EXPECTED,
    REAL,
    calls,
    launches,
    ran_once_on_the_batch_host,
    run_imported,
    starts_entry,
)

# a script bash rejects stops there under sbatch: refused at import (the key's note says so), never run
SCRIPTS = sorted(n for n in EXPECTED if not EXPECTED[n].get("refused_line"))
REJECTED = sorted(n for n in EXPECTED if EXPECTED[n].get("refused_line"))
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


@pytest.mark.parametrize("name", REJECTED)
def test_a_script_bash_rejects_is_refused_at_its_line(tmp_path: Path, name: str) -> None:
    with pytest.raises(Refused, match=r"bash rejects this script .*syntax error.*under sbatch it stops") as err:
        imported(name, tmp_path)
    assert err.value.line == EXPECTED[name]["refused_line"]


def test_unfilled_placeholder_is_rejected(tmp_path: Path) -> None:
    from orchestrator.settings import ConfigError, parse_overrides

    cfg, notes = imported("torchtitan-multinode-trainer.sbatch", tmp_path)
    out = tmp_path / "c.yaml"
    out.write_text(dump_config(cfg, notes, "x"))
    with pytest.raises(ConfigError, match=r"checkpoint.dir \('CHANGE-ME'\): edit the file, or give "
                                          r"--set checkpoint.dir=VALUE"):
        load_settings(out)
    fixed = load_settings(out, parse_overrides([f"checkpoint.dir={tmp_path / 'ckpt'}"]))
    assert fixed.checkpoint.dir == tmp_path / "ckpt"


def run_agents(tmp_path: Path, name: str, nodes: int = 2) -> dict[str, str]:
    return run_imported(tmp_path, REAL / name, nodes)[0]


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
