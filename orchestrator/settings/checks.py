"""`preflight`: checks every node runs before the training starts."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from orchestrator.settings.base import Section


class PreflightCfg(Section):
    """Checks every node runs before the training starts."""
    commands: list[list[str]] = Field(default_factory=list,
                                      description="Extra checks, each an argv list.")
    timeout_s: float = Field(20.0, gt=0, le=86_400, description="Timeout of each preflight check.")
    nhc: Literal["auto", "off"] = Field("auto", description="auto: run LBNL Node Health Check "
                                        "(`nhc`, the site's own checks) where it is installed, "
                                        "with MARK_OFFLINE=0; a failed check excludes the node, "
                                        "NHC that cannot run is `unknown`, never healthy.")

    @field_validator("commands")
    @classmethod
    def _argv(cls, v: list[list[str]]) -> list[list[str]]:
        for i, argv in enumerate(v):
            if not argv or not argv[0].strip():
                raise ValueError(f"check {i} is empty: each check is an argv list such as "
                                 "[nvidia-smi, -L]")
            if any("\x00" in a for a in argv):
                raise ValueError(f"check {i} contains a NUL byte")
        return v
