"""Commands that read: `status`, `report`, `validate`, and `import-sbatch` (its reading and
translating in `importing.py`); `diagnose` is in `diagnosing.py`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from orchestrator.cli.common import SetOpt, _state_for, app, err, fail, load, loaded, out, wiring
from orchestrator.cli.importing import check_output, translate
from orchestrator.clock import RealClock
from orchestrator.state import RunState
from orchestrator.views.status import (
    blacklist_table,
    drain_commands,
    status_json,
    summary_table,
    timeline_table,
)
from orchestrator.views.text import clean


@app.command()
def status(
    ctx: typer.Context,
    target: Annotated[Path, typer.Argument(help="A run's config file or its run directory.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    watch: Annotated[bool, typer.Option("--watch", help="Refresh in place every few seconds "
                                                        "(Ctrl-C ends).")] = False,
    every: Annotated[float,
                     typer.Option(min=0.5, help="Seconds between refreshes with --watch.")] = 5.0,
) -> None:
    """Where the run is, what happened to it and why: segments, causes, culprits, blacklist, time
    lost.

    \b
    Examples:
      orchestrator status configs/demo.yaml
      orchestrator status runs/demo --json
      orchestrator status runs/demo --watch --every 2
    """
    store, where = _state_for(target)

    def load_state() -> RunState:
        return loaded(store, where, " (has 'orchestrator run' been started for this config?)")

    if as_json:
        print(json.dumps(status_json(load_state(), RealClock().now()), indent=2))
        return
    if not watch:
        # drain lines whole
        out.print(status_view(load_state(), RealClock().now(), store.run_dir), crop=False)
        return
    from rich.live import Live

    clock = wiring(ctx).clock()

    def view() -> Any:
        return status_view(load_state(), clock.now(), store.run_dir, out.size.height)

    with Live(view(), console=out, refresh_per_second=1, vertical_overflow="crop") as live:
        try:
            while clock.sleep(every):
                live.update(view())
        except KeyboardInterrupt:
            pass


def status_view(state: Any, now: Any, run_dir: Path | None = None,
                height: int | None = None) -> Any:
    """Summary first, then the segments (the last ones when `height` rows would overflow), the
    blacklist and the drain lines; `run_dir`: say whether a controller is attached."""
    from rich.console import Group
    from rich.text import Text

    attached = None if run_dir is None else controller_note(state, run_dir)
    head: list[Any] = [summary_table(state, now, attached)]
    tail: list[Any] = [blacklist_table(state, now)] if state.blacklist.entries else []
    drains = drain_commands(state, now)
    if drains:
        tail.append(Text("To take the blacklisted nodes out of service (an admin runs these):"))
        tail.extend(Text(d, no_wrap=True, overflow="ignore") for d in drains)
    if height is None:
        return Group(*head, timeline_table(state, reason=False, width=out.width), *tail)
    # --watch: fit the terminal (summary first, then as many of the last segments as there are rows
    # left)
    def rows(part: Any) -> int:
        return len(out.render_lines(part, out.options, pad=False))

    room = height - sum(rows(p) for p in [*head, *tail])
    last = max(room - rows(timeline_table(state, last=1, reason=False, width=out.width)) + 1, 1)
    while last > 1 and rows(timeline_table(state, last=last, reason=False, width=out.width)) > room:
        last -= 1
    return Group(*head, timeline_table(state, last=last, reason=False, width=out.width), *tail)


def controller_note(state: Any, run_dir: Path) -> str:
    from orchestrator.runlock import RunLock

    lock = RunLock(run_dir)
    if lock.holder_is_controller():
        return f"attached ({lock.holder()})"
    if state.status.value == "running":
        return ("none attached: nothing watches the job or submits the next segment; 'orchestrator "
                "run' resumes")
    return "none attached"


@app.command()
def report(
    target: Annotated[Path, typer.Argument(help="A run's config file or its run directory.")],
    out_dir: Annotated[Path | None, typer.Option("--out", help="Where to write (default: the run "
                                                               "directory).")] = None,
) -> None:
    """Write a self-contained HTML page and a PNG: segment timeline by cause, iterations over time,
    time lost.

    \b
    Examples:
      orchestrator report configs/demo.yaml
      orchestrator report runs/demo --out /tmp/report
    """
    from orchestrator.views.report import write_report

    store, where = _state_for(target)
    state = loaded(store, where)
    if out_dir is not None and out_dir.exists() and not out_dir.is_dir():
        raise fail([f"--out {out_dir}: is a file; give a directory"])
    try:
        html_path, png_path = write_report(state, RealClock().now(), out_dir or store.run_dir)
    except OSError as exc:
        raise fail([f"{out_dir or store.run_dir}: cannot write the report: {exc}"], 1) from None
    out.print(clean(f"wrote {html_path} and {png_path}"), markup=False, highlight=False)


@app.command("import-sbatch")
def import_sbatch_cmd(
    script: Annotated[Path, typer.Argument(help="An existing batch script with #SBATCH lines.")],
    args: Annotated[list[str] | None, typer.Argument(help="The script's own arguments, as to "
                                                     "`sbatch SCRIPT ARGS` (after `--` when one "
                                                     "starts with a dash).")] = None,
    output: Annotated[Path | None,
                      typer.Option("-o", "--output",
                                   help="Write the config here (default stdout).")] = None,
    array_task: Annotated[int | None, typer.Option(
        "--array-task", metavar="ID", help="Import one task of a job array (a sweep) as its own "
                                           "run: SLURM_ARRAY_TASK_ID=ID in every segment.")] = None,
) -> None:
    """Turn an #SBATCH script into a config that runs the script's own shell on every node.

    The body (module loads, exports, variables, arrays) and the training launch, with srun taken
    out, become the per-node launch the agent runs under bash in srun's place. What is not carried
    over, the variables the script does not set and the checkpoint path found are listed on stderr
    and at the top of the file.

    \b
    Examples:
      orchestrator import-sbatch tests/data/sbatch/real/csc-ddp-torchrun-gpu8.sbatch -o \
