"""import-sbatch on realistic scripts: a job array, a dependency chain, srun + torchrun, the deepspeed
launcher, plain python. The script's own shell runs on every node (`bash -c SCRIPT`); each result must load as
a valid config once CHANGE-ME values are filled in. The 19 real public scripts are in test_import_real.py."""

from __future__ import annotations

import os
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.importer import Refused, dump_config, import_sbatch
from orchestrator.importer.options import array_ids
from orchestrator.settings import load_settings

DATA = Path(__file__).resolve().parents[1] / "data" / "sbatch"
runner = CliRunner()

EXPECT: dict[str, dict[str, Any]] = {
    "array.sh": dict(name="tr1-13B", nodes=32, gpus=4, time=1200, max_segments=10,
                     notes=["--array=1-10%1", "six_ALL_CCFRWORK"], launch="torch.distributed.launch"),
    "chain.sh": dict(name="llama-70b", nodes=8, gpus=8, time=2880, tasks=8, preset="megatron",
                     notes=["--dependency=afterany:4242", "--exclude=gpu-a[012,017]", "--requeue"],
                     launch="python pretrain_gpt.py"),
    "torchrun.sh": dict(name="vit-h", nodes=4, gpus=8, time=720, preset="hf", notes=["srun and its options"],
                        launch="torchrun --nnodes"),
    "deepspeed.sh": dict(name="bloom-ft", nodes=2, gpus=0, time=2160, preset="deepspeed",
                         notes=["deepspeed launched from the batch script", "--signal"], launch="deepspeed --no_ssh"),
    "plain.sh": dict(name="small-lm", gpus=1, time=90, preset="lightning", notes=[], launch="python train.py"),
}


@pytest.mark.parametrize("script", sorted(EXPECT))
def test_import(tmp_path: Path, script: str) -> None:
    exp = EXPECT[script]
    cfg, notes = import_sbatch((DATA / script).read_text(), Path(script).stem)
    r = cfg["resources"]
    assert cfg["name"] == exp["name"] and r.get("gpus_per_node", 0) == exp["gpus"]
    assert r["time_limit_min"] == exp["time"]
    assert r.get("nodes", 1) == exp.get("nodes", 1) and r.get("tasks_per_node", 1) == exp.get("tasks", 1)
    assert cfg["command"][:2] == ["bash", "-c"] and exp["launch"] in cfg["command"][2]
    if "preset" in exp:
        # Megatron's --load and DeepSpeed's load_dir take the checkpoint root (they read its tracker file)
        var = "ORCH_RESUME_ROOT" if exp["preset"] in ("megatron", "deepspeed") else "ORCH_RESUME_FROM"
        assert cfg["checkpoint"]["preset"] == exp["preset"] and "${" + var + ":-" in cfg["command"][2]
    if "max_segments" in exp:
        assert cfg["policy"]["max_segments"] == exp["max_segments"]
    for n in exp["notes"]:
        assert any(n in note for note in notes), (n, notes)
    # what came out is a config the orchestrator accepts
    text = dump_config(cfg, notes, script).replace("CHANGE-ME", str(tmp_path / "ckpt"))
    p = tmp_path / "imported.yaml"
    p.write_text(text)
    s = load_settings(p)
    assert s.backend.kind == "slurm" and s.name == exp["name"]


def test_cli_writes_file_and_lists_notes(tmp_path: Path) -> None:
    out = tmp_path / "c.yaml"
    res = runner.invoke(app, ["import-sbatch", str(DATA / "chain.sh"), "-o", str(out)])
    assert res.exit_code == 0, res.output
    text = out.read_text()
    assert text.startswith("# imported from") and "# NOTE: --dependency=afterany:4242" in text
    assert yaml.safe_load(text)["resources"]["partition"] == "batch"


def test_not_a_batch_script(tmp_path: Path) -> None:
    f = tmp_path / "x.sh"
    f.write_text("echo hello\n")
    res = runner.invoke(app, ["import-sbatch", str(f)])
    assert res.exit_code == 2 and "no #SBATCH line" in res.output


