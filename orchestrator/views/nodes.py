"""Pure: the nodes' reputation across runs (issue 40), for `orchestrator nodes`: every verdict that
named a node, from the runs' own ledgers and from the shared blacklist several runs publish to,
counted per node (the runs it failed, the failures, the strong ones), worst first, each with a
drain-ready line for the admins (`scontrol update NodeName=... State=DRAIN Reason=...`)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime

from orchestrator.model import Action, BlacklistEntry, EntrySource
from orchestrator.state import RunState
from orchestrator.views.text import cut, shell_dq

# Slurm keeps a node's reason whole; `sinfo -R` shows the first 20-40 characters, so the cause leads
REASON_CHARS = 200


@dataclass(frozen=True)
class Failure:
    """One verdict against a node: which run and job, why, how strong, when, and the line."""
    run: str
    job_id: str
    cause: str
    strong: bool
    at: datetime
    evidence: str


@dataclass
class NodeRecord:
    """One node's failures across runs, and what they add up to."""
    node: str
    failures: list[Failure] = field(default_factory=list)

    @property
    def runs(self) -> list[str]:
        return sorted({f.run for f in self.failures})

    @property
    def strong(self) -> int:
        return sum(f.strong for f in self.failures)

    @property
    def last(self) -> Failure:
        return max(self.failures, key=lambda f: f.at)

    def causes(self) -> list[tuple[str, int]]:
        return Counter(f.cause for f in self.failures).most_common()

    def drain_reason(self) -> str:
        """Ready for `scontrol update ... Reason=`: whose problem, the cause, how often, the
        line."""
        last = self.last
        owner = "node_problem" if self.strong else "node_suspect"
        text = (f"[{owner}] {last.cause}: {len(self.failures)} failure(s) in {len(self.runs)} "
                f"run(s), last job {last.job_id} ({last.run}): {last.evidence}")
        return cut(text.replace("\n", " "), REASON_CHARS)

    def drain_command(self) -> str:
        reason = shell_dq(self.drain_reason())
        return f'scontrol update NodeName={self.node} State=DRAIN Reason="{reason}"'


def drain_reason(e: BlacklistEntry, run: str) -> str:
    """A blacklist entry as the reason an admin gives `scontrol update ... State=DRAIN`: whose
    problem it is first (what `sinfo -R` shows), the cause, the run and job, the evidence line."""
    owner = "node_problem" if e.hard else "node_suspect"
    return cut(f"[{owner}] orchestrator {e.run or run}: {e.cause.value} job {e.job_id}: "
               f"{_evidence_line(e.evidence)}".replace("\n", " "), REASON_CHARS)


def _evidence_line(evidence: str) -> str:
    """'/path/to/host.log:44: text' as 'text'."""
    return evidence.split(": ", 1)[1] if evidence.startswith("/") and ": " in evidence else evidence


def from_run(state: RunState) -> list[tuple[str, Failure]]:
    """Every ended segment's verdict against a node, with its evidence on that node (or the
    segment's summary)."""
    out = []
    for seg in state.segments:
        if not seg.culprit_nodes or seg.cause is None or seg.ended_at is None:
            continue
        strong = seg.action == Action.RESUBMIT_EXCLUDE
        for node in seg.culprit_nodes:
            line = next((e.text for e in seg.evidence if e.node == node), "") or seg.reason
            out.append((node, Failure(state.run, seg.job_id or "?", seg.cause.value, strong,
                                      seg.ended_at, cut(line, 300))))
    return out


def from_shared(entries: list[BlacklistEntry]) -> list[tuple[str, Failure]]:
    """The shared blacklist's entries (each run's newest verdict per node; manual edits left
    out: an operator's word is not a failure)."""
    return [(e.node, Failure(e.run or "?", e.job_id, e.cause.value, e.hard, e.since,
                             cut(_evidence_line(e.evidence), 300)))
            for e in entries if e.source == EntrySource.AUTO]


def reputation(found: list[tuple[str, Failure]]) -> list[NodeRecord]:
    """Per node, worst first: the runs it failed, then its strong failures, then all, then the
    newest. A verdict seen twice (a run's ledger and the shared file) counts once."""
    per: dict[str, NodeRecord] = {}
    seen: set[tuple[str, str, str]] = set()
    for node, f in found:
        if (key := (node, f.run, f.job_id)) in seen:
            continue
        seen.add(key)
        per.setdefault(node, NodeRecord(node)).failures.append(f)
    return sorted(per.values(), key=lambda r: (-len(r.runs), -r.strong, -len(r.failures),
                                               -r.last.at.timestamp(), r.node))
