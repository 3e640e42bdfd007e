"""Shared by the unit and Slurm tests of import-sbatch on the real scripts in tests/data/sbatch/real/: stub
launchers (python, torchrun, deepspeed, accelerate, ...) that print their argv and rank environment as one JSON
line and then progress lines, and the check that every node started the training entry point with its
original arguments."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

from orchestrator.importer.names import assignments, resolve
from orchestrator.importer.scan import segments

REAL = Path(__file__).resolve().parent / "data" / "sbatch" / "real"
EXPECTED: dict[str, dict[str, Any]] = json.loads((REAL / "expected.json").read_text())
REAL2 = REAL.parent / "real2"  # set 2: containers, run-once lines, arrays, exclude/node lists
LABELS: dict[str, dict[str, Any]] = json.loads((REAL2 / "expected.json").read_text())
MARK = "STUB-LAUNCH "
# Left unset in the tests: set, nanotron copies its config file under /fsx/...
KEEP_UNSET = {"CONFIG_FILE"}

STUB = f"""#!{sys.executable}
import json, os, sys
keys = ("SLURMD_NODENAME", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "RANK", "LOCAL_RANK", "WORLD_SIZE",
        "ORCH_NODE_NAME", "ORCH_RESUME_FROM", "SLURM_ARRAY_TASK_ID")
line = json.dumps({{"prog": os.path.basename(sys.argv[0]), "argv": sys.argv[1:],
                   "env": {{k: os.environ.get(k) for k in keys}}}})
print({MARK!r} + line, flush=True)
if os.environ.get("ORCH_TEST_CALLS"):  # every call, from the batch script's setup and from the nodes
    with open(os.environ["ORCH_TEST_CALLS"], "a") as f:
        f.write(line + "\\n")
for i in range(1, 4):
    print(f"step {{i}}: loss 1.0", flush=True)
"""
SRUN = f"""#!{sys.executable}
# a helper srun step run locally: drop the options, run the command
import os, sys
VALUE = {{"-N", "-n", "-c", "-w", "-o", "-e", "-J", "-p", "-t", "--nodes", "--ntasks", "--ntasks-per-node",
          "--nodelist", "--output", "--error", "--jobid", "--container-image", "--container-mounts",
          "--container-workdir", "--container-name", "--container-env"}}
args, i = sys.argv[1:], 0
tasks = 1
while i < len(args) and args[i].startswith("-"):
    if args[i].startswith("--ntasks="):
        tasks = int(args[i].split("=", 1)[1])
    i += 2 if args[i] in VALUE else 1
if args[i:i + 1] == ["/bin/sh"] and "orch-rank" in args[i:]:  # the launch's own srun (a container's): its tasks
    import subprocess
    # one after another: srun keeps each task's lines whole, a shared pipe would not
    sys.exit(max(subprocess.call(args[i:], env={{**os.environ, "SLURM_LOCALID": str(t), "SLURM_PROCID": str(t)}})
                 for t in range(tasks)))
try:
    os.execvp(args[i], args[i:])
except FileNotFoundError:
    if not any(a.startswith("--container-image") for a in args[:i]):
        raise
    print("stub srun: in the container image:", *args[i:], flush=True)  # a program of the image, not of this host
"""
SCONTROL = """#!/bin/bash
if [ "$1 $2" = "show hostnames" ] || [ "$1 $2" = "show hostname" ]; then  # scontrol takes either
  list="${3:-$SLURM_JOB_NODELIST}"
  tr ',' '\\n' <<< "$list"  # one write, as scontrol's: `| head -n 1` under pipefail must not see SIGPIPE
fi
"""
# real programs that run-once lines use: recorded like the stubs, then run
RECORDED = ("mkdir", "cat", "wget", "curl")
RECORD = f"""#!{sys.executable}
import json, os, shutil, sys
name = os.path.basename(sys.argv[0])
if os.environ.get("ORCH_TEST_CALLS"):
    with open(os.environ["ORCH_TEST_CALLS"], "a") as f:
        f.write(json.dumps({{"prog": name, "argv": sys.argv[1:],
                            "env": {{"ORCH_NODE_NAME": os.environ.get("ORCH_NODE_NAME")}}}}) + "\\n")
