"""Spare nodes in the views and the CLI (issue 14): `status` and `report` tell a restart inside a job from a new
submission and time both; `status --json` carries the spares; the dry run shows the allocation, the supervisor
and the step's srun; a local-backend config with spares is refused before anything runs."""

from __future__ import annotations

import json
import shlex
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from orchestrator.agent.allocation import step_argv
from orchestrator.backends.slurm import SlurmBackend
from orchestrator.cli import app
from orchestrator.clock import FakeClock
from orchestrator.contract import SegmentPaths
from orchestrator.loop.submission import prepare
from orchestrator.model import Action, Cause, Evidence, JobState
from orchestrator.placement import InAllocation
from orchestrator.settings import Settings, load_settings
from orchestrator.state import RunState, SegmentRecord, StateStore
from orchestrator.views.report import render_html
from orchestrator.views.restarts import job_spares, restarts, summary, swapped
from orchestrator.views.status import status_json, summary_table, timeline_table
from tests.conftest import base_config, write_config

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
ALLOC = ["node1", "node2", "node3", "node4", "node5"]
ALLOC_DIR = "/runs/sp/segments/0001/allocation"


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def failed(seg: SegmentRecord, cause: Cause, culprit: str, ended: float) -> SegmentRecord:
    return seg.evolve(cause=cause, culprit_nodes=[culprit], action=Action.RESUBMIT_EXCLUDE, ended_at=at(ended),
                      job_state=JobState.FAILED, reason=f"{cause} {culprit}",
                      evidence=[Evidence(node=culprit, text=f"{cause} on {culprit}", cause=cause)])


def with_seg(state: RunState, i: int, **changes: object) -> RunState:
    """`state` with its segment at position `i` changed."""
    segs = list(state.segments)
    segs[i] = segs[i].evolve(**changes)
    return state.evolve(segments=segs)


def spares_run() -> RunState:
    """Job 269 (3 nodes + 2 spares): ECC on node2 -> segment 2 in the job on node4; node3 fails -> segment 3 in
    the job on node5; node1 (the batch host) fails -> segment 4 is a new job 270 with --exclude."""
    s1 = SegmentRecord(index=1, job_name="sp.seg0001", job_id="269", submitted_at=at(0), nodes=ALLOC[:3],
                       placement=InAllocation(spares=2, nodes=tuple(ALLOC), dir=ALLOC_DIR), first_progress_at=at(5),
                       last_progress_at=at(30), end_iteration=34)
    s1 = failed(s1.evolve(cancelled_at=at(30.5)), Cause.GPU_ECC, "node2", 31)
    s2 = SegmentRecord(index=2, job_name="sp.seg0002", job_id="269", submitted_at=at(31),
                       nodes=["node1", "node4", "node3"],
                       placement=InAllocation(spares=1, nodes=tuple(ALLOC), dir=ALLOC_DIR, submitted_by=1),
                       resumed_from="/ck/iter_0000030", start_iteration=30, first_progress_at=at(31.75),
                       last_progress_at=at(50), end_iteration=52)
    s2 = failed(s2, Cause.NODE_FAIL, "node3", 51)
    s3 = SegmentRecord(index=3, job_name="sp.seg0003", job_id="269", submitted_at=at(51),
                       nodes=["node1", "node4", "node5"],
                       placement=InAllocation(spares=0, nodes=tuple(ALLOC), dir=ALLOC_DIR, submitted_by=1),
                       resumed_from="/ck/iter_0000050", start_iteration=50, first_progress_at=at(52.25),
                       last_progress_at=at(60), end_iteration=61)
    s3 = failed(s3, Cause.NODE_FAIL, "node1", 61)
    s4 = SegmentRecord(index=4, job_name="sp.seg0004", job_id="270", submitted_at=at(62), excluded=["node1"],
                       placement=InAllocation(spares=2, dir="/runs/sp/segments/0004/allocation"),
                       resumed_from="/ck/iter_0000060", start_iteration=60)
    return RunState(run="sp", created_at=T0, updated_at=at(70), segments=[s1, s2, s3, s4], target_iteration=100)


def render(table: object) -> str:
    console = Console(width=400, record=True)
    console.print(table)
    return console.export_text()


