"""Building verdicts: evidence from matches (whether the node itself reported the line), and the one
constructor that drops the culprits an owner does not allow."""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.contract import NODE_MARKER
from orchestrator.diagnose.culprits import origin
from orchestrator.evidence import Match, NodeEvidence
from orchestrator.model import CancelReason, Cause, Evidence, EvidenceSource, Owner, Role, Verdict

NodeMatch = tuple[NodeEvidence, Match]


@dataclass(frozen=True)
class Context:
    """History the classifier may use: nodes with a recent hardware strike, the stall, why the
    controller cancelled; and what finishes a verdict: reads of the segment's files that hung, nodes
    Slurm took out of the job (those of the segment's step) and the job's id."""

    recent_hardware: frozenset[str] = frozenset()
    start_iteration: int = 0
    stalled: bool = False
    cancel_reason: CancelReason | None = None
    fs_stalls: tuple[str, ...] = ()
    lost: tuple[str, ...] = ()
    job_id: str = ""
    slow_node: str = ""  # cancelled to swap this slow node for a spare (and the evidence why)
    slow_evidence: str = ""
    cancelled_by: str = ""  # an operator's cancel: who and when


def ev(n: NodeEvidence, m: Match, role: Role) -> Evidence:
    source = EvidenceSource.NODE if NODE_MARKER in m.text[:32] else EvidenceSource.LOG
    return Evidence(node=origin(n, m) or n.node, file=m.file or n.file, line=m.line, text=m.text,
                    role=role, cause=m.cause, source=source, rank=m.rank)


def evs(pairs: list[NodeMatch], role: Role, limit: int = 20) -> list[Evidence]:
    return [ev(n, m, role) for n, m in pairs[:limit]]


NOT_A_NODE = frozenset({Cause.USER_BUG, Cause.USER_OOM, Cause.TIMELIMIT, Cause.PREEMPTED,
                        Cause.SUCCESS, Cause.CANCELLED, Cause.LOSS_ANOMALY})


def verdict(cause: Cause, culprits: list[str], blame: bool, conf: float, evidence: list[Evidence],
             summary: str, rule: str = "", owner: Owner | None = None) -> Verdict:
    """Causes that are not a node's fault name no culprit (the evidence still says where it was
    printed); the job's and the shared environment's faults name none either."""
    # a node named with the cause (one rank's crash, an unkillable node at a preemption) keeps it
    named = owner in (Owner.NODE, Owner.NODE_SUSPECT) and cause != Cause.SUCCESS
    if (cause in NOT_A_NODE and not named) or owner in (Owner.JOB, Owner.SHARED, Owner.FINISHED):
        culprits, blame = [], False
    blame = blame and bool(culprits)
    if owner in (Owner.NODE, Owner.NODE_SUSPECT) and not culprits:
        owner = Owner.NOBODY
    return Verdict(cause=cause, culprit_nodes=tuple(culprits), blame=blame, confidence=conf,
                   evidence=tuple(evidence), summary=summary, owner=owner, rule=rule)