here = os.path.dirname(os.path.abspath(sys.argv[0]))
path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if os.path.abspath(p or ".") != here)
real = shutil.which(name, path=path) or "/bin/" + name
os.execv(real, [real, *sys.argv[1:]])
"""
LAUNCHERS = ("python", "python3", "torchrun", "deepspeed", "accelerate", "singularity")
NOOPS = ("module", "conda", "dcgmi", "pkill", "nvidia-smi", "clear", "git")


def write_stubs(bindir: Path, workdir: Path) -> None:
    """Stubs on PATH, plus the relative programs some scripts start from their working directory."""
    bindir.mkdir(parents=True, exist_ok=True)
    files = {**{n: STUB for n in LAUNCHERS}, **{n: "#!/bin/sh\nexit 0\n" for n in NOOPS},
             **{n: RECORD for n in RECORDED}}
    files["scontrol"] = SCONTROL
    files["srun"] = SRUN
    for name, text in files.items():
        (bindir / name).write_text(text)
        (bindir / name).chmod(0o755)
    # `source activate ENV` (conda's, in nanotron's script) would otherwise find the virtualenv's own activate,
    # which puts its bin first on PATH: a real torchrun (with torch installed) would shadow the stub
    (bindir / "activate").write_text("# conda's activate, for the test: the stubs stay first on PATH\n")
    for rel in ("pt_fsdp/bin/torchrun", "scripts/run_with_environment.sh"):
        p = workdir / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(STUB)
        p.chmod(0o755)
    # DeepLearningExamples' CPU/NIC binding wrapper (`./bind.sh ... -- python ...`): runs what follows `--`
    (workdir / "bind.sh").write_text('#!/bin/bash\nwhile [ $# -gt 0 ] && [ "$1" != -- ]; do shift; done\nshift\n'
                                     'exec "$@"\n')
    (workdir / "bind.sh").chmod(0o755)


def launches(log_text: str) -> list[dict[str, Any]]:
    out = []
    for line in log_text.splitlines():
        i = line.find(MARK)
        if i >= 0:
            out.append(json.loads(line[i + len(MARK):]))
    return out


def _suffix_match(arg: str, entry: str) -> bool:
    entry = entry.removeprefix("./")
    return arg == entry or arg.endswith("/" + entry) or arg.endswith(entry) and "/" in entry


def starts_entry(launch: dict[str, Any], entry: str, must: list[str]) -> bool:
    """The launch's argv holds the entry point (by suffix, or `-m module`), followed by every must-have arg."""
    argv: list[str] = launch["argv"]
    if " " in entry and not entry.startswith("-m "):  # a program's subcommand: `trl vllm-serve`
        prog, sub = entry.split(" ", 1)
        return launch.get("prog") == prog and argv[:1] == [sub] and all(
            m in argv[1:] or any(a.startswith(m + "=") for a in argv[1:]) for m in must)
    if entry.startswith("-m "):
        idx = [i for i in range(len(argv) - 1) if argv[i] == "-m" and argv[i + 1] == entry[3:]]
        pos = idx[0] + 2 if idx else None
    else:
        found = [i for i, a in enumerate(argv) if _suffix_match(a, entry)]
        pos = found[0] + 1 if found else None
    if pos is None:
        return False
    rest = argv[pos:]
    return all(m in rest or any(a.startswith(m + "=") for a in rest) for m in must)


