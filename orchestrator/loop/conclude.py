"""Pure: what the end of a segment means and what it changes.

(run state, the job's end state, per-node evidence, policy) -> Outcome: the verdict, the policy's
decision, the ledger edits (blacklist, hardware history, failed checkpoints, run status) and the
effects to carry out (alerts, publish, drain). No I/O; `advance` writes the edits into the ledger.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from orchestrator.blacklist import Blacklist
from orchestrator.diagnose.classify import Context, classify
from orchestrator.diagnose.verdicts import NOT_A_NODE
from orchestrator.evidence import NodeEvidence
from orchestrator.loop.effects import Alert, Drain, Effect, Publish
from orchestrator.model import (
    HARDWARE_CAUSES,
    Action,
    CancelReason,
    Cause,
    Decision,
    Evidence,
    JobStatus,
    Owner,
    Role,
    RunStatus,
    Verdict,
)
from orchestrator.numerics import over_loss
from orchestrator.policy import decide
from orchestrator.settings import Goal, Policy
from orchestrator.state import HardwareEvent, RunState, SegmentRecord

# a node that had a hardware fault this recently: OOM there is a poisoned GPU
HARDWARE_MEMORY = timedelta(days=7)
MAX_HARDWARE_EVENTS = 500


def recent_hardware(events: list[HardwareEvent], now: datetime) -> frozenset[str]:
    return frozenset(h.node for h in events if now - h.time < HARDWARE_MEMORY)


def _slow(seg: SegmentRecord) -> dict[str, str]:
    """The slow (or drained) node the step was cancelled to swap out, and why."""
    if seg.cancel_reason == CancelReason.DRAINED:  # the one loop.drains swaps: never the batch host
        node = next((n for n in sorted(seg.drained)
                     if n in seg.nodes and n not in seg.allocation[:1]), "")
        return {"slow_node": node, "slow_evidence": f"drained in Slurm: {seg.drained.get(node)}"}
    if seg.cancel_reason != CancelReason.SLOW_NODE or not seg.slow_nodes:
        return {}
    return {"slow_node": seg.slow_nodes[-1].node, "slow_evidence": seg.slow_nodes[-1].evidence}


def _cancelled_by(seg: SegmentRecord) -> str:
    """'orchestrator cancel by ann at 2026-12-01T03:04:05+00:00' for an operator's cancel."""
    if seg.cancel_reason != CancelReason.OPERATOR:
        return ""
    when = f" at {seg.cancelled_at.isoformat(timespec='seconds')}" if seg.cancelled_at else ""
    return f"{seg.cancelled_by_controller or 'an operator'}{when}"


def judge(status: JobStatus, evidence: list[NodeEvidence], fs_stalls: list[str], seg: SegmentRecord,
          recent: frozenset[str], lost: tuple[str, ...] = ()) -> Verdict:
    """The verdict on one segment: the classifier's rules, finished by the reads of the segment's
    own files that hung and the nodes of its step that Slurm took out of the job (`lost`)."""
    ctx = Context(recent_hardware=recent, start_iteration=seg.start_iteration,
                  stalled=seg.cancel_reason == CancelReason.STALL, cancel_reason=seg.cancel_reason,
                  fs_stalls=tuple(fs_stalls), lost=tuple(n for n in lost if n in seg.nodes),
                  job_id=seg.job_id or "", cancelled_by=_cancelled_by(seg), **_slow(seg))
    return over_loss(drained_culprit(classify(status, evidence, ctx), seg), evidence,
                     seg.cancel_reason)


def drained_culprit(v: Verdict, seg: SegmentRecord) -> Verdict:
    """A segment that failed naming nobody while Slurm showed a node of its step drained (an admin,
    a health check): that node, on their word."""
    drained = sorted(n for n in seg.drained if n in seg.nodes)
    if v.culprit_nodes or not drained or v.cause in NOT_A_NODE:
        return v
    found = tuple(Evidence(node=n, text=f"drained in Slurm while the step ran: {seg.drained[n]}",
                           cause=Cause.NODE_FAIL, role=Role.ROOT) for n in drained)
    return v.model_copy(update={
        "culprit_nodes": tuple(drained), "blame": True, "owner": Owner.NODE, "rule":
        "drained_in_slurm", "evidence": found + v.evidence, "summary": f"{v.summary}; "
        f"{','.join(drained)} drained in Slurm ({seg.drained[drained[0]]})"[:300]})


