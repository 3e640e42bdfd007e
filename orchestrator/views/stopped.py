"""Why a stopped run stopped, for the text status: the error lines that decided it (rank, node,
where, text), each text once, and what to change."""

from __future__ import annotations

from orchestrator.model import Action, Evidence, Role, RunStatus
from orchestrator.policy import ADVICE
from orchestrator.state import RunState, SegmentRecord
from orchestrator.views.text import cut

MAX_LINES = 3  # distinct error texts shown; --json and diagnose have them all


def stopping_segment(state: RunState) -> SegmentRecord | None:
    """The segment whose decision stopped the run, or None (running, done, or stopped by hand)."""
    if state.status != RunStatus.STOPPED:
        return None
    last = next((s for s in reversed(state.segments) if s.action), None)
    return last if last is not None and last.action == Action.STOP_AND_ALERT else None


def _where(e: Evidence) -> str:
    rank = f"rank {e.rank} on " if e.rank is not None else ""
    place = f" ({e.file.rsplit('/', 1)[-1]}:{e.line})" if e.file and e.line else ""
    return f"{rank}{e.node}{place}"


def error_lines(seg: SegmentRecord) -> list[str]:
    """'rank 0 on node1 (node1.log:27), also node2,node3: ValueError: ...': the root lines that
    decided the segment's end, one per distinct text, the other nodes that printed it named."""
    groups: dict[str, list[Evidence]] = {}
    for e in seg.evidence:
        if e.role == Role.ROOT:
            groups.setdefault(e.text.strip(), []).append(e)
    out = []
    for text, found in list(groups.items())[:MAX_LINES]:
        others = list(dict.fromkeys(e.node for e in found[1:] if e.node != found[0].node))
        also = f", also {','.join(others)}" if others else ""
        out.append(f"{_where(found[0])}{also}: {cut(text, 200)}")
    return out


def what_to_change(seg: SegmentRecord) -> str:
    """What the user changes before resuming, by the cause ('' when the cause has no advice)."""
    return ADVICE.get(seg.cause, "") if seg.cause is not None else ""


def stop_rows(state: RunState) -> list[tuple[str, str]]:
    """(key, value) rows for the summary table of a run stopped by a decision: the stop's reason
    without the advice, the error lines, what to change."""
    seg = stopping_segment(state)
    if seg is None:
        return []
    advice = what_to_change(seg)
    # the policy's reason ends with the advice: shown on its own row
    why = seg.reason.removesuffix(f": {advice}") if advice else seg.reason
    rows = [("stopped by", f"segment {seg.index} ({seg.action.value if seg.action else '-'}): "
                           f"{why}")]
    lines = error_lines(seg)
    rows += [("error" if i == 0 else "", line) for i, line in enumerate(lines)]
    if advice:
        rows.append(("what to change", advice))
    return rows