/tmp/ddp.yaml
      orchestrator import-sbatch tests/data/sbatch/chain.sh
      orchestrator import-sbatch tests/data/sbatch/sweep.sh --array-task 3 -o /tmp/sweep-3.yaml
      orchestrator import-sbatch tests/data/sbatch/real2/mlperf-gpt3-run.sbatch /data /ckpt /code \
img -o /tmp/m.yaml
    """
    from orchestrator.importer import dump_config

    check_output(output)
    cfg, notes = translate(script, tuple(args or ()), array_task)
    body = dump_config(cfg, notes, str(script))
    if output:
        try:
            output.write_text(body)
        except OSError as exc:
            raise fail([f"-o {output}: cannot write: {exc}"], 1) from None
        out.print(f"wrote {clean(output)}", markup=False, highlight=False)
    else:
        print(body, end="")
    for n in notes:
        err.print(f"note: {clean(n)}", markup=False, highlight=False)


@app.command()
def validate(config: Annotated[Path, typer.Argument(help="The YAML config file to check.")],
             overrides: SetOpt = []) -> None:  # noqa: B006 - typer needs a literal default
    """Check a config file and print every problem with its field path (exit 2 if any); warn about a
    checkpoint dir that does not exist or is not where the command saves.

    \b
    Examples:
      orchestrator validate configs/demo.yaml
      orchestrator validate configs/example.yaml
      orchestrator validate configs/slurm-demo.yaml --set resources.spare_nodes=auto
    """
    from orchestrator.cli.dryrun import check_preset, spares_problem
    from orchestrator.settings import path_warnings

    s = load(config, overrides)
    if problem := spares_problem(s):
        raise fail([problem])
    check_preset(s)
    for w in path_warnings(s):
        err.print(f"warning: {clean(w)}", markup=False, highlight=False)
    k = s.resources.spare_nodes
    spares = ("" if k == 0 else f" + spares {k}" if k == "auto"
              else f" + {k} spare{'s' if k != 1 else ''}")
    out.print(clean(f"{config}: ok (run {s.name}, {s.resources.nodes} nodes{spares}, backend "
                    f"{s.backend.kind})"), markup=False, highlight=False)


