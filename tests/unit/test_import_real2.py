"""Issue 23, set 2: eight more real public batch scripts (tests/data/sbatch/real2/, sources in SOURCES.md), picked
by a helper for containers, run-once lines, arrays and exclude/node lists, with an answer key (expected.json)
written from the scripts alone before the orchestrator first ran on them.

Imported and run (setup once, then the real agent on two virtual nodes, stub launchers, recorded mkdir/cat):
container options reach srun_args or are refused with a loud note (never passed on with a shell expansion),
run-once lines run once on the batch host and never on a node, the array id is the first task's, the
script's --exclude is resources.exclude and its --nodelist is kept."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.blacklist import expand
from orchestrator.importer import import_sbatch
from tests.sbatch_launch import (
    LAUNCHERS,
    RECORDED,
    calls,
    launches,
    positional_args,
    ran_once_on_the_batch_host,
    run_imported,
    starts_entry,
)

REAL2 = Path(__file__).resolve().parents[1] / "data" / "sbatch" / "real2"
LABELS: dict[str, dict[str, Any]] = json.loads((REAL2 / "expected.json").read_text())
SCRIPTS = sorted(LABELS)


def entry_of(label: dict[str, Any]) -> str | None:
    """The entry point as a suffix: a prefix that needs the shell (`${PWD}/..`, `` `pwd`/ ``) is dropped."""
    entry: str | None = label["entry_point"]
    if entry and ("$" in entry or "`" in entry) and not entry.startswith("-m "):
        entry = entry.rsplit("/", 1)[-1]
    return entry


def array_ids(value: str) -> list[int]:
    ids: list[int] = []
    for part in value.split("%")[0].split(","):
        a, _, b = part.partition("-")
        ids.extend(range(int(a), int(b or a) + 1))
    return ids


@pytest.mark.parametrize("name", SCRIPTS)
def test_the_answer_keys_features_are_carried(tmp_path: Path, name: str) -> None:
    label = LABELS[name]
    cfg, notes = import_sbatch((REAL2 / name).read_text(), Path(name).stem, str(tmp_path),
                               positional_args(label, tmp_path))
    slurm = cfg["backend"].get("slurm", {})
    carried = {a.split("=", 1)[0] for a in slurm.get("srun_args", [])}
    refused = " ".join(n for n in notes if n.startswith("CONTAINER NOT CARRIED:"))
    for opt in label["container_options"]:
        assert opt in carried or opt in refused, (opt, carried, refused)
    assert not any("$" in a or "`" in a for a in slurm.get("srun_args", []))
    if label["container_values_literal"]:
        assert carried == set(label["container_options"]) and not refused
    setup = "\n".join(slurm.get("setup", []))
    for once in label["run_once"]:
        assert once["contains"] in setup, (once, notes)
    if label["array"]:
        assert cfg["policy"]["max_segments"] == len(array_ids(label["array"]))
    if label["exclude"]:
        assert expand(cfg["resources"]["exclude"]) == expand(label["exclude"])
    if label["nodelist"]:
        assert expand(cfg["resources"]["sbatch_extra"]["nodelist"]) == expand(label["nodelist"])


@pytest.mark.parametrize("name", SCRIPTS)
def test_run_once_lines_run_once_and_the_entry_point_on_every_node(tmp_path: Path, name: str) -> None:
    label = LABELS[name]
    logs, _cfg = run_imported(tmp_path, REAL2 / name, 2, positional_args(label, tmp_path))
    found = calls(tmp_path / "calls.jsonl")
    entry = entry_of(label)
    for host, text in logs.items():
        started = [la for la in launches(text) if entry and starts_entry(la, entry, [])]
        assert started, f"{host}: {entry} not started\n{text[-3000:]}"
        if label["uses_array_task_id"]:
            assert {la["env"]["SLURM_ARRAY_TASK_ID"] for la in started} == {str(array_ids(label["array"])[0])}
    assert not ran_once_on_the_batch_host(found, {"entry_point": entry})
    for program in {o["program"] for o in label["run_once"]} & {*RECORDED, *LAUNCHERS}:
        want = sum(o["count"] for o in label["run_once"] if o["program"] == program)
        on_batch = [c for c in found if c["prog"] == program and not c["env"].get("ORCH_NODE_NAME")]
        on_nodes = [c for c in found if c["prog"] == program and c["env"].get("ORCH_NODE_NAME")]
        assert len(on_batch) >= want and not on_nodes, (program, want, on_batch, on_nodes)
