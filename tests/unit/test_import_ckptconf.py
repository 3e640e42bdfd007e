"""Issue 36 item 5: import-sbatch finds the checkpoint directory in the config files the launch names (torchtitan
TOML, nanotron and NeMo YAML, LightningCLI and HF argument files; the real configs and their sources are in
tests/data/sbatch/ckptconf/SOURCES.md), with the preset of the framework that writes it, says which file and key
it came from, and says when the directory already holds a checkpoint; a missing or broken file is a note."""

from __future__ import annotations

import shutil
from pathlib import Path

from orchestrator.importer import import_sbatch

DATA = Path(__file__).resolve().parents[1] / "data" / "sbatch" / "ckptconf"
HEAD = "#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --time=01:00:00\n"


def imported(tmp: Path, launch: str, *files: str) -> tuple[dict[str, object], list[str]]:
    for f in files:
        dest = tmp / f
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(DATA / Path(f).name, dest)
    cfg, notes = import_sbatch(HEAD + launch + "\n", "train", str(tmp))
    return cfg, notes


def test_torchtitan_toml_dump_folder_and_checkpoint_folder(tmp_path: Path) -> None:
    cfg, notes = imported(tmp_path, 'CONFIG_FILE=${CONFIG_FILE:-"./train_configs/debug_model.toml"}\n'
                          "srun torchrun --nnodes 2 -m torchtitan.train --job.config_file ${CONFIG_FILE}",
                          "train_configs/debug_model.toml")
    assert cfg["checkpoint"] == {"dir": f"{tmp_path}/outputs/checkpoint", "preset": "torchtitan"}
    note = next(n for n in notes if n.startswith("checkpoint path found in"))
    assert "debug_model.toml: [job] dump_folder + [checkpoint] folder" in note
    assert "enable_checkpoint = false there" in note


def test_nanotron_yaml_checkpoints_path(tmp_path: Path) -> None:
    cfg, notes = imported(tmp_path, "srun python run_train.py --config-file examples/config_tiny_llama.yaml",
                          "examples/config_tiny_llama.yaml")
    assert cfg["checkpoint"] == {"dir": f"{tmp_path}/checkpoints", "preset": "glob", "glob": "[0-9]*",
                                 "marker": "checkpoint_metadata.json"}
    assert any("checkpoints.checkpoints_path (nanotron)" in n for n in notes)


def test_nemo_hydra_config_path_and_name_relative_to_the_program(tmp_path: Path) -> None:
    cfg, notes = imported(tmp_path, "srun python examples/nlp/megatron_gpt_pretraining.py --config-path=conf "
                          "--config-name=megatron_gpt_config trainer.num_nodes=2",
                          "examples/nlp/conf/megatron_gpt_config.yaml")
    # exp_dir null: NeMo's ./nemo_experiments; resume_if_exists: no version folder
    assert cfg["checkpoint"] == {"dir": f"{tmp_path}/nemo_experiments/megatron_gpt/checkpoints", "preset": "nemo"}
    assert any("megatron_gpt_config.yaml: exp_manager.exp_dir + name" in n for n in notes)


def test_lightning_cli_and_hf_argument_files(tmp_path: Path) -> None:
    (tmp_path / "cli.yaml").write_text(
        "trainer:\n  default_root_dir: /scratch/root\n  callbacks:\n"
        "  - class_path: lightning.pytorch.callbacks.ModelCheckpoint\n    init_args:\n      dirpath: /scratch/ck\n")
    cfg, _ = imported(tmp_path, "srun python main.py fit --config cli.yaml")
    assert cfg["checkpoint"] == {"dir": "/scratch/ck", "preset": "lightning"}
    (tmp_path / "args.yaml").write_text("output_dir: out/run1\nsave_steps: 100\n")
    cfg, _ = imported(tmp_path, "srun python sft.py --config args.yaml")
    assert cfg["checkpoint"] == {"dir": f"{tmp_path}/out/run1", "preset": "hf"}


def test_a_missing_or_broken_config_file_is_a_note_not_a_crash(tmp_path: Path) -> None:
    cfg, notes = imported(tmp_path, "srun python train.py --config configs/absent.toml")
    assert cfg["checkpoint"]["dir"] == "CHANGE-ME"  # type: ignore[index]
    assert any("configs/absent.toml: not read (does not exist" in n for n in notes)
    (tmp_path / "bad.yaml").write_text("a: [unclosed\n")
    cfg, notes = imported(tmp_path, "srun python train.py --config bad.yaml")
    assert cfg["checkpoint"]["dir"] == "CHANGE-ME"  # type: ignore[index]
    assert any("bad.yaml: not read" in n for n in notes)


def test_accelerate_save_state_scripts_get_the_accelerate_preset_not_hf(tmp_path: Path) -> None:
    cfg, _ = imported(tmp_path, "srun accelerate launch run_clm_no_trainer.py --output_dir /ck "
                      "--checkpointing_steps 500")
    assert cfg["checkpoint"] == {"dir": "/ck", "preset": "accelerate"}
    cfg, _ = imported(tmp_path, "srun accelerate launch run_clm.py --output_dir /ck --save_steps 500")
    assert cfg["checkpoint"] == {"dir": "/ck", "preset": "hf"}


def test_an_existing_checkpoint_dir_is_read_at_import(tmp_path: Path) -> None:
    step = tmp_path / "ck" / "step_300"
    step.mkdir(parents=True)
    for f in ("model.safetensors", "optimizer.bin", "random_states_0.pkl"):
        (step / f).write_bytes(b"x")
    # an HF Trainer guess on accelerate's layout: the preset that reads it is taken, with a note
    cfg, notes = imported(tmp_path, f"srun python train.py --output_dir {tmp_path}/ck")
    assert cfg["checkpoint"] == {"dir": f"{tmp_path}/ck", "preset": "accelerate"}
    assert any("preset hf does not recognise: preset accelerate does" in n for n in notes)
    assert any(f"the first segment resumes from {step}" in n for n in notes)


def test_value_less_sbatch_flags_are_carried_or_noted_never_dropped_silently(tmp_path: Path) -> None:
    flags = ["overcommit", "exclusive", "requeue", "no-requeue", "contiguous", "spread-job"]
    text = HEAD + "".join(f"#SBATCH --{f}\n" for f in flags) + "srun python train.py --save /ck\n"
    cfg, notes = import_sbatch(text, "train", str(tmp_path))
    extra = cfg["resources"].get("sbatch_extra", {})
    for f in flags:
        assert f in extra or any(n.startswith(f"--{f}:") for n in notes), f


def test_environment_defaults_are_not_frozen_at_import(tmp_path: Path) -> None:
    text = HEAD + ': ${IMAGE:=nvcr.io/nvidia/pytorch:24.01}\nCKPT=${CKPT:-/scratch/ck}\n' \
        'srun python train.py --image "$IMAGE" --save "$CKPT"\n'
    cfg, _ = import_sbatch(text, "train", str(tmp_path))
    script = cfg["command"][2]
    # the run-time environment still decides: the lines stay as written, the launch reads the variables
    assert ": ${IMAGE:=nvcr.io/nvidia/pytorch:24.01}\nCKPT=${CKPT:-/scratch/ck}\n" in script
    assert 'python train.py --image "$IMAGE" --save "$CKPT"' in script
    assert cfg["checkpoint"] == {"dir": "/scratch/ck", "preset": "megatron"}  # its default, as the note says
