"""Issue 38: `orchestrator diagnose JOBID` finds a finished job's output as an operator would, on real output of
the test cluster (tests/data/slurmjob/README.md): scontrol while slurmctld holds the job, then sacct (and the batch
script where the site keeps it), else slurm-%j.out in the working directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.backends.slurm_commands import CommandFailed
from orchestrator.backends.slurmjob import JobLogs, JobNotFound, expand_pattern, find_job_logs
from orchestrator.model import JobState
from orchestrator.offline.diagnosis import diagnose_dir
from tests.conftest import REPO

DATA = REPO / "tests" / "data" / "slurmjob"
GONE = "slurm_load_jobs error: Invalid job id specified"  # scontrol, once MinJobAge has passed
SCRIPT = """Batch Script for 402
--------------------------------------------------------------------------------
#!/bin/bash
#SBATCH --job-name=keyerr
#SBATCH --nodes=1
#SBATCH --output=logs/%x-%j.log
#SBATCH -e 'logs/%x-%j.err'
srun python3 train.py
"""


def runner(tmp_path: Path, answers: dict[str, str | None]):  # type: ignore[no-untyped-def]
    def run(argv: list[str], timeout: float) -> str:
        key = " ".join(argv[:3]) if argv[0] == "scontrol" else ("sacct -B" if "-B" in argv else "sacct")
        answer = answers[key]
        if answer is None:
            raise CommandFailed(argv, GONE)
        return answer.replace("SJDIR", str(tmp_path))
    return run


def test_scontrol_names_the_output_while_slurm_holds_the_job(tmp_path: Path) -> None:
    (tmp_path / "keyerr-402.log").write_text((DATA / "keyerr-402.log").read_text())
    shown = (DATA / "scontrol-show-job-402.txt").read_text()
    job = find_job_logs("402", runner(tmp_path, {"scontrol show job": shown}))
    assert job.files == [tmp_path / "keyerr-402.log"] and job.state == JobState.FAILED
    assert job.nodes == ["node1"] and job.name == "keyerr" and job.workdir == str(tmp_path)
    got = diagnose_dir(job.files[0].parent, files=job.files, job_state=job.state)
    assert got["cause"] == "user_bug" and got["action"] == "stop_and_alert"


def test_after_slurm_forgot_it_sacct_gives_the_directory_and_slurm_out_is_the_default(tmp_path: Path) -> None:
    (tmp_path / "slurm-402.out").write_text((DATA / "keyerr-402.log").read_text())
    kept = (DATA / "sacct-B-402-not-kept.txt").read_text()
    job = find_job_logs("402", runner(tmp_path, {"scontrol show job": None, "sacct": (DATA / "sacct-402.txt")
                                                .read_text(), "sacct -B": kept}))
    assert job.files == [tmp_path / "slurm-402.out"] and job.state == JobState.FAILED and job.user == "root"


def test_the_kept_batch_script_names_the_output_as_sbatch_expands_it(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    for name in ("keyerr-402.log", "keyerr-402.err"):
        (tmp_path / "logs" / name).write_text("x\n")
    job = find_job_logs("402", runner(tmp_path, {"scontrol show job": None, "sacct": (DATA / "sacct-402.txt")
                                                .read_text(), "sacct -B": SCRIPT}))
    assert job.files == [tmp_path / "logs" / "keyerr-402.log", tmp_path / "logs" / "keyerr-402.err"]


def test_nothing_found_says_what_was_tried(tmp_path: Path) -> None:
    with pytest.raises(JobNotFound) as err:
        find_job_logs("402", runner(tmp_path, {"scontrol show job": None, "sacct": "", "sacct -B": ""}))
    assert "Invalid job id specified" in str(err.value) and "sacct: no job 402" in str(err.value)
    with pytest.raises(JobNotFound, match="not a Slurm job id"):
        find_job_logs("402; rm -rf /", runner(tmp_path, {}))


def test_filename_patterns_expand_as_sbatch_does() -> None:
    job = JobLogs(job_id="7_3", name="train", user="ann", nodes=["gpu01", "gpu02"], workdir="/w")
    assert expand_pattern("%x-%A_%a.out", job) == "/w/train-7_3.out"
    assert expand_pattern("/abs/%u/%j-%N.log", job) == "/abs/ann/7-gpu01.log"
    assert expand_pattern("%5j%%.txt", job) == "/w/00007%.txt"
