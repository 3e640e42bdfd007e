"""Issue 36: a pyxis launch, imported as a user would (`srun --container-image=... --container-mounts=...`), runs its
ranks in the image while the agents stay on the host, with nothing of the orchestrator in the image.

The test cluster has no pyxis (no SPANK plugin is built here), so the `srun` first on the jobs' PATH is a stand-in
for it: an srun whose `--container-*` options make each task run as enroot runs it, in a mount namespace of its own
chrooted into the unpacked image (Debian's python3 and numpy, no orchestrator), the host's process namespace shared,
the mounts bound, the workdir entered; every other option and the step itself go to the real srun. A rank frozen in
the image is named from the agent's dump of the launch's own step, its node excluded, and the run resumes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO
from tests.slurm.conftest import TESTBED, progressing, sh, slurm_env, status, uniq, wait_until
from tests.slurm.test_container_scenarios import HANG_WATCH, image  # noqa: F401 - the image fixture

pytestmark = pytest.mark.slurm

# pyxis's options, done the way enroot does them; what is not a container option goes to the real srun
PYXIS_STANDIN = r"""#!/bin/bash
opts=() image= mounts= workdir=
while [ "$#" -gt 0 ]; do
  case "$1" in
    --container-image=*) image=${1#*=} ;;
    --container-mounts=*) mounts=${1#*=} ;;
    --container-workdir=*) workdir=${1#*=} ;;
    --container-*|--no-container-*) ;;
    -*) opts+=("$1") ;;
    *) break ;;
  esac
  shift
done
[ -n "$image" ] || exec /usr/bin/srun "${opts[@]}" "$@"
echo "pyxis stand-in: $image ($mounts)" >&2
exec /usr/bin/srun "${opts[@]}" unshare --mount --propagation private /bin/bash -c '
  root=$1 mounts=$2 wd=$3; shift 3
  IFS=, read -ra each <<< "$mounts"
  for m in "${each[@]}"; do mkdir -p "$root${m#*:}"; mount --bind "${m%%:*}" "$root${m#*:}"; done
  mount -t proc proc "$root/proc" && mount --rbind /dev "$root/dev"
  exec chroot "$root" /bin/sh -c "cd \"\$0\" && PATH=/usr/local/bin:/usr/bin:/bin exec \"\$@\"" "${wd:-/}" "$@"
' pyxis "$ORCH_TEST_ROOTFS/$image" "$mounts" "$workdir" "$@"
"""


@pytest.fixture(scope="module")
def rootfs(image: str, tmp_path_factory: pytest.TempPathFactory) -> Path:  # noqa: F811 - the fixture above
    """The image unpacked, as enroot keeps it (`podman export` of a container made from it)."""
    base = tmp_path_factory.mktemp("rootfs")
    root = base / image
    root.mkdir(parents=True)
    name = uniq("export")
    subprocess.run(["podman", "create", "--name", name, image, "true"], check=True, capture_output=True)
    try:
        exported = subprocess.Popen(["podman", "export", name], stdout=subprocess.PIPE)
        subprocess.run(["tar", "-x", "-C", str(root)], stdin=exported.stdout, check=True, timeout=300)
        assert exported.wait(timeout=60) == 0
    finally:
        subprocess.run(["podman", "rm", "-f", name], check=False, capture_output=True)
    assert not (root / "usr/lib/python3/dist-packages/orchestrator").exists()
    return base


def _imported(tmp_path: Path, image_name: str) -> Path:
    """The user's batch script, imported by `orchestrator import-sbatch` as they would, then pointed at this test's
    directories (the run's checkpoints are the demo's, Megatron-style)."""
    script = tmp_path / "train.sbatch"
    script.write_text(f"""#!/bin/bash
#SBATCH --nodes=3
#SBATCH --ntasks-per-node=1
#SBATCH --time=10
#SBATCH --job-name=pyx
IMAGE={image_name}
MOUNTS="{REPO}:{REPO},{tmp_path}:{tmp_path}"
srun --container-image=$IMAGE --container-mounts=$MOUNTS --container-workdir={REPO} \\
  python3 scripts/demo_train.py --iters=200 --ckpt-every=10 --ckpt-dir={tmp_path}/run/checkpoints \\
  --resume="$ORCH_RESUME_FROM" --sync-dir="$ORCH_SEGMENT_DIR/sync" --step-time=0.1 --collective-timeout=600
