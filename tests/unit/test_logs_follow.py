"""Issue 37: `orchestrator logs -f` an operator can trust: it follows into the next segment, exits when the
run ends, prints the nodes' lines in time order, and `-n 0` prints only what comes next. The clock is a
script: each sleep does the next step (a controller submitting, a node writing); sleeping past the script
fails the test instead of hanging it."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from orchestrator.cli import app
from orchestrator.cli.common import Wiring
from orchestrator.clock import FakeClock
from orchestrator.contract import SegmentPaths
from orchestrator.model import RunStatus
from orchestrator.state import RunState, SegmentRecord, StateStore
from orchestrator.views.nodelogs import merge

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def ts(sec: float) -> str:
    """A node log line's timestamp as the agent writes it."""
    return (T0 + timedelta(seconds=sec)).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def save(run_dir: Path, segments: int, status: RunStatus = RunStatus.RUNNING) -> StateStore:
    store = StateStore(run_dir)
    store.save(RunState(
        run="r", created_at=T0, updated_at=T0, status=status,
        segments=[SegmentRecord(index=i, job_name=f"r.seg{i}", job_id=str(1000 + i)) for i in range(1, segments + 1)]))
    return store


def write(run_dir: Path, seg: int, node: str, text: str) -> Path:
    log = SegmentPaths.of(run_dir, seg).logs / f"{node}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as fh:
        fh.write(text)
    return log


class Script(FakeClock):
    """Each sleep runs the next step first; a sleep with no step left means the command did not stop."""

    def __init__(self, steps: list[Callable[[], object]]) -> None:
        super().__init__(T0)
        self.steps = steps

    def sleep(self, seconds: float) -> bool:
        if not self.steps:
            raise AssertionError("logs -f still following after the script ended")
        self.steps.pop(0)()
        return super().sleep(seconds)


@pytest.fixture(autouse=True)
def no_wall_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """Following waits by the injected clock only: a real sleep fails the test (it would hang it)."""
    def refuse(seconds: float) -> None:
        raise AssertionError(f"logs -f slept {seconds} s of the wall clock")

    monkeypatch.setattr(time, "sleep", refuse)


def invoke(argv: list[str], clock: Script) -> Result:
    return CliRunner().invoke(app, argv, obj=Wiring(clock=lambda: clock))


def test_follow_goes_into_the_next_segment_and_segment_k_stays_on_k(tmp_path: Path) -> None:
    run = tmp_path / "run"
    for pinned in ([], ["--segment", "1"]):
        save(run, 1)
        write(run, 1, "node1", f"{ts(0)} 0: old\n")

        def steps() -> list[Callable[[], object]]:
            return [lambda: write(run, 1, "node1", f"{ts(1)} 0: seg1 late\n"),
                    lambda: (save(run, 2), write(run, 2, "node2", f"{ts(11)} 0: seg2 b\n"),
                             write(run, 2, "node1", f"{ts(10)} 0: seg2 a\n")),
                    lambda: write(run, 2, "node1", f"{ts(12)} 0: seg2 c\n"),
                    lambda: save(run, 2, RunStatus.DONE)]

        clock = Script(steps())
        res = invoke(["logs", str(run), "-f", "-n", "1", *pinned], clock)
        assert res.exit_code == 0, res.output
        assert not clock.steps
        if pinned:
            assert res.output.splitlines() == [f"node1: {ts(0)} 0: old", f"node1: {ts(1)} 0: seg1 late"]
        else:
            assert res.output.splitlines() == [
                f"node1: {ts(0)} 0: old", f"node1: {ts(1)} 0: seg1 late", "== segment 2 (job 1002) ==",
                f"node1: {ts(10)} 0: seg2 a", f"node2: {ts(11)} 0: seg2 b", f"node1: {ts(12)} 0: seg2 c"]
        for seg in (1, 2):
            for log in SegmentPaths.of(run, seg).logs.glob("*.log"):
                log.unlink()


@pytest.mark.parametrize("status", [RunStatus.DONE, RunStatus.STOPPED])
def test_follow_exits_when_the_run_ends_after_printing_what_is_left(tmp_path: Path, status: RunStatus) -> None:
    """Stopped covers cancelled (`orchestrator cancel` records the run stopped). While the run runs, every
    poll prints what came; the last words, even without their newline, are printed before exit 0."""
    run = tmp_path / "run"
    save(run, 1)
    write(run, 1, "node1", f"{ts(0)} 0: start\n")
    steps: list[Callable[[], object]] = [
        partial(write, run, 1, "node1", f"{ts(k)} 0: step {k}\n") for k in range(1, 6)]
    steps.append(lambda: (write(run, 1, "node1", f"{ts(9)} 0: last words"), save(run, 1, status)))
    clock = Script(steps)
    res = invoke(["logs", str(run), "--node", "node1", "-f"], clock)
    assert res.exit_code == 0, res.output
    assert not clock.steps and clock.slept == 6.0
    assert res.output.splitlines() == [f"{ts(k)} 0: {t}" for k, t in
                                       [(0, "start"), *((k, f"step {k}") for k in range(1, 6)), (9, "last words")]]


