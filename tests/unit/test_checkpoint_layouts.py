"""Issue 36 item 5: the presets for accelerate `save_state`, DCP/FSDP, torchtitan and NeMo read the layouts those
frameworks write (file names and the file each writes last: tests/data/checkpoints/README.md cites the framework's
source file and commit for each), and a preset that recognises none of the checkpoints present is named."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

from orchestrator.checkpoint import checkpoint_like, find_latest, preset_problem, recognises
from orchestrator.settings import CheckpointCfg


def cfg(d: Path, preset: str, **kw: str) -> CheckpointCfg:
    return CheckpointCfg(dir=d, preset=preset, **kw)


def touch(p: Path, data: bytes = b"x") -> None:
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data)


def ckpt_zip(p: Path) -> None:
    p.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(p, "w") as z:
        z.writestr("archive/data.pkl", b"x")


def accelerate_state(d: Path, done: bool = True) -> None:
    """What `save_accelerator_state` writes, in its order: the RNG states of each process last."""
    touch(d / "model.safetensors")
    touch(d / "optimizer.bin")
    touch(d / "scheduler.bin")
    if done:
        touch(d / "random_states_0.pkl")
        touch(d / "random_states_1.pkl")


def test_accelerate_save_state_dirs_are_complete_with_their_rng_states(tmp_path: Path) -> None:
    accelerate_state(tmp_path / "step_100")
    accelerate_state(tmp_path / "step_200", done=False)  # being written: no random_states yet
    c = find_latest(cfg(tmp_path, "accelerate"))
    assert c is not None and c.path.endswith("step_100") and c.iteration == 100
    assert find_latest(cfg(tmp_path, "hf")) is None  # not HF Trainer's checkpoint-N/trainer_state.json


def test_accelerate_automatic_checkpoint_naming_under_checkpoints(tmp_path: Path) -> None:
    accelerate_state(tmp_path / "checkpoints" / "checkpoint_0")
    accelerate_state(tmp_path / "checkpoints" / "checkpoint_1")
    c = find_latest(cfg(tmp_path, "accelerate"))
    assert c is not None and c.path.endswith("checkpoints/checkpoint_1")


def test_dcp_and_torchtitan_step_dirs_complete_only_with_metadata(tmp_path: Path) -> None:
    touch(tmp_path / "step-10" / "__0_0.distcp")
    touch(tmp_path / "step-10" / ".metadata")
    touch(tmp_path / "step-20" / "__0_0.distcp")  # .metadata comes last: not complete
    for preset in ("dcp", "torchtitan"):
        c = find_latest(cfg(tmp_path, preset))
        assert c is not None and c.path.endswith("step-10") and c.iteration == 10, preset
    touch(tmp_path / "step-20" / ".metadata")
    c = find_latest(cfg(tmp_path, "torchtitan"))
    assert c is not None and c.iteration == 20


def test_dcp_takes_underscored_step_dirs_torchtitan_does_not(tmp_path: Path) -> None:
    touch(tmp_path / "step_5" / ".metadata")
    c = find_latest(cfg(tmp_path, "dcp"))
    assert c is not None and c.iteration == 5
    assert find_latest(cfg(tmp_path, "torchtitan")) is None


def test_nemo_ckpt_files_and_dist_checkpoint_dirs_less_unfinished(tmp_path: Path) -> None:
    ckdir = tmp_path / "default" / "checkpoints"
    ckpt_zip(ckdir / "megatron_gpt--val_loss=2.10-step=100-consumed_samples=800.0.ckpt")
    ckpt_zip(ckdir / "megatron_gpt--val_loss=2.00-step=100-consumed_samples=800.0-last.ckpt")
    c = find_latest(cfg(tmp_path, "nemo"))
    assert c is not None and c.path.endswith("-last.ckpt") and c.iteration == 100
    dist = ckdir / "megatron_gpt--val_loss=1.90-step=200-consumed_samples=1600.0"
    touch(dist / "metadata.json", b"{}")
    touch(dist / "common.pt")
    touch(Path(str(dist) + "-unfinished"))  # NeMo's marker: still being written
    c = find_latest(cfg(tmp_path, "nemo"))
    assert c is not None and c.iteration == 100
    Path(str(dist) + "-unfinished").unlink()
    c = find_latest(cfg(tmp_path, "nemo"))
    assert c is not None and c.path == str(dist) and c.iteration == 200


def test_a_preset_that_recognises_none_of_the_checkpoints_is_named_with_the_ones_that_do(
        tmp_path: Path) -> None:
    accelerate_state(tmp_path / "step_100")
    problem = preset_problem(cfg(tmp_path, "hf"))
    assert f"checkpoint.dir {tmp_path} holds step_100" in problem
    assert "checkpoint.preset hf recognises none" in problem
    assert "--set checkpoint.preset=accelerate" in problem and "--set checkpoint.preset=dcp" in problem
    assert preset_problem(cfg(tmp_path, "accelerate")) == ""


def test_a_half_written_checkpoint_of_the_preset_is_still_its_own(tmp_path: Path) -> None:
    touch(tmp_path / "checkpoint-50" / "model.safetensors")  # no trainer_state.json yet
    assert recognises("hf", cfg(tmp_path, "hf"))
    assert preset_problem(cfg(tmp_path, "hf")) == ""


def test_an_absent_empty_or_log_only_directory_is_fine(tmp_path: Path) -> None:
    assert preset_problem(cfg(tmp_path / "absent", "megatron")) == ""
    assert preset_problem(cfg(tmp_path, "megatron")) == ""
    touch(tmp_path / "runs" / "Jan01" / "events.out.tfevents.1.host")  # HF output_dir's tensorboard
    (tmp_path / "empty").mkdir()
    assert checkpoint_like(tmp_path) == []
    assert preset_problem(cfg(tmp_path, "hf")) == ""


def test_checkpoints_no_preset_knows_point_at_glob(tmp_path: Path) -> None:
    touch(tmp_path / "weights_epoch3.pt")
    problem = preset_problem(cfg(tmp_path, "megatron"))
    assert "holds weights_epoch3.pt" in problem and "checkpoint.preset=glob" in problem
    assert preset_problem(cfg(tmp_path, "glob", glob="weights_*.pt")) == ""


def test_the_dry_run_says_the_checkpoint_it_resumes_from_and_refuses_a_preset_that_reads_none(
        tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from orchestrator.cli import app
    from tests.conftest import base_config, write_config

    ck = tmp_path / "ckpt"
    touch(ck / "step-10" / "__0_0.distcp")
    touch(ck / "step-10" / ".metadata")
    good = write_config(tmp_path, base_config(tmp_path, checkpoint={"preset": "torchtitan"}))
    dry = CliRunner().invoke(app, ["run", str(good), "--dry-run"])
    assert dry.exit_code == 0 and f"# resume from: {ck / 'step-10'} (iteration 10)" in dry.output, dry.output
    bad = write_config(tmp_path, base_config(tmp_path, checkpoint={"preset": "hf"}), "bad.yaml")
    for argv in (["run", str(bad), "--dry-run"], ["validate", str(bad)]):
        res = CliRunner().invoke(app, argv)
        assert res.exit_code == 2, res.output
        lines = [line for line in res.output.splitlines() if line.startswith("error:")]
        assert len(lines) == 1 and "holds step-10" in lines[0] and "preset hf recognises none" in lines[0]
        assert "--set checkpoint.preset=dcp or --set checkpoint.preset=torchtitan" in lines[0]
    fixed = CliRunner().invoke(app, ["validate", str(bad), "--set", "checkpoint.preset=torchtitan"])
    assert fixed.exit_code == 0, fixed.output


def _hf(d: Path, shards: int, written: int | None = None, empty: str = "") -> None:
    """A Trainer checkpoint with a sharded model: the index names every shard; `written` of them on disk."""
    names = [f"model-{i:05d}-of-{shards:05d}.safetensors" for i in range(1, shards + 1)]
    touch(d / "model.safetensors.index.json",
          json.dumps({"metadata": {"total_size": 9}, "weight_map": {f"w{i}": n for i, n in enumerate(names)}}).encode())
    for n in names[: shards if written is None else written]:
        touch(d / n, b"" if n == empty else b"x")
    touch(d / "trainer_state.json", b"{}")


def test_a_checkpoint_missing_a_shard_its_index_lists_or_with_an_empty_shard_is_not_resumed(tmp_path: Path) -> None:
    """Issue 41 item 4: completeness beyond the marker file: a save cut short (a shard its index lists missing or
    empty, DCP shards without the `.metadata` written last) falls back to the one before; an empty file the index does
    not list proves nothing (a DCP rank with nothing to write leaves one)."""
    _hf(tmp_path / "checkpoint-100", 4)
    _hf(tmp_path / "checkpoint-200", 4, written=3)
    _hf(tmp_path / "checkpoint-300", 4, empty="model-00002-of-00004.safetensors")
    got = find_latest(cfg(tmp_path, "hf"))
    assert got is not None and got.iteration == 100
    _hf(tmp_path / "checkpoint-400", 4)
    touch(tmp_path / "checkpoint-400" / "padding.bin", b"")
    got = find_latest(cfg(tmp_path, "hf"))
    assert got is not None and got.iteration == 400


def test_a_megatron_torch_dist_iteration_without_its_dcp_metadata_is_not_whole(tmp_path: Path) -> None:
    for it, done in ((1000, True), (2000, False)):
        d = tmp_path / f"iter_{it:07d}"
        touch(d / "__0_0.distcp")
        touch(d / "__1_0.distcp")
        touch(d / "common.pt")
        touch(d / "metadata.json", b"{}")
        if done:
            touch(d / ".metadata")
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("2000")
    got = find_latest(cfg(tmp_path, "megatron"))
    assert got is not None and got.iteration == 1000


def test_an_empty_file_beside_the_shards_does_not_make_a_megatron_iteration_incomplete(tmp_path: Path) -> None:
    """What the project's own PyTorch job writes (its save-time padding file, empty when the save is instant), and a
    DCP rank with nothing to write: an empty file alone is no cut-short save."""
    for it in (100, 200):
        touch(tmp_path / f"iter_{it:07d}" / "mp_rank_00" / "model_optim_rng.pt")
        touch(tmp_path / f"iter_{it:07d}" / "mp_rank_00" / "padding.bin", b"")
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("200")
    got = find_latest(cfg(tmp_path, "megatron"))
    assert got is not None and got.iteration == 200
