"""Reading run states written by earlier releases: each schema version's file turned into the next
one's."""

from __future__ import annotations

from typing import Any

from orchestrator.model import CancelReason

V1_CANCELS = (("stall", CancelReason.STALL), ("preflight", CancelReason.PREFLIGHT),
              ("training failed", CancelReason.PEER_FAILED),
              ("--cancel-on-exit", CancelReason.OPERATOR),
              ("orchestrator cancel", CancelReason.OPERATOR))


def read_v1(data: dict[str, Any]) -> dict[str, Any]:
    """Schema 1 -> 2: the one place a cancel's sentence is read back, to give it its reason (version
    1 kept only the sentence). The file is rewritten as version 2 at the next save."""
    segments: list[Any] = []
    old = data.get("segments")
    for seg in old if isinstance(old, list) else []:
        text = seg.get("cancelled_by_controller") if isinstance(seg, dict) else None
        if text and isinstance(text, str) and "cancel_reason" not in seg:
            why = next((r for head, r in V1_CANCELS if text[:len(head)] == head),
                       CancelReason.PEER_FAILED)
            seg = {**seg, "cancel_reason": why.value}
        segments.append(seg)
    out = {**data, "schema_version": 2}
    if isinstance(old, list):
        out["segments"] = segments
    return out
