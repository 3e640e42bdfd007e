"""Pure: (settings, run state, checkpoint, exclude plan) -> the next SegmentSpec."""

from __future__ import annotations

import re
from pathlib import Path

from orchestrator import numerics
from orchestrator.blacklist import ExcludePlan
from orchestrator.checkpoint import Checkpoint
from orchestrator.checkpoint_interval import (
    advise,
    failure_rate_per_node_hour,
    observed,
    restart_cost_s,
    write_time_s,
)
from orchestrator.contract import SegmentPaths
from orchestrator.model import SegmentSpec
from orchestrator.settings import Settings
from orchestrator.shellform import PLACEHOLDER, SAFE_TEXT, pasted, script_indexes, unsafe_char
from orchestrator.spares import sizing_text, spares_needed
from orchestrator.state import RunState


def job_name(run_name: str, index: int) -> str:
    return f"{run_name}.seg{index:04d}"


class UnsafeValue(ValueError):
    """A value that would be pasted as text into the command holds a character a program could
    read as code (a checkpoint's name found on disk: the config's paths are checked on load)."""


# What a placeholder becomes inside a shell script (`bash -c SCRIPT`): the environment variable that
# holds its value, so no value (a run_dir holding `$(...)`, a path with spaces) is ever read by the
# shell as code or split.
SHELL_VARS = {"checkpoint_interval": "ORCH_CHECKPOINT_INTERVAL_S", "checkpoint": "ORCH_RESUME_FROM",
              "checkpoint_root": "ORCH_RESUME_ROOT", "segment": "ORCH_SEGMENT",
              "run_dir": "ORCH_RUN_DIR", "python": "ORCH_PYTHON", "config_dir": "ORCH_CONFIG_DIR"}


def render(argv: list[str], values: dict[str, str]) -> tuple[str, ...]:
    """Substitute {placeholders} in each argv element in one pass (a value is never substituted
    again); `{{name}}` is the escape for a literal `{name}`. Never joins or splits arguments. In the
    script of a shell launch (`bash -c SCRIPT ...`) a placeholder becomes a quoted reference to its
    environment variable (shellform.py finds it in every spelling). A value pasted as text holding
    a character outside shellform.SAFE_VALUE raises UnsafeValue: it is never pasted."""
    for i, name in pasted(argv):
        if (c := unsafe_char(values.get(name, ""), argv[i] == f"{{{name}}}")) is not None:
            raise UnsafeValue(f"command.{i}: the value of {{{name}}} ({values[name]!r}) holds "
                              f"{c!r}; a value pasted as text may hold only {SAFE_TEXT}")

    def sub(m: re.Match[str]) -> str:
        if m.group(1) is not None:
            return "{" + m.group(1) + "}"
        return values.get(m.group(2), m.group(0))

    out = [PLACEHOLDER.sub(sub, arg) for arg in argv]
    for i in script_indexes(argv):  # every spelling: bash -lc, env bash -e -c, dash -c ...
        out[i] = shell_refs(argv[i], set(values))
    return tuple(out)


def shell_refs(script: str, known: set[str]) -> str:
    """Each known placeholder of a shell script as `"${VAR}"`, quoted for where it stands: unquoted,
    inside double quotes (`${VAR}`) or inside single quotes (`'"${VAR}"'`, closing and reopening
    them). Comments are copied as they are (an apostrophe in `# the agent's note` opens no
    quote)."""
    out: list[str] = []
    quote, i = "", 0
    while i < len(script):
        m = PLACEHOLDER.match(script, i)
        if m and m.group(2) in known and m.group(2) in SHELL_VARS:
            ref = "${" + SHELL_VARS[m.group(2)] + "}"
            out.append(ref if quote == '"' else f"'\"{ref}\"'" if quote == "'" else f'"{ref}"')
            i = m.end()
            continue
        if m and m.group(1) is not None:
            out.append("{" + m.group(1) + "}")
            i = m.end()
            continue
        c = script[i]
        if c == "#" and not quote and (i == 0 or script[i - 1] in " \t\n;&|()<>"):
            end = script.find("\n", i)
            end = len(script) if end < 0 else end
            out.append(script[i:end])  # a comment: an apostrophe in it opens no quote
            i = end
            continue
        if c == "\\" and quote != "'" and i + 1 < len(script):
            out.append(script[i:i + 2])
            i += 2
            continue
        if c in ("'", '"') and quote in ("", c):
            quote = "" if quote == c else c
        out.append(c)
        i += 1
    return "".join(out)


def interval(settings: Settings, state: RunState) -> tuple[int, str]:
    """The checkpoint interval to hand to the next segment (seconds), and a line saying why. Never
    more than half the segment's time limit: a segment that ends at its limit has saved at least
    once."""
    c, limit_min = settings.checkpoint, settings.resources.time_limit_min
    write_s, timed = write_time_s(state, c.write_time_s)
    current_s = c.interval_s or 3600.0
    a = advise(observed(state), settings.resources.nodes, write_s, restart_cost_s(state), current_s,
               max_interval_s=limit_min * 60 / 2)
    capped = a.interval_s < a.optimum_s
    why = (f"half the {limit_min} min time limit; the failure rate alone would give "
           f"{fmt_min(a.optimum_s)}" if capped else "the best for the failure rate")
    now = ("would not save before the time limit" if current_s > limit_min * 60
           else f"would give {a.ettr_now:.1%}")
    note = (f"every {fmt_min(a.interval_s)} ({why}): expected effective training time "
            f"{a.ettr_advised:.1%}; the {'configured' if c.interval_s else 'default'} "
            f"{fmt_min(current_s)} {now}; from a job MTBF of {a.mtbf_h:.0f} h and a {write_s:.0f} "
            f"s checkpoint write ({'timed' if timed else 'configured'})")
    return round(a.interval_s), note