def test_restarts_inside_the_job_and_new_submissions_are_told_apart_and_timed() -> None:
    rows = restarts(spares_run())
    assert [(r.segment, r.after, r.in_job) for r in rows] == [(2, 1, True), (3, 2, True), (4, 3, False)]
    # from the controller's cancel (else the segment's end) to the next segment's first progress
    assert [r.seconds for r in rows] == [75.0, 75.0, None]
    assert (rows[0].dropped, rows[0].promoted) == (("node2",), ("node4",))
    assert (rows[1].dropped, rows[1].promoted) == (("node3",), ("node5",))
    assert rows[2].promoted == () and rows[2].cause == "node_fail" and rows[2].culprits == ("node1",)
    s = summary(rows)
    assert s["in_job"] == {"count": 2, "timed": 2, "median_s": 75.0, "max_s": 75.0}
    assert s["new_job"] == {"count": 1, "timed": 0, "median_s": None, "max_s": None}


def test_a_swap_pairs_each_dropped_node_with_the_spare_in_its_place() -> None:
    prev = SegmentRecord(index=1, job_name="a", nodes=["node1", "node2", "node3"])
    nxt = SegmentRecord(index=2, job_name="b", nodes=["node1", "node5", "node4"],
                        placement=InAllocation(submitted_by=1))
    assert swapped(prev, nxt) == (("node2", "node3"), ("node5", "node4"))  # ranks kept: not in name order
    nxt = nxt.evolve(nodes=["node1", "node3", "node4"])  # a sorted node list: node3 kept its node, node4 replaced node2
    assert swapped(prev, nxt) == (("node2",), ("node4",))
    nxt = nxt.evolve(in_job_of=None)
    assert swapped(prev, nxt) == ((), ())  # a new submission promotes nothing


def test_a_planned_new_segment_is_no_restart() -> None:
    state = spares_run()
    for i in range(3):
        state = with_seg(state, i, in_job_of=None)
    state = with_seg(state, 0, cause=Cause.TIMELIMIT)  # segment 2 follows a time limit: the plan, not a fault
    state = with_seg(state, 1, cause=Cause.SUCCESS)
    assert [r.segment for r in restarts(state)] == [4]


def test_spares_of_a_job_promoted_and_free() -> None:
    jobs = job_spares(spares_run())
    assert [(j.job_id, j.segments) for j in jobs] == [("269", (1, 2, 3)), ("270", (4,))]
    first = jobs[0]
    assert first.spares == ("node4", "node5") and first.promoted == ("node4", "node5")
    assert first.free == ()  # both spares promoted; the dropped nodes and the last culprit are not free
    assert jobs[1].allocation == () and jobs[1].spare_count == 2  # not placed yet
    state = spares_run()
    state = state.evolve(segments=state.segments[:2])  # segment 2 still runs on node1,node4,node3; node5 is free ...
    assert job_spares(state)[0].free == ("node5",)
    state = with_seg(state, 0, culprit_nodes=["node2", "node5"])  # ... unless a segment of the job blamed it too
    assert job_spares(state)[0].free == ()


def test_status_json_carries_spares_allocation_and_restarts() -> None:
    state = spares_run()
    data = json.loads(json.dumps(status_json(state, at(70))))
    seg2 = data["segments"][1]
    assert (seg2["in_job_of"], seg2["spare_count"], seg2["allocation"], seg2["job_id"]) == (1, 1, ALLOC, "269")
    assert seg2["first_progress_at"] == "2026-11-30T12:31:45+00:00"
    assert data["segments"][0]["in_job_of"] is None and data["segments"][0]["spare_count"] == 2
    assert data["restarts"]["in_job"]["count"] == 2 and data["restarts"]["new_job"]["count"] == 1
    assert [r["where"] for r in data["restarts"]["list"]] == ["in_job", "in_job", "new_job"]
    assert data["restarts"]["jobs"][0]["promoted"] == ["node4", "node5"]
    state = state.evolve(segments=state.segments[:2])  # segment 2 is the current one, running inside job 269
    state = with_seg(state, 1, cause=None, action=None, ended_at=None)
    cur = status_json(state, at(40))["current"]
    assert (cur["in_job_of"], cur["spare_count"], cur["allocation"]) == (1, 1, ALLOC)


