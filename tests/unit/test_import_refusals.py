"""Issue 36: what import-sbatch cannot run as sbatch runs it is refused with one line naming the script's line
and what to do (a hetjob, an MPMD step, one background step per item of a loop with no nodes named, a script with
no launch it knows), and
what the script does once per job stays once per job (its own resubmission taken out, `| tee` of the launch, the
commands after the launch)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.importer import Refused, import_sbatch

HEAD = "#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --time=10\n"


@pytest.mark.parametrize("body,line,said", [
    ("#SBATCH hetjob\n#SBATCH --nodes=1\nsrun python train.py\n", 4, "heterogeneous job"),
    ("#SBATCH packjob\nsrun python train.py\n", 4, "heterogeneous job"),
    ("srun -n1 python server.py : -n8 python train.py\n", 4, "heterogeneous .MPMD. srun step"),
    ("srun --het-group=0,1 python train.py\n", 4, "heterogeneous .MPMD. srun step"),
    ("srun --pack-group=1 python train.py\n", 4, "heterogeneous .MPMD. srun step"),
    # one step per item, sent to the background without its nodes: Slurm placed each where it found room
    ("for cfg in a b c; do\n  srun python3 train.py --cfg $cfg &\ndone\nwait\n", 5,
     r"inside a `for` loop \(line 4\) and sent to the background without the nodes"),
    ("while read -r cfg; do\n  srun python train.py $cfg &\ndone < cfgs.txt\nwait\n", 5,
     r"inside a `while` loop \(line 4\)"),
    ("mkdir -p out\necho starting\nmy_site_launcher --nodes 2\n", None, "no training launch recognised"),
    ("#SBATCH --nodes=9\nsrun --nodes=8 python train.py &\nsrun --nodes=1 -w $HEAD trl vllm-serve &\nwait\n", 5,
     "asks for --nodes 8 in a job of 9 nodes"),
    ("srun --exclude=gpu1 python train.py\n", 4, r"chosen nodes \(--exclude=gpu1\)"),
    ("srun -n1 python train.py\n", 4, "asks for -n 1 in a job of 2 nodes"),
])
def test_what_cannot_run_as_under_sbatch_is_refused_with_its_line(body: str, line: int | None, said: str) -> None:
    with pytest.raises(Refused, match=said) as refused:
        import_sbatch(HEAD + body, "job")
    assert refused.value.line == line


def test_an_srun_step_of_any_program_is_the_launch_and_one_node_runs_the_whole_script() -> None:
    cfg, notes = import_sbatch(HEAD + "srun hostname\nsrun --ntasks-per-node=1 ./run_pretrain.sh --steps 10\n", "job")
    assert "\n./run_pretrain.sh --steps 10" in cfg["command"][2]
    one = "#!/bin/bash\n#SBATCH --nodes=1\n#SBATCH --time=10\n./run_pretrain.sh --steps 10\n"
    cfg, notes = import_sbatch(one, "job")
    assert "./run_pretrain.sh --steps 10" in cfg["command"][2]
    assert any("the whole script runs on the job's one node" in n for n in notes)


def test_sbatch_refuses_a_script_whose_shebang_is_not_on_line_1_and_so_does_the_import() -> None:
    late = "# Copyright (c) 2024, a licence header\n#\n#!/bin/bash\n#SBATCH -N 2 -t 10\nsrun python train.py\n"
    with pytest.raises(Refused, match="the `#!` is on line 3: move it to line 1") as refused:
        import_sbatch(late, "job")
    assert refused.value.line == 1
    _cfg, notes = import_sbatch("#SBATCH -N 2 -t 10\nsrun python train.py\n", "job")
    assert any("no `#!/bin/bash` on line 1" in n for n in notes)


def test_a_script_without_a_launch_or_a_node_count_is_refused_not_run_whole() -> None:
    """An MLPerf run.sub gets its node count from `sbatch -N`; its docker launch is not one we know."""
    body = "#!/bin/bash\n#SBATCH -t 10\n$(eval echo $SRUN) docker exec cont ./run_and_time.sh &\nwait\n"
    with pytest.raises(Refused, match="no #SBATCH --nodes"):
        import_sbatch(body, "job")


def test_tasks_per_node_is_sbatchs_other_spelling_and_x_equals_x_is_a_variable_to_set() -> None:
    body = "#SBATCH --tasks-per-node=4\nset -u\nDIR=${DIR}  # where logs go\nsrun python train.py --out $DIR\n"
    cfg, notes = import_sbatch(HEAD + body, "job")
    assert cfg["resources"]["tasks_per_node"] == 4
    assert any(n.startswith("the script uses variables it does not set") and "DIR" in n for n in notes)


def test_a_function_with_its_body_on_the_next_line_and_a_heredoc_read_stay_on_every_node(tmp_path: Path) -> None:
    body = ("TERM ()\n{\n    echo got TERM\n    scontrol requeue $SLURM_JOB_ID\n}\ntrap TERM SIGTERM\n"
            "read -r -d '' cmd <<EOF\npython train.py --lr 3\nEOF\nsrun bash -c \"${cmd}\"\n")
    cfg, _notes = import_sbatch(HEAD + body, "job")
    script = cfg["command"][2]
    assert "TERM ()\n{\n" in script and "read -r -d '' cmd <<EOF" in script
    res = _run(cfg, tmp_path, 0)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "calls").read_text().splitlines() == ["python train.py --lr 3"]


def test_a_launch_after_a_loop_is_not_in_it() -> None:
    """A loop that ends before the launch (a retry of a download, a host list built in a loop) is no refusal."""
    body = ("for i in 1 2 3; do\n  wget -q data.tar && break\ndone\nwhile false; do :; done\n"
            "srun python train.py --save /ckpt\n")
    cfg, _notes = import_sbatch(HEAD + body, "job")
    assert "\npython train.py --save /ckpt" in cfg["command"][2]


def test_the_cli_says_the_refusal_in_one_line_and_writes_nothing(tmp_path: Path) -> None:
    script = tmp_path / "sweep.sbatch"
    script.write_text(HEAD + "#SBATCH --array=1-8%2\nsrun python train.py --config cfg_$SLURM_ARRAY_TASK_ID.yaml\n")
    out = tmp_path / "out.yaml"
    res = CliRunner().invoke(app, ["import-sbatch", str(script), "-o", str(out)])
    assert res.exit_code == 2 and not out.exists()
    errors = [ln for ln in res.output.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(f"error: {script}:4: --array=1-8%2 is a sweep")
    assert "at most 2 at once" in res.output.replace("\n", " ")
    res = CliRunner().invoke(app, ["import-sbatch", str(script), "--array-task", "3", "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert "SLURM_ARRAY_TASK_ID=3" in out.read_text()


def _run(cfg: dict[str, Any], tmp_path: Path, procid: int) -> subprocess.CompletedProcess[str]:
    """The per-node launch as one task runs it, with `python`, `sbatch`, `scontrol` and `dcgmi` recording
    their calls."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    for tool in ("python", "sbatch", "scontrol", "dcgmi"):
        (bindir / tool).write_text(f'#!/bin/sh\necho "{tool} $*" >> "{tmp_path}/calls"\necho "{tool} ran"\n')
        (bindir / tool).chmod(0o755)
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "SLURM_PROCID": str(procid),
           "SLURM_JOB_ID": "77"}
    return subprocess.run(cfg["command"][:4], capture_output=True, text=True, env=env, cwd=tmp_path, check=False)


