"""Issue 41 on the real test cluster, with the real PyTorch job (scripts/torch_train.py): a batch of NaN on node2's
ranks at iteration 330 turns every rank's weights and printed loss NaN, and the job trains on. The controller reads
the printed loss, cancels the segment, judges it `loss_anomaly` (the numerics, not a node) and resumes from the
newest checkpoint written before 330; the bad batch does not come back and the run finishes. Checkpoint 350, written
after the onset, is never resumed from."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.slurm.conftest import orch, status, uniq
from tests.slurm.test_torch_scenarios import torch_available, torch_config

pytestmark = pytest.mark.slurm


def test_a_nan_batch_is_rolled_back_to_a_checkpoint_before_it_and_the_run_finishes(cluster: None,
                                                                                  tmp_path: Path) -> None:
    torch_available()
    cfg = torch_config(tmp_path, uniq("tnan"), 500, "--fault=nan_once:node2:330", "--collective-timeout=600")
    res = orch("run", str(cfg), timeout=500)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    st = status(cfg)
    s1, s2 = st["segments"][0], st["segments"][1]
    assert s1["cause"] == "loss_anomaly" and s1["decision_rule"] == "loss_rollback" and s1["culprit_nodes"] == [], s1
    assert s1["cancelled"].startswith("the loss went nan at iteration 330"), s1["cancelled"]
    assert s1["rollback_below"] == 330 and s1["end_iteration"] >= 331
    assert s2["resumed_from"].endswith("iter_0000300") and s2["start_iteration"] == 300, s2
    assert st["state"] == "done" and len(st["segments"]) == 2 and not st["blacklist"]
    assert st["checkpoints_suspect_from"] is None  # segment 2 trained past 330 with a sound loss
    # what a save of the real job blocks it, timed from its save lines, and the interval advice built on it
    assert s1["checkpoint_write_s"] is not None and st["metrics"]["checkpoint_write_s"] is not None, s1
    assert "s checkpoint write (timed)" in s2["interval_advice"], s2["interval_advice"]
