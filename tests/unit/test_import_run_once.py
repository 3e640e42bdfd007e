"""Issue 23: lines of a batch script before the training launch ran once under sbatch (data preparation, a
DeepSpeed config written by a here-document, a download); imported, they must still run once (the batch
script's setup), while what shapes the launch's shell (variables, sourced files) runs on every node.

The imported setup and per-node script are executed for real with bash: a stub `python` records each call."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from orchestrator.backends.slurm import SlurmBackend
from orchestrator.importer import import_sbatch
from orchestrator.settings import load_settings
from tests.conftest import base_config, write_config

SCRIPT = """#!/bin/bash
#SBATCH -N 2
#SBATCH --ntasks-per-node=1
set -e
source $SITE/env.sh
export DATA=$WORK/data
mkdir -p $DATA
echo "START TIME: $(date)"
python prepare_data.py --out $DATA
cat > $DATA/ds_config.json <<EOF
{"train_batch_size": 8}
EOF
if [ ! -f $DATA/tokenizer.json ]; then
    python download.py --to $DATA
fi
MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
srun --ntasks-per-node=1 python train.py --data $DATA --ds $DATA/ds_config.json --from-site $FROM_SITE
"""


def _stubs(tmp: Path) -> dict[str, str]:
    bindir = tmp / "bin"
    bindir.mkdir()
    for name, body in (("python", 'echo "python $*" >> "$CALLS"\n'), ("scontrol", "echo n1\n")):
        (bindir / name).write_text(f"#!/bin/sh\n{body}")
        (bindir / name).chmod(0o755)
    (tmp / "site").mkdir()
    (tmp / "site" / "env.sh").write_text("export FROM_SITE=yes\n")
    return {"PATH": f"{bindir}:{os.environ['PATH']}", "CALLS": str(tmp / "calls"), "SITE": str(tmp / "site"),
            "WORK": str(tmp / "work"), "SLURM_JOB_NODELIST": "n1,n2"}


def _run_setup(setup: list[str], env_file: Path | None, env: dict[str, str],
               cwd: Path) -> subprocess.CompletedProcess[str]:
    head = f"ORCH_SETUP_ENV={env_file}\n" if env_file else ""
    return subprocess.run(["bash", "-c", head + "\n".join(setup) + "\necho BATCH-CONTINUES"], capture_output=True,
                          text=True, env=env, timeout=30, check=False, cwd=cwd)


def test_work_before_the_launch_runs_once_and_variables_on_every_node(tmp_path: Path) -> None:
    cfg, notes = import_sbatch(SCRIPT, "prep", workdir=str(tmp_path))
    setup = cfg["backend"]["slurm"]["setup"]
    once = [n for n in notes if n.startswith("RUN ONCE:")]
    assert once and "python prepare_data.py" in once[0] and "cat > $DATA/ds_config.json" in once[0]
    env = _stubs(tmp_path)
    # the run's environment (config env) reaches the setup through the file the Slurm backend writes
    env_file = tmp_path / "setup.env"
    env_file.write_text("".join(f"export {k}='{v}'\n" for k, v in env.items() if k != "PATH"))
    batch = _run_setup(setup, env_file, {"PATH": env["PATH"], "HOME": str(tmp_path)}, tmp_path)
    assert batch.returncode == 0 and "BATCH-CONTINUES" in batch.stdout, batch.stderr
    assert "START TIME" in batch.stdout
    assert (tmp_path / "work" / "data" / "ds_config.json").read_text().strip() == '{"train_batch_size": 8}'
    for node in ("n1", "n2"):  # the per-node script, as the agent runs it on each node
        res = subprocess.run(cfg["command"][:3], capture_output=True, text=True, env={**env, "NODE": node},
                             cwd=tmp_path, timeout=30, check=False)
        assert res.returncode == 0, res.stderr
        assert "START TIME" not in res.stdout
    calls = (tmp_path / "calls").read_text().splitlines()
    assert sum("prepare_data.py" in c for c in calls) == 1
    assert sum("download.py" in c for c in calls) == 1
    train = [c for c in calls if "train.py" in c]
    assert len(train) == 2 and all(f"--data {tmp_path}/work/data" in c and "--from-site yes" in c for c in train)


@pytest.mark.parametrize(("strict", "rc"), [("set -e\n", 1), ("", 0)])
def test_the_setup_stops_the_batch_script_where_the_original_stopped(tmp_path: Path, strict: str, rc: int) -> None:
    """Under sbatch, `set -e` and a failed preparation ended the job before the launch; without it the job went on."""
    script = f"#!/bin/bash\n#SBATCH -N 2\n{strict}false\nmkdir -p out\nsrun python train.py\n"
    cfg, _ = import_sbatch(script, "x", workdir=str(tmp_path))
    res = _run_setup(cfg["backend"]["slurm"]["setup"], None, {"PATH": os.environ["PATH"]}, tmp_path)
    assert ("BATCH-CONTINUES" in res.stdout) == (rc == 0)
    assert (res.returncode != 0) == bool(rc)


def test_a_launch_inside_a_block_keeps_the_block_and_moves_the_work_before_it(tmp_path: Path) -> None:
    script = ("#!/bin/bash\n#SBATCH -N 2\npython prep.py\nfor i in 1 2; do\n  export X$i=1\ndone\n"
              "if [ -n \"$GO\" ]; then\n  srun python train.py\nfi\n")
    cfg, notes = import_sbatch(script, "x", workdir=str(tmp_path))
    per_node = cfg["command"][2]
    assert "python prep.py" in cfg["backend"]["slurm"]["setup"][0]
    assert "\npython prep.py" not in per_node and "export X$i=1" in per_node
    assert 'if [ -n "$GO" ]; then' in per_node and "python train.py" in per_node


def test_a_block_that_sets_variables_and_works_stays_on_every_node_with_a_note(tmp_path: Path) -> None:
    script = ("#!/bin/bash\n#SBATCH -N 2\nif [ -n \"$CONFIG\" ]; then\n  cp $CONFIG /tmp/c.yaml\n  CONFIG=/tmp/c.yaml\n"
              "fi\nsrun python train.py --config $CONFIG\n")
    cfg, notes = import_sbatch(script, "x", workdir=str(tmp_path))
    assert "cp $CONFIG /tmp/c.yaml" in cfg["command"][2]
    assert any("both sets variables and does work" in n for n in notes)
    assert "slurm" not in cfg["backend"]  # nothing to run once: no setup


def test_only_variables_before_the_launch_make_no_setup(tmp_path: Path) -> None:
    script = "#!/bin/bash\n#SBATCH -N 2\nmodule load cuda\nexport A=1\nB=$(hostname)\nsrun python train.py\n"
    cfg, notes = import_sbatch(script, "x", workdir=str(tmp_path))
    assert "slurm" not in cfg["backend"] and not any(n.startswith("RUN ONCE") for n in notes)


def test_the_slurm_backend_hands_the_setup_the_runs_environment_privately(tmp_path: Path) -> None:
    from orchestrator.blacklist import ExcludePlan
    from orchestrator.clock import FakeClock
    from orchestrator.plan import plan
    from orchestrator.state import RunState

    raw = base_config(tmp_path, backend={"kind": "slurm", "slurm": {"setup": ["echo once"]}},
                      env={"WANDB_API_KEY": "it's-secret", "DATA": "/d"})
    s = load_settings(write_config(tmp_path, raw))
    clock = FakeClock()
    state = RunState(run=s.name, created_at=clock.now(), updated_at=clock.now())
    spec = plan(s, state, None, ExcludePlan(nodes=()), "py")
    backend = SlurmBackend(s.backend.slurm, clock, s.run_dir, runner=lambda argv, t: "")
    backend._write_setup_env(spec)
    path = SlurmBackend.setup_env(spec)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    out = subprocess.run(["bash", "-c", f'set -a; . "{path}"; echo "$WANDB_API_KEY|$DATA"'], capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == "it's-secret|/d"
    assert backend._params(spec)["setup"][0].startswith("ORCH_SETUP_ENV=")


def test_the_local_backend_refuses_setup_lines_it_would_not_run(tmp_path: Path) -> None:
    raw = base_config(tmp_path, backend={"kind": "local", "slurm": {"setup": ["python prepare.py"]}})
    with pytest.raises(Exception, match="backend.slurm.setup"):
        load_settings(write_config(tmp_path, raw))
