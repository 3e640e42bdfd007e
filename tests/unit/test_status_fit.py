"""Issue 37 re-probe: at COLUMNS=100 the segment table cut its cells ("20->…", "CANCE…", "excl…"). Now it drops
whole columns, least needed first, and what it shows is whole; the nodes, iterations, cause, culprit and action
always stay."""

from __future__ import annotations

from datetime import UTC, datetime

from rich.console import Console

from orchestrator.model import Action, Cause, JobState
from orchestrator.state import RunState, SegmentRecord
from orchestrator.views.fit import kept_columns
from orchestrator.views.status import timeline_table

NOW = datetime(2026, 12, 3, tzinfo=UTC)


def _state() -> RunState:
    seg = SegmentRecord(index=12, job_name="r.seg0012", job_id="4412345", nodes=[f"gpu-r07c{i:02d}" for i in range(16)],
                        excluded=["gpu-r01c03", "gpu-r02c11", "gpu-r09c01"], start_iteration=123000,
                        end_iteration=124999, resumed_from="/lustre/proj/ckpt/run-7b/iter_0123000",
                        job_state=JobState.CANCELLED, cause=Cause.NCCL_TIMEOUT, culprit_nodes=["gpu-r07c03"],
                        action=Action.RESUBMIT_EXCLUDE, ended_at=NOW)
    return RunState(run="r", created_at=NOW, updated_at=NOW, segments=[seg])


def _render(width: int) -> str:
    console = Console(width=width, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(timeline_table(_state(), width=width))
    return console.export_text()


def test_at_100_columns_whole_columns_give_way_and_no_cell_is_cut() -> None:
    text = _render(100)
    assert "…" not in text, text
    for whole in ("gpu-r07c[00-15]", "123000->124999", "nccl_timeout", "gpu-r07c03", "resubmit_exclude"):
        assert whole in text, text
    assert "resumed from" not in text and "iter_0123000" not in text  # dropped first
    wide = _render(220)
    assert "resumed from" in wide and "iter_0123000" in wide and "…" not in wide


def test_the_columns_kept_are_those_that_fit_in_the_drop_order() -> None:
    headers = ["seg", "nodes", "resumed from", "end", "action"]
    rows = [["1", "node[1-3]", "iter_0000030", "CANCELLED", "resubmit"]]
    assert kept_columns(headers, rows, None, ("resumed from", "end")) == [0, 1, 2, 3, 4]
    assert kept_columns(headers, rows, 200, ("resumed from", "end")) == [0, 1, 2, 3, 4]
    assert kept_columns(headers, rows, 50, ("resumed from", "end")) == [0, 1, 3, 4]
    assert kept_columns(headers, rows, 10, ("resumed from", "end")) == [0, 1, 4]  # never the others
