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
MARK = "STUB-LAUNCH "
# Left unset in the tests: set, nanotron copies its config file under /fsx/...
KEEP_UNSET = {"CONFIG_FILE"}

STUB = f"""#!{sys.executable}
import json, os, sys
keys = ("SLURMD_NODENAME", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "RANK", "LOCAL_RANK", "WORLD_SIZE",
        "ORCH_NODE_NAME", "ORCH_RESUME_FROM")
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
          "--nodelist", "--output", "--error", "--jobid"}}
args, i = sys.argv[1:], 0
while i < len(args) and args[i].startswith("-"):
    i += 2 if args[i] in VALUE else 1
os.execvp(args[i], args[i:])
"""
SCONTROL = """#!/bin/bash
if [ "$1 $2" = "show hostnames" ]; then
  list="${3:-$SLURM_JOB_NODELIST}"
  tr ',' '\\n' <<< "$list"  # one write, as scontrol's: `| head -n 1` under pipefail must not see SIGPIPE
fi
"""
LAUNCHERS = ("python", "python3", "torchrun", "deepspeed", "accelerate", "singularity")
NOOPS = ("module", "conda", "dcgmi", "pkill", "nvidia-smi", "clear", "git")


def write_stubs(bindir: Path, workdir: Path) -> None:
    """Stubs on PATH, plus the relative programs some scripts start from their working directory."""
    bindir.mkdir(parents=True, exist_ok=True)
    files = {**{n: STUB for n in LAUNCHERS}, **{n: "#!/bin/sh\nexit 0\n" for n in NOOPS}}
    files["scontrol"] = SCONTROL
    files["srun"] = SRUN
    for name, text in files.items():
        (bindir / name).write_text(text)
        (bindir / name).chmod(0o755)
    for rel in ("pt_fsdp/bin/torchrun", "scripts/run_with_environment.sh"):
        p = workdir / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(STUB)
        p.chmod(0o755)


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
    env["HOME"] = str(tmp / "home")
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
        extra = [c for c in found if c["env"].get("ORCH_NODE_NAME")
                 and not starts_entry(c, exp["entry_point"], exp["must_args"])]
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
