"""#SBATCH options -> the config's `resources` (and `policy`, `name`, `workdir`), and a note for
every option that is not carried over as it was.

The orchestrator runs one agent task per node (srun's place), so the per-task options of the script
(--ntasks-per-node, --cpus-per-task, --gpus-per-task) are turned into per-node amounts."""

from __future__ import annotations

import re
import shlex
from typing import Any

from orchestrator.settings.slurmtime import is_slurm_time, slurm_minutes

SHORT = {"-J": "job-name", "-N": "nodes", "-n": "ntasks", "-c": "cpus-per-task", "-p": "partition",
         "-A": "account",
         "-q": "qos", "-t": "time", "-C": "constraint", "-o": "output", "-e": "error",
         "-a": "array",
         "-d": "dependency", "-x": "exclude", "-G": "gpus", "-w": "nodelist", "-D": "chdir",
         "-M": "clusters",
         "-m": "distribution", "-s": "oversubscribe", "-O": "overcommit", "-k": "no-kill",
         "-H": "hold",
         "-W": "wait", "-Q": "quiet", "-v": "verbose", "-B": "extra-node-info", "-L": "licenses",
         "-b": "begin"}
FLAGS = {"exclusive", "requeue", "no-requeue", "hold", "overcommit", "contiguous", "spread-job",
         "test-only",
         "use-min-nodes", "wait", "parsable", "quiet", "verbose", "oversubscribe", "ignore-pbs",
         "no-kill", "reboot"}
IGNORED = {"output": "per-node logs are written by the agent under run_dir/segments/NNNN/logs/",
           "error": "per-node logs are written by the agent under run_dir/segments/NNNN/logs/",
           "open-mode": "the agent appends to its own per-node logs",
           "requeue": "segments are submitted with --no-requeue; the controller owns retries",
           "no-requeue": "segments are always submitted with --no-requeue",
           "signal": "submitit sends USR2 before the time limit; the agent passes it on as a "
                     "warning",
           "nodelist": "it needs the shell: write the nodes out in resources.sbatch_extra.nodelist",
           "export": "the agent passes the controller's environment plus `env`; put what the job "
                     "needs in `env`",
           "parsable": "not a job property", "test-only": "not a job property",
           "wait": "the controller polls the job", "chdir": "became `workdir`"}
RESERVED = {"exclude", "nodes", "time", "output", "error", "job-name", "requeue", "no-requeue"}
Opts = list[tuple[str, str | None]]
# the long options this import treats itself, or that the orchestrator sets: sbatch takes any
# unambiguous prefix
_KNOWN = ("ntasks-per-node", "cpus-per-task", "gpus-per-task", "ntasks", "gpus-per-node", "gpus",
          "gres", "partition",
          "account", "qos", "job-name", "nodes", "time", "array", "dependency", "exclude", "chdir",
          "exclusive", "comment", "wrap", *IGNORED)


def _not_carried(key: str, val: str | None) -> str:
    """The note for --comment/--wrap, which the orchestrator sets itself."""
    if key == "comment" and val and re.search(r"[\"']?APS[\"']?\s*:", val):
        return ("--comment: an auto-resume policy (NVIDIA Mission Control's APS) is NOT carried "
                "over: that system would requeue or resubmit each segment's job while the "
                "controller submits the next one, two owners of one run; the orchestrator owns "
                "recovery now")
    return f"--{key}: not carried over: the orchestrator sets it itself"


# other spellings sbatch takes for the same option
ALIASES = {"tasks-per-node": "ntasks-per-node"}


def _full_name(key: str) -> str:
    """`--exclud` / `--job-nam` / `--outp`, as sbatch reads them: the one option they abbreviate."""
    key = ALIASES.get(key, key)
    if key in _KNOWN:
        return key
    full = {k for k in _KNOWN if k.startswith(key)}
    return full.pop() if len(full) == 1 else key


def array_ids(val: str, limit: int = 100_000) -> list[int]:
    """The task ids of `--array=VAL` (`0-9%1`, `1-99:2`, `3,5,7`), in order; [] when it cannot be
    read."""
    ids: list[int] = []
    for part in val.split("%")[0].split(","):
        m = re.fullmatch(r"(\d+)(?:-(\d+)(?::(\d+))?)?", part.strip())
        if not m:
            return []
        first, last, step = int(m.group(1)), int(m.group(2) or m.group(1)), int(m.group(3) or 1)
        ids.extend(range(first, min(last, first + limit * step) + 1, max(step, 1)))
    return ids[:limit]


