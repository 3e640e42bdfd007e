"""Another recovery owner inside the job said "do not restart" (issue 40 item 2): NVIDIA Resiliency
Extension's `ft_launcher` restarts the ranks inside the allocation itself and, when it concludes the
job must not be restarted (its progress tracker saw no progress across its restarts, or its
attribution recommended stopping), exits every launcher with its no-restart code (93 by default)
and says why. Resubmitting a segment then would overrule the owner that saw the restarts: the run
stops and alerts, with that line and the first error as evidence."""

from __future__ import annotations

import re

from orchestrator.diagnose.judge import NodeMatch
from orchestrator.diagnose.verdicts import evs, verdict
from orchestrator.evidence import NodeEvidence
from orchestrator.model import HARDWARE_CAUSES, Cause, Owner, Role, Verdict

NO_RESTART_KIND = "no_restart"
REASON = re.compile(r"must not be restarted \((\w+)\)")


def supervisor_stop(nodes: list[NodeEvidence], roots: list[NodeMatch],
                    secondary: list[NodeMatch]) -> Verdict | None:
    """The in-job supervisor's no-restart decision, if one was printed: the job's (stop), with the
    first error's cause; a node's hardware report before it keeps that node named in the
    evidence, the decision stays the supervisor's."""
    said = [(n, m) for n in nodes for m in n.matches if m.kind == NO_RESTART_KIND]
    if not said:
        return None
    first = min(roots, key=lambda nm: (nm[1].line, nm[0].node), default=None)
    cause = first[1].cause if first is not None else Cause.USER_BUG
    hardware = [n.node for n, m in roots if m.cause in HARDWARE_CAUSES]
    why = REASON.search(said[0][1].text)
    summary = (f"NVRx ft_launcher, the job's own restart supervisor, decided not to restart it "
               f"({why.group(1) if why else 'no progress across restarts'})"
               + (f"; hardware reported on {', '.join(sorted(set(hardware)))}" if hardware else "")
               + (f"; the first error: {first[1].text[:100]}" if first is not None else ""))
    return verdict(Cause.USER_BUG if cause in (Cause.UNKNOWN, Cause.SUCCESS) else cause, [], False,
                   0.85, evs(said, Role.ROOT, 4) + evs(roots, Role.SECONDARY, 8)
                   + evs(secondary, Role.SECONDARY, 8), summary, "supervisor_no_restart",
                   Owner.JOB)
