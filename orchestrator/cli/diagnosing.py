"""`orchestrator diagnose`: name the cause, the culprit and the action from any job's logs: a
directory of per-node files, one file, or a Slurm job id (its output found through scontrol/sacct,
backends/slurmjob.py; its end state from sacct)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from orchestrator.backends.slurmjob import JOB_ID, JobLogs, JobNotFound, find_job_logs
from orchestrator.cli.common import app, err, fail, load, out
from orchestrator.cli.compressed import (
    CompressedLogError,
    decompressed,
    is_compressed,
    scratch_dir,
)
from orchestrator.diagnose.origin import JOB_WIDE
from orchestrator.model import JobState
from orchestrator.offline.diagnosis import diagnose_dir, links_left_out, log_files
from orchestrator.views.text import clean, cut


def blame_words(result: dict[str, Any]) -> str:
    """Whether the culprits are blamed, in words (the JSON keeps `blame`: true/false)."""
    if result["blame"]:
        return "blamed: their fault, excluded or struck"
    return "named, not blamed" if result["culprit_nodes"] else "nobody blamed"


def _diagnosed(directory: Path, config: Path | None, files: list[Path] | None = None,
               job_state: JobState | None = None) -> dict[str, Any]:
    if config is None:
        return diagnose_dir(directory, files=files, job_state=job_state)
    from orchestrator.diagnose.signatures import table_for

    s = load(config, [])
    return diagnose_dir(directory, s.progress_regex, table_for(s.signatures), files, job_state)


def _job(target: str) -> JobLogs:
    """A Slurm job id: its output files and end state, or one error line saying what was tried."""
    try:
        job = find_job_logs(target)
    except JobNotFound as exc:
        raise fail([str(exc)], 1) from None
    err.print(clean(f"job {job.job_id} ({job.name or '?'}, {job.state.value}, nodes "
                    f"{','.join(job.nodes) or '?'}): reading {', '.join(map(str, job.files))}"),
              markup=False, highlight=False, soft_wrap=True)
    return job


@app.command()
def diagnose(
    target: Annotated[str, typer.Argument(
        metavar="PATH_OR_JOBID", help="A directory with one log file per node (host.out), one "
        "log file, or a Slurm job id (its output found through scontrol or sacct).")],
    as_json: Annotated[bool, typer.Option("--json")] = False,
    config: Annotated[Path | None, typer.Option(
        "--config", help="Also use this run config's signatures and progress_regex (test them on "
                         "old logs).")] = None,
) -> None:
    """Name the cause and the culprit node from the logs of any Slurm job.

    \b
    Examples:
      orchestrator diagnose runs/demo/segments/0001/logs
      orchestrator diagnose tests/data/blind/segfault-one-node-r7n3/logs --json
      orchestrator diagnose tests/data/blind/node-failure-node023-slurm-out/logs/slurm-771234.out
      orchestrator diagnose tests/data/blind/segfault-one-node-r7n3/logs --config \
configs/example.yaml

    A job id (`orchestrator diagnose 4242`) is looked up through scontrol, else sacct.
    """
    directory, files, state = Path(target), None, None
    if not directory.exists() and JOB_ID.fullmatch(target):
        job = _job(target)
        directory, files, state = job.files[0].parent, job.files, job.state
    elif not directory.exists():
        raise fail([f"{target}: no such file or directory (nor a Slurm job id)"])
    elif not directory.is_dir() and not directory.is_file():
        raise fail([f"{directory}: neither a log file nor a directory of them"])
    elif directory.is_dir() and not any(p.is_file() for p in directory.iterdir()):
        raise fail([f"{directory}: no log files in it (expected one file per node, named after the "
                    "host)"])
    listed = files if files is not None else log_files(directory)
    with scratch_dir() as scratch:
        try:
            plain = decompressed(listed, Path(scratch))
            result = _diagnosed(directory, config, plain, state)
        except CompressedLogError as exc:
            raise fail([clean(str(exc))], 1) from None
        except OSError as exc:
            raise fail([f"{clean(getattr(exc, 'filename', None) or directory)}: cannot read: "
                        f"{exc.strerror or exc}"], 1) from None
    result["not_read"] = links_left_out(directory) if files is None else []
    result["decompressed"] = [p.name for p in listed if is_compressed(p)]
    _show(result, as_json)


def _show(result: dict[str, Any], as_json: bool) -> None:
    for e in result["evidence"]:  # a job-wide file's name is no host: no node, as the text says
        e["node"] = None if _job_wide_label(e["node"], e["file"]) else e["node"]
    if as_json:
        print(json.dumps(result, indent=2))
        return
    culprits = clean(",".join(result["culprit_nodes"]) or "-")
    out.print(f"cause: {result['cause']}  culprits: {culprits} ({blame_words(result)})  action: "
              f"{result['action']}  confidence: {result['confidence']:.2f}  rule: {result['rule']}",
              markup=False, highlight=False, emoji=False)
    out.print(f"summary: {clean(result['summary'])}", markup=False, highlight=False, emoji=False)
    for name in result.get("decompressed", []):
        out.print(clean(f"note: read {name} decompressed"), markup=False, highlight=False,
                  emoji=False)
    for name in result["not_read"]:
        out.print(clean(f"note: not read: {name} (a symlink that leads out of the directory; give "
                        "the file itself to read it)"), markup=False, highlight=False, emoji=False)
    for e in result["evidence"][:15]:
        src = " (node)" if e.get("source") == "node" else ""
        node = e["node"] or "-"
        out.print(clean(f"  [{e['role']}{src}] {node} {Path(e['file']).name}:{e['line']}: ")
                  + cut(e["text"], 160), markup=False, highlight=False, emoji=False)


def _job_wide_label(node: str, file: str) -> bool:
    """A job-wide file's own name (slurm-77.out) standing where a line names no host."""
    return bool(node) and Path(file).name.split(".")[0] == node and JOB_WIDE.match(node) is not None