def test_the_scripts_own_resubmission_is_taken_out_with_a_note(tmp_path: Path) -> None:
    body = ("trap 'scontrol requeue $SLURM_JOB_ID' USR1\n"
            "srun python train.py --save /ckpt\n"
            "# sbatch $0  (a comment stays as it is)\n"
            "if [ ! -f done ]; then sbatch --dependency=afterany:$SLURM_JOB_ID \"$0\"; fi\n"
            "sbatch eval.sbatch\n")
    cfg, notes = import_sbatch(HEAD + body, "job")
    taken = [n for n in notes if n.startswith("RESUBMISSION TAKEN OUT")]
    assert len(taken) == 2 and "(line 4)" in taken[0] and "(line 7)" in taken[1]
    script = cfg["command"][2]
    assert ": scontrol requeue" in script and ': sbatch --dependency' in script
    assert "# sbatch $0  (a comment" in script
    res = _run(cfg, tmp_path, 0)
    assert res.returncode == 0, res.stderr
    calls = (tmp_path / "calls").read_text().splitlines()
    # another job the script submits (an eval) is still submitted, once
    assert calls == ["python train.py --save /ckpt", "sbatch eval.sbatch"]


def test_a_resubmission_by_a_path_named_after_the_job_is_taken_out_and_any_other_sbatch_is_said() -> None:
    """A real chain (blind36 distillation-resubmit) resubmits `../scripts/NAME.sh` where NAME is its
    `--job-name`, while the file the user imports may be called something else; an `sbatch` of any other
    file still runs, as under sbatch, but is never silent."""
    for spelling in ("#SBATCH --job-name=cont_CE\n", "#SBATCH -J cont_CE\n", "#SBATCH --job-name \"cont_CE\"\n"):
        body = (spelling + "srun python train.py\n"
                "if [ -f ../flag ]; then\n  sbatch ../scripts/cont_CE.sh\nfi\n"
                "sbatch --dependency=afterok:$SLURM_JOB_ID eval_CE.sbatch\n")
        cfg, notes = import_sbatch(HEAD + body, "renamed-copy.sbatch")
        script = cfg["command"][2]
        assert ": sbatch ../scripts/cont_CE.sh" in script, (spelling, script)
        assert [n for n in notes if n.startswith("RESUBMISSION TAKEN OUT")][0].count("(line 7)") == 1
        other = [n for n in notes if n.startswith("ANOTHER JOB SUBMITTED")]
        assert len(other) == 1 and "eval_CE.sbatch" in other[0] and "(line 9)" in other[0], notes
        assert "sbatch --dependency=afterok:$SLURM_JOB_ID eval_CE.sbatch" in script
    # a job name that is only a prefix of the file submitted is not this script
    _cfg, notes = import_sbatch(HEAD + "#SBATCH -J cont\nsrun python train.py\nsbatch cont_eval.sh\n", "j")
    assert not any(n.startswith("RESUBMISSION TAKEN OUT") for n in notes)
    assert any(n.startswith("ANOTHER JOB SUBMITTED: `sbatch cont_eval.sh`") for n in notes)