def _one_line(toks: list[str], out: Opts) -> None:
    i = 0
    while i < len(toks):
        tok = toks[i]
        if tok.startswith("--"):
            key, eq, val = tok[2:].partition("=")
            if (not eq and key not in FLAGS and i + 1 < len(toks)
                and not toks[i + 1].startswith("-")):
                val, eq = toks[i + 1], "="  # "--time 20:00:00"
                i += 1
            out.append((key, val if eq else None))
        elif tok in SHORT:
            takes = (SHORT[tok] not in FLAGS and i + 1 < len(toks)
                     and not toks[i + 1].startswith("-"))
            out.append((SHORT[tok], toks[i + 1] if takes else None))
            i += 1 if takes else 0
        elif re.match(r"-[A-Za-z]\S", tok) and tok[:2] in SHORT:
            out.append((SHORT[tok[:2]], tok[2:].lstrip("=")))
        else:
            out.append((tok, None))  # not an option: named in the notes
        i += 1


def sbatch_options(lines: list[str]) -> Opts:
    """Every option of every `#SBATCH` line, in order (several options on one line included).
    Lines such as `#SBATCHz` or `# SBATCH` are comments, as for sbatch."""
    out: Opts = []
    for line in lines:
        m = re.match(r"#SBATCH\s+(.*)", line.strip())
        if m:
            try:
                _one_line(shlex.split(m.group(1), comments=True), out)
            except ValueError:
                out.append((m.group(1), None))
    return out


def _gres_gpus(val: str) -> tuple[int | None, str | None]:
    """(GPU count, GPU type) of a gres value such as gpu:8, gpu:v100:4, gpu:a100:4,tmpfs:10G."""
    for item in val.split(","):
        m = re.fullmatch(r"gpu(?::([A-Za-z][\w.-]*))?(?::(\d+))?", item.strip())
        if m:
            return int(m.group(2) or 1), m.group(1)
    return None, None


def _first_int(val: str | None) -> int | None:
    m = re.search(r"\d+", val or "")
    return int(m.group(0)) if m else None