def fill_env(notes: list[str], tmp: Path, script: str) -> dict[str, str]:
    """What a user does after reading the notes: give every variable the script does not set a value (a
    directory of the test), and have the files it sources from there."""
    env: dict[str, str] = {}
    for n in notes:
        if n.startswith("the script uses variables it does not set"):
            for name in n.split(": ", 1)[1].split(", "):
                if name not in KEEP_UNSET:
                    env[name] = str(tmp / "site" / name)
    # a name the script counts with (`$(( SLURM_JOB_NUM_NODES * DGXNGPU ))`) is a number, as a site's config gives it
    counted = {n for expr in re.findall(r"\$\(\((.*?)\)\)", script) for n in re.findall(r"[A-Za-z_]\w*", expr)}
    env.update({name: "2" for name in env if name in counted})
    env["HOME"] = str(tmp / "home")
    for rel in re.findall(r">\s*([A-Za-z_][\w.-]*(?:/[\w.-]+)*)/[\w.-]+", script):
        (tmp / "work" / rel).mkdir(parents=True, exist_ok=True)  # the script's repository has its own folders
    known = {**assignments(script, segments(script)), **env}
    for m in re.finditer(r"(?m)^\s*(source|\.|cd)\s+(\S+)", script):
        path = resolve(m.group(2).strip("'\""), known).replace("~", env["HOME"], 1)
        if not path.startswith(str(tmp)):
            continue  # only what lives in the test's own site directories
        if m.group(1) == "cd":
            Path(path).mkdir(parents=True, exist_ok=True)
        else:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).touch()
    return env


def run_setup(cfg: dict[str, Any], env: dict[str, str], tmp: Path) -> None:
    """The imported backend.slurm.setup, once, as the batch script runs it before the step (with the run's
    environment handed over the way the Slurm backend does it)."""
    setup = cfg.get("backend", {}).get("slurm", {}).get("setup")
    if not setup:
        return
    env_file = tmp / "setup.env"
    env_file.write_text("".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items()))
    script = f"ORCH_SETUP_ENV={shlex.quote(str(env_file))}\n" + "\n".join(setup)
    res = subprocess.run(["bash", "-c", script], cwd=cfg.get("workdir") or tmp, env={**os.environ, **env}, timeout=120,
                   check=False, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-2000:]


def calls(path: Path) -> list[dict[str, Any]]:
    return [json.loads(ln) for ln in path.read_text().splitlines()] if path.exists() else []


def ran_once_on_the_batch_host(found: list[dict[str, Any]], exp: dict[str, Any]) -> str:
    """'' when every stub call made by the setup (no ORCH_NODE_NAME: the batch host, before the step) was made
    once and never again by a node, and the nodes made no call but the training launch; else what went wrong."""
    if exp["entry_point"]:
        extra = [c for c in found if c["env"].get("ORCH_NODE_NAME") and c["prog"] in LAUNCHERS
                 and not starts_entry(c, exp["entry_point"], exp.get("must_args", []))]
        if extra:
            return f"the nodes ran more than the training launch: {[(c['prog'], c['argv'][:3]) for c in extra]}"
    setup = [c for c in found if not c["env"].get("ORCH_NODE_NAME")]
    nodes = [c for c in found if c["env"].get("ORCH_NODE_NAME")]
    seen: dict[str, int] = {}
    for c in setup:
        key = json.dumps([c["prog"], c["argv"]])
        seen[key] = seen.get(key, 0) + 1
    again = [k for k, n in seen.items() if n > 1 or any(json.dumps([c["prog"], c["argv"]]) == k for c in nodes)]
    return f"run-once calls repeated: {again}" if again else ""


def positional_args(labels: dict[str, Any], tmp: Path) -> tuple[str, ...]:
    """What a user gives a script that reads $1..$N (`sbatch SCRIPT ARGS`): a site directory for each."""
    n = max((int(v) for v in labels.get("undefined_vars", []) if v.isdigit()), default=0)
    return tuple(str(tmp / "site" / f"arg{i}") for i in range(1, n + 1))


def array_task(label: dict[str, Any]) -> int | None:
    """A sweep (its tasks read SLURM_ARRAY_TASK_ID) is imported one task at a time: its first task."""
    return array_ids(label["array"])[0] if label.get("uses_array_task_id") else None


