"""Issue 37: configs/templates/ holds one config per framework (Megatron-LM, NeMo, torchtitan, HF Trainer, Lightning,
DeepSpeed, JAX). Each is refused while a CHANGE-ME is left, naming the --set that fills it; filled with --set it
validates; and its checkpoint settings find the newest complete checkpoint in that framework's own layout."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.checkpoint import find_latest
from orchestrator.cli import app
from orchestrator.settings import load_settings, parse_overrides
from tests.conftest import REPO

TEMPLATES = REPO / "configs" / "templates"


def _ckpt(path: Path) -> None:
    """A complete torch/Lightning .ckpt: a zip archive."""
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/data.pkl", b"x")


# each framework's layout: newest complete iteration, then what it wrote (a name ending in / is a directory)
LAYOUTS: dict[str, tuple[int, dict[str, str]]] = {
    "megatron-lm": (2000, {"latest_checkpointed_iteration.txt": "2000",
                           "iter_0001000/mp_rank_00/model_optim_rng.pt": "x",
                           "iter_0002000/mp_rank_00/model_optim_rng.pt": "x", "iter_0003000/": ""}),
    "nemo": (3000, {"gpt/checkpoints/megatron_gpt--step=2000/metadata.json": "{}",
                    "gpt/checkpoints/megatron_gpt--step=3000/metadata.json": "{}",
                    "gpt/checkpoints/megatron_gpt--step=4000/common.pt": "x"}),  # no metadata.json yet
    "torchtitan": (1000, {"checkpoint/step-500/.metadata": "x", "checkpoint/step-1000/.metadata": "x",
                          "checkpoint/step-1500/__0_0.distcp": "x"}),
    "hf-trainer": (1500, {"checkpoint-1000/trainer_state.json": "{}", "checkpoint-1500/trainer_state.json": "{}",
                          "checkpoint-2000/model.safetensors": "x"}),
    "lightning": (1200, {"epoch=0-step=600.ckpt": "zip", "epoch=1-step=1200.ckpt": "zip",
                         "epoch=2-step=1800.ckpt": "cut"}),
    "deepspeed": (2000, {"latest": "global_step2000", "global_step1000/mp_rank_00_model_states.pt": "x",
                         "global_step2000/mp_rank_00_model_states.pt": "x", "global_step3000/": ""}),
    "jax": (2000, {"1000/_CHECKPOINT_METADATA": "{}", "2000/_CHECKPOINT_METADATA": "{}",
                   "3000.orbax-checkpoint-tmp-17/default/x": "x"}),
}


def _sets(tmp: Path) -> list[str]:
    values = {"run_dir": tmp / "run", "workdir": tmp, "checkpoint.dir": tmp / "ckpt", "resources.partition": "gpu",
              "resources.account": "proj"}
    return [f"{k}={v}" for k, v in values.items()]


def test_there_is_one_template_per_framework() -> None:
    assert sorted(p.stem for p in TEMPLATES.glob("*.yaml")) == sorted(LAYOUTS)
    assert (TEMPLATES / "README.md").is_file()


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_a_template_names_what_to_fill_and_validates_once_filled(tmp_path: Path, name: str) -> None:
    path = TEMPLATES / f"{name}.yaml"
    res = CliRunner().invoke(app, ["validate", str(path)])
    assert res.exit_code == 2 and "placeholder values still to be filled in" in res.output, res.output
    assert "--set run_dir=VALUE" in res.output and "checkpoint.dir ('CHANGE-ME')" in res.output
    argv = ["validate", str(path)]
    for item in _sets(tmp_path):
        argv += ["--set", item]
    res = CliRunner().invoke(app, argv)
    assert res.exit_code == 0 and f"ok (run {name}," in res.output, res.output


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_a_templates_checkpoint_settings_find_the_newest_complete_one(tmp_path: Path, name: str) -> None:
    s = load_settings(TEMPLATES / f"{name}.yaml", parse_overrides(_sets(tmp_path)))
    newest, files = LAYOUTS[name]
    for rel, body in files.items():
        target = tmp_path / "ckpt" / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if rel.endswith("/"):
            target.mkdir(exist_ok=True)
        elif body == "zip":
            _ckpt(target)
        else:
            target.write_text(body)
    found = find_latest(s.checkpoint)
    assert found is not None and found.iteration == newest, found
    assert s.resources.time_limit_min >= 60