@pytest.mark.parametrize("text,bad", [
    # NeMo's template left unfilled; an unclosed ${ (BigScience); bash's error after the launch: the script
    # still stops there; no #! at all: run under bash, as the import's note says
    ("#!/bin/bash\n#SBATCH -N 2\nCODE_DIR=<PATH_TO_NEMO> # adjust\nsrun python train.py\n", "CODE_DIR"),
    ("#!/usr/bin/env bash\n#SBATCH -N 2\nX=${WORK/code/run.py\nsrun python train.py\n", None),
    ("#!/bin/sh\n#SBATCH -N 2\nsrun python train.py\nDP=$N*G/(P*T)\necho done\n", "DP="),
    ("#SBATCH -N 2\nDP=$N*G/(P*T)\nsrun python train.py\n", "DP="),
])
def test_a_script_bash_rejects_is_refused_naming_the_line(text: str, bad: str | None) -> None:
    with pytest.raises(Refused, match=r"bash rejects this script \(.*\), so under sbatch it stops there") as err:
        import_sbatch(text, "job")
    lines = text.split("\n")
    assert bad is None or lines[(err.value.line or 0) - 1].startswith(bad), (err.value.line, text)


def test_launchers_that_start_the_other_hosts_themselves_still_import_without_srun() -> None:
    for body in ("deepspeed --hostfile hosts train.py\n", "mpirun -np 8 python train.py\n"):
        cfg, _notes = import_sbatch(HEAD + body, "job")
        assert "train.py" in cfg["command"][2]
    cfg, _notes = import_sbatch("#!/bin/bash\n#SBATCH --nodes=1\npython train.py\n", "job")  # one node: runs there
    assert "python train.py" in cfg["command"][2]


def test_a_script_for_another_shell_is_not_judged_by_bash() -> None:
    _cfg, notes = import_sbatch("#!/bin/tcsh\n#SBATCH --nodes=1\nset x = (a b)\nsrun python train.py\n", "job")
    assert not any("bash rejects" in n for n in notes)


def test_tee_of_the_launch_and_the_lines_after_it_run_once_per_job(tmp_path: Path) -> None:
    body = ("srun python train.py --save /ckpt 2>&1 | tee -a main_log.txt\n"
            "dcgmi profile --resume\n"
            "echo finished\n"
            "exit 0\n")
    cfg, notes = import_sbatch(HEAD + body, "job")
    assert any(n.startswith("RUN ONCE AFTER THE LAUNCH: 2 command(s)") for n in notes)
    assert any("`| tee` of the launch" in n for n in notes)
    for procid in (1, 0):
        res = _run(cfg, tmp_path, procid)
        assert res.returncode == 0 and "python ran" in res.stdout, res.stderr
        assert ("finished" in res.stdout) == (procid == 0)
    assert (tmp_path / "main_log.txt").read_text() == "python ran\n"  # the first task's, once
    calls = (tmp_path / "calls").read_text().splitlines()
    assert calls.count("dcgmi profile --resume") == 1 and calls.count("python train.py --save /ckpt") == 2


def test_every_task_still_waits_for_a_launch_in_the_background_and_exits_with_its_code(tmp_path: Path) -> None:
    body = "srun python train.py &\nwait\necho done > marker\n"
    cfg, _notes = import_sbatch(HEAD + body, "job")
    script = cfg["command"][2]
    wait_at, gate_at = script.index("\nwait\n"), script.index('if [ "${SLURM_PROCID:-0}" = 0 ]')
    assert wait_at < gate_at  # `wait` is not behind the gate
    res = _run(cfg, tmp_path, 1)
    assert res.returncode == 0 and not (tmp_path / "marker").exists()
    _run(cfg, tmp_path, 0)
    assert (tmp_path / "marker").read_text() == "done\n"


@pytest.mark.parametrize("line", ["#SBATCH --comment='{\"APS\": {\"auto_resume_mode\": \"requeue\"}}'\n",
                                  "#SBATCH --comment={\"APS\":{\"auto_resume_mode\":\"requeue\"}}\n"])
def test_an_auto_resume_policy_in_the_comment_is_not_a_second_owner(line: str) -> None:
    """Issue 40: NVIDIA Mission Control's auto-resume policy rides in the job comment; carried over, that
    system would requeue each segment's job beside the controller's next one. It is dropped and said."""
    cfg, notes = import_sbatch(HEAD + line + "#SBATCH --requeue\nsrun python train.py\n", "job")
    assert "comment" not in cfg["resources"].get("sbatch_extra", {})
    assert any(n.startswith("--comment: an auto-resume policy") and "owns recovery" in n for n in notes), notes
    assert any(n.startswith("--requeue: not carried over") for n in notes), notes