def test_timeline_marks_restarts_inside_the_job_and_the_promoted_spare() -> None:
    text = render(timeline_table(spares_run()))
    header = next(line for line in text.splitlines() if "seg" in line and "job" in line)
    assert "spares" in header
    row2 = next(line for line in text.splitlines() if line.startswith("│ 2 "))
    assert "in job 269 (seg 1)" in row2 and "node4 for node2; 1 left" in row2
    row1 = next(line for line in text.splitlines() if line.startswith("│ 1 "))
    assert "in job" not in row1 and "node4,node5" in row1
    row4 = next(line for line in text.splitlines() if line.startswith("│ 4 "))
    assert "270" in row4 and "in job" not in row4 and "2 asked for" in row4


def test_a_run_without_spares_keeps_its_table() -> None:
    state = spares_run()
    state = state.evolve(segments=[s.evolve(in_job_of=None, spare_count=0, allocation_dir="", allocation=[])
                                   for s in state.segments])
    header = next(line for line in render(timeline_table(state)).splitlines() if "seg" in line)
    assert [c.strip() for c in header.strip("┃ ").split("┃")] == [
        "seg", "job", "nodes", "excluded", "resumed from", "iters", "end", "cause", "culprit", "action"]


def test_summary_counts_restarts_and_shows_the_current_jobs_spares() -> None:
    state = spares_run()
    text = render(summary_table(state, at(70)))
    assert ("2 inside the job (median 01m15s from the end of the failed segment to progress again), "
            "1 new submission (not timed)") in text
    assert "job 270: 2 spares asked for" in text  # the current segment's job is not placed yet
    state = state.evolve(segments=state.segments[:2])
    state = with_seg(state, 1, cause=None)
    text = render(summary_table(state, at(40)))
    assert "current segment" in text and "2 in job 269" in text
    assert "job 269 (5 nodes): spares node4,node5; promoted node4; free node5" in text
    state = spares_run()
    state = state.evolve(segments=state.segments[:3])  # segment 3 runs on the last spare
    state = with_seg(state, 2, cause=None, ended_at=None)
    assert "promoted node4,node5; free none" in render(summary_table(state, at(55)))


def test_report_has_the_restarts_and_the_spares() -> None:
    page = render_html(spares_run(), at(70), b"")
    assert "<td>in job 269 (seg 1)</td>" in page
    restarts_table = page.split('<table id="restarts">')[1].split("</table>")[0]
    assert "<td>inside job 269</td><td>node4 for node2</td><td>01m15s</td>" in restarts_table
    assert "<td>new job 270</td><td>-</td><td>-</td>" in restarts_table
    spares_table = page.split('<table id="spares">')[1].split("</table>")[0]
    assert "<td>269</td><td>1</td><td>1,2,3</td><td>node4,node5</td><td>node4,node5</td>" in spares_table
    plain = spares_run()
    plain = plain.evolve(segments=[s.evolve(in_job_of=None, spare_count=0, allocation_dir="", cause=Cause.SUCCESS)
                                   for s in plain.segments])
    assert "<h2>Restarts</h2>" not in render_html(plain, at(70), b"")


