"""Assembling a segment's evidence from its node watches: each node's scan, exit code, stuck state
and stacks, the scheduler's lines about it, and the flight recorders' word on who is behind."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping

from orchestrator.diagnose.nodes import node_evidence
from orchestrator.evidence import Match, NodeEvidence
from orchestrator.watch.node import NodeWatch
from orchestrator.watch.stuck import frames, fs_suspect


def node_evidences(nodes: Mapping[str, NodeWatch], scheduler: Iterable[NodeWatch],
                   stuck: Callable[[NodeWatch], str],
                   behind: Mapping[str, str]) -> list[NodeEvidence]:
    """One NodeEvidence per node with a log or a scheduler file, sorted by node."""
    extra: dict[str, list[Match]] = {}
    for sw in scheduler:
        # submitit's own `Job completed successfully` / `Exiting after successful completion` there
        # say the agent's function returned (a cancelled one too), never that the training ended
        extra.setdefault(sw.scan.node, []).extend(m for m in sw.scan.matches if m.kind != "done")
    out = []
    for node in sorted(set(nodes) | set(extra)):
        nw = nodes.get(node)
        if nw is None:
            ev = NodeEvidence(node=node, matches=tuple(extra[node]))
        else:
            code = nw.exit_record.exit_code if nw.exit_record else None
            ev = node_evidence(nw.scan, exit_code=code, stuck_detail=stuck(nw),
                               top_frames=frames(nw.dump), fs_suspect=fs_suspect(nw.dump),
                               loss=nw.losses.found if nw.losses else None,
                               loss_sound_to=nw.losses.sound if nw.losses else None)
            if node in extra:
                ev = dataclasses.replace(ev, matches=ev.matches + tuple(extra[node]))
        out.append(dataclasses.replace(ev, flight_detail=behind[node]) if node in behind else ev)
    return out
