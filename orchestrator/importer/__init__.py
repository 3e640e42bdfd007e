"""`orchestrator import-sbatch`: turn an existing #SBATCH script into a run config, and say what it
could not translate. The script's own shell is kept: its body and its training launch (srun taken
out) become the per-node launch the agent runs under bash on every node (`command: [bash, -c,
SCRIPT, NAME]`).

- `options.py`: #SBATCH options -> resources.
- `scan.py`: the top-level commands of the script, with the spans of their words.
- `launch.py`: which command is the training launch, and that command without srun.
- `names.py`: variables (assigned, undefined), checkpoint and resume flags.
- `script.py`: the per-node launch script; `bash -n` clean.
"""

from __future__ import annotations

import gc
import re
from pathlib import PurePosixPath
from typing import Any

from orchestrator.importer import ckptconf
from orchestrator.importer import launch as launch_mod
from orchestrator.importer.container import containers, pyxis
from orchestrator.importer.names import (
    SAVE_FLAGS,
    assignments,
    flag_values,
    resolve,
    resume_var,
    rewrite_resume,
    undefined,
)
from orchestrator.importer.nodes import first_node_only, listed, on_first_node
from orchestrator.importer.once import LOAD_ENV, once_after, split_once
from orchestrator.importer.options import resources, sbatch_options
from orchestrator.importer.refuse import (
    Array,
    Refused,
    backgrounded,
    bash_rejects,
    enclosing_loop,
    het_launch,
    hetjob,
    in_loop,
    line_of,
    no_launch,
    no_launch_no_nodes,
    on_some_nodes,
    resubmissions,
    shebang,
)
from orchestrator.importer.refuse import (
    array as refuse_array,
)
from orchestrator.importer.scan import segments, unquote
from orchestrator.importer.script import (
    LAUNCH_BEFORE,
    array_lines,
    array_task_lines,
    first_only,
    passing_bash_n,
    syntax_error,
    tee_once,
    tidy,
    with_array_id,
    with_array_task,
    with_launch,
    with_rank_step,
)
from orchestrator.importer.yamlout import dump_config

__all__ = ["Refused", "dump_config", "import_sbatch"]
# `$1`, `${2:?}`, `"$@"`, `$#` outside comments
POSITIONAL = re.compile(r"(?m)^[^#\n]*(?<!\\)\$(\{#?)?[1-9@*#]")
ORDER = ["name", "run_dir", "workdir", "command", "env", "resources", "checkpoint", "policy",
         "backend"]


def _refuse_launch(text: str, found: launch_mod.Launch, env: dict[str, str], nodes: int,
                   notes: list[str]) -> None:
    """Raises Refused for a launch the orchestrator cannot run as sbatch runs it: sent to the
    background in a loop (one launch per item, placed by Slurm), an MPMD step, on nodes Slurm
    picks, or run from the batch script alone in a job of several nodes. A launch on nodes the
    script names (`-w $host`) runs on those nodes only; a loop's launch on every node runs on
    every node, pass by pass."""
    line = line_of(text, found.segment.words[0][0])
    named = found.kind == "srun" and listed(found.dropped)
    if (loop := enclosing_loop(text, found.segment)) is not None and nodes > 1 and not named:
        if backgrounded(text, found.segment):
            raise in_loop(loop, line)
        notes.append(f"the training launch is inside a `{loop.word}` loop (line {loop.line}): "
                     "every node runs the loop, and each pass starts this node's part of the "
                     "launch, as each pass of the batch script's loop started it on every node")
    het_launch([*found.dropped, *found.segment.texts(text)[found.program_at:]], line)
    on_some_nodes([resolve(w, env) for w in found.dropped], nodes, line, named)


def _launch_edit(found: launch_mod.Launch, text: str, env: dict[str, str], cfg: dict[str, Any],
                 notes: list[str]) -> tuple[int, int, str, bool]:
    """(start, end, replacement, ranks in a pyxis image): the edit that puts the agent in the
    launch's place; a container launch keeps its srun for each node's ranks (agents on the host)."""
    r = cfg["resources"]
    named = found.kind == "srun" and listed(found.dropped)
    in_image = found.launcher == "srun" and pyxis(found, env)
    if in_image or named:
        start, end, repl, more = launch_mod.rank_step(found, text, r.get("tasks_per_node", 1),
                                                      in_image)
        r["tasks_per_node"] = 1
    else:
        many = r.get("nodes", 1) > 1
        first = first_node_only(found.launcher, found.kind, r.get("nodes", 1))
        start, end, repl, more = launch_mod.rewrite(found, text, many and not first)
        if first:
            on_first_node(found.launcher, line_of(text, found.segment.words[0][0]), r, notes)
        containers(found, env, cfg, notes)
    notes.extend(more)
    return start, end, repl, in_image or named