def test_exclusive_gres_and_gpus_per_task() -> None:
    text = ("#!/bin/bash\n#SBATCH -N 2 --exclusive --ntasks-per-node=4 --cpus-per-task=8\n#SBATCH --gres=gpu:h100:4\n"
            "#SBATCH --gpus-per-task=1 -t 1:00:00\nsrun python train.py\n")
    cfg, notes = import_sbatch(text, "x")
    r = cfg["resources"]
    assert r["sbatch_extra"]["exclusive"] == "exclusive" and r["sbatch_extra"]["gres"] == "gpu:h100:4"
    assert r["gpus_per_node"] == 4 and r["cpus_per_task"] == 32 and r["tasks_per_node"] == 4
    assert any("--cpus-per-task=8 x 4" in n for n in notes)


def test_comment_ending_in_backslash_and_if_bodies(tmp_path: Path) -> None:
    text = ("#!/bin/bash\n#SBATCH -N 1 -t 10\n# a comment \\\nexport CMD=\"train.py --lr 1\"\n"
            "if [ -n \"$X\" ]; then\n  export A=1\nfi\nsrun python $CMD 2>&1 | tee log.txt\n")
    cfg, notes = import_sbatch(text, "x")
    script = cfg["command"][2]
    assert 'export CMD="train.py --lr 1"' in script and "\npython $CMD 2>&1 | __orch_tee log.txt" in script
    assert "training launch found: python train.py --lr 1" in "\n".join(notes)


def test_megatron_load_gets_the_checkpoint_root_not_an_iteration_dir(tmp_path: Path) -> None:
    """Megatron's --load reads latest_checkpointed_iteration.txt in the directory it is given: handing it an
    iter_NNNNNNN directory would silently start from scratch. The plan gives ORCH_RESUME_ROOT for that."""
    from orchestrator.blacklist import ExcludePlan
    from orchestrator.checkpoint import find_latest
    from orchestrator.plan import plan
    from orchestrator.settings import load_settings, parse_overrides
    from orchestrator.state import RunState
    from tests.conftest import base_config, write_config

    ckpt = tmp_path / "ckpt"
    (ckpt / "iter_0000020" / "mp_rank_00").mkdir(parents=True)
    (ckpt / "iter_0000020" / "mp_rank_00" / "model_optim_rng.pt").write_text("x")
    (ckpt / "latest_checkpointed_iteration.txt").write_text("20")
    s = load_settings(write_config(tmp_path, base_config(tmp_path, checkpoint={"dir": str(ckpt),
                                                                                "preset": "megatron"})),
                      parse_overrides([]))
    found = find_latest(s.checkpoint, frozenset())
    assert found is not None
    now = datetime.now(UTC)
    env = dict(plan(s, RunState(run="r", created_at=now, updated_at=now), found, ExcludePlan(nodes=()), "python").env)
    assert env["ORCH_RESUME_ROOT"] == str(ckpt) and env["ORCH_RESUME_FROM"].endswith("iter_0000020")
    script = "#SBATCH -N 2\nsrun python pretrain_gpt.py --save /ckpt --load /ckpt\n"
    cfg, notes = import_sbatch(script, "m")
    assert "--load \"${ORCH_RESUME_ROOT:-/ckpt}\"" in cfg["command"][2]
    assert any("ORCH_RESUME_ROOT" in n for n in notes)


def test_hostname_in_the_body_names_the_batch_host_on_every_node(tmp_path: Path) -> None:
    """Under sbatch the body runs once, on the batch host, so `RDZV_HOST=$(hostname)` names it; the imported
    script runs on every node and must give every node the same endpoint (the agent exports ORCH_BATCH_HOST)."""
    import os
    import subprocess

    script = ("#SBATCH -N 2\nexport RDZV_HOST=$(hostname)\nIP=$(hostname --ip-address)\n"
              "srun torchrun --rdzv_endpoint=\"$RDZV_HOST:29400\" train.py --ip=$IP --host=$HOSTNAME\n")
    cfg, _ = import_sbatch(script, "rdzv")
    body = cfg["command"][2].replace("torchrun ", "echo ", 1)
    outs = []
    for node in ("node1", "node2"):
        env = {**os.environ, "ORCH_BATCH_HOST": "localhost", "SLURMD_NODENAME": node}
        res = subprocess.run(["bash", "-c", body, "rdzv"], capture_output=True, text=True, env=env, timeout=30,
                             check=False)
        outs.append(res.stdout)
    assert outs[0] == outs[1] and "--rdzv_endpoint=localhost:29400" in outs[0], outs
    assert "--ip=127." in outs[0] or "--ip=::1" in outs[0], outs
    assert "--host=localhost" in outs[0]


