"""Pure: the rules that finish a verdict after the classifier's first match
(diagnose.classify.FINISH), in order: the segment's own files that did not answer, then the nodes
Slurm took out of the job."""

from __future__ import annotations

from collections.abc import Callable

from orchestrator.diagnose.verdicts import Context
from orchestrator.model import Cause, Evidence, Owner, Role, Verdict

SYMPTOMS = frozenset({Cause.HANG, Cause.NCCL_TIMEOUT, Cause.NETWORK, Cause.UNKNOWN,
                      Cause.NODE_FAIL})


def files_did_not_answer(verdict: Verdict, ctx: Context) -> Verdict:
    """Reads of the segment's own files hung and nothing else explains the end: the shared
    filesystem."""
    if ctx.fs_stalls and verdict.cause in (Cause.UNKNOWN, Cause.HANG) and not verdict.blame:
        return verdict.model_copy(update={"cause": Cause.FILESYSTEM,
                                          "summary": "; ".join(ctx.fs_stalls[:3]),
                                          "owner": Owner.SHARED,
                                          "rule": "segment_files_did_not_answer"})
    return verdict


def _lost(nodes: list[str], job_id: str) -> tuple[Evidence, ...]:
    return tuple(Evidence(node=n, text=f"Slurm removed {n} from job {job_id} and killed the step "
                          "on it (node failure)", role=Role.ROOT, cause=Cause.NODE_FAIL)
                 for n in nodes)


def left_the_allocation(verdict: Verdict, ctx: Context) -> Verdict:
    """Slurm removing a node from a --no-kill job is first-hand evidence of its failure: every lost
    node the verdict does not already blame joins the culprits (a node failure when nobody was
    blamed). A verdict on the code (the same bug everywhere) stands: the run stops, and the job with
    it."""
    lost = list(ctx.lost)
    missing = [n for n in lost if not (verdict.blame and n in verdict.culprit_nodes)]
    if verdict.fault_owner == Owner.JOB or not lost:
        return verdict
    # a dead node is silent: its peers time out, its agent answers no dump
    if verdict.cause in SYMPTOMS:
        culprits = tuple(sorted({*lost, *(verdict.culprit_nodes if verdict.blame else ())}))
        return Verdict(cause=Cause.NODE_FAIL, culprit_nodes=culprits, blame=True, confidence=0.95,
                       evidence=_lost(lost, ctx.job_id) + verdict.evidence[:20],
                       summary=f"node failure: {','.join(lost)} left the job", owner=Owner.NODE,
                       rule="left_the_allocation")
    if not missing:
        return verdict
    ev = _lost(missing, ctx.job_id)
    if verdict.blame:
        return verdict.model_copy(update={
            "culprit_nodes": tuple(sorted({*verdict.culprit_nodes, *missing})),
            "evidence": verdict.evidence + ev, "owner": Owner.NODE})
    return Verdict(cause=Cause.NODE_FAIL, culprit_nodes=tuple(missing), blame=True, confidence=0.95,
                   evidence=ev + verdict.evidence[:20], summary="node failure: "
                                                                f"{','.join(missing)} left the job",
                   owner=Owner.NODE, rule="left_the_allocation")


def lost_node_verdict(verdict: Verdict, lost: list[str], job_id: str) -> Verdict:
    """`left_the_allocation` for `lost` nodes of job `job_id`."""
    return left_the_allocation(verdict, Context(lost=tuple(lost), job_id=job_id))


Finish = tuple[str, Callable[[Verdict, Context], Verdict]]
FINISH: tuple[Finish, ...] = (
    ("segment_files_did_not_answer", files_did_not_answer),
    ("left_the_allocation", left_the_allocation),
)
