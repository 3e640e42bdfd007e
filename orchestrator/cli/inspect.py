"""Commands that read: `status`, `report`, `diagnose`, `validate`, and `import-sbatch`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from orchestrator.cli.common import _state_for, app, err, fail, load, out
from orchestrator.clock import RealClock
from orchestrator.diagnose.offline import diagnose_dir
from orchestrator.state import RunState, StateError
from orchestrator.views.status import blacklist_table, drain_commands, status_json, summary_table, timeline_table


@app.command()
def status(
    target: Annotated[Path, typer.Argument(help="A run's config file or its run directory.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    watch: Annotated[bool, typer.Option("--watch", help="Refresh in place every few seconds (Ctrl-C ends).")] = False,
    every: Annotated[float, typer.Option(help="Seconds between refreshes with --watch.")] = 5.0,
) -> None:
    """Where the run is, what happened to it and why: segments, causes, culprits, blacklist, time lost.

    Examples:
      orchestrator status configs/demo.yaml
      orchestrator status runs/demo --json
      orchestrator status configs/example.yaml --watch
    """
    store, where = _state_for(target)

    def load_state() -> RunState:
        try:
            state = store.load()
        except StateError as exc:
            raise fail([str(exc)], 1) from None
        if state is None:
            raise fail([f"{where}: no run state yet (has 'orchestrator run' been started for this config?)"], 1)
        return state

    if as_json:
        print(json.dumps(status_json(load_state(), RealClock().now()), indent=2))
        return
    if not watch:
        out.print(status_view(load_state(), RealClock().now()))
        return
    from rich.live import Live

    clock = RealClock()
    with Live(status_view(load_state(), clock.now()), console=out, refresh_per_second=1) as live:
        try:
            while clock.sleep(every):
                live.update(status_view(load_state(), clock.now()))
        except KeyboardInterrupt:
            pass


def status_view(state: Any, now: Any) -> Any:
    from rich.console import Group

    parts: list[Any] = [summary_table(state, now), timeline_table(state)]
    if state.blacklist.entries:
        parts.append(blacklist_table(state, now))
    drains = drain_commands(state, now)
    if drains:
        parts.append("To take the blacklisted nodes out of service (an admin runs these):\n" + "\n".join(drains))
    return Group(*parts)


@app.command()
def report(
    target: Annotated[Path, typer.Argument(help="A run's config file or its run directory.")],
    out_dir: Annotated[Path | None, typer.Option("--out", help="Where to write (default: the run directory).")]
    = None,
) -> None:
    """Write a self-contained HTML page and a PNG: segment timeline by cause, iterations over time, time lost.

    Examples:
      orchestrator report configs/demo.yaml
      orchestrator report runs/demo --out /tmp/report
    """
    from orchestrator.views.report import write_report

    store, where = _state_for(target)
    state = store.load()
    if state is None:
        raise fail([f"{where}: no run state yet"], 1)
    html_path, png_path = write_report(state, RealClock().now(), out_dir or store.run_dir)
    out.print(f"wrote {html_path} and {png_path}", markup=False, highlight=False)


@app.command("import-sbatch")
def import_sbatch_cmd(
    script: Annotated[Path, typer.Argument(help="An existing batch script with #SBATCH lines.")],
    output: Annotated[Path | None, typer.Option("-o", "--output", help="Write the config here (default stdout).")]
    = None,
) -> None:
    """Turn an #SBATCH script into a config that runs the script's own shell on every node.

    The body (module loads, exports, variables, arrays) and the training launch, with srun taken out, become
    the per-node launch the agent runs under bash in srun's place. What is not carried over, the variables
    the script does not set and the checkpoint path found are listed on stderr and at the top of the file.

    Examples:
      orchestrator import-sbatch tests/data/sbatch/real/csc-ddp-torchrun-gpu8.sbatch -o /tmp/ddp.yaml
      orchestrator import-sbatch tests/data/sbatch/chain.sh
    """
    from orchestrator.importer import dump_config, import_sbatch

    try:
        text = script.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise fail([f"{script}: cannot read: {exc}"]) from None
    if "#SBATCH" not in text and "srun" not in text:
        raise fail([f"{script}: no #SBATCH line and no srun line: is this a Slurm batch script?"])
    cfg, notes = import_sbatch(text, script.stem, str(Path.cwd()))
    body = dump_config(cfg, notes, str(script))
    if output:
        output.write_text(body)
        out.print(f"wrote {output}", markup=False)
    else:
        print(body, end="")
    for n in notes:
        err.print(f"note: {n}", markup=False, highlight=False)


@app.command()
def validate(config: Annotated[Path, typer.Argument(help="The YAML config file to check.")]) -> None:
    """Check a config file and print every problem with its field path (exit 2 if any); warn about a
    checkpoint dir that does not exist or is not where the command saves.

    Example: orchestrator validate configs/demo.yaml
    """
    from orchestrator.settings import path_warnings

    s = load(config, [])
    for w in path_warnings(s):
        err.print(f"warning: {w}", markup=False, highlight=False)
    out.print(f"{config}: ok (run {s.name}, {s.resources.nodes} nodes, backend {s.backend.kind})",
              markup=False, highlight=False)


@app.command()
def diagnose(
    directory: Annotated[Path, typer.Argument(help="A directory with one log file per node (host.out).")],
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Name the cause and the culprit node from per-node logs of any Slurm job.

    Examples:
      orchestrator diagnose runs/demo/segments/0001/logs
      orchestrator diagnose /scratch/logs/job-12345 --json
    """
    if not directory.is_dir():
        raise fail([f"{directory}: not a directory"])
    if not any(p.is_file() for p in directory.iterdir()):
        raise fail([f"{directory}: no log files in it (expected one file per node, named after the host)"])
    result = diagnose_dir(directory)
    if as_json:
        print(json.dumps(result, indent=2))
        return
    out.print(f"cause: {result['cause']}  culprits: {','.join(result['culprit_nodes']) or '-'}  "
              f"blame: {result['blame']}  action: {result['action']}  confidence: {result['confidence']:.2f}",
              markup=False, highlight=False)
    out.print(f"summary: {result['summary']}", markup=False, highlight=False)
    for e in result["evidence"][:15]:
        out.print(f"  [{e['role']}] {e['node']} {Path(e['file']).name}:{e['line']}: {e['text'][:160]}",
                  markup=False, highlight=False)