def test_abbreviated_options_are_read_as_sbatch_reads_them(tmp_path: Path) -> None:
    """Issue 21 re-run (I4): `--outp`, `--err`, `--job-nam`, `--exclud`, `--comment` went to sbatch_extra without a
    note, and the written config failed validate. sbatch takes unambiguous prefixes; so does the import."""
    script = ("#!/bin/bash\n#SBATCH --outp=/tmp/x.out\n#SBATCH --err=/tmp/x.err\n#SBATCH --job-nam=evil\n"
              "#SBATCH --exclud=node1\n#SBATCH --comment=hello\n#SBATCH --nod=2\n#SBATCH --parti=gpu\n"
              "srun python train.py\n")
    cfg, notes = import_sbatch(script, "t")
    assert cfg["name"] == "evil" and cfg["resources"]["partition"] == "gpu"
    assert "sbatch_extra" not in cfg["resources"]
    text = "\n".join(notes)
    for said in ("--output=/tmp/x.out: not carried over", "--exclude=node1", "--comment: not carried over",
                 "--nod: an ambiguous abbreviation"):
        assert said in text
    written = tmp_path / "t.yaml"
    written.write_text(dump_config(cfg, notes, "t").replace("CHANGE-ME", str(tmp_path / "ckpt")))
    load_settings(written)  # what it writes passes validate


def test_unreadable_option_values_are_noted_not_a_traceback(tmp_path: Path) -> None:
    """Issue 21 re-run (I6): `#SBATCH --nodes=abc` gave `cannot translate this script: ValueError: invalid literal
    for int()`, naming neither the option nor the line. Now each such value is a note and the rest is imported."""
    script = tmp_path / "bad.sh"
    script.write_text("#!/bin/bash\n#SBATCH --nodes=abc\n#SBATCH --time=zz\n#SBATCH --ntasks-per-node=x\n"
                      "srun python train.py\n")
    res = CliRunner().invoke(app, ["import-sbatch", str(script)])
    assert res.exit_code == 0, res.output
    for said in ("--nodes=abc: not a node count", "--time=zz: not a time limit", "(M, M:S, H:M:S,",
                 "--ntasks-per-node=x: not a count"):
        assert said in res.output


