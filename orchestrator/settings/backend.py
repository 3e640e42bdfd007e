"""The `backend:` section of a run config: which backend runs the segments (no silent default), and
the settings of each: virtual nodes for the local one, command timeouts and srun/sbatch extras for
Slurm."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from orchestrator.settings.base import Section
from orchestrator.settings.nodes import SAFE_NAME
from orchestrator.settings.sections import MAX_LOCAL_NODES, YEAR_S


class LocalBackendCfg(Section):
    """The embedded backend: virtual nodes on this machine."""
    nodes: list[str] | int = Field(4, description="Virtual node names, or a count (node1..nodeN).")

    def node_names(self) -> list[str]:
        if isinstance(self.nodes, int):
            return [f"node{i}" for i in range(1, self.nodes + 1)]
        return list(self.nodes)

    @field_validator("nodes")
    @classmethod
    def _names(cls, v: list[str] | int) -> list[str] | int:
        if not 1 <= (v if isinstance(v, int) else len(v)) <= MAX_LOCAL_NODES:
            raise ValueError(f"needs 1 to {MAX_LOCAL_NODES} virtual nodes")
        if isinstance(v, int):
            return v
        for n in v:
            if not SAFE_NAME.match(n):
                raise ValueError(f"invalid node name {n!r}")
        if len(set(v)) != len(v):
            raise ValueError("node names repeat")
        return v


class SlurmBackendCfg(Section):
    """Slurm commands and how long to wait for them."""
    command_timeout_s: float = Field(30.0, gt=0, le=86_400,
                                     description="Timeout of one squeue/sacct/sbatch call.")
    retry_max_s: float = Field(600.0, gt=0, le=YEAR_S,
                               description="Give up retrying one Slurm call after this long.")
    validate_exclude: bool = Field(True, description="Drop --exclude names that sinfo does not "
                                                     "know.")
    srun_args: list[str] = Field(default_factory=list, description="Extra arguments for srun.")
    setup: list[str] = Field(default_factory=list, description="Shell lines run in the batch "
                                                               "script first.")
    python: str | None = Field(
        None, pattern=r"^[A-Za-z0-9_./+-]+$",
        description="The Python interpreter that runs the agents on the nodes (submitit's "
                    "`python=`): a path where the orchestrator is installed on the compute "
                    "nodes, when it differs from the controller's own (the default). The "
                    "training itself runs with its own interpreter, in its container if it "
                    "has one.")


class BackendCfg(Section):
    """Which backend runs the segments (no silent default)."""
    kind: Literal["local", "slurm"] = Field(
        description="slurm: a Slurm cluster; local: virtual nodes on this machine (demos, tests). "
                    "Required.")
    local: LocalBackendCfg = Field(default_factory=LocalBackendCfg)
    slurm: SlurmBackendCfg = Field(default_factory=SlurmBackendCfg)

    @model_validator(mode="after")
    def _setup_needs_slurm(self) -> BackendCfg:
        if self.kind == "local" and self.slurm.setup:
            raise ValueError("backend.slurm.setup runs once in the batch script, and the local "
                             "backend has none: its lines would not run; remove them or use "
                             "backend.kind: slurm")
        return self
