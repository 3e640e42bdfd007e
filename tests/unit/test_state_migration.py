"""state.json schema 2 (issue 24) reads the files of the release before it (schema 1), kept in tests/data/state/."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from orchestrator.loop.advance import Phase, advance, phase
from orchestrator.loop.observations import Ended
from orchestrator.model import CancelReason, Cause, JobState, JobStatus
from orchestrator.placement import InAllocation, OwnJob
from orchestrator.state import SCHEMA_VERSION, StateError, StateStore
from tests.conftest import REPO
from tests.unit.test_controller_fake import make

OLD = REPO / "tests" / "data" / "state"


def store_of(tmp_path: Path, name: str) -> StateStore:
    run = tmp_path / "run"
    run.mkdir(mode=0o700, parents=True)
    shutil.copy(OLD / name, run / "state.json")
    return StateStore(run)


@pytest.mark.parametrize(("name", "reasons"), [
    ("hang-cancelled.json", [CancelReason.STALL, None]),
    ("spares-restart.json", [CancelReason.PEER_FAILED, None]),
    ("stall-cancelled-not-judged.json", [CancelReason.STALL]),
])
def test_a_version_1_file_reads_with_each_cancel_s_reason(tmp_path: Path, name: str,
                                                          reasons: list[CancelReason | None]) -> None:
    raw = json.loads((OLD / name).read_text())
    assert raw["schema_version"] == 1
    store = store_of(tmp_path, name)
    state = store.load()
    assert state is not None and state.schema_version == SCHEMA_VERSION == 2
    assert [s.cancel_reason for s in state.segments] == reasons
    assert [s.cancelled_by_controller for s in state.segments] == [s.get("cancelled_by_controller", "")
                                                                 for s in raw["segments"]]
    store.save(state)  # written back as version 2, and read again the same
    assert json.loads(store.path.read_text())["schema_version"] == 2
    assert store.load() == state


def test_a_segment_cancelled_for_a_stall_before_the_upgrade_is_judged_a_hang_after_it(tmp_path: Path) -> None:
    ctl, _, clock = make(tmp_path)
    state = store_of(tmp_path / "x", "stall-cancelled-not-judged.json").load()
    assert state is not None and state.current is not None
    assert phase(state.current) == Phase.CANCELLING
    t = advance(state, Ended(JobStatus(state=JobState.CANCELLED, nodes=tuple(state.current.nodes)), ()), ctl.s,
                clock.now())
    assert t.ledger.segments[-1].cause == Cause.HANG


@pytest.mark.parametrize("version", [0, 3, "1", None])
def test_another_schema_is_refused_and_nothing_is_overwritten(tmp_path: Path, version: object) -> None:
    data = json.loads((OLD / "hang-cancelled.json").read_text())
    data["schema_version"] = version
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    (run / "state.json").write_text(json.dumps(data))
    before = (run / "state.json").read_bytes()
    with pytest.raises(StateError, match="schema_version"):
        StateStore(run).load()
    assert (run / "state.json").read_bytes() == before


def test_the_four_spares_fields_of_version_1_become_the_segment_s_placement(tmp_path: Path) -> None:
    raw = json.loads((OLD / "spares-restart.json").read_text())["segments"]
    store = store_of(tmp_path, "spares-restart.json")
    state = store.load()
    assert state is not None
    first, restart = state.segments
    assert isinstance(first.placement, InAllocation) and isinstance(restart.placement, InAllocation)
    assert (first.placement.dir, first.placement.spares, first.placement.submitted_by) == (
        raw[0]["allocation_dir"], raw[0]["spare_count"], None)
    assert list(first.placement.nodes) == raw[0]["allocation"] and restart.placement.submitted_by == 1
    assert [(s.spare_count, s.allocation, s.in_job_of, s.allocation_dir) for s in state.segments] == [
        (s["spare_count"], s["allocation"], s["in_job_of"], s["allocation_dir"]) for s in raw]  # read as before
    plain = store_of(tmp_path / "plain", "hang-cancelled.json").load()
    assert plain is not None and all(isinstance(s.placement, OwnJob) for s in plain.segments)
    store.save(state)
    written = json.loads(store.path.read_text())["segments"]
    assert all("placement" in s and not {"spare_count", "in_job_of", "allocation_dir"} & set(s) for s in written)
