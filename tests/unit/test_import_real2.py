"""Issue 23, set 2: eight more real public batch scripts (tests/data/sbatch/real2/, sources in SOURCES.md), picked
by a helper for containers, run-once lines, arrays and exclude/node lists, with an answer key (expected.json)
written from the scripts alone before the orchestrator first ran on them.

Imported and run (setup once, then the real agent on two virtual nodes, stub launchers, recorded mkdir/cat):
container options stay on the launch's own srun (the ranks' step, evaluated by the script's shell),
run-once lines run once on the batch host and never on a node, the array id is the first task's, the
script's --exclude is resources.exclude and its --nodelist is kept."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.blacklist import expand
from orchestrator.importer import Refused, import_sbatch
from tests.sbatch_launch import (
    LABELS,
    REAL2,
    array_ids,
    array_task,
    calls,
    entry_of,
    launches,
    positional_args,
    ran_once_on_the_batch_host,
    run_imported,
    run_once_counts,
    starts_entry,
)

SCRIPTS = sorted(LABELS)


@pytest.mark.parametrize("name", SCRIPTS)
def test_the_answer_keys_features_are_carried(tmp_path: Path, name: str) -> None:
    label = LABELS[name]
    text, args = (REAL2 / name).read_text(), positional_args(label, tmp_path)
    if label["uses_array_task_id"]:  # a sweep: refused whole, with the way to import each task
        with pytest.raises(Refused, match=r"is a sweep.*--array-task ID") as whole:
            import_sbatch(text, Path(name).stem, str(tmp_path), args)
        assert whole.value.line and "--array" in text.split("\n")[whole.value.line - 1]
    cfg, notes = import_sbatch(text, Path(name).stem, str(tmp_path), args, array_task(label))
    slurm = cfg["backend"].get("slurm", {})
    # a pyxis launch keeps its own srun for the ranks, options as written (the script's shell evaluates them, as
    # under sbatch): nothing goes to the agents' srun, which would need the orchestrator inside the image
    script = cfg["command"][2]
    launch = next((ln for ln in script.splitlines() if ln.lstrip().startswith("__orch_rank_step ")), "")
    for opt in label["container_options"]:
        assert launch and opt in script, (opt, launch)
    assert "srun_args" not in slurm
    setup = "\n".join(slurm.get("setup", []))
    for once in label["run_once"]:
        assert once["contains"] in setup, (once, notes)
    if label["array"] and not label["uses_array_task_id"]:
        assert cfg["policy"]["max_segments"] == len(array_ids(label["array"]))
    elif label["array"]:  # one task of the sweep, its own run, retried as itself
        assert cfg["name"].endswith(f"-task{array_task(label)}") and "max_segments" not in cfg.get("policy", {})
    if label["exclude"]:
        assert expand(cfg["resources"]["exclude"]) == expand(label["exclude"])
    if label["nodelist"]:
        assert expand(cfg["resources"]["sbatch_extra"]["nodelist"]) == expand(label["nodelist"])


@pytest.mark.parametrize("name", SCRIPTS)
def test_run_once_lines_run_once_and_the_entry_point_on_every_node(tmp_path: Path, name: str) -> None:
    label = LABELS[name]
    logs, _cfg = run_imported(tmp_path, REAL2 / name, 2, positional_args(label, tmp_path), task=array_task(label))
    found = calls(tmp_path / "calls.jsonl")
    entry = entry_of(label)
    for host, text in logs.items():
        started = [la for la in launches(text) if entry and starts_entry(la, entry, [])]
        assert started, f"{host}: {entry} not started\n{text[-3000:]}"
        if label["uses_array_task_id"]:
            assert {la["env"]["SLURM_ARRAY_TASK_ID"] for la in started} == {str(array_ids(label["array"])[0])}
    assert not ran_once_on_the_batch_host(found, {"entry_point": entry})
    assert not run_once_counts(found, label)
