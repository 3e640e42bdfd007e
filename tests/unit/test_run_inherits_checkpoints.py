"""Issue 23: `--set run_dir=NEW` with the old checkpoint.dir "resumed" a finished run without a word. A new run
directory over checkpoints is legal (a moved run) but said, with the checkpoint and whether the goal is met."""

from __future__ import annotations

from pathlib import Path

import pytest
from loguru import logger

from orchestrator.cli.run import _say_inherited
from orchestrator.settings import load_settings
from orchestrator.state import StateStore
from tests.conftest import base_config, write_config


def _warnings(tmp_path: Path, iteration: int | None, goal: int) -> list[str]:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    if iteration is not None:
        (ckpt / f"iter_{iteration:07d}").mkdir()
        (ckpt / f"iter_{iteration:07d}" / "model.pt").write_bytes(b"weights")
        (ckpt / "latest_checkpointed_iteration.txt").write_text(str(iteration))
    s = load_settings(write_config(tmp_path, base_config(tmp_path, checkpoint={"dir": str(ckpt)},
                                                         goal={"target_iteration": goal})))
    said: list[str] = []
    sink = logger.add(lambda m: said.append(str(m)), level="WARNING")
    try:
        _say_inherited(s, StateStore(s.run_dir))
    finally:
        logger.remove(sink)
    return said


@pytest.mark.parametrize(("iteration", "goal", "reached"), [(50, 50, True), (30, 50, False)])
def test_a_new_run_dir_over_existing_checkpoints_is_said(tmp_path: Path, iteration: int, goal: int,
                                                         reached: bool) -> None:
    said = _warnings(tmp_path, iteration, goal)
    assert len(said) == 1 and f"iter_{iteration:07d}" in said[0] and "segment 1 resumes from it" in said[0]
    assert ("goal is already reached" in said[0]) == reached


def test_a_new_run_over_an_empty_checkpoint_dir_says_nothing(tmp_path: Path) -> None:
    assert _warnings(tmp_path, None, 50) == []