def test_lines_of_several_nodes_are_merged_in_time_order(tmp_path: Path) -> None:
    """A line without a timestamp (a traceback's next line) stays after the line it follows, in its node."""
    run = tmp_path / "run"
    save(run, 1, RunStatus.DONE)
    write(run, 1, "node1", "".join(f"{ts(k)} 0: n1 {k}\n" for k in (0, 2, 4)))
    write(run, 1, "node2", f"{ts(1)} 0: n2 1\n{ts(3)} 0: Traceback\n  File x.py\n")
    expected = [f"node1: {ts(0)} 0: n1 0", f"node2: {ts(1)} 0: n2 1", f"node1: {ts(2)} 0: n1 2",
                f"node2: {ts(3)} 0: Traceback", "node2:   File x.py", f"node1: {ts(4)} 0: n1 4"]
    res = CliRunner().invoke(app, ["logs", str(run)])
    assert res.exit_code == 0 and res.output.splitlines() == expected, res.output
    # with -f, what the nodes wrote between two polls
    save(run, 1)
    clock = Script([lambda: (write(run, 1, "node2", f"{ts(6)} 0: n2 6\nValueError\n"),
                             write(run, 1, "node1", f"{ts(5)} 0: n1 5\n{ts(7)} 0: n1 7\n")),
                    lambda: save(run, 1, RunStatus.DONE)])
    res = invoke(["logs", str(run), "-f"], clock)
    assert res.exit_code == 0, res.output
    assert res.output.splitlines() == [*expected, f"node1: {ts(5)} 0: n1 5", f"node2: {ts(6)} 0: n2 6",
                                       "node2: ValueError", f"node1: {ts(7)} 0: n1 7"]


def test_merge_compares_times_across_zones_and_keeps_a_nodes_order() -> None:
    after: dict[str, datetime] = {"b": T0 + timedelta(hours=2)}
    got = merge({"a": ["2026-01-01T01:30:00+01:00 x", "2026-01-01T00:45:00 y"],
                 "b": ["rest of b's line", "2026-01-01T00:40:00.5Z z"]}, after)
    # a's 00:30Z first; y (00:45, no zone: UTC) after z (00:40); b's headless line takes b's last time (02:00)
    assert got == [("a", "2026-01-01T01:30:00+01:00 x"), ("a", "2026-01-01T00:45:00 y"),
                   ("b", "rest of b's line"), ("b", "2026-01-01T00:40:00.5Z z")]
    assert after == {"a": T0 + timedelta(minutes=45), "b": T0 + timedelta(minutes=40, seconds=0.5)}


def test_n_0_prints_nothing_of_the_past_only_what_comes_next(tmp_path: Path) -> None:
    run = tmp_path / "run"
    save(run, 1)
    write(run, 1, "node1", f"{ts(0)} 0: old\n{ts(1)} 0: half")
    res = CliRunner().invoke(app, ["logs", str(run), "-n", "0"])
    assert res.exit_code == 0 and res.output == "", res.output
    clock = Script([lambda: write(run, 1, "node1", " done\n"),
                    lambda: (write(run, 1, "node1", f"{ts(2)} 0: new\n"), save(run, 1, RunStatus.DONE))])
    res = invoke(["logs", str(run), "-n", "0", "-f"], clock)
    assert res.exit_code == 0, res.output
    assert res.output.splitlines() == [f"node1: {ts(1)} 0: half done", f"node1: {ts(2)} 0: new"]


def test_follow_waits_for_the_first_segment(tmp_path: Path) -> None:
    run = tmp_path / "run"
    save(run, 0)
    clock = Script([lambda: (save(run, 1), write(run, 1, "node1", f"{ts(0)} 0: hello\n")),
                    lambda: save(run, 1, RunStatus.STOPPED)])
    res = invoke(["logs", str(run), "-f"], clock)
    assert res.exit_code == 0, res.output
    assert res.output.splitlines() == ["== segment 1 (job 1001) ==", f"node1: {ts(0)} 0: hello"]


def test_follow_started_before_the_run_waits_for_its_first_state(tmp_path: Path) -> None:
    """The re-probe (G7): `logs -f` in one pane, then `orchestrator run` in the other: logs said "no run state
    yet" and exited 1 instead of waiting."""
    run = tmp_path / "run"
    clock = Script([lambda: None,  # no state at the first look either
                    lambda: (save(run, 1), write(run, 1, "node1", f"{ts(1)} 0: first line\n")),
                    lambda: save(run, 1, RunStatus.DONE)])
    from tests.conftest import base_config, write_config

    cfg = write_config(tmp_path, base_config(tmp_path))  # its run_dir is `run`, not made yet
    res = invoke(["logs", str(cfg), "-f", "-n", "0"], clock)
    assert res.exit_code == 0, res.output
    assert "waiting for 'orchestrator run'" in res.output and f"node1: {ts(1)} 0: first line" in res.output
    assert not clock.steps
    (tmp_path / "other").mkdir()
    without = CliRunner().invoke(app, ["logs", str(write_config(tmp_path / "other", base_config(tmp_path / "other")))])
    assert without.exit_code == 1 and "no run state yet" in without.output  # without -f: said, not waited for
