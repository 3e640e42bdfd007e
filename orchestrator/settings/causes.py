"""`policy.on_cause`: its keys are causes (docs/CAUSES.md) or `any`."""

from __future__ import annotations

from orchestrator.model import Cause


def known_causes(v: dict[str, str]) -> dict[str, str]:
    """The keys must name a cause the diagnosis gives (success is never overridden) or `any`."""
    known = {c.value for c in Cause} - {Cause.SUCCESS.value}
    if bad := sorted(set(v) - known - {"any"}):
        raise ValueError(f"unknown cause {', '.join(bad)}: one of any, {', '.join(sorted(known))}")
    return v
