"""`orchestrator import-sbatch`: turn an existing #SBATCH script into a run config, and say what it could
not translate. Pure: text in, (config mapping, notes) out."""

from __future__ import annotations

import re
import shlex
from typing import Any

SHORT = {"-J": "job-name", "-N": "nodes", "-n": "ntasks", "-c": "cpus-per-task", "-p": "partition", "-A": "account",
         "-q": "qos", "-t": "time", "-C": "constraint", "-o": "output", "-e": "error", "-a": "array",
         "-d": "dependency", "-x": "exclude", "-G": "gpus", "-w": "nodelist"}
PASS_THROUGH = {"constraint", "mem", "mem-per-cpu", "mem-per-gpu", "exclusive", "mail-type", "mail-user",
                "reservation", "licenses", "gres-flags", "hint", "distribution", "switches", "wckey"}
IGNORED = {"output": "per-node logs are written by the agent under run_dir/segments/NNNN/logs/",
           "error": "per-node logs are written by the agent under run_dir/segments/NNNN/logs/",
           "open-mode": "the agent appends to its own per-node logs",
           "requeue": "segments are submitted with --no-requeue; the controller owns retries",
           "no-requeue": "segments are always submitted with --no-requeue",
           "signal": "submitit sends USR2 before the time limit; the agent passes it on as a warning",
           "ntasks": "use tasks_per_node (processes the agent starts on each node)"}
CKPT_FLAGS = {"--load": "megatron", "--resume_from_checkpoint": "hf", "--resume-from-checkpoint": "hf",
              "--ckpt_path": "lightning", "--ckpt-path": "lightning", "--load_dir": "deepspeed",
              "--load-dir": "deepspeed", "--resume": "glob"}
SAVE_FLAGS = ("--save", "--output_dir", "--output-dir", "--save_dir", "--save-dir", "--default_root_dir",
              "--checkpoint_dir", "--checkpoint-dir")
LAUNCHERS = ("srun", "mpirun", "mpiexec")
FLAGS = {"exclusive", "requeue", "no-requeue", "hold", "overcommit", "contiguous", "spread-job", "test-only",
         "use-min-nodes", "wait", "parsable", "quiet", "verbose", "oversubscribe", "ignore-pbs", "no-kill"}


def _time_to_min(v: str) -> int:
    """Slurm time formats: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S."""
    days = 0
    if "-" in v:
        d, v = v.split("-", 1)
        days = int(d)
        parts = [int(x) for x in v.split(":")]
        h, m, s = (parts + [0, 0])[:3]
    else:
        parts = [int(x) for x in v.split(":")]
        h, m, s = {1: (0, parts[0], 0), 2: (0, parts[0], parts[-1])}.get(len(parts), tuple(parts[:3]))
    return max(1, days * 1440 + h * 60 + m + (1 if s else 0))


def _sbatch_options(lines: list[str]) -> list[tuple[str, str | None]]:
    out = []
    for line in lines:
        m = re.match(r"#SBATCH\s+(.*)", line.strip())
        if not m:
            continue
        toks = shlex.split(m.group(1), comments=True)
        i = 0
        while i < len(toks):
            tok = toks[i]
            if tok.startswith("--"):
                key, eq, val = tok[2:].partition("=")
                if not eq and key not in FLAGS and i + 1 < len(toks) and not toks[i + 1].startswith("-"):
                    val, eq = toks[i + 1], "="  # "--time 20:00:00"
                    i += 1
                out.append((key, val if eq else None))
            elif tok in SHORT:
                out.append((SHORT[tok], toks[i + 1] if i + 1 < len(toks) else None))
                i += 1
            elif re.match(r"-[A-Za-z]\S", tok) and tok[:2] in SHORT:
                out.append((SHORT[tok[:2]], tok[2:]))
            i += 1
    return out


def _logical_lines(text: str) -> list[str]:
    joined = re.sub(r"\\\n\s*", " ", text)
    return joined.splitlines()


def _gpus(val: str) -> int | None:
    m = re.search(r"gpu(?::[\w-]+)?:(\d+)", val)
    return int(m.group(1)) if m else None


def _resources(opts: list[tuple[str, str | None]], cfg: dict[str, Any], notes: list[str]) -> None:
    r: dict[str, Any] = {}
    extra: dict[str, str] = {}
    for key, val in opts:
        if key == "job-name" and val:
            cfg["name"] = re.sub(r"[^A-Za-z0-9_.+-]", "-", val).lstrip("-.") or "run"
        elif key == "nodes" and val:
            r["nodes"] = int(val.split("-")[-1])
        elif key == "ntasks-per-node" and val:
            r["tasks_per_node"] = int(val)
        elif key in ("gpus-per-node", "gpus") and val:
            r["gpus_per_node"] = int(val.split(":")[-1])
        elif key == "gres" and val and _gpus(val) is not None:
            r["gpus_per_node"] = _gpus(val)
        elif key == "cpus-per-task" and val:
            r["cpus_per_task"] = int(val)
        elif key in ("partition", "account", "qos") and val:
            r[key] = val
        elif key == "time" and val:
            r["time_limit_min"] = _time_to_min(val)
        elif key == "array" and val:
            m = re.match(r"(\d+)-(\d+)", val)
            n = int(m.group(2)) - int(m.group(1)) + 1 if m else len(val.split(","))
            cfg.setdefault("policy", {})["max_segments"] = n
            notes.append(f"--array={val}: the array's {n} tasks become up to {n} segments (policy.max_segments); "
                         "the controller submits each one after diagnosing the last")
        elif key == "dependency":
            notes.append(f"--dependency={val}: the dependency chain is replaced by the controller's loop")
        elif key == "exclude" and val:
            notes.append(f"--exclude={val}: add these by hand if still broken: orchestrator blacklist add RUN '{val}'")
        elif key in IGNORED:
            notes.append(f"--{key}: {IGNORED[key]}")
        elif key in PASS_THROUGH:
            extra[key] = val if val is not None else "true"
        else:
            notes.append(f"--{key}{'=' + val if val else ''}: not translated (add it to resources.sbatch_extra "
                         "if it is needed)")
    if extra:
        r["sbatch_extra"] = extra
    cfg["resources"] = r


