"""Offline diagnosis of any job's logs (`orchestrator diagnose DIR`, scripts/diagnose_accuracy.py):
scan every file, infer how Slurm ended the job from the lines it printed, classify, and show the
action the controller's own policy would take for a run with no history."""

from __future__ import annotations

import functools
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from orchestrator.diagnose.classify import Context, classify, infer_job_state
from orchestrator.diagnose.nodes import scan_file
from orchestrator.diagnose.owner import job_id, without_foreign_kills
from orchestrator.diagnose.prefilter import Prefilter
from orchestrator.diagnose.signatures import Signature, build_table
from orchestrator.model import EvidenceSource, JobState, JobStatus, Verdict
from orchestrator.offline.history import decide_with_history, split_allocations
from orchestrator.policy import decide
from orchestrator.settings import PROGRESS_REGEX, Goal, Policy
from orchestrator.state import RunState, SegmentRecord

DEFAULT_PROGRESS = PROGRESS_REGEX  # the run's default: progress lines of a dozen frameworks
T0 = datetime(2000, 1, 1, tzinfo=UTC)


def action_without_history(verdict: Verdict) -> tuple[str, str, str]:
    """(action, reason, policy rule) that `policy.decide` picks for this verdict in a fresh run."""
    state = RunState(run="offline", created_at=T0, updated_at=T0,
                     segments=[SegmentRecord(index=1, job_name="offline")])
    d = decide(state, verdict, Policy(), Goal(), T0)
    return d.action.value, d.reason, d.rule


@functools.lru_cache(maxsize=8)
def _prefilter(sigs: tuple[Signature, ...]) -> Prefilter:
    """Compiling the prefilter costs more than scanning a small job's logs: once per signature
    table."""
    return Prefilter([(s.pattern, s.ignore_case) for s in sigs])


def log_files(directory: Path) -> list[Path]:
    """The log files to read: one per host or one for the whole job. A run directory means its
    latest segment's logs; a symlink that leads out of the directory is not followed. A file is
    read alone (the one log most jobs have)."""
    if directory.is_file():
        return [directory]
    return [p for p in _candidates(directory) if not _leads_out(p)]


def _candidates(directory: Path) -> list[Path]:
    segments = directory / "segments"
    if segments.is_dir():
        latest = sorted(p for p in segments.iterdir() if p.is_dir() and (p / "logs").is_dir())
        if latest:
            directory = latest[-1] / "logs"
    return [p for p in sorted(directory.iterdir()) if not p.name.startswith(".") and p.is_file()]


def _leads_out(p: Path) -> bool:
    return p.is_symlink() and p.parent.resolve() not in p.resolve().parents


def links_left_out(directory: Path) -> list[str]:
    """The names of the log files `log_files` does not read: symlinks leading out of the
    directory (said, never skipped silently)."""
    return [] if directory.is_file() else [p.name for p in _candidates(directory) if _leads_out(p)]


HOST_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")


def host_of_file(name: str, index: int) -> str:
    """The host a log file belongs to (its name up to the first dot); a name that is not a host name
    (`-rf.log`, control or bidirectional characters) is read as a job-wide file, never blamed."""
    stem = name.split(".")[0] if "." in name else name
    return stem if HOST_NAME.fullmatch(stem) else f"output-{index}"


def diagnose_dir(directory: Path, progress_regex: str = DEFAULT_PROGRESS,
                 signatures: tuple[Signature, ...] | None = None, files: list[Path] | None = None,
                 job_state: JobState | None = None) -> dict[str, Any]:
    """`signatures`: the table to use (a config's, from `signatures.table_for`); default the
    built-in one. `files`: these instead of the directory's; `job_state`: how Slurm ended the job
    (sacct's State), when known, instead of inferring it from the lines."""
    files = files if files is not None else log_files(directory)
    sigs = build_table() if signatures is None else signatures
    rx = re.compile(progress_regex)
    prefilter = _prefilter(sigs)
    scans = [(f.name, scan_file(f, host_of_file(f.name, i), sigs, rx, prefilter)) for i,
             f in enumerate(files)]
    # the last allocation is judged; earlier ones (older job ids, appended runs) are its history
    history, nodes = split_allocations(scans)
    nodes = without_foreign_kills(nodes, job_id([f.name for f in files], nodes))
    stalled = any(n.top_frames or n.stuck_detail for n in nodes)
    known = JobStatus(state=job_state) if job_state not in (None, JobState.UNKNOWN) else None
    v = classify(known or infer_job_state(nodes), nodes, Context(stalled=stalled))
    if history:
        d, v = decide_with_history(history, nodes, v)
        action, reason, policy_rule = d.action.value, d.reason, d.rule
    else:
        action, reason, policy_rule = action_without_history(v)
    return {
        "cause": v.cause.value, "culprit_nodes": list(v.culprit_nodes), "blame": v.blame,
        "owner": v.fault_owner.value, "rule": v.rule, "policy_rule": policy_rule,
        "action": action, "reason": reason, "confidence": v.confidence, "summary": v.summary,
        "evidence": [{"node": e.node, "file": e.file, "line": e.line, "text": e.text,
                      "role": e.role, "source": e.source} for e in v.evidence],
        "node_evidence": [{"node": e.node, "file": e.file, "line": e.line, "text": e.text,
                           "role": e.role} for e in v.evidence if e.source == EvidenceSource.NODE
                          or _node_file(e.file)],
    }


def _node_file(path: str) -> bool:
    """A file of what a node reported about itself (dmesg, nvidia-smi, counters), beside its
    output."""
    name = Path(path).name.lower()
    return any(k in name
               for k in ("dmesg", "nvidia-smi", "kern", "syslog", "ibstat", "counters",
                         "memory.events", "epilog", "prolog", "nvml", ".df"))