def _echoed(tmp_path: Path, cfg: dict[str, Any], segment: int) -> str:
    """What the per-node launch passes to a `python` that echoes its arguments, in segment `segment`."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    (bindir / "python").write_text('#!/bin/sh\necho "$@"\n')
    (bindir / "python").chmod(0o755)
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "ORCH_SEGMENT": str(segment)}
    return subprocess.run(cfg["command"][:3], capture_output=True, text=True, env=env, check=True).stdout


@pytest.mark.parametrize("array,task", [("0-9%1", 2), ("3,5,7", 5), ("1-9:4", 9), ("5-6", 5), ("0-99%4", 40)])
def test_a_sweep_is_refused_whole_and_each_task_runs_as_itself_on_every_retry(tmp_path: Path, array: str,
                                                                               task: int) -> None:
    """Issue 36: an array whose tasks read SLURM_ARRAY_TASK_ID does different work per task; made one chain of
    segments, a retry ran the next task's work. Refused whole, naming the lines, with the way out; one task
    imported with `--array-task` runs as that task in every segment."""
    script = (f"#!/bin/bash\n#SBATCH -N 1\n#SBATCH --array={array}\n"
              "srun python train.py --job_idx ${SLURM_ARRAY_TASK_ID:--1} --of $SLURM_ARRAY_TASK_COUNT\n")
    with pytest.raises(Refused, match=r"is a sweep: .*line 4\).*--array-task ID") as refused:
        import_sbatch(script, "arr")
    assert refused.value.line == 3
    cfg, notes = import_sbatch(script, "arr", array_task=task)
    assert cfg["name"] == f"arr-task{task}" and cfg["run_dir"] == f"runs/arr-task{task}"
    assert "max_segments" not in cfg.get("policy", {})
    for segment in (1, 3):
        assert f"--job_idx {task} --of " in _echoed(tmp_path, cfg, segment)
    with pytest.raises(Refused, match="not a task of"):
        import_sbatch(script, "arr", array_task=1000)


@pytest.mark.parametrize("array,segment,task", [("0-9%1", 3, "2"), ("3,5,7%1", 2, "5")])
def test_a_chain_keeps_one_chain_and_each_segment_the_task_id_it_had(tmp_path: Path, array: str, segment: int,
                                                                     task: str) -> None:
    """Issue 23: `SLURM_ARRAY_TASK_ID` was unset in an imported array script; in a chain (`%1`, the same work,
    nothing in the script reads the id) segment k runs as the k-th task of the array did."""
    script = f"#!/bin/bash\n#SBATCH -N 1\n#SBATCH --array={array}\nsrun python train.py --steps 10\n"
    cfg, notes = import_sbatch(script, "arr")
    assert any("SLURM_ARRAY_TASK_ID is set from the segment" in n for n in notes)
    assert cfg["policy"]["max_segments"] == len(array_ids(array))
    assert "export SLURM_ARRAY_TASK_ID=" in cfg["command"][2]
    assert _echoed(tmp_path, cfg, segment).strip() == "train.py --steps 10"
    env = {**os.environ, "ORCH_SEGMENT": str(segment)}
    probe = cfg["command"][2].replace("python train.py --steps 10", 'echo "task=$SLURM_ARRAY_TASK_ID"')
    assert f"task={task}" in subprocess.run(["bash", "-c", probe], capture_output=True, text=True, env=env,
                                            check=True).stdout


@pytest.mark.parametrize("array,said", [("0-7", "runs all 8 of its tasks at once"),
                                        ("0-99%4", "runs up to 4 of its tasks at once")])
def test_copies_of_the_same_work_side_by_side_are_refused(array: str, said: str) -> None:
    script = f"#!/bin/bash\n#SBATCH -N 1\n#SBATCH --array={array}\nsrun python train.py\n"
    with pytest.raises(Refused, match=said + r".*write `%1`"):
        import_sbatch(script, "arr")


def _launch_srun(cfg: dict[str, Any], tmp_path: Path, env: dict[str, str] | None = None) -> list[str]:
    """The argv the per-node script gives srun for its launch, run as the agent runs it on node vn2 of 2 (a
    recording srun on PATH; the program is not run)."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    env_line = f'echo "${{SLURM_CPUS_PER_TASK:-}}/${{SLURM_TRES_PER_TASK:-}}" > {tmp_path}/srun.env\n'
    (bindir / "srun").write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {tmp_path}/srun.args\n{env_line}')
    (bindir / "srun").chmod(0o755)
    run_env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "ORCH_NODE_NAME": "vn2", "ORCH_NNODES": "2",
               "ORCH_NODE_RANK": "1", "ORCH_AGENT_PID": "77", "SLURM_STEP_NODELIST": "vn[1-2]", **(env or {})}
    subprocess.run(cfg["command"][:3], cwd=tmp_path, env=run_env, timeout=10, check=False, capture_output=True)
    return (tmp_path / "srun.args").read_text().splitlines()


