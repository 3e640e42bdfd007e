"""Issue 40 item 2: another recovery owner inside the job. NVIDIA Resiliency Extension's `ft_launcher` restarts
the ranks in the allocation itself; when it decides the job must not be restarted (no progress across its restarts,
or its attribution said stop) every launcher exits 93 and says why. The controller honours that: it stops and
alerts, it does not resubmit a segment the job's own supervisor gave up on. Texts: NVRx's launcher
(`NoRestartRequested`, `DEFAULT_NO_RESTART_EXIT_CODE = 93`) and its progress tracker."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from orchestrator.model import Action, RunStatus
from tests.fakes import Fault
from tests.unit.test_blind14_readings import _diagnose, _said, _steps
from tests.unit.test_controller_fake import make

RESTART = "[default] Worker group FAILED. 3/3 attempts left; will restart worker group"
NO_PROGRESS = ("[NVRx] [ERROR] NVRx decided the job must not be restarted (no_progress): Progress tracker detected no "
               "progress across restarts.. Agent's exit code = 93")
ATTRIBUTION = ("Rendezvous closed because NVRx decided the job must not be restarted (attribution_stop). Original "
               "rendezvous message: The node 'nid001-4711' has closed the rendezvous 'ft_rdzv_4711'.")
TRACKER = "[default] Progress tracker detected no progress across restarts. No more restarts will be attempted."
BUG = "ValueError: Expected input batch_size (16) to match target batch_size (8)."


@pytest.mark.parametrize("said", [NO_PROGRESS, ATTRIBUTION, TRACKER])
def test_the_jobs_own_supervisor_deciding_not_to_restart_stops_the_run(tmp_path: Path, said: str) -> None:
    files = {f"nid00{i}.out": [*_steps(), RESTART, *_steps(start=90), "Traceback (most recent call last):", BUG,
                               said] for i in (1, 2, 3)}
    d = _diagnose(tmp_path, files)
    assert _said(d) == ("user_bug", [], "stop_and_alert"), d["reason"]
    assert d["rule"] == "supervisor_no_restart" and "NVRx ft_launcher" in d["reason"], d["reason"]


def test_a_hardware_fault_before_the_no_restart_is_named_and_the_decision_stays_the_supervisors(tmp_path: Path) -> None:
    ecc = "RuntimeError: CUDA error: uncorrectable ECC error encountered"
    files = {"nid001.out": [*_steps(), ecc, NO_PROGRESS], "nid002.out": [*_steps(), NO_PROGRESS]}
    d = _diagnose(tmp_path, files)
    assert d["action"] == "stop_and_alert" and d["rule"] == "supervisor_no_restart", d["reason"]
    assert "hardware reported on nid001" in d["reason"]


def test_ft_launchers_own_restarts_without_a_no_restart_decision_are_judged_as_usual(tmp_path: Path) -> None:
    ecc = "RuntimeError: CUDA error: uncorrectable ECC error encountered"
    files = {"nid001.out": [*_steps(), RESTART, ecc], "nid002.out": [*_steps(), RESTART],
             "nid003.out": [*_steps(), RESTART]}
    d = _diagnose(tmp_path, files)
    assert d["rule"] != "supervisor_no_restart" and d["culprit_nodes"] == ["nid001"], d["reason"]


def test_live_a_no_restart_exit_stops_the_run_after_one_segment(tmp_path: Path) -> None:
    ctl, cluster, _ = make(tmp_path, {"all": Fault("ft_stop", at=12)})
    state = ctl.run()
    assert state.status == RunStatus.STOPPED and len(cluster.submitted) == 1, state.stop_reason
    s1 = state.segments[0]
    assert s1.action == Action.STOP_AND_ALERT and s1.rule == "supervisor_no_restart", s1.reason
    assert not state.blacklist.entries


FT_SCRIPT = """#!/bin/bash
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --time=04:00:00
export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)
srun {launcher} --ft-cfg-path ft.yaml {restarts} --nnodes=2 --nproc-per-node=8 --rdzv-backend=c10d \\
  --rdzv-endpoint=$MASTER_ADDR:29500 train.py --save ckpts --load ckpts
"""


@pytest.mark.parametrize(("launcher", "restarts", "said"), [
    ("ft_launcher", "--max-restarts 3", "--max-restarts 3"), ("ft_launcher", "--max-restarts=5", "--max-restarts 5"),
    ("/opt/venv/bin/ft_launcher", "", "--max-restarts 0"), ("torchrun", "--max-restarts 3", None)])
def test_an_imported_ft_launcher_keeps_its_in_job_restarts_and_the_controller_holds_no_spares(
        tmp_path: Path, launcher: str, restarts: str, said: str | None) -> None:
    from orchestrator.importer import import_sbatch
    from orchestrator.settings import ConfigError, load_settings, parse_overrides

    cfg, notes = import_sbatch(FT_SCRIPT.format(launcher=launcher, restarts=restarts), "ft", workdir=str(tmp_path))
    owner = [n for n in notes if n.startswith("IN-JOB RESTARTS")]
    assert (owner == []) if said is None else (said in owner[0] and "exit 93" in owner[0]), notes
    cfg.update(run_dir=str(tmp_path / "run"), backend={"kind": "local"})
    cfg["resources"]["spare_nodes"] = 2
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    if said is None:
        return
    with pytest.raises(ConfigError) as err:  # two owners of the restarts inside one job: one clear line
        load_settings(path, parse_overrides([]))
    assert "resources.spare_nodes=2 with a command that runs NVRx's ft_launcher" in str(err.value)
    load_settings(path, parse_overrides(["resources.spare_nodes=0"]))