def test_report_command_writes_the_page_for_a_run_with_spares(tmp_path: Path) -> None:
    StateStore(tmp_path / "run").save(spares_run())
    res = CliRunner().invoke(app, ["report", str(tmp_path / "run"), "--out", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    assert "inside job 269" in (tmp_path / "out" / "sp-report.html").read_text()


@pytest.mark.parametrize("spares", [1, "auto"])
@pytest.mark.parametrize("argv", [["validate"], ["run", "--dry-run"], ["run"]])
def test_spares_with_the_local_backend_are_refused_before_anything_runs(
        tmp_path: Path, argv: list[str], spares: int | str) -> None:
    cfg = write_config(tmp_path, base_config(tmp_path, resources={"nodes": 2, "spare_nodes": spares}))
    res = CliRunner().invoke(app, [argv[0], str(cfg), *argv[1:]])
    assert res.exit_code == 2, res.output
    assert f"resources.spare_nodes: {spares} needs backend.kind: slurm" in res.output
    assert not (tmp_path / "run").exists()  # nothing submitted, no run directory made


def test_the_local_backend_without_spares_validates(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, base_config(tmp_path, resources={"nodes": 2, "spare_nodes": 0}))
    res = CliRunner().invoke(app, ["validate", str(cfg)])
    assert res.exit_code == 0 and "ok (run" in res.output and "spare" not in res.output, res.output


@pytest.mark.parametrize(("spares", "said"), [(1, "2 nodes + 1 spare,"), (3, "2 nodes + 3 spares,"),
                                               ("auto", "2 nodes + spares auto,")])
def test_validate_mentions_the_spares(tmp_path: Path, spares: int | str, said: str) -> None:
    cfg = write_config(tmp_path, base_config(tmp_path, resources={"nodes": 2, "spare_nodes": spares},
                                             backend={"kind": "slurm"}))
    res = CliRunner().invoke(app, ["validate", str(cfg)])
    assert res.exit_code == 0 and said in res.output, res.output
    res = CliRunner().invoke(app, ["validate", str(cfg), "--set", "resources.spare_nodes=0"])
    assert res.exit_code == 0 and "ok (run" in res.output and "spare" not in res.output, res.output
    res = CliRunner().invoke(app, ["validate", str(cfg), "--set", "resources.spare_nodes=yes"])
    assert res.exit_code == 2 and "spare_nodes must be a number from 0 to 64, or auto" in res.output


def dry_run(tmp_path: Path, spares: int | str) -> tuple[str, Settings]:
    cfg = base_config(tmp_path, resources={"nodes": 3, "spare_nodes": spares, "gpus_per_node": 8},
                      backend={"kind": "slurm", "slurm": {"srun_args": ["--cpu-bind=none"]}})
    path = write_config(tmp_path, cfg)
    res = CliRunner().invoke(app, ["run", str(path), "--dry-run"])
    assert res.exit_code == 0, res.output
    return res.output, load_settings(path)


def test_dry_run_with_spares_shows_the_allocation_the_supervisor_and_the_exact_step(
        tmp_path: Path, fake_slurm_bin: Path) -> None:
    output, s = dry_run(tmp_path, 1)
    lines = output.splitlines()
    assert "#SBATCH --nodes=4" in lines and "#SBATCH --no-kill" in lines
    assert not any(line.startswith("srun") for line in lines)  # no srun in the batch script
    assert any("--nodes=4 (3 for the training + 1 spare) with --no-kill" in line for line in lines)
    assert any("orchestrator.agent.allocation.run_allocation" in line for line in lines)
    step = next(line for line in lines if line.startswith("#   srun "))
    clock = FakeClock()
    state = RunState(run="t", created_at=clock.now(), updated_at=clock.now())
    backend = SlurmBackend(s.backend.slurm, clock, s.run_dir)  # sinfo: the stand-in's node1..node4
    spec = prepare(s, state, backend, clock.now(), sys.executable).spec
    assert spec.spares == 1
    expected = step_argv(spec, ["NODE1", "NODE2", "NODE3"], SegmentPaths(Path(spec.segment_dir)).spec,
                         ("--cpu-bind=none",), sys.executable)
    assert shlex.split(step[len("#   "):]) == expected
    assert "--overlap" in expected and "--gpus-per-node=8" in expected
    assert any(line.endswith(str(Path(spec.allocation_dir) / "step-NNNN.json")) for line in lines)


def test_dry_run_with_auto_spares_says_how_many_this_segment_gets(tmp_path: Path, fake_slurm_bin: Path) -> None:
    output, _ = dry_run(tmp_path, "auto")
    assert "# spare nodes: 0 for this segment (resources.spare_nodes: auto)" in output
    assert "#   auto: 3 nodes x " in output and "the chance of running out is" in output  # why 0
    assert "#SBATCH --nodes=3" in output and "--no-kill" not in output


def test_dry_run_says_why_a_segment_gets_fewer_spares_than_asked(tmp_path: Path, fake_slurm_bin: Path) -> None:
    output, _ = dry_run(tmp_path, 3)  # the stand-in cluster has node1..node4: 3 for the training, 1 left
    assert "# spare nodes: 1 for this segment (resources.spare_nodes: 3)" in output
    assert "#   1 instead of 3: only 4 usable node(s) (up, not blacklisted) for 3 needed" in output
    assert "#SBATCH --nodes=4" in output


def test_dry_run_without_spares_says_nothing_of_them(tmp_path: Path, fake_slurm_bin: Path) -> None:
    output, _ = dry_run(tmp_path, 0)
    assert "# spare nodes" not in output and "--no-kill" not in output and "#SBATCH --nodes=3" in output