class _Resources:
    """Collects the options, then works out the per-node amounts once all are known."""

    def __init__(self, cfg: dict[str, Any], notes: list[str]):
        self.cfg, self.notes = cfg, notes
        self.r: dict[str, Any] = {}
        self.extra: dict[str, str] = {}
        self.per_task: dict[str, int] = {}
        self.ntasks: int | None = None

    def add(self, key: str, val: str | None) -> None:
        key = _full_name(key)
        if key in ("ntasks-per-node", "cpus-per-task",
                   "gpus-per-task") and _first_int(val) is not None:
            self.per_task[key] = _first_int(val) or 0
        elif key == "ntasks" and _first_int(val):
            self.ntasks = _first_int(val)
        elif key in ("ntasks-per-node", "cpus-per-task", "gpus-per-task", "ntasks"):
            self.notes.append(
                f"--{key}={val}: not a count; not carried over, set resources by hand")
        elif key in ("gpus-per-node", "gpus", "gres") and val:
            self._gpus(key, val)
        elif key in ("partition", "account", "qos") and val:
            self.r[key] = val
        elif not self._special(key, val):
            self._other(key, val)

    def _gpus(self, key: str, val: str) -> None:
        count, kind = _gres_gpus(val) if key == "gres" else (_first_int(val.split(":")[-1]), None)
        if key != "gres" and ":" in val:
            kind = val.split(":")[0]
        if count is None:
            self.extra[key] = val
            self.notes.append(f"--{key}={val}: carried over in resources.sbatch_extra")
        elif kind:  # keep the type: gpus_per_node has no room for it
            self.extra["gres" if key == "gres" else key] = val
            self.notes.append(f"--{key}={val}: typed GPU request kept as is in "
                              f"resources.sbatch_extra ({count} {kind} GPU(s) per node)")
        else:
            self.r["gpus_per_node"] = count
            if key == "gpus":
                self.notes.append(f"--gpus={val}: taken as GPUs per node (check: --gpus counts the "
                                  "whole job)")

    def _special(self, key: str, val: str | None) -> bool:
        if key == "job-name" and val:
            self.cfg["name"] = re.sub(r"[^A-Za-z0-9_.+-]", "-", val).lstrip("-.") or "run"
        elif key == "nodes" and val and not val.split("-")[-1].isdigit():
            self.notes.append(f"--nodes={val}: not a node count; set resources.nodes by hand")
        elif key == "nodes" and val:
            self.r["nodes"] = int(val.split("-")[-1])
            if "-" in val:
                self.notes.append(f"--nodes={val}: a range; every segment asks for "
                                  f"{self.r['nodes']} nodes")
        elif key == "time" and val and not is_slurm_time(val):
            self.notes.append(f"--time={val}: not a time limit Slurm reads (M, M:S, H:M:S, D-H, "
                              "D-H:M, D-H:M:S); set resources.time_limit_min by hand")
        elif key == "time" and val:
            self.r["time_limit_min"] = slurm_minutes(val)
        elif key == "array" and val:
            self._array(val)
        elif key == "dependency" and val and re.fullmatch(r"[A-Za-z0-9_:,?+]+", val):
            self.r["first_dependency"] = val
            self.notes.append(f"--dependency={val}: resources.first_dependency: the first segment "
                              "waits for it, as the script's job did; the later ones follow the "
                              "controller")
        elif key == "dependency":
            self.notes.append(f"--dependency={val}: not carried over (it needs the shell); write "
                              "it out in resources.first_dependency")
        elif key == "exclude" and val and not re.search(r"[$`\s]", val):
            self.r["exclude"] = val
            self.notes.append(f"--exclude={val}: resources.exclude: never used, in any segment "
                              "(the blacklist adds its own nodes to it)")
        elif key == "exclude" and val:
            self.notes.append(f"--exclude={val}: not carried over (it needs the shell); write the "
                              "nodes out in resources.exclude")
        elif key == "nodelist" and val and not re.search(r"[$`\s]", val):
            self.extra["nodelist"] = val
            self.notes.append(f"--nodelist={val}: carried over in resources.sbatch_extra: every "
                              "segment asks for these nodes, less any the blacklist or "
                              "resources.exclude holds (Slurm adds others as needed)")
        elif key == "chdir" and val:
            self.cfg["workdir"] = val
            self.notes.append(f"--chdir={val}: {IGNORED['chdir']}")
        elif key in ("comment", "wrap"):
            self.notes.append(_not_carried(key, val))
        elif key in IGNORED:
            self.notes.append(
                f"--{key}{'=' + val if val else ''}: not carried over: {IGNORED[key]}")
        else:
            return False
        return True

    def _array(self, val: str) -> None:
        m = re.match(r"(\d+)-(\d+)", val)
        n = int(m.group(2)) - int(m.group(1)) + 1 if m else len(val.split("%")[0].split(","))
        self.cfg["_array_spec"] = val
        ids = array_ids(val)
        if ids:
            # import_sbatch sets SLURM_ARRAY_TASK_ID from it in the launch script
            self.cfg["_array_ids"] = ids
        self.cfg.setdefault("policy", {})["max_segments"] = n

    def _other(self, key: str, val: str | None) -> None:
        if not re.fullmatch(r"[a-z][a-z0-9-]*", key):
            self.notes.append(f"#SBATCH {key}: not an option sbatch knows; ignored")
        elif key not in _KNOWN and (several := sorted(k for k in _KNOWN if k.startswith(key))):
            self.notes.append(f"--{key}: an ambiguous abbreviation (--{', --'.join(several)}); not "
                              "carried over")
        elif key == "exclusive":
            # submitit writes `--KEY=VALUE`; `--exclusive=exclusive` is what sbatch accepts for
            # plain --exclusive
            self.extra["exclusive"] = val or "exclusive"
        elif val is None:
            self.notes.append(f"--{key}: a flag without a value cannot be passed through "
                              "resources.sbatch_extra (the backend writes --KEY=VALUE); not "
                              "carried over")
        else:
            self.extra[key] = val

    def finish(self) -> dict[str, Any]:
        nodes = self.r.get("nodes", 1)
        tpn = self.per_task.get("ntasks-per-node")
        if tpn is None and self.ntasks:
            tpn = max(1, self.ntasks // nodes)
            if self.ntasks % nodes:
                self.notes.append(f"--ntasks={self.ntasks} does not divide by {nodes} nodes: {tpn} "
                                  "per node")
        self.r["tasks_per_node"] = tpn or 1
        gpt = self.per_task.get("gpus-per-task")
        if gpt is not None:
            self.r["gpus_per_node"] = gpt * self.r["tasks_per_node"]
            self.notes.append(f"--gpus-per-task={gpt}: one agent task per node asks for "
                              f"{self.r['gpus_per_node']} GPUs per node")
        cpt = self.per_task.get("cpus-per-task")
        if cpt is not None:
            self.r["cpus_per_task"] = cpt * self.r["tasks_per_node"]
            if self.r["tasks_per_node"] > 1:
                self.notes.append(f"--cpus-per-task={cpt} x {self.r['tasks_per_node']} tasks per "
                                  "node: the one agent task per node asks for "
                                  f"{self.r['cpus_per_task']} CPUs")
        if "time_limit_min" not in self.r:
            self.r["time_limit_min"] = 60
            self.notes.append("no --time in the script: each segment gets "
                              "resources.time_limit_min=60; set it to your partition's limit")
        if self.extra:
            self.r["sbatch_extra"] = self.extra
        return self.r


def resources(opts: Opts, cfg: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    acc = _Resources(cfg, notes)
    for key, val in opts:
        acc.add(key, val)
    return acc.finish()