def run_imported(tmp_path: Path, script: Path, nodes: int = 2, args: tuple[str, ...] = (),
                 extra_env: dict[str, str] | None = None,
                 task: int | None = None) -> tuple[dict[str, str], dict[str, Any]]:
    """The imported launch, its setup run once first, then the real agent on `nodes` virtual nodes:
    ({node: log text}, config)."""
    from orchestrator.agent.main import NodeAgent
    from orchestrator.importer import import_sbatch
    from orchestrator.model import SegmentSpec
    from orchestrator.settings import PROGRESS_REGEX

    work = tmp_path / "work"
    work.mkdir()
    cfg, notes = import_sbatch(script.read_text(), script.stem, str(work), args, task)
    bindir = tmp_path / "bin"
    write_stubs(bindir, work)
    env = {**fill_env(notes, tmp_path, script.read_text()), **(extra_env or {})}
    hosts = [f"vn{i}" for i in range(1, nodes + 1)]
    saved = dict(os.environ)
    os.environ.update({"PATH": f"{bindir}:{saved['PATH']}", "SLURM_JOB_NODELIST": ",".join(hosts),
                       "SLURM_JOB_NUM_NODES": str(nodes), "SLURM_NNODES": str(nodes), "SLURM_JOB_ID": "4242",
                       "SLURM_JOBID": "4242", "SLURM_CPUS_PER_TASK": "2", "SLURM_GPUS_PER_NODE": "8"})
    try:
        # what the plan and Slurm give every segment: its number, and the user
        env.update(ORCH_TEST_CALLS=str(tmp_path / "calls.jsonl"), ORCH_SEGMENT="1", USER=os.environ.get("USER", "u"))
        run_setup({**cfg, "workdir": str(work)}, env, tmp_path)
        for rank, host in enumerate(hosts):
            spec = SegmentSpec(run_name="t", index=1, job_name="t.seg0001", nodes=nodes,
                               tasks_per_node=min(cfg["resources"].get("tasks_per_node", 1), 2), gpus_per_node=0,
                               time_limit_min=5, command=tuple(cfg["command"]), env=tuple(sorted(env.items())),
                               workdir=str(work), run_dir=str(tmp_path / "run"),
                               segment_dir=str(tmp_path / "run" / "segments" / "0001"), progress_regex=PROGRESS_REGEX)
            NodeAgent(spec, host, rank, nodes, "4242").run()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    logs = tmp_path / "run" / "segments" / "0001" / "logs"
    return {h: (logs / f"{h}.log").read_text() for h in hosts}, cfg


def entry_of(label: dict[str, Any]) -> str | None:
    """The entry point as a suffix: a prefix that needs the shell (`${PWD}/..`, `` `pwd`/ ``) is dropped."""
    entry: str | None = label["entry_point"]
    if entry and ("$" in entry or "`" in entry) and not entry.startswith("-m "):
        entry = entry.rsplit("/", 1)[-1]
    return entry


def array_ids(value: str) -> list[int]:
    ids: list[int] = []
    for part in value.split("%")[0].split(","):
        a, _, b = part.partition("-")
        ids.extend(range(int(a), int(b or a) + 1))
    return ids


def run_once_counts(found: list[dict[str, Any]], label: dict[str, Any]) -> str:
    """'' when each recorded program the answer key lists as run-once ran at least that often on the batch host
    and never on a node."""
    for program in {o["program"] for o in label["run_once"]} & {*RECORDED, *LAUNCHERS}:
        want = sum(o["count"] for o in label["run_once"] if o["program"] == program)
        on_batch = [c for c in found if c["prog"] == program and not c["env"].get("ORCH_NODE_NAME")]
        on_nodes = [c for c in found if c["prog"] == program and c["env"].get("ORCH_NODE_NAME")]
        if len(on_batch) < want or on_nodes:
            return f"{program}: {len(on_batch)} on the batch host (want {want}), {len(on_nodes)} on nodes"
    return ""
