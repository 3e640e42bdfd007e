"""`orchestrator nodes`: the worst nodes across runs (issue 40), from the runs' ledgers under the
given directories or configs and from the shared blacklist, each with a drain-ready line. Read-only:
nothing is created, locked or drained."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from orchestrator.cli.browse import MAX_RUNS
from orchestrator.cli.common import app, err, fail, load, out
from orchestrator.loop.submission import shared_path
from orchestrator.shared_blacklist import SharedBlacklist
from orchestrator.state import STATE_FILE, StateError, StateStore
from orchestrator.views.nodes import Failure, NodeRecord, from_run, from_shared, reputation
from orchestrator.views.text import clean

CONFIG_SUFFIXES = (".yaml", ".yml", ".toml", ".json")


def _sources(targets: list[Path], shared: Path | None) -> tuple[list[Path], list[Path]]:
    """(run directories, shared blacklist files): a directory's runs (its subdirectories too), a
    config's run and its policy.shared_blacklist."""
    runs, files = [], [shared] if shared else []
    for t in targets:
        if t.is_dir():
            runs += [p.parent for p in sorted(t.rglob(STATE_FILE))[:MAX_RUNS]]
        elif t.is_file() and t.suffix in CONFIG_SUFFIXES:
            s = load(t, [])
            runs.append(s.run_dir)
            files += [p] if (p := shared_path(s)) else []
        else:
            raise fail([f"{clean(t)}: neither a directory of runs nor a config file"])
    return runs, files


def _found(runs: list[Path], files: list[Path]) -> list[tuple[str, Failure]]:
    found: list[tuple[str, Failure]] = []
    for d in dict.fromkeys(runs):
        try:
            state = StateStore(d).load()
        except (OSError, StateError) as exc:
            err.print(f"warning: {clean(d)}: skipped: {clean(exc)[:160]}", markup=False)
            continue
        found += from_run(state) if state is not None else []
    for f in dict.fromkeys(files):
        try:
            found += from_shared(SharedBlacklist(f).entries())
        except (OSError, ValueError) as exc:
            raise fail([f"{clean(f)}: {clean(exc)[:200]}"], 1) from None
    return found


def _json(r: NodeRecord) -> dict[str, object]:
    last = r.last
    return {"node": r.node, "runs": r.runs, "failures": len(r.failures), "strong": r.strong,
            "causes": dict(r.causes()), "last": {"run": last.run, "job_id": last.job_id,
                                                 "cause": last.cause, "at": last.at.isoformat(),
                                                 "evidence": last.evidence},
            "drain_reason": r.drain_reason(), "drain_command": r.drain_command()}


@app.command()
def nodes(
    targets: Annotated[list[Path] | None, typer.Argument(
        help="Directories of runs (their subdirectories too) or config files (their run and "
             "shared blacklist); default: the current directory.")] = None,
    shared: Annotated[Path | None, typer.Option("--shared", help="A shared blacklist file "
                                                                 "(policy.shared_blacklist).")]
    = None,
    top: Annotated[int, typer.Option("--top", min=1, max=100_000, help="At most this many "
                                                                       "nodes.")] = 20,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """The worst nodes across runs: the runs each failed, its failures (strong ones: excluded at
    once), their causes, the newest with its evidence, and a drain-ready line for the admins
    (printed, never run).

    \b
    Examples:
      orchestrator nodes runs/
      orchestrator nodes --shared /shared/orch/blacklist.json --top 5
    """
    if shared is not None and not shared.is_file():
        raise fail([f"{clean(shared)}: no such shared blacklist file"])
    runs, files = _sources(targets or ([] if shared else [Path(".")]), shared)
    rows = reputation(_found(runs, files))[:top]
    if as_json:
        print(json.dumps([_json(r) for r in rows], indent=2))
        return
    if not rows:
        out.print("no node failed in these runs", markup=False)
        return
    for r in rows:
        last, causes = r.last, ", ".join(f"{c} x{n}" for c, n in r.causes())
        out.print(f"{clean(r.node)}: {len(r.runs)} run(s), {len(r.failures)} failure(s) "
                  f"({r.strong} strong): {causes}; last {last.at:%Y-%m-%d %H:%M} job "
                  f"{clean(last.job_id)} ({clean(last.run)}): {clean(last.evidence)[:160]}",
                  markup=False, highlight=False, soft_wrap=True)
        out.print(f"  {r.drain_command()}", markup=False, highlight=False, soft_wrap=True)
