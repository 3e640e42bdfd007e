"""The spec's version (issue 42): the controller pickles a `SegmentSpec` for every node's agent; a
node whose orchestrator reads another version refuses it in one line (the controller reads it as
a start-up failure of the job's install: stop and say so) instead of misreading its fields."""

from __future__ import annotations

from orchestrator.contract import CANNOT_START_EXIT
from orchestrator.model import SPEC_VERSION, SegmentSpec


def refuse_another_version(spec: SegmentSpec) -> None:
    """Return when the spec is this node's version; otherwise say why and exit 127."""
    got = getattr(spec, "version", None)  # a spec pickled by an older controller has none
    if got == SPEC_VERSION:
        return
    print(f"ORCH-AGENT cannot start the training command: the controller sent segment spec "
          f"version {got}, this node's orchestrator reads version {SPEC_VERSION}: install the same "
          "orchestrator on the nodes as where the controller runs", flush=True)
    raise SystemExit(CANNOT_START_EXIT)