@pytest.mark.parametrize("script", [
    "#!/bin/bash\n#SBATCH -N 2\nsrun --container-image=nvcr.io/nvidia/pytorch:24.05-py3 "
    "--container-mounts /data:/data,/ckpt:/ckpt --container-workdir=/work python train.py\n",
    "#!/bin/bash\n#SBATCH -N 2\nARGS=(--container-image nvcr.io/nvidia/pytorch:24.05-py3 "
    "--container-mounts=/data:/data,/ckpt:/ckpt --container-workdir /work)\nsrun \"${ARGS[@]}\" python train.py\n",
])
def test_a_pyxis_launch_keeps_its_srun_for_the_ranks_and_the_agents_stay_on_the_host(tmp_path: Path,
                                                                                     script: str) -> None:
    """Issue 36: the pyxis options were carried into the agents' srun, so the agents had to run inside the image
    (`<venv>/bin/python -m ...` there: a path that does not exist). The launch's own srun now starts each node's
    ranks in the image, in a step of its own; the agents' srun has no container option."""
    cfg, notes = import_sbatch(script, "ctr")
    assert "srun_args" not in cfg["backend"].get("slurm", {})
    assert any(n.startswith("CONTAINER:") and "nothing of the orchestrator is needed in the image" in n
               for n in notes)
    got = _launch_srun(cfg, tmp_path)
    options = " ".join(got[:got.index("/bin/sh")])
    for want in ("nvcr.io/nvidia/pytorch:24.05-py3", "/data:/data,/ckpt:/ckpt", "/work", "--overlap",
                 "--nodes=1", "--ntasks=1", "--nodelist=vn2"):
        assert want in options, (want, got)
    # the wrapper: rank base, world, node rank, nodes, the step's node list, the agent's pid, tasks; the program
    assert got[got.index("orch-rank") + 1:] == ["1", "2", "1", "2", "vn[1-2]", "77", "1", "python", "train.py"]
    written = tmp_path / "c.yaml"
    written.write_text(dump_config(cfg, notes, "ctr").replace("CHANGE-ME", str(tmp_path / "ckpt")))
    assert load_settings(written).backend.slurm.srun_args == []


@pytest.mark.parametrize("line", [
    "srun --container-image=$(pwd)/img.sqsh --container-mounts $PWD/results/:/model python train.py",
    "srun --container-image `pwd`/img.sqsh --no-container-entrypoint --container-mounts ${PWD}/results/:/model "
    "python train.py",
])
def test_a_container_option_with_the_current_directory_is_evaluated_where_sbatch_would(tmp_path: Path,
                                                                                       line: str) -> None:
    """`$(pwd)` in a container option: the script's own shell evaluates it in the run's workdir, as sbatch's."""
    cfg, _ = import_sbatch(f"#!/bin/bash\n#SBATCH -N 2\n{line}\n", "ctr", workdir=str(tmp_path))
    got = _launch_srun(cfg, tmp_path)
    assert f"{tmp_path}/img.sqsh" in " ".join(got) and f"{tmp_path}/results/:/model" in got
    assert ("--no-container-entrypoint" in got) == ("--no-container-entrypoint" in line)


def test_a_container_option_from_the_environment_is_evaluated_by_the_scripts_shell(tmp_path: Path) -> None:
    """`--container-image=$IMAGE` (set by the user's environment at sbatch time) was refused from srun_args: argv
    words with no shell. The script's own shell now expands it on the node, as sbatch's did."""
    script = "#!/bin/bash\n#SBATCH -N 2\nsrun --container-image=$IMAGE --container-mounts=/d:/d python train.py\n"
    cfg, notes = import_sbatch(script, "ctr", workdir=str(tmp_path))
    assert not any(n.startswith("CONTAINER NOT CARRIED:") for n in notes)
    got = _launch_srun(cfg, tmp_path, {"IMAGE": "/images/pt.sqsh"})
    assert "--container-image=/images/pt.sqsh" in got and "--container-mounts=/d:/d" in got


def test_a_pyxis_launchs_srun_asks_each_task_its_share_of_the_cpus(tmp_path: Path) -> None:
    """The agent's task holds the node's CPUs (`--cpus-per-task=12` x 8 tasks = 96); the script's srun under sbatch saw
    SLURM_CPUS_PER_TASK=12, and a step of 8 tasks asking 96 each would not start. SLURM_TRES_PER_TASK (Slurm 23.11+,
    the same request) is not passed on."""
    script = ("#!/bin/bash\n#SBATCH -N 2\n#SBATCH --ntasks-per-node=8\n#SBATCH --cpus-per-task=12\n"
              "srun --container-image=/i.sqsh python train.py\n")
    cfg, _ = import_sbatch(script, "ctr", workdir=str(tmp_path))
    assert cfg["resources"]["cpus_per_task"] == 96 and cfg["resources"]["tasks_per_node"] == 1
    got = _launch_srun(cfg, tmp_path, {"SLURM_CPUS_PER_TASK": "96", "SLURM_TRES_PER_TASK": "cpu=96"})
    assert "--ntasks=8" in got and (tmp_path / "srun.env").read_text().strip() == "12/"


