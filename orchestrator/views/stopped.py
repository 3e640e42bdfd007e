"""Why a stopped run stopped, for the text status: the error lines that decided it (rank, node,
where, text), each text once, and what to change."""

from __future__ import annotations

import re

from orchestrator.model import Action, Evidence, EvidenceSource, Role, RunStatus
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


# a node log's line as the agent writes it: `2026-...Z RANK: text`, RANK a number or `agent`
_NODE_LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\dT[\d:.]+Z (?P<rank>\d+|agent): (?P<text>.*)$")


def last_output(seg: SegmentRecord) -> list[str]:
    """'rank 0 on node1 (node1.log:4): ls: cannot access ...': the ranks' last lines before the
    end, for a stop no error line decided (a breaker, an unknown cause): what a person reads
    first in the node logs. The agent's own lines are left out."""
    out: dict[str, str] = {}
    for e in seg.evidence:
        m = _NODE_LOG_LINE.match(e.text.strip())
        if e.role != Role.CONTEXT or e.source != EvidenceSource.LOG or (m and m["rank"] == "agent"):
            continue
        text = m["text"] if m else e.text.strip()
        rank = int(m["rank"]) if m else e.rank
        out.setdefault(text, _where(e.model_copy(update={"rank": rank})))
    return [f"{where}: {cut(text, 200)}" for text, where in list(out.items())[-MAX_LINES:]]


def what_to_change(seg: SegmentRecord) -> str:
    """What the user changes before resuming, by the cause ('' when the cause has no advice)."""
    return ADVICE.get(seg.cause, "") if seg.cause is not None else ""


def stop_rows(state: RunState) -> list[tuple[str, str]]:
    """(key, value) rows for the summary table of a run stopped by a decision: the stop's reason
    without the advice and without the error it quotes, the error lines (or, when no line decided
    it, the ranks' last output), what to change: each said once."""
    seg = stopping_segment(state)
    if seg is None:
        return []
    advice = what_to_change(seg)
    # the policy's reason ends with the advice: shown on its own row
    why = seg.reason.removesuffix(f": {advice}") if advice else seg.reason
    lines, key = error_lines(seg), "error"
    if lines:  # a line the error row shows is not quoted in the reason too
        shown = [e.text.strip()[:40] for e in seg.evidence if e.role == Role.ROOT]
        why = re.sub(r" \([^()]*\)", lambda m: "" if any(t and t in m.group(0) for t in shown)
                     else m.group(0), why)
    else:
        lines, key = last_output(seg), "last output"
    rows = [("stopped by", f"segment {seg.index} ({seg.action.value if seg.action else '-'}): "
                           f"{why}")]
    rows += [(key if i == 0 else "", line) for i, line in enumerate(lines)]
    if advice:
        rows.append(("what to change", advice))
    return rows
