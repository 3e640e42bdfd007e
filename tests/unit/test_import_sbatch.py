"""import-sbatch on realistic scripts: a job array, a dependency chain, srun + torchrun, the deepspeed
launcher, plain python. Each result must load as a valid config once CHANGE-ME values are filled in."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.importer import import_sbatch
from orchestrator.settings import load_settings

DATA = Path(__file__).resolve().parents[1] / "data" / "sbatch"
runner = CliRunner()

EXPECT: dict[str, dict[str, Any]] = {
    "array.sh": dict(name="tr1-13B", nodes=32, gpus=4, time=1200, max_segments=10,
                     notes=["--array=1-10%1", "no resume flag found"], cmd0="bash"),
    "chain.sh": dict(name="llama-70b", nodes=8, gpus=8, time=2880, tasks=8, preset="megatron",
                     notes=["--dependency=afterany:4242", "--exclude=gpu-a[012,017]", "--requeue"], cmd0="python"),
    "torchrun.sh": dict(name="vit-h", nodes=4, gpus=8, time=720, preset="hf", notes=["srun and its options"],
                        cmd0="torchrun"),
    "deepspeed.sh": dict(name="bloom-ft", nodes=2, gpus=8, time=2160, preset="deepspeed",
                         notes=["deepspeed's launcher", "--signal"], cmd0="deepspeed"),
    "plain.sh": dict(name="small-lm", gpus=1, time=90, preset="lightning", notes=[], cmd0="python"),
}


@pytest.mark.parametrize("script", sorted(EXPECT))
def test_import(tmp_path: Path, script: str) -> None:
    exp = EXPECT[script]
    cfg, notes = import_sbatch((DATA / script).read_text(), Path(script).stem)
    r = cfg["resources"]
    assert cfg["name"] == exp["name"] and r["gpus_per_node"] == exp["gpus"] and r["time_limit_min"] == exp["time"]
    assert r.get("nodes", 1) == exp.get("nodes", 1) and r.get("tasks_per_node", 1) == exp.get("tasks", 1)
    assert cfg["command"][0] == exp["cmd0"]
    if "preset" in exp:
        assert cfg["checkpoint"]["preset"] == exp["preset"] and "{checkpoint}" in " ".join(cfg["command"])
    if "max_segments" in exp:
        assert cfg["policy"]["max_segments"] == exp["max_segments"]
    for n in exp["notes"]:
        assert any(n in note for note in notes), (n, notes)
    # what came out is a config the orchestrator accepts
    text = yaml.safe_dump(cfg).replace("CHANGE-ME", str(tmp_path / "ckpt"))
    p = tmp_path / "imported.yaml"
    p.write_text(text)
    s = load_settings(p)
    assert s.backend.kind == "slurm" and s.name == exp["name"]


def test_cli_writes_file_and_lists_notes(tmp_path: Path) -> None:
    out = tmp_path / "c.yaml"
    res = runner.invoke(app, ["import-sbatch", str(DATA / "chain.sh"), "-o", str(out)])
    assert res.exit_code == 0, res.output
    text = out.read_text()
    assert text.startswith("# imported from") and "# NOTE: --dependency=afterany:4242" in text
    assert yaml.safe_load(text)["resources"]["partition"] == "batch"


def test_not_a_batch_script(tmp_path: Path) -> None:
    f = tmp_path / "x.sh"
    f.write_text("echo hello\n")
    res = runner.invoke(app, ["import-sbatch", str(f)])
    assert res.exit_code == 2 and "no #SBATCH line" in res.output
