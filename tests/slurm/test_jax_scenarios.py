"""Issue 39 item 5: a second framework whose collectives are not torch's. A real JAX job (scripts/jax_train.py:
`jax.distributed` with gloo collectives across processes, one process per node, MaxText's progress lines) on 3 nodes
of the test cluster, with the default watch settings: a process frozen on node2 (the testbed's cgroup freezer, while
the others block inside JAX's all-gather) is named from the stacks and the frozen state, without any torch frame, long
before the 20-minute stall limit; node2 is excluded and the job resumes from its checkpoint to the end."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO
from tests.slurm.conftest import TESTBED, make_config, progressing, sh, slurm_env, status, uniq, wait_until

pytestmark = pytest.mark.slurm


def jax_available() -> None:
    if importlib.util.find_spec("jax") is None:
        if os.environ.get("ORCH_REQUIRE_SLURM") == "1":
            pytest.fail("jax is not installed (the dev extras install jax[cpu])")
        pytest.skip("jax is not installed")


def test_a_frozen_jax_process_is_named_without_torch_frames_and_the_job_resumes(cluster: None, tmp_path: Path) -> None:
    jax_available()
    steps = 1500
    cfg = make_config(tmp_path, uniq("jax"), iters=steps)
    data = yaml.safe_load(cfg.read_text())
    data["command"] = ["{python}", str(REPO / "scripts" / "jax_train.py"), f"--steps={steps}", "--ckpt-every=50",
                       "--ckpt-dir={run_dir}/checkpoints", "--resume={checkpoint}", "--step-time=0.05"]
    data["env"] = {"OMP_NUM_THREADS": "1", "XLA_FLAGS": "--xla_force_host_platform_device_count=1"}
    data["watch"] = {}  # the defaults: 5 s poll, 20 min stall limit
    cfg.write_text(yaml.safe_dump(data))
    log = tmp_path / "ctl.log"
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "run", str(cfg)], stdout=log.open("ab"),
                            stderr=subprocess.STDOUT, env={**slurm_env(), "PYTHONPATH": str(REPO)}, cwd=REPO)
    try:
        wait_until(lambda: progressing(cfg, 120), 300, "segment 1 to make progress")
        sh(str(TESTBED), "freeze-rank", "node2", "jax_train")
        assert proc.wait(timeout=600) == 0, log.read_text()[-3000:]
    finally:
        sh(str(TESTBED), "thaw-job", "node2", check=False)
        proc.kill() if proc.poll() is None else None
    st = status(cfg)
    s1 = st["segments"][0]
    assert s1["cause"] == "hang" and s1["culprit_nodes"] == ["node2"], (s1, log.read_text()[-3000:])
    assert not s1["cancelled"].startswith("stall"), s1  # named early, not by the 20-minute stall limit
    assert all("node2" not in s["nodes"] for s in st["segments"][1:])
    assert st["segments"][1]["start_iteration"] > 0 and st["state"] == "done"
