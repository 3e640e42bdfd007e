"""Issue 36: training inside a real container on the test cluster. Each node's agent runs where the orchestrator is
installed and starts the ranks with `podman run` in an image that holds Debian's python3 and numpy and not the
orchestrator (`scripts/container-image.sh build`, no registry). The job completes; a rank frozen inside its
container is named and its node excluded, the next segment resumes; no container and no rank outlives its
segment (podman's containers are outside the Slurm step: the agent stops them itself)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.slurm.conftest import TESTBED, make_config, orch_bg, progressing, sh, status, uniq, wait_until

pytestmark = pytest.mark.slurm
IMAGE = os.environ.get("ORCH_TEST_IMAGE", "localhost/orch-train:numpy")
HANG_WATCH = {"poll_interval_s": 1, "stall_timeout_s": 15, "startup_timeout_s": 120, "cascade_grace_s": 3}


@pytest.fixture(scope="module")
def image() -> str:
    """The test image, or a skip (a failure under CI, which builds it: ORCH_REQUIRE_CONTAINERS=1)."""
    why = ""
    if shutil.which("podman") is None:
        why = "podman is not installed (scripts/container-image.sh install)"
    elif subprocess.run(["podman", "image", "exists", IMAGE], check=False).returncode != 0:
        why = f"no image {IMAGE} (ORCH_IMAGE_NUMPY=1 scripts/container-image.sh build {IMAGE})"
    if why and os.environ.get("ORCH_REQUIRE_CONTAINERS") == "1":
        pytest.fail(why)
    if why:
        pytest.skip(why)
    return IMAGE


def _ranks_left(tmp_path: Path) -> list[str]:
    """Processes of this test's training still running anywhere on the machine (inside containers too: the
    host sees every container's processes). podman's own records are not asked: a monitor that Slurm's
    KillWait SIGKILLs before it could clean up leaves a record that says "Up" with nothing behind it."""
    return subprocess.run(["pgrep", "-f", f"demo_train.py.*{tmp_path}"], capture_output=True, text=True,
                          check=False).stdout.split()


def _podman_config(tmp_path: Path, name: str, image: str, **over: object) -> Path:
    """The Slurm demo's training, each rank started by `podman run` in the image, as a user's launch line would."""
    cfg = make_config(tmp_path, name, **over)  # type: ignore[arg-type]
    import yaml

    data = yaml.safe_load(cfg.read_text())
    train = data["command"][1:]  # scripts/demo_train.py and its arguments (after {python})
    data["command"] = ["podman", "run", "--rm", "--network=host", "--label", f"orch-test={name}",
                       # the rank's environment (RANK, WORLD_SIZE, ORCH_*), the image's own PATH
                       "--env-host", "-e", "PATH=/usr/local/bin:/usr/bin:/bin",
                       "-v", f"{REPO}:{REPO}:ro", "-v", f"{tmp_path}:{tmp_path}", "-w", str(REPO),
                       image, "python3", *train]
    cfg.write_text(yaml.safe_dump(data))
    return cfg


def test_a_rank_frozen_inside_its_container_is_named_excluded_and_the_run_resumes(cluster: None, image: str,
                                                                                   tmp_path: Path) -> None:
    name = uniq("ctr")
    cfg = _podman_config(tmp_path, name, image, iters=200, step=0.1, collective_timeout=600, watch=HANG_WATCH)
    proc = orch_bg("run", str(cfg), log=tmp_path / "ctl.log")
    try:
        wait_until(lambda: progressing(cfg, 20), 180, "segment 1 to make progress inside the containers")
        sh(str(TESTBED), "freeze-rank", "node2", "demo_train")
        assert proc.wait(timeout=500) == 0, (tmp_path / "ctl.log").read_text()[-3000:]
    finally:
        sh(str(TESTBED), "thaw-job", "node2", check=False)
        proc.kill() if proc.poll() is None else None
    st = status(cfg)
    s1 = st["segments"][0]
    assert s1["cause"] == "hang" and s1["culprit_nodes"] == ["node2"], (s1, (tmp_path / "ctl.log").read_text()[-3000:])
    assert all("node2" in s["excluded"] and "node2" not in s["nodes"] for s in st["segments"][1:])
    assert st["segments"][1]["start_iteration"] > 0 and st["state"] == "done"
    # the frozen rank was seen in its container: the node's dump holds the image's python, not only the client
    dump = (tmp_path / "run" / "segments" / "0001" / "nodes" / "node1.dump.json").read_text()
    assert "demo_train" in dump
    # nothing of the cancelled segment outlives it: every rank in its container is gone
    wait_until(lambda: not _ranks_left(tmp_path), 60, "the test's ranks, in their containers, to be gone")
