"""Issue 23: the run as Prometheus metrics in run_dir/metrics.prom, written atomically after every poll, for
node_exporter's textfile collector (prometheus_client writes the format and the atomic rename)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from orchestrator.views.metrics import METRICS_FILE, write_metrics
from tests.fakes import Fault
from tests.unit.test_controller_fake import make


def samples(path: Path) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(path.read_text()) for s in fam.samples}


def test_a_run_exports_its_progress_ettr_losses_restarts_and_blacklist(tmp_path: Path) -> None:
    ctl, _, _ = make(tmp_path, {"node3": Fault("ecc", at=35)})
    assert ctl.run().segments
    got = samples(ctl.s.run_dir / METRICS_FILE)
    run = (("run", "t"),)
    assert got[("orchestrator_iteration", run)] == 50 and got[("orchestrator_goal_iteration", run)] == 50
    assert got[("orchestrator_running", run)] == 0 and got[("orchestrator_segments", run)] == 2
    assert 0 < got[("orchestrator_effective_training_time_ratio", run)] < 1
    assert got[("orchestrator_lost_seconds", (("cause", "gpu_ecc"), ("run", "t")))] > 0
    assert got[("orchestrator_restarts", (("kind", "new_job"), ("run", "t")))] == 1
    assert got[("orchestrator_blacklisted_nodes", run)] == 1
    # issue 40: per node, its strikes with the reason an admin gives `scontrol update ... State=DRAIN`
    struck = {dict(k[1])["node"]: (dict(k[1]), v) for k, v in got.items() if k[0] == "orchestrator_node_strikes"}
    labels, strikes = struck["node3"]
    assert strikes == 1 and labels["cause"] == "gpu_ecc" and labels["hard"] == "true"
    assert labels["reason"].startswith("[node_problem] orchestrator t: gpu_ecc job 101: ")
    assert len(labels["reason"]) <= 200
    assert ("orchestrator_job_seen_timestamp_seconds", run) in got


def test_a_write_killed_half_way_leaves_the_previous_file_whole(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    ctl, _, clock = make(tmp_path)
    state = ctl.run()
    path = tmp_path / "m.prom"
    write_metrics(path, state, clock.now(), None)
    before = path.read_text()

    def killed(*_: object) -> None:
        raise KeyboardInterrupt("killed between the write and the rename")

    monkeypatch.setattr(os, "replace", killed)
    monkeypatch.setattr(os, "rename", killed)
    with pytest.raises(KeyboardInterrupt):
        write_metrics(path, state.evolve(target_iteration=999), clock.now(), None)
    assert path.read_text() == before and samples(path)[("orchestrator_goal_iteration", (("run", "t"),))] == 50


def test_every_segment_of_a_run_continues_one_wandb_run_unless_env_says_otherwise(tmp_path: Path) -> None:
    """Issue 23: W&B continuity across segments: a stable WANDB_RUN_ID per run and WANDB_RESUME=allow."""
    ctl, cluster, _ = make(tmp_path, {"node3": Fault("ecc", at=35)})
    ctl.run()
    ids = {dict(spec.env)["WANDB_RUN_ID"] for spec in cluster.submitted}
    assert len(cluster.submitted) == 2 and len(ids) == 1 and ids.pop().startswith("t-")
    assert all(dict(spec.env)["WANDB_RESUME"] == "allow" for spec in cluster.submitted)
    (tmp_path / "own").mkdir()
    ctl, cluster, _ = make(tmp_path / "own", env={"WANDB_RUN_ID": "mine"})
    ctl.run()
    assert dict(cluster.submitted[0].env)["WANDB_RUN_ID"] == "mine"