""")
    run, cfg = imported_demo_run(tmp_path, script, "nothing of the orchestrator is needed in the image", 200)
    assert "__orch_rank_step 1 --container-image=$IMAGE" in cfg["command"][2]
    return run


def imported_demo_run(tmp_path: Path, script: Path, said: str, target: int) -> tuple[Path, dict[str, Any]]:
    """`script` imported by `orchestrator import-sbatch` as a user would (its notes must say `said`), then pointed
    at this test's directories (the run's checkpoints are the demo's, Megatron-style): the run's config file."""
    out = tmp_path / "imported.yaml"
    res = subprocess.run([sys.executable, "-m", "orchestrator", "import-sbatch", str(script), "-o", str(out)],
                         capture_output=True, text=True, cwd=tmp_path, timeout=60, check=False,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert res.returncode == 0, res.stderr
    assert said in res.stderr, res.stderr
    cfg: dict[str, Any] = yaml.safe_load(out.read_text())
    cfg.update(run_dir=str(tmp_path / "run"), checkpoint={"dir": str(tmp_path / "run" / "checkpoints"),
                                                          "preset": "megatron"},
               env={"OMP_NUM_THREADS": "1"}, goal={"target_iteration": target}, watch=HANG_WATCH,
               policy={"max_segments": 6, "max_no_progress_segments": 2}, name=uniq(script.stem[:8]))
    cfg["backend"] = {"kind": "slurm", "slurm": {"command_timeout_s": 20}}
    run = tmp_path / "run.yaml"
    run.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return run, cfg


def freeze_a_rank_on_node2_and_see_the_run_resume(cfg: Path, env: dict[str, str], log: Path,
                                                  during: Callable[[], None] | None = None) -> None:
    """Runs the controller; once segment 1 makes progress (and `during` has looked at it), a rank on node2 is frozen:
    the hang is named on node2, node2 is excluded, and the run resumes to its end."""
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "run", str(cfg)],
                            stdout=log.open("ab"), stderr=subprocess.STDOUT, env=env, cwd=REPO)
    try:
        wait_until(lambda: progressing(cfg, 20), 240, "segment 1 to make progress")
        if during is not None:
            during()
        froze = sh(str(TESTBED), "freeze-rank", "node2", "demo_train")
        frozen_at = status(cfg)["segments"][0]
        assert proc.wait(timeout=500) == 0, log.read_text()[-3000:]
    finally:
        sh(str(TESTBED), "thaw-job", "node2", check=False)
        proc.kill() if proc.poll() is None else None
    st = status(cfg)
    s1 = st["segments"][0]
    seg1 = Path(yaml.safe_load(cfg.read_text())["run_dir"]) / "segments" / "0001"
    ends = [f"{p.name}: {line[:200]}" for p in sorted(seg1.rglob("*.log")) + sorted(seg1.rglob("*.out"))
            for line in p.read_text(errors="replace").splitlines()
            if re.search(r"(?i)done|finish|complet", line)]  # what read as the training's end
    assert s1["cause"] == "hang" and s1["culprit_nodes"] == ["node2"], (
        f"segment 1 {s1}\nat the freeze: {froze.stderr.strip()}; segment then {frozen_at}\n"
        f"lines that may read as an end: {ends[-20:]}\ncontroller log:\n{log.read_text()[-3000:]}")
    assert all("node2" not in s["nodes"] for s in st["segments"][1:])
    assert st["segments"][1]["start_iteration"] > 0 and st["state"] == "done"


def test_a_rank_frozen_in_a_pyxis_image_is_named_and_the_run_resumes(cluster: None, image: str,  # noqa: F811
                                                                     rootfs: Path, tmp_path: Path) -> None:
    cfg = _imported(tmp_path, image)
    bindir = tmp_path / "pyxis-bin"
    bindir.mkdir()
    (bindir / "srun").write_text(PYXIS_STANDIN)
    (bindir / "srun").chmod(0o755)
    env = {**slurm_env(), "PATH": f"{bindir}:{os.environ['PATH']}", "ORCH_TEST_ROOTFS": str(rootfs)}
    freeze_a_rank_on_node2_and_see_the_run_resume(cfg, env, tmp_path / "ctl.log")
    seg1 = tmp_path / "run" / "segments" / "0001"
    assert "pyxis stand-in" in (seg1 / "logs" / "node1.log").read_text()  # the ranks ran in the image
    # the ranks of the launch's own step (children of its slurmstepd, not of the agent) were found by their mark and
    # dumped: a healthy node's dump holds the image's python with its stack (the frozen one's py-spy cannot read)
    dump = json.loads((seg1 / "nodes" / "node1.dump.json").read_text())
    ranks = [p for p in dump["processes"] if "demo_train" in p["stack"] and p["top_frame"]]
    assert ranks, dump