def _command(body: list[str], cfg: dict[str, Any], notes: list[str]) -> None:
    setup, env = [], {}
    launch: list[str] | None = None
    for line in body:
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        try:
            toks = shlex.split(s, comments=True)
        except ValueError:
            setup.append(s)
            continue
        if not toks:
            continue
        m = re.fullmatch(r"export\s+([A-Za-z_]\w*)=(.*)", s)
        if m and "$(" not in s and "`" not in s:
            env[m.group(1)] = shlex.split(m.group(2))[0] if m.group(2) else ""
            continue
        if toks[0] in LAUNCHERS or toks[0] in ("torchrun", "deepspeed", "accelerate") or re.match(r"python[\d.]*$",
                                                                                                   toks[0]):
            if launch is None:
                launch = toks
                continue
        if toks[0] == "cd" and len(toks) == 2:
            cfg["workdir"] = toks[1]
            continue
        setup.append(s)
    if setup:
        cfg.setdefault("backend", {"kind": "slurm"}).setdefault("slurm", {})["setup"] = setup
    if env:
        cfg["env"] = env
    if launch is None:
        notes.append("no srun/torchrun/python line found: set `command` by hand")
        cfg["command"] = ["CHANGE-ME"]
        return
    if launch[0] in LAUNCHERS:  # drop the launcher and its options: the agent runs once per node
        i = 1
        while i < len(launch) and launch[i].startswith("-"):
            if "=" not in launch[i] and i + 1 < len(launch) and not launch[i + 1].startswith("-") and \
                    launch[i] not in ("--label", "-l", "--unbuffered", "-u", "--exclusive", "--overlap"):
                i += 1
            i += 1
        notes.append(f"{launch[0]} and its options ({' '.join(launch[1:i]) or 'none'}) dropped: the agent starts "
                     "tasks_per_node processes on every node itself")
        launch = launch[i:]
    if launch and launch[0] == "deepspeed":
        notes.append("deepspeed's launcher starts ranks on every host over pdsh/ssh; under the orchestrator the "
                     "agent already runs on every node: use torchrun (or python -m deepspeed.launcher.launch)")
    _checkpoint(launch, cfg, notes)
    cfg["command"] = launch


def _checkpoint(argv: list[str], cfg: dict[str, Any], notes: list[str]) -> None:
    save_dir = None
    for i, tok in enumerate(argv):
        flag, eq, val = tok.partition("=")
        if flag in SAVE_FLAGS:
            save_dir = val if eq else (argv[i + 1] if i + 1 < len(argv) else None)
    for i, tok in enumerate(argv):
        flag, eq, val = tok.partition("=")
        if flag in CKPT_FLAGS:
            preset = CKPT_FLAGS[flag]
            if eq:
                argv[i] = f"{flag}={{checkpoint}}"
                old = val
            elif i + 1 < len(argv):
                old, argv[i + 1] = argv[i + 1], "{checkpoint}"
            else:
                continue
            d = save_dir or (old if old and not old.startswith("$") else None) or "CHANGE-ME"
            cfg["checkpoint"] = {"dir": d, "preset": preset} | ({"glob": "*"} if preset == "glob" else {})
            notes.append(f"{flag} now receives the newest complete checkpoint ({{checkpoint}}), preset {preset}")
            return
    cfg["checkpoint"] = {"dir": save_dir or "CHANGE-ME", "preset": "megatron"}
    notes.append("no resume flag found: make the training resume from {checkpoint} or $ORCH_RESUME_FROM, "
                 "and check checkpoint.dir and checkpoint.preset")


def import_sbatch(text: str, script_name: str = "script") -> tuple[dict[str, Any], list[str]]:
    lines = _logical_lines(text)
    notes: list[str] = []
    cfg: dict[str, Any] = {"name": re.sub(r"[^A-Za-z0-9_.+-]", "-", script_name).lstrip("-.") or "run",
                           "run_dir": "runs/" + (re.sub(r"\W", "-", script_name) or "run")}
    _resources(_sbatch_options(lines), cfg, notes)
    body = [ln for ln in lines if not ln.strip().startswith(("#!", "#SBATCH"))]
    cfg["backend"] = {"kind": "slurm"}
    _command(body, cfg, notes)
    cfg["run_dir"] = f"runs/{cfg['name']}"
    if any("$" in a for a in cfg.get("command", [])):
        notes.append("the command uses $VARIABLES: the agent expands those set in the rank's environment "
                     "(SLURM_*, MASTER_ADDR, RANK, ...); others stay as written")
    order = ["name", "run_dir", "workdir", "command", "env", "resources", "checkpoint", "policy", "backend"]
    return {k: cfg[k] for k in order if k in cfg}, notes
