from __future__ import annotations

import json
import zipfile
from pathlib import Path

from orchestrator.checkpoint import Checkpoint, find_latest
from orchestrator.settings import CheckpointCfg


def cfg(d: Path, preset: str, **kw: str) -> CheckpointCfg:
    return CheckpointCfg(dir=d, preset=preset, **kw)


def found(c: CheckpointCfg, failed: frozenset[str] = frozenset()) -> Checkpoint:
    """find_latest, asserting that it found a checkpoint."""
    latest = find_latest(c, failed)
    assert latest is not None
    return latest


def touch(p: Path, data: bytes = b"x") -> None:
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data)


def test_megatron_tracker_marks_completeness(tmp_path: Path) -> None:
    touch(tmp_path / "iter_0000100/mp_rank_00/model_optim_rng.pt")
    touch(tmp_path / "iter_0000200/mp_rank_00/model_optim_rng.pt")
    assert find_latest(cfg(tmp_path, "megatron")) is None  # no tracker yet: nothing is complete
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("100\n")
    c = find_latest(cfg(tmp_path, "megatron"))
    assert c and c.iteration == 100 and c.path.endswith("iter_0000100")  # 200 is being written
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("200")
    assert found(cfg(tmp_path, "megatron")).iteration == 200
    # a newest checkpoint that failed to load is skipped: fall back to the previous one
    assert found(cfg(tmp_path, "megatron"), frozenset({str(tmp_path / "iter_0000200")})).iteration == 100


def test_megatron_tracker_pointing_at_missing_dir(tmp_path: Path) -> None:
    touch(tmp_path / "iter_0000010/mp_rank_00/model_optim_rng.pt")
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("20")
    assert found(cfg(tmp_path, "megatron")).iteration == 10


def test_deepspeed_latest_tag(tmp_path: Path) -> None:
    touch(tmp_path / "global_step50/mp_rank_00_model_states.pt")
    touch(tmp_path / "global_step100/mp_rank_00_model_states.pt")
    (tmp_path / "global_step150").mkdir()  # partial: no model states yet
    (tmp_path / "latest").write_text("global_step100")
    c = find_latest(cfg(tmp_path, "deepspeed"))
    assert c and c.path.endswith("global_step100") and c.iteration == 100
    assert found(cfg(tmp_path, "deepspeed"), frozenset({c.path})).iteration == 50


def test_hf_trainer_state_is_written_last(tmp_path: Path) -> None:
    touch(tmp_path / "checkpoint-500/model.safetensors")
    touch(tmp_path / "checkpoint-500/trainer_state.json", json.dumps({"global_step": 500}).encode())
    touch(tmp_path / "checkpoint-1000/model.safetensors")  # partial
    c = find_latest(cfg(tmp_path, "hf"))
    assert c and c.iteration == 500


def _zip(p: Path) -> None:
    p.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(p, "w") as z:
        z.writestr("archive/data.pkl", b"weights")


def test_lightning_truncated_ckpt_is_partial(tmp_path: Path) -> None:
    _zip(tmp_path / "epoch=1-step=300.ckpt")
    _zip(tmp_path / "last.ckpt")
    full = (tmp_path / "last.ckpt").read_bytes()
    assert found(cfg(tmp_path, "lightning")).path.endswith("last.ckpt")
    (tmp_path / "last.ckpt").write_bytes(full[: len(full) // 2])  # crash while writing
    c = find_latest(cfg(tmp_path, "lightning"))
    assert c and c.path.endswith("epoch=1-step=300.ckpt") and c.iteration == 300


def test_glob_with_marker(tmp_path: Path) -> None:
    touch(tmp_path / "step_0900/weights.bin")
    touch(tmp_path / "step_0900/COMPLETE")
    touch(tmp_path / "step_1000/weights.bin")  # no marker: partial
    c = find_latest(cfg(tmp_path, "glob", glob="step_*", marker="COMPLETE"))
    assert c and c.iteration == 900
    # without a marker, any non-empty entry counts; the highest step wins
    assert found(cfg(tmp_path, "glob", glob="step_*")).iteration == 1000


def test_missing_dir_means_start_from_scratch(tmp_path: Path) -> None:
    for preset in ("megatron", "deepspeed", "hf", "lightning"):
        assert find_latest(cfg(tmp_path / "nothing", preset)) is None
