"""Issue 15, writing where it should not: no input reaches the terminal unescaped. Escape sequences in file
names and log lines are shown as text, rich markup in log text (`[/INST]`, `[/x]`) is printed as is and never
crashes `status`, `blacklist list`, `diagnose` or the final print of `run`. And issue 13's output fixes:
evidence cut at a word, success is not time lost, drain lines unwrapped, --watch fits the terminal, status
says whether a controller is attached and that --cancel-on-exit cancelled the job."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta
from pathlib import Path

from rich.console import Console
from typer.testing import CliRunner

from orchestrator.blacklist import Blacklist
from orchestrator.cli import app
from orchestrator.cli.inspect import status_view
from orchestrator.model import Action, Cause, Evidence, JobRef, JobState, RunStatus
from orchestrator.runlock import CONTROLLER, RunLock
from orchestrator.state import RunState, SegmentRecord, StateStore
from orchestrator.views.status import summary_table, timeline_table
from orchestrator.views.text import clean, cut

T = datetime(2026, 1, 1, tzinfo=UTC)
NOW = T + timedelta(hours=1)
ESC = "\x1b]0;pwned\x07\x1b[2J\x1b[31m"
HOSTILE = f"[/INST] [bold]x[/bold] [/x] {ESC}ran for 1800520 seconds " + "y" * 120


def hostile_state(segments: int = 2, status: RunStatus = RunStatus.STOPPED) -> RunState:
    segs = [SegmentRecord(index=i, job_name=f"r.seg{i}", job_id=str(1000 + i), submitted_at=T + timedelta(minutes=i),
                          ended_at=T + timedelta(minutes=i, seconds=30), start_iteration=0, end_iteration=i,
                          cause=Cause.USER_BUG, action=Action.RESUBMIT, reason=HOSTILE,
                          evidence=[Evidence(node="n1", file="/x/n1.log", line=3, text=HOSTILE, role="root")])
            for i in range(1, segments + 1)]
    bl = Blacklist().record("n1", Cause.GPU_ECC, f"/x/n1.log:3: {HOSTILE}", "9", T, hard=True,
                            expiry=timedelta(days=3))
    return RunState(run="r", created_at=T, updated_at=T, status=status, stop_reason=HOSTILE, segments=segs,
                    blacklist=bl)


def saved(tmp_path: Path, state: RunState) -> Path:
    StateStore(tmp_path / "run").save(state)
    return tmp_path / "run"


def assert_escaped(output: str) -> None:
    assert "\x1b" not in output and "\x07" not in output, repr(output[:300])
    assert "\\x1b]0;pwned" in output  # shown, not interpreted


def test_status_prints_markup_and_escapes_as_text(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["status", str(saved(tmp_path, hostile_state()))], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert "[/INST] [bold]x[/bold] [/x]" in res.output
    assert_escaped(res.output)


def test_blacklist_list_prints_markup_and_escapes_as_text(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["blacklist", "list", str(saved(tmp_path, hostile_state()))],
                             catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert "[/INST]" in res.output
    assert_escaped(res.output)


def test_final_print_of_run_survives_markup_in_the_stop_reason() -> None:
    buf = io.StringIO()
    Console(file=buf, width=200).print(timeline_table(hostile_state()))
    assert "[/INST] [bold]x[/bold] [/x]" in buf.getvalue()
    assert_escaped(buf.getvalue())


def test_diagnose_escapes_file_names_and_log_lines(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / f"n1{ESC}.out").write_text(f"RuntimeError: CUDA error: an illegal memory access {HOSTILE}\n")
    (logs / "n2.out").write_text("iteration 5/ 100 | loss 1.0\n")
    res = CliRunner().invoke(app, ["diagnose", str(logs)], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert "[/INST]" in res.output
    assert_escaped(res.output)


def test_errors_escape_the_path(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["validate", str(tmp_path / f"x{ESC}.yaml")])
    assert res.exit_code == 2 and "\x1b" not in res.output, repr(res.output)


def test_evidence_is_cut_at_a_word_never_inside_a_number() -> None:
    line = "watchdog: rank 3 ran for 1800520 ms before the collective timed out"
    for width in range(10, len(line)):
        shown = cut(line, width)
        assert len(shown) <= width and shown.endswith("…"), shown
        assert "1800520" in shown or "180" not in shown, shown
    assert cut(line, len(line)) == line and clean("a\x1b[2Jb\rc") == "a\\x1b[2Jb\\x0dc"


def test_success_is_not_time_lost() -> None:
    st = hostile_state(1, RunStatus.DONE)
    ok = SegmentRecord(index=2, job_name="r.seg2", job_id="2", submitted_at=T + timedelta(minutes=5), start_iteration=1,
                       end_iteration=100, first_progress_at=T + timedelta(minutes=6),
                       last_progress_at=T + timedelta(minutes=20), ended_at=T + timedelta(minutes=21),
                       cause=Cause.SUCCESS, action=Action.DONE)
    st = st.evolve(segments=[*st.segments, ok])
    buf = io.StringIO()
    Console(file=buf, width=300).print(summary_table(st, NOW))
    lost = next(line for line in buf.getvalue().splitlines() if "time lost" in line)
    assert "user_bug" in lost and "success" not in lost, lost
    assert "start-up overhead" in buf.getvalue()


def test_drain_line_is_one_line_at_100_columns(tmp_path: Path) -> None:
    st = hostile_state(1, RunStatus.RUNNING)
    st = st.evolve(blacklist=Blacklist().record("n1", Cause.GPU_ECC, "/x/n1.log:3: Xid 48 $(reboot) `id` " + "z " * 80,
                                                "9", T, hard=True, expiry=timedelta(days=3)))
    buf = io.StringIO()
    Console(file=buf, width=100).print(status_view(st, NOW), crop=False)  # as `status` prints it
    [drain] = [line for line in buf.getvalue().splitlines() if "scontrol" in line]
    assert drain.startswith("scontrol update NodeName=n1 State=DRAIN Reason=") and drain.endswith('"'), drain
    assert "\\$(reboot)" in drain and "\\`id\\`" in drain


def test_watch_fits_24_rows_summary_first(tmp_path: Path) -> None:
    st = hostile_state(60, RunStatus.RUNNING)
    st = st.evolve(blacklist=Blacklist())
    buf = io.StringIO()
    Console(file=buf, width=200, height=24).print(status_view(st, NOW, tmp_path, height=24))
    lines = buf.getvalue().splitlines()
    assert len(lines) <= 24, "\n".join(lines)
    assert "run r" in lines[0] and any("state" in line for line in lines[:4])
    assert any("│ 60 " in line for line in lines) and not any("│ 1 " in line for line in lines)


def test_status_says_whether_a_controller_is_attached(tmp_path: Path) -> None:
    run = saved(tmp_path, hostile_state(1, RunStatus.RUNNING))
    res = CliRunner().invoke(app, ["status", str(run)], catch_exceptions=False)
    assert "none attached" in res.output and "'orchestrator run' resumes" in res.output, res.output
    lock = RunLock(run)
    lock.acquire(CONTROLLER)
    try:
        res = CliRunner().invoke(app, ["status", str(run)], catch_exceptions=False)
    finally:
        lock.release()
    assert "attached (" in res.output and "none attached" not in res.output, res.output


class CancelRecorder:
    name = "fake"

    def __init__(self) -> None:
        self.cancelled: list[str] = []

    def cancel(self, ref: JobRef) -> None:
        self.cancelled.append(ref.job_id)


def test_cancel_on_exit_is_recorded_and_status_says_so(tmp_path: Path) -> None:
    from orchestrator.cli.run import _cancel_current
    from orchestrator.clock import FakeClock

    st = hostile_state(1, RunStatus.RUNNING)
    st = st.evolve(stop_reason="", segments=[
        st.segments[0].evolve(ended_at=None, action=None, job_state=JobState.RUNNING)])  # as the last poll left it
    store = StateStore(tmp_path / "run")
    backend = CancelRecorder()
    new = _cancel_current(st, backend, store, FakeClock(NOW))  # type: ignore[arg-type]
    assert backend.cancelled == ["1001"]
    # the controller's own final table is drawn from this ledger (it showed the job RUNNING: the re-probes, N6)
    assert new is not None and new.current is not None and new.current.job_state == JobState.CANCELLED
    res = CliRunner().invoke(app, ["status", str(tmp_path / "run")], catch_exceptions=False)
    assert "stopped (controller stopped with --cancel-on-exit: job 1001 cancelled)" in res.output, res.output
    assert "cancelled (--cancel-on-exit)" in res.output and "running" not in res.output.split("segment")[0]
    assert "RUNNING" not in res.output, res.output  # issue 21 re-run (X14b): the current segment said RUNNING
    res = CliRunner().invoke(app, ["status", str(tmp_path / "run"), "--json"], catch_exceptions=False)
    assert '"RUNNING"' not in res.output


def test_report_png_has_totals_and_survives_hostile_names(tmp_path: Path) -> None:
    from orchestrator.views.report import _totals, write_report

    st = hostile_state(2, RunStatus.STOPPED)
    st = st.evolve(run="r$x^{$", segments=[st.segments[0].evolve(culprit_nodes=["n$1"]), *st.segments[1:]])
    html_path, png_path = write_report(st, NOW, tmp_path)
    assert png_path.read_bytes().startswith(b"\x89PNG") and html_path.is_file()
    totals = _totals(st, NOW)
    assert "effective training time" in totals and "time lost: user_bug" in totals and "\\$" in totals