@pytest.mark.parametrize(("line", "want"), [
    ('options+=" --load ${CKPT}"\nsrun python train.py $options', ' --load /resume'),  # in a string (run_gpt3.sh)
    ("srun python train.py --load ${CKPT}", "--load /resume"),
    ("srun python train.py --load '/a b/}c'", "--load /resume"),
])
def test_a_resume_flag_reads_the_orchestrators_checkpoint_wherever_it_is_written(tmp_path: Path, line: str,
                                                                                  want: str) -> None:
    """`--load ${CKPT}` inside a string became `"${ORCH_RESUME_ROOT:-${CKPT\\}}"`: quotes that broke the string and
    an escaped brace that left the expansion open; the script failed `bash -n`."""
    script = f"#!/bin/bash\n#SBATCH -N 2\nCKPT=/first\noptions=\n{line}\n"
    cfg, notes = import_sbatch(script, "x", workdir=str(tmp_path))
    assert not any("bash -n" in n for n in notes), notes
    (tmp_path / "python").write_text('#!/bin/sh\necho "$@"\n')
    (tmp_path / "python").chmod(0o755)
    for resume, expect in (("/resume", want), ("", want.replace("/resume", "/first" if "CKPT" in line else "/a b/}c"))):
        out = subprocess.run(cfg["command"][:3], capture_output=True, text=True, timeout=10, check=False,
                             env={"PATH": f"{tmp_path}:{os.environ['PATH']}", "ORCH_RESUME_ROOT": resume})
        assert expect in out.stdout, (line, out.stdout, out.stderr)


def test_the_scripts_arguments_are_given_to_every_node_and_to_the_setup(tmp_path: Path) -> None:
    """`sbatch run.sh /data img` passes arguments to the script: imported with the same arguments, the per-node
    script and the run-once setup both see them; without them, a note says the script reads arguments."""
    script = "#!/bin/bash\n#SBATCH -N 2\nDATA=${1:?data}\nmkdir -p \"$DATA/out\"\nsrun python train.py --data $DATA\n"
    cfg, notes = import_sbatch(script, "x", workdir=str(tmp_path), args=(str(tmp_path / "d d"),))
    assert cfg["command"][4:] == [str(tmp_path / "d d")]
    setup = cfg["backend"]["slurm"]["setup"][0]
    assert subprocess.run(["bash", "-c", setup], timeout=10, check=False).returncode == 0
    assert (tmp_path / "d d" / "out").is_dir()
    _, bare = import_sbatch(script, "x", workdir=str(tmp_path))
    assert any("reads its own arguments" in n for n in bare)


def test_an_outside_dependency_holds_the_first_segment_only(tmp_path: Path) -> None:
    """Issue 36: `#SBATCH --dependency=afterany:4242` (the job the run follows) was dropped: segment 1 started at
    once. It now holds segment 1, and only segment 1 (later ones follow the controller)."""
    from orchestrator.blacklist import ExcludePlan
    from orchestrator.clock import FakeClock
    from orchestrator.plan import plan
    from orchestrator.settings import ConfigError
    from orchestrator.state import RunState, SegmentRecord

    cfg, notes = import_sbatch((DATA / "chain.sh").read_text(), "chain")
    assert cfg["resources"]["first_dependency"] == "afterany:4242"
    written = tmp_path / "c.yaml"
    written.write_text(dump_config(cfg, notes, "chain").replace("CHANGE-ME", str(tmp_path / "ckpt")))
    s = load_settings(written)
    now = FakeClock().now()
    fresh = RunState(run=s.name, created_at=now, updated_at=now)
    first = plan(s, fresh, None, ExcludePlan(nodes=()), "python")
    assert dict(first.sbatch_extra)["dependency"] == "afterany:4242"
    later = plan(s, fresh.evolve(segments=[SegmentRecord(index=1, job_name="chain.seg0001", job_id="7")]), None,
                 ExcludePlan(nodes=()), "python")
    assert "dependency" not in dict(later.sbatch_extra)
    with pytest.raises(ConfigError, match="first_dependency"):
        load_settings(written, {"resources": {"first_dependency": "afterany:$(id)"}})
