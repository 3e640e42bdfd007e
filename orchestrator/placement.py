"""Where a segment runs, as a value: a job of its own, or a step of a job that holds spare nodes (a
restart inside that job is a later step of it). Read by `SegmentRecord.placement`; written only by
loop.advance."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from orchestrator.model import Frozen


class OwnJob(Frozen):
    """The segment has a job of its own: every node of the job runs the training."""
    kind: Literal["job"] = "job"


class InAllocation(Frozen):
    """The segment runs as a step of a job with spare nodes (--no-kill): the job's first step, or a
    restart in it (`submitted_by`: the segment that submitted the job)."""
    kind: Literal["allocation"] = "allocation"
    dir: str = ""  # where the controller and the job's allocation supervisor talk
    spares: int = 0  # spare nodes the job holds beyond this step (0: no restart left in the job)
    nodes: tuple[str, ...] = ()  # every node of the job, spares included, once known
    submitted_by: int | None = None


Placement = Annotated[OwnJob | InAllocation, Field(discriminator="kind")]
OLD_FIELDS = {"allocation_dir": "dir", "spare_count": "spares", "allocation": "nodes",
              "in_job_of": "submitted_by"}


def legacy_placement(data: Any) -> Any:
    """A segment record's input with schema 1's four fields (allocation_dir, spare_count,
    allocation, in_job_of) folded into its placement: the allocation when any of them says so, else
    a job of its own."""
    if not isinstance(data, dict) or not any(k in data for k in OLD_FIELDS):
        return data
    data = dict(data)
    cur = data.get("placement")
    base = (cur.model_dump() if isinstance(cur, BaseModel) else dict(cur) if isinstance(cur, dict)
            else {})
    vals = {new: base.get(new) for new in OLD_FIELDS.values() if base.get(new) is not None}
    vals |= {new: data.pop(old) for old, new in OLD_FIELDS.items() if old in data}
    held = (vals.get("dir") or vals.get("spares") or vals.get("nodes")
            or vals.get("submitted_by") is not None)
    data["placement"] = {"kind": "allocation", **vals} if held else {"kind": "job"}
    return data