def _launch_script(text: str, cfg: dict[str, Any], notes: list[str], source: str) -> str:
    segs = segments(text, launch_mod.WANTED)
    env = assignments(text, segs)
    if task := cfg.get("_array_task"):
        env.setdefault("SLURM_ARRAY_TASK_ID", str(task[0]))
    found = launch_mod.find_launch(segs, text, env)
    r = cfg["resources"]
    if found is None and r.get("nodes", 1) > 1:
        raise no_launch()
    if found is None and "nodes" not in r:
        raise no_launch_no_nodes()
    if found is None:  # one node: the batch script ran there, once, as the agent runs it now
        notes.append("no training launch (srun, torchrun, deepspeed, accelerate, python) "
                     "recognised: the whole script runs on the job's one node, as under sbatch; "
                     "check it")
        return passing_bash_n(tidy(text, source), notes)
    _refuse_launch(text, found, env, r.get("nodes", 1), notes)
    start, end, repl, in_image = _launch_edit(found, text, env, cfg, notes)
    if found.kind != "srun" and r.get("tasks_per_node", 1) != 1:
        notes.append(f"--ntasks-per-node={r['tasks_per_node']} is not used: the launch is not "
                     "under srun, so the agent starts it once on a node (tasks_per_node: 1)")
        r["tasks_per_node"] = 1
    words = found.segment.texts(text)[found.program_at:]
    shown = resolve(" ".join(unquote(w) for w in words), env)
    notes.append(f"training launch found: {' '.join(shown.split())[:300]}")
    script = with_launch(text, start, end, repl, found.segment.line_start)
    setup = None  # on the first node alone, the script runs once there, as the batch script did
    if r.get("launch_nodes") != "first":  # up to the launch's first word (`clear; srun ...`)
        script = once_after(script, notes)
        script, setup = split_once(script, found.segment.words[0][0] + len(LAUNCH_BEFORE), notes,
                                   cfg["_args"])
    if setup:
        cfg["_setup"] = [setup]
    script, resumes = rewrite_resume(script)
    for flag, value, _line in resumes:
        var = resume_var(flag)
        what = ("the checkpoint directory when the orchestrator found a complete checkpoint in it "
                "(the framework loads the iteration its tracker file names)"
                if var == "ORCH_RESUME_ROOT"
                else "the newest complete checkpoint the orchestrator found")
        notes.append(f"{flag} {value} now reads ${{{var}:-{value}}}: {what}, the original value on "
                     "the first segment")
    _checkpoint(text, env, cfg, notes, [f for f, _, _ in resumes])
    script = tee_once(tidy(script, source), notes)
    script = first_only(script) if r.get("launch_nodes") == "first" else script
    return passing_bash_n(with_rank_step(script) if in_image else script, notes)


def _checkpoint(text: str, env: dict[str, str], cfg: dict[str, Any], notes: list[str],
                resumes: list[str]) -> None:
    saves = flag_values(text, SAVE_FLAGS)
    preset = launch_mod_preset(resumes, [f for f, _, _ in saves], text)
    ck = None
    for flag, value, line in saves:
        path = resolve(unquote(value), env)
        notes.append(f"checkpoint path found: {flag} {value} (line {line})" +
                     (f" = {path}" if path != value else ""))
        if "$" not in path and "`" not in path:
            ck = {"dir": path, "preset": preset} | ({"glob": "*"} if preset == "glob" else {})
            break
    ck = ck or ckptconf.from_configs(text, cfg.get("workdir"), lambda v: resolve(v, env), notes)
    if ck is not None:
        ckptconf.existing(ck, notes, cfg.get("workdir"))
        cfg["checkpoint"] = ck
        return
    cfg["checkpoint"] = {"dir": "CHANGE-ME", "preset": preset} | (
        {"glob": "*"} if preset == "glob" else {})
    if not saves:
        notes.append("no checkpoint path found in the script (no --save, --output_dir, "
                     "--checkpoint_dir, ...): set checkpoint.dir and checkpoint.preset by hand")
    else:
        notes.append("the checkpoint path depends on variables the script does not set: set "
                     "checkpoint.dir by hand")
    if not resumes:
        notes.append("no resume flag found: make the training resume from $ORCH_RESUME_FROM (the "
                     "newest complete checkpoint, empty on the first segment)")


