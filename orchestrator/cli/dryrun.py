"""`orchestrator run --dry-run`: the next submission, printed and not submitted; and the check that
a config's spare nodes have a backend that can hold them."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.cli.common import build_backend, fail
from orchestrator.clock import Clock
from orchestrator.contract import SegmentPaths
from orchestrator.loop.submission import reported_into
from orchestrator.model import RunStatus
from orchestrator.plan import spares_reason
from orchestrator.saves import reported_saves
from orchestrator.settings import Settings
from orchestrator.shellform import script_indexes
from orchestrator.state import STATE_FILE, RunState, StateError, StateStore
from orchestrator.views.text import clean

if TYPE_CHECKING:
    from orchestrator.model import SegmentSpec


def spares_problem(s: Settings) -> str:
    """Why the config's spare nodes cannot work with its backend, or ''. The local backend has no
    allocation to hold spares in (it refuses them at submission); better said before the run
    starts."""
    k = s.resources.spare_nodes
    if s.backend.kind == "slurm" or k == 0:
        return ""
    return (f"{s.config_path or 'config'}: resources.spare_nodes: {k} needs backend.kind: slurm "
            "(the spares are nodes of one Slurm allocation held with --no-kill, and a restart on "
            f"one is a new job step); the {s.backend.kind} backend has no allocation: set "
            "resources.spare_nodes to 0")


def check_preset(s: Settings) -> None:
    """A checkpoint dir holding checkpoints its preset does not read: every segment would start
    from scratch. One error line naming the preset that would read them."""
    from orchestrator.checkpoint import preset_problem

    if problem := preset_problem(s.checkpoint):
        raise fail([f"{s.config_path or 'config'}: {problem}"])


def dry(s: Settings, clock: Clock, start_over: bool = False, from_scratch: bool = False,
        resume: bool = False) -> None:
    """Print the next submission. `start_over`: as `run --start-over` would see it (a missing
    state.json in a run directory with traces is a new ledger), without setting anything aside;
    `from_scratch`: as `run --from-scratch` would (the checkpoints seen so far given up), changing
    nothing on disk."""
    from orchestrator.loop.advance import advance
    from orchestrator.loop.observations import FromScratch
    from orchestrator.loop.submission import FilesystemStall, prepare

    try:
        state = StateStore(s.run_dir).load()
    except StateError as exc:
        if not start_over or (s.run_dir / STATE_FILE).exists():
            raise fail([str(exc)], 1) from None
        state = None
        print("# --start-over: the old run's segments/ and state.json.bak would be set aside, a "
              "new ledger begun")
    now = clock.now()
    if state is not None and state.run != s.name:
        raise fail([f"{s.run_dir} holds run {state.run!r}, not {s.name!r}: give this config its "
                    "own run_dir"], 1)
    state = state or RunState.begin(s.name, now)
    if from_scratch and state.segments:
        state = advance(state, FromScratch(), s, now).ledger
        print(f"# --from-scratch: segments up to {state.scratch_after} would be history; iteration "
              "0 is allowed")
    check_preset(s)
    backend = build_backend(s, clock)
    try:
        prepared = prepare(s, state, backend, now, sys.executable)
    except FilesystemStall as exc:
        raise fail([f"checkpoint directory: {exc}"], 1) from None
    spec, excl = prepared.spec, prepared.exclude
    print(f"# dry run: nothing is submitted. Segment {spec.index} of run {s.name} "
          f"({s.backend.kind} backend)")
    if standing := where_it_stands(state, s.goal.target_iteration, resume):
        print(f"# {standing}")
    print(f"# exclude: {spec.exclude_hostlist or '(none)'}"
          + (f"  [{excl.note}]" if excl.note else ""))
    print("\n".join(resume_lines(spec, state, s)))
    print("\n".join(launch_lines(spec)))
    if s.resources.spare_nodes != 0:
        print("\n".join(allocation_lines(spec, s.resources.spare_nodes,
                                         tuple(s.backend.slurm.srun_args),
                                          reason="; ".join(x for x in (spares_reason(s, state),
                                                                       prepared.spares_note)
                                                           if x))))
    print(backend.render(spec))


def resume_lines(spec: SegmentSpec, state: RunState, s: Settings) -> list[str]:
    """The checkpoint the segment resumes from. With none while the last segment is not judged yet:
    if its nodes' exit records say the training saved checkpoints, run will wait for them (a lost
    filesystem, exit 1 here, as run decides once it judges the segment); else that it is pending."""
    out = [f"# resume from: {spec.resume_from or '(no checkpoint: start from scratch)'} "
           f"(iteration {spec.start_iteration})"]
    cur = state.current
    if spec.resume_from is not None or cur is None or cur.action is not None:
        return out
    run_dir, ckpt_dir = s.run_dir, Path(s.checkpoint.dir)
    if not ckpt_dir.is_dir() and not reported_into(run_dir, cur.index, ckpt_dir, s.workdir):
        return out  # never created and no save named it: the training saves elsewhere (as run)
    saved = [x for x in reported_saves(SegmentPaths.of(run_dir, cur.index).root) if x.durations]
    if saved:
        reached = max(x.iteration or 0 for x in saved)
        raise fail([f"checkpoint directory: no complete checkpoint, but the training of segment "
                    f"{cur.index} reported saving checkpoints (its nodes' exit records or logs; it "
                    f"reached "
                    f"iteration {reached}): emptied, moved or unmounted? run would not start from "
                    "scratch (`orchestrator run --from-scratch` starts from iteration 0 on "
                    "purpose)"], 1)
    if (cur.end_iteration or 0) > 0:
        out.append(f"#   not decided yet: segment {cur.index} reached iteration "
                   f"{cur.end_iteration}; if its training reported saving checkpoints, run waits "
                   "for them instead")
    return out


def where_it_stands(state: RunState, target: int | None = None, resume: bool = False) -> str:
    """What `run` would do first, when it is not 'submit this segment': a segment still out, a
    finished run (whose goal `target`, the config's, may have been raised: then run resumes it, as
    loop/operator.resume decides)."""
    cur = state.current
    if cur is not None and cur.ended_at is None and cur.job_id:
        return (f"segment {cur.index} (job {cur.job_id}) has not ended: run would watch it and "
                "submit nothing now; below is what would follow it if it ended as things stand")
    if (state.status == RunStatus.DONE and state.target_iteration is not None
        and (target or 0) > state.target_iteration and state.best_iteration() >= (target or 0)):
        return (f"the run is done; the config raised its goal to {target}, but it already reached "
                f"iteration {state.best_iteration()}: run would submit nothing")
    if (state.status == RunStatus.DONE and state.target_iteration is not None
        and (target or 0) > state.target_iteration):
        return (f"the run is done at goal {state.target_iteration}, but the config raised it to "
                f"{target}: run would resume it and submit this segment")
    if state.status == RunStatus.DONE:
        return (f"the run is done ({clean(state.stop_reason) or 'goal reached'}): run would submit "
                "nothing; below is the segment a raised goal (goal.target_iteration) would start")
    if state.status == RunStatus.STOPPED and resume:
        return (f"the run is stopped ({clean(state.stop_reason)[:200]}): run --resume resumes it "
                "with the segment below")
    if state.status == RunStatus.STOPPED:
        return (f"the run is stopped ({clean(state.stop_reason)[:200]}): run would submit nothing "
                "and exit 3; below is the segment 'run --resume' would start once it is fixed")
    return ""


def launch_lines(spec: SegmentSpec) -> list[str]:
    """What each node's agent will start, where and with which environment (secret values
    masked)."""
    from orchestrator.backends.local_jobs import masked
    from orchestrator.redact import masked_text

    out = [f"# per-node launch: one agent on each of {spec.nodes} node(s), {spec.tasks_per_node} "
           "rank(s) each" + ("; the command runs on the first node only, the other agents idle "
                             "(resources.launch_nodes: first)" if spec.launch_nodes == "first"
                             else ""), f"#   working directory: {spec.workdir}"]
    argv = list(spec.command)
    if scripts := script_indexes(argv):
        i = scripts[0]
        out.append(f"#   command: {shlex.join(argv[:i])} SCRIPT {shlex.join(argv[i + 1:])}".rstrip()
                   + "   (SCRIPT below)")
        out += [f"#     | {line}" for line in argv[i].splitlines()]
    else:
        out.append(f"#   command: {shlex.join(argv)}")
    out = [masked_text(line) for line in out]
    env = masked(dict(spec.env))
    out += (["#   environment (secret values masked):"]
            + [f"#     {k}={v}" for k, v in sorted(env.items())])
    return [clean(line) for line in out]


def allocation_lines(spec: SegmentSpec, configured: int | str, srun_args: tuple[str, ...],
                     python: str = sys.executable, reason: str = "") -> list[str]:
    """With spare nodes: the job's size and --no-kill, the allocation supervisor on the batch host,
    and the exact srun it runs for the segment's step (the nodes are the allocation's first ones,
    known once Slurm places it)."""
    from orchestrator.agent.allocation import step_argv

    n, k = spec.nodes, spec.spares
    out = [f"# spare nodes: {k} for this segment (resources.spare_nodes: {configured})"]
    if reason:
        out.append(f"#   {reason}")
    if not k:
        return [*out, "#   none for this segment: the job runs as without spares (srun on every "
                      "node)"]
    nodes = [f"NODE{i}" for i in range(1, n + 1)]
    spec_file = SegmentPaths(Path(spec.segment_dir)).spec
    alloc = Path(spec.allocation_dir)
    out += [
        f"# allocation: --nodes={n + k} ({n} for the training + {k} spare{'s' if k > 1 else ''}) "
        "with --no-kill: a failed node leaves the job and the job keeps running",
        "# batch host: no srun from submitit; it runs the allocation supervisor "
        "(orchestrator.agent.allocation.run_allocation), which starts the training as a job step, "
        "one agent per node:",
        f"#   {shlex.join(step_argv(spec, nodes, spec_file, srun_args, python))}",
        f"#   ({','.join(nodes)}: the first {n} nodes of the allocation; a restart inside the job "
        "runs the same srun with the blamed node replaced by a spare, resuming from the newest "
        "checkpoint)",
        f"#   controller -> supervisor: {alloc / 'request.json'}; one record per step: "
        f"{alloc / 'step-NNNN.json'}",
    ]
    return [clean(line) for line in out]