def fmt_min(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 60 else f"{seconds:.0f} s"


def spares(settings: Settings, state: RunState) -> int:
    """Spare nodes for the next segment: as configured, or (`auto`) enough that the chance of more
    node failures than spares within the time limit is below 1% at the failure rate observed so
    far."""
    r = settings.resources
    if r.spare_nodes != "auto":
        return r.spare_nodes
    rate = failure_rate_per_node_hour(observed(state))
    return spares_needed(rate, r.nodes, r.time_limit_min / 60)


def spares_reason(settings: Settings, state: RunState) -> str:
    """How `auto` sized the spares (the rate, its basis, the chance of running out), or '' for a
    number."""
    r = settings.resources
    if r.spare_nodes != "auto":
        return ""
    obs = observed(state)
    basis = (f"{obs.failures} node failure(s) in {obs.node_hours:.0f} node-hours observed, blended "
             "with the field prior" if obs.node_hours else "the field prior; no failure observed "
                                                           "yet")
    return "auto: " + sizing_text(failure_rate_per_node_hour(obs), r.nodes, r.time_limit_min / 60,
                                  basis)


def _env(settings: Settings, state: RunState, values: dict[str, str]) -> dict[str, str]:
    """The segment's environment: the run's own, then what the orchestrator tells the training."""
    # Megatron's --load and DeepSpeed's load_dir take the checkpoint root (ORCH_RESUME_ROOT) and
    # read its tracker
    return {**settings.env, "ORCH_RESUME_FROM": values["checkpoint"],
            "ORCH_CHECKPOINT_INTERVAL_S": values["checkpoint_interval"],
            "ORCH_RESUME_ROOT": values["checkpoint_root"], "ORCH_SEGMENT": values["segment"],
            "ORCH_RUN_DIR": values["run_dir"], "ORCH_PYTHON": values["python"],
            "ORCH_CONFIG_DIR": values["config_dir"], **tracker_env(settings, state),
            # a rollback in force: the iterations whose data the loss went bad on (CAUSES.md)
            **({"ORCH_SKIP_BATCHES": skip} if (skip := numerics.skip_ranges(
                state.segments, state.scratch_after)) else {})}


def plan(settings: Settings, state: RunState, ckpt: Checkpoint | None, exclude: ExcludePlan,
         python: str, spare_nodes: int | None = None) -> SegmentSpec:  # spare_nodes None: spares()
    index = len(state.segments) + 1
    run_dir = Path(settings.run_dir)
    every_s, advice = interval(settings, state)
    values = {
        "checkpoint_interval": str(every_s), "checkpoint": ckpt.path if ckpt else "",
        "checkpoint_root": str(settings.checkpoint.dir) if ckpt else "",
        "segment": str(index), "run_dir": str(run_dir), "python": python,
        "config_dir": str(settings.config_dir),
    }
    env = _env(settings, state, values)
    r = settings.resources
    k = spares(settings, state) if spare_nodes is None else spare_nodes
    return SegmentSpec(
        run_name=settings.name,
        index=index,
        job_name=job_name(settings.name, index),
        nodes=r.nodes,
        tasks_per_node=r.tasks_per_node,
        launch_nodes=r.launch_nodes,
        gpus_per_node=r.gpus_per_node,
        cpus_per_task=r.cpus_per_task,
        partition=r.partition, account=r.account, qos=r.qos,
        time_limit_min=r.time_limit_min,
        exclude=exclude.nodes,
        exclude_hostlist=exclude.hostlist,
        resume_from=ckpt.path if ckpt else None,
        start_iteration=(ckpt.iteration or 0) if ckpt else 0,
        command=render(settings.command, values),
        env=tuple(sorted(env.items())),
        workdir=str(settings.workdir or settings.config_dir),
        run_dir=str(run_dir),
        segment_dir=str(SegmentPaths.of(run_dir, index).root),
        sbatch_extra=tuple(sorted(_first_held(r.sbatch_extra, r.first_dependency, index).items())),
        progress_regex=settings.progress_regex,
        preflight_commands=tuple(tuple(c) for c in settings.preflight.commands),
        preflight_timeout_s=settings.preflight.timeout_s, preflight_nhc=settings.preflight.nhc,
        interval_advice=advice,
        spares=k,
        allocation_dir=str(SegmentPaths.of(run_dir, index).allocation) if k else "",
        request_wait_s=3 * settings.watch.poll_interval_s + settings.watch.read_timeout_s,
    )


def tracker_env(settings: Settings, state: RunState) -> dict[str, str]:
    """One W&B run across every segment: a run id stable for this run (its name and when its ledger
    began) and resume allowed, so each resubmission continues the same charts. What `env` sets
    wins."""
    rid = re.sub(r"[^A-Za-z0-9_-]", "-", f"{state.run}-{state.created_at:%Y%m%d%H%M%S}")[:64]
    tracked = {"WANDB_RUN_ID": rid, "WANDB_RESUME": "allow"}
    return {k: v for k, v in tracked.items() if k not in settings.env}


def _first_held(extra: dict[str, str], dependency: str | None, index: int) -> dict[str, str]:
    """The first segment waits for `resources.first_dependency` (the job the run follows)."""
    return {**extra, "dependency": dependency} if dependency and index == 1 else dict(extra)