def _array(text: str, cfg: dict[str, Any], notes: list[str], script_name: str,
           array_task: int | None) -> None:
    """A job array: one chain of segments (`%1`, the same work), or one task of it as its own run
    (`--array-task ID`, or an array of one task); a sweep or tasks side by side are refused."""
    spec = cfg.pop("_array_spec", None)
    if spec is None:
        if array_task is not None:
            raise Refused(None, f"--array-task {array_task}: the script has no #SBATCH --array")
        return
    arr = Array(spec, cfg.get("_array_ids") or [])
    if not arr.ids:
        raise Refused(None, f"--array={spec}: not a task list Slurm reads (e.g. 0-9, 1,3,5, "
                            "0-99%1)")
    if refuse_array(text, arr, array_task, script_name) == "chain":
        notes.append(f"--array={spec}: a chain (one task at a time, the same work): its "
                     f"{len(arr.ids)} tasks become up to {len(arr.ids)} segments "
                     "(policy.max_segments); the controller submits each one after diagnosing the "
                     "last")
        return
    task = arr.ids[0] if array_task is None else array_task
    cfg.pop("_array_ids", None)
    cfg.get("policy", {}).pop("max_segments", None)
    if not cfg.get("policy"):
        cfg.pop("policy", None)
    if len(arr.ids) > 1:
        cfg["name"] = f"{cfg['name']}-task{task}"
    cfg["_array_task"] = (task, arr.ids)
    notes.append(f"--array={spec}: this run is array task {task} alone (SLURM_ARRAY_TASK_ID="
                 f"{task} in every segment, and on every retry)" + (
                     "; import the others with --array-task ID" if len(arr.ids) > 1 else ""))


# accelerate's own save_state (its no_trainer examples, --checkpointing_steps, a project_dir):
# step_N/epoch_N dirs, not HF Trainer's checkpoint-N
ACCELERATE_STATE = re.compile(r"no_trainer|--checkpointing[-_]steps|--project[-_]dir|save_state")


def launch_mod_preset(resumes: list[str], saves: list[str], text: str = "") -> str:
    from orchestrator.importer.names import RESUME_FLAGS

    preset = (RESUME_FLAGS[resumes[0]] if resumes
              else SAVE_FLAGS[saves[0]] if saves else "megatron")
    return "accelerate" if preset == "hf" and ACCELERATE_STATE.search(text) else preset


def import_sbatch(text: str, script_name: str = "script", workdir: str | None = None,
                  args: tuple[str, ...] = (),
                  array_task: int | None = None) -> tuple[dict[str, Any], list[str]]:
    """(config mapping, notes) for a batch script. `workdir`: where sbatch would have run it (the
    current directory of the user by default), unless the script says --chdir. `array_task`: the
    one task of a job array to import as its own run. Raises Refused when the script cannot run as
    sbatch would run it."""
    collecting = gc.isenabled()
    # a large script makes millions of small objects and no cycles: the collector only costs time
    gc.disable()
    try:
        return _import(text, script_name, workdir, args, array_task)
    finally:
        if collecting:
            gc.enable()


def _import(text: str, script_name: str, workdir: str | None, args: tuple[str, ...],
            array_task: int | None) -> tuple[dict[str, Any], list[str]]:
    text = text.replace("\r\n", "\n")
    notes: list[str] = []
    shebang(text, notes)
    bash_rejects(text, syntax_error(text))
    hetjob(text)
    text = resubmissions(text, script_name, notes)
    name = re.sub(r"[^A-Za-z0-9_.+-]", "-", script_name).lstrip("-.") or "run"
    cfg: dict[str, Any] = {"name": name}
    cfg["resources"] = resources(sbatch_options(text.split("\n")), cfg, notes)
    _array(text, cfg, notes, script_name, array_task)
    if workdir and not str(cfg.get("workdir", "")).startswith("/"):
        cfg["workdir"] = str(PurePosixPath(workdir) / cfg.get("workdir", "."))
        notes.append(f"workdir: {cfg['workdir']} (where sbatch would have started the script); "
                     "change it if you submit from elsewhere")
    cfg["_args"] = args
    script = _launch_script(text, cfg, notes, script_name)
    if not cfg.pop("_args") and POSITIONAL.search(text):
        notes.append("the script reads its own arguments ($1, $@, ...), as given to `sbatch SCRIPT "
                     "ARGS`: give them after the script (orchestrator import-sbatch SCRIPT -- "
                     "ARGS...); here it runs without any")
    if task := cfg.pop("_array_task", None):
        script = with_array_task(script, *task)
        if setup := cfg.get("_setup"):
            cfg["_setup"] = [setup[0].replace(LOAD_ENV, LOAD_ENV + array_task_lines(*task), 1)]
    elif ids := cfg.pop("_array_ids", None):
        script = with_array_id(script, ids, notes)
        # the run-once lines read it too (ORCH_SEGMENT is in the setup's environment)
        if setup := cfg.get("_setup"):
            cfg["_setup"] = [setup[0].replace(LOAD_ENV, LOAD_ENV + array_lines(ids), 1)]
    cfg["command"] = ["bash", "-c", script, cfg["name"], *args]
    missing = undefined(text)
    if missing:
        notes.append("the script uses variables it does not set (they must come from the "
                     "environment, e.g. `env`): " + ", ".join(missing))
    cfg["run_dir"] = f"runs/{cfg['name']}"
    cfg["backend"] = {"kind": "slurm"}
    slurm = {k: v for k in ("srun_args", "setup") if (v := cfg.pop(f"_{k}", None))}
    if slurm:
        cfg["backend"]["slurm"] = slurm
    return {k: cfg[k] for k in ORDER if k in cfg}, notes