@dataclass(frozen=True)
class Outcome:
    """Everything the end of a segment changes, as values: verdict, decision, new blacklist and
    hardware history, effects, run status and when to resubmit."""
    verdict: Verdict
    decision: Decision
    blacklist: Blacklist
    hardware: tuple[HardwareEvent, ...]
    effects: tuple[Effect, ...]
    status: RunStatus
    wait_until: datetime | None


def evidence_text(verdict: Verdict, node: str) -> str:
    root = next((e for e in verdict.evidence if e.role == Role.ROOT), None)
    ev = next((e for e in verdict.evidence if e.node == node and e.role == Role.ROOT), root)
    if ev is None:
        return verdict.summary
    # e.g. the scheduler's word: no log line
    return f"{ev.file}:{ev.line}: {ev.text}" if ev.file else ev.text


def ledger(state: RunState, job_id: str, verdict: Verdict, decision: Decision, policy: Policy,
           now: datetime) -> tuple[Blacklist, tuple[HardwareEvent, ...], tuple[Effect, ...]]:
    """Blacklist and hardware-history edits for the nodes the decision blames, and what to tell
    whom."""
    bl, hw = state.blacklist, list(state.hardware_events)
    effects: list[Effect] = []
    for node in decision.blame_nodes:
        text = evidence_text(verdict, node)
        bl = bl.record(node, verdict.cause, text, job_id, now, hard=decision.hard,
                       expiry=timedelta(hours=policy.blacklist_expiry_h))
        entry = bl.get(node)
        if entry is not None:
            effects.append(Publish(entry.model_copy(update={"run": state.run,
                                                              "run_created": state.created_at})))
            if policy.drain_blacklisted and entry.hard:
                effects.append(Drain(node, f"[node_problem] orchestrator {state.run}: "
                                           f"{entry.cause.value} job {entry.job_id}"))
        if verdict.cause in HARDWARE_CAUSES:
            hw.append(HardwareEvent(node=node, cause=verdict.cause, job_id=job_id, time=now))
        effects.append(Alert(f"{state.run}: node {node} blacklisted",
                             f"{verdict.cause.value}: {text[:300]}"))
    return bl, tuple(hw[-MAX_HARDWARE_EVENTS:]), tuple(effects)


def conclude(state: RunState, seg: SegmentRecord, status: JobStatus, evidence: list[NodeEvidence],
             fs_stalls: list[str], policy: Policy, goal: Goal, now: datetime,
             lost: tuple[str, ...] = (), checkpoint_dir: str = "") -> Outcome:
    """`lost`: nodes Slurm removed from the segment's --no-kill job (first-hand evidence of a node
    failure); `checkpoint_dir`: where the config looks for checkpoints (named when progress is lost
    for want of one)."""
    verdict = judge(status, evidence, fs_stalls, seg, recent_hardware(state.hardware_events, now),
                    lost)
    decision = decide(state, verdict, policy, goal, now, checkpoint_dir)
    bl, hw, effects = ledger(state, seg.job_id or "", verdict, decision, policy, now)
    culprits = ",".join(verdict.culprit_nodes) or "-"
    alerts: list[Effect] = [Alert(f"{state.run}: segment {seg.index} ended ({verdict.cause.value})",
                                  f"culprits={culprits} action={decision.action.value}: "
                                  f"{decision.reason}")]
    run_status, wait_until = RunStatus.RUNNING, None
    if decision.action == Action.DONE:
        run_status = RunStatus.DONE
        alerts.append(Alert(f"{state.run}: done", decision.reason))
    elif decision.action == Action.STOP_AND_ALERT:
        run_status = RunStatus.STOPPED
        alerts.append(Alert(f"{state.run}: STOPPED, needs a human", decision.reason))
    elif decision.action == Action.WAIT_AND_RESUBMIT:
        wait_until = now + timedelta(seconds=decision.wait_s)
    return Outcome(verdict, decision, bl, hw, effects + tuple(alerts), run_status, wait_until)
