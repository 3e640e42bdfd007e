"""The allocation supervisor (orchestrator/agent/allocation.py, issue 14) with an injected popen: no srun, no
Slurm, no sleeping. The fake step processes play the controller's part (write a StepRequest) from inside
their poll(), so every run is single-threaded and deterministic."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.agent import allocation
from orchestrator.agent.allocation import AllocationSupervisor, Host, step_argv
from orchestrator.contract import AllocationPaths, SegmentPaths, StepRecord, StepRequest, read_record, write_record
from orchestrator.model import SegmentSpec

ALLOC = ["node1", "node2", "node3"]
MAX_POLLS = 1000  # a supervisor that never stops polling fails the test instead of hanging it


def make_spec(tmp: Path, index: int = 1, nodes: int = 2, **over: Any) -> SegmentSpec:
    run = tmp / "run"
    fields: dict[str, Any] = dict(
        run_name="t", index=index, job_name=f"t.seg{index:04d}", nodes=nodes, tasks_per_node=1, gpus_per_node=0,
        time_limit_min=60, command=("python", "train.py"), workdir=str(tmp), run_dir=str(run),
        segment_dir=str(SegmentPaths.of(run, index).root), progress_regex=r"iteration\s+(\d+)", spares=1,
        allocation_dir=str(SegmentPaths.of(run, 1).allocation))
    fields.update(over)
    return SegmentSpec(**fields)


class FakeProc:
    """A step's srun: poll() returns `codes` one by one (the last one repeats) and calls `on_poll` first."""

    def __init__(self, codes: list[int | None], on_poll: Callable[[int], None] | None = None,
                 obeys_terminate: bool = True):
        self.codes, self.on_poll, self.obeys = codes, on_poll, obeys_terminate
        self.polls = 0
        self.terminated = self.killed = False
        self.forced: int | None = None

    def poll(self) -> int | None:
        self.polls += 1
        assert self.polls < MAX_POLLS, "the supervisor kept polling a step"
        if self.on_poll is not None:
            self.on_poll(self.polls)
        if self.forced is not None:
            return self.forced
        return self.codes[min(self.polls - 1, len(self.codes) - 1)]

    def terminate(self) -> None:
        self.terminated = True
        if self.obeys:
            self.forced = -signal.SIGTERM

    def kill(self) -> None:
        self.killed, self.forced = True, -signal.SIGKILL

    def wait(self, timeout: float | None = None) -> int:
        assert self.forced is not None
        return self.forced


class Popen:
    """Records every srun the supervisor starts and hands out the prepared processes in order."""

    def __init__(self, *procs: FakeProc):
        self.procs = list(procs)
        self.calls: list[tuple[list[str], dict[str, Any]]] = []

    def __call__(self, argv: list[str], **kw: Any) -> FakeProc:
        self.calls.append((argv, kw))
        assert self.procs, f"an unexpected step was started: {argv}"
        return self.procs.pop(0)

    def nodelists(self) -> list[str]:
        return [next(a for a in argv if a.startswith("--nodelist=")) for argv, _ in self.calls]


VIEW: dict[str, list[str]] = {}  # what Slurm says: the nodes the job holds, and those it declared down


def slurm_says(argv: list[str]) -> str:
    """squeue's and sinfo's answers from VIEW, in their own formats."""
    if argv[0] == "squeue":
        return ",".join(VIEW["held"]) + "\n"
    asked = next(argv[i + 1] for i, a in enumerate(argv) if a == "-n").split(",")
    return "".join(f"{n} {'down' if n in VIEW['down'] else 'alloc'}\n" for n in asked)


@pytest.fixture(autouse=True)
def fast() -> Iterator[dict[str, list[str]]]:
    """A fixed view of the job's nodes, and the process's signal handlers restored afterwards."""
    VIEW.clear()
    VIEW.update(held=list(ALLOC), down=[])
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGUSR2)}
    yield VIEW
    for s, handler in saved.items():
        signal.signal(s, handler)


def supervisor(spec: SegmentSpec, popen: Popen, srun_args: tuple[str, ...] = (), request_wait_s: float = 0.0,
               cls: type[AllocationSupervisor] = AllocationSupervisor,
               read: Callable[[Path, type[StepRequest]], StepRequest | None] = read_record) -> AllocationSupervisor:
    """No waiting (a failed step with no request ends the job at once), Slurm's answers from VIEW."""
    host = Host(popen=popen, query=slurm_says, sleep=lambda s: None, poll_s=0.0, stop_grace_s=0.0,
                request_wait_s=request_wait_s, read=read)
    return cls(spec, srun_args, job_id="555", allocation=list(ALLOC), host=host)


def step_record(spec: SegmentSpec, segment: int) -> StepRecord:
    got = read_record(AllocationPaths(Path(spec.allocation_dir)).step(segment), StepRecord)
    assert got is not None, f"no step record for segment {segment}"
    return got


def ask(tmp: Path, first: SegmentSpec, nodes: list[str], index: int = 2, **over: Any) -> SegmentSpec:
    """What the controller does for a restart: the next spec in its segment's spec.json, then the request."""
    nxt = make_spec(tmp, index=index, **over)
    spec_file = SegmentPaths(Path(nxt.segment_dir)).spec
    spec_file.parent.mkdir(parents=True, exist_ok=True)
    spec_file.write_text(nxt.model_dump_json())
    paths = AllocationPaths(Path(first.allocation_dir))
    paths.root.mkdir(parents=True, exist_ok=True)
    write_record(paths.request,
                 StepRequest(segment=index, nodes=nodes, spec_file=str(spec_file)))
    return nxt


# ---- the srun line ------------------------------------------------------------------------------

def test_step_argv_runs_one_agent_per_node_overlapping_the_dead_step(tmp_path: Path) -> None:
    spec = make_spec(tmp_path)
    argv = step_argv(spec, ["node1", "node3"], tmp_path / "spec.json", ("--mpi=none", "--cpu-bind=none"), python="py")
    assert argv[0] == "srun" and "--overlap" in argv
    for opt in ("--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "--nodelist=node1,node3", "--job-name=t.seg0001"):
        assert opt in argv
    assert not any(a.startswith(("--cpus-per-task", "--gpus-per-node")) for a in argv)
    py = argv.index("py")
    assert argv[py:] == ["py", "-m", "orchestrator.agent.allocation", "step", str(tmp_path / "spec.json")]
    assert argv[py - 2: py] == ["--mpi=none", "--cpu-bind=none"]  # the site's srun options, before the program
    assert max(argv.index(o) for o in ("--overlap", "--nodelist=node1,node3")) < argv.index("--mpi=none")


def test_step_argv_asks_for_cpus_and_gpus_only_when_set(tmp_path: Path) -> None:
    argv = step_argv(make_spec(tmp_path, cpus_per_task=8, gpus_per_node=4), ["node1", "node2"],
                     tmp_path / "spec.json", ())
    assert "--cpus-per-task=8" in argv and "--gpus-per-node=4" in argv
    assert argv.index("--gpus-per-node=4") < argv.index("-m")


# ---- steps and records --------------------------------------------------------------------------

def test_first_step_runs_on_the_first_nodes_and_is_recorded_at_start_and_end(tmp_path: Path) -> None:
    spec = make_spec(tmp_path)
    seen: list[StepRecord] = []
    proc = FakeProc([None, None, 0], on_poll=lambda n: seen.append(step_record(spec, 1)) if n == 1 else None)
    popen = Popen(proc)
    assert supervisor(spec, popen).run() == 0
    assert popen.nodelists() == ["--nodelist=node1,node2"]  # allocation[:nodes]: node3 stays a spare
    assert popen.calls[0][1].get("stdin") == subprocess.DEVNULL
    start = seen[0]
    assert start.started and not start.ended and start.exit_code is None
    assert start.nodes == ["node1", "node2"] and start.allocation == ALLOC and start.job_id == "555"
    end = step_record(spec, 1)
    assert end.ended and end.exit_code == 0 and end.lost_nodes == [] and end.started == start.started
    assert SegmentPaths(Path(spec.segment_dir)).spec.exists()  # the agents of the first step read it there


def test_exit_zero_ends_the_supervisor_at_once(tmp_path: Path) -> None:
    class NoWait(AllocationSupervisor):
        def wait_request(self, after: int) -> None:
            raise AssertionError("a step that exited 0 needs no decision from the controller")

    popen = Popen(FakeProc([0]))
    assert supervisor(make_spec(tmp_path), popen, cls=NoWait).run() == 0 and len(popen.calls) == 1


def test_a_request_for_the_next_segment_stops_the_step_and_starts_the_next(tmp_path: Path) -> None:
    spec = make_spec(tmp_path)
    asked: list[SegmentSpec] = []

    def controller(n: int) -> None:
        if n == 2:
            asked.append(ask(tmp_path, spec, ["node1", "node3"]))

    first = FakeProc([None], on_poll=controller)
    second = FakeProc([None, 0])
    popen = Popen(first, second)
    assert supervisor(spec, popen, ("--mpi=none",)).run() == 0
    assert first.terminated and not first.killed
    assert popen.nodelists() == ["--nodelist=node1,node2", "--nodelist=node1,node3"]
    argv = popen.calls[1][0]
    nxt = asked[0]
    assert "--job-name=t.seg0002" in argv and "--mpi=none" in argv
    assert argv[-1] == str(SegmentPaths(Path(nxt.segment_dir)).spec)
    assert SegmentPaths(Path(nxt.segment_dir)).spec.read_text() == nxt.model_dump_json()  # not overwritten
    old, new = step_record(spec, 1), step_record(spec, 2)
    assert old.ended and "segment 2" in old.note and old.exit_code == -signal.SIGTERM
    assert new.nodes == ["node1", "node3"] and new.ended and new.exit_code == 0 and new.allocation == ALLOC


def test_a_request_for_the_running_segment_is_ignored(tmp_path: Path) -> None:
    spec = make_spec(tmp_path)
    paths = AllocationPaths(Path(spec.allocation_dir))
    paths.root.mkdir(parents=True)
    write_record(paths.request, StepRequest(segment=1, nodes=["node2", "node3"], spec_file="/nonexistent"))
    proc = FakeProc([None, None, None, 0])
    popen = Popen(proc)
    assert supervisor(spec, popen).run() == 0
    assert not proc.terminated and len(popen.calls) == 1


def test_the_request_is_read_again_only_when_the_file_was_replaced(tmp_path: Path) -> None:
    spec = make_spec(tmp_path)
    reads: list[int] = []

    def counted(path: Path, model: type[StepRequest]) -> StepRequest | None:
        reads.append(1)
        return read_record(path, model)

    sup = supervisor(spec, Popen(), read=counted)
    assert sup.pending(1) is None and reads == []  # no file: a failed stat, no read
    ask(tmp_path, spec, ["node1", "node3"], index=2)
    for _ in range(5):
        got = sup.pending(1)
        assert got is not None and got.segment == 2
    assert len(reads) == 1  # polled five times, read once
    ask(tmp_path, spec, ["node1", "node4"], index=3)  # replaced atomically: a new file
    got = sup.pending(2)
    assert got is not None and got.segment == 3 and got.nodes == ["node1", "node4"] and len(reads) == 2


def test_a_failed_step_records_lost_nodes_and_waits_for_the_request(
        tmp_path: Path, fast: dict[str, list[str]]) -> None:
    spec = make_spec(tmp_path)

    def node2_dies(n: int) -> None:
        if n == 2:  # Slurm removed node2 from the --no-kill job and killed the step; the controller decides
            fast["held"] = ["node1", "node3"]
            ask(tmp_path, spec, ["node1", "node3"])

    first = FakeProc([None, 1], on_poll=node2_dies)
    popen = Popen(first, FakeProc([0]))
    assert supervisor(spec, popen, request_wait_s=600.0).run() == 0  # the request is there at the first look
    assert not first.terminated  # it had ended by itself
    rec = step_record(spec, 1)
    assert rec.exit_code == 1 and rec.lost_nodes == ["node2"] and rec.ended and not rec.note
    assert popen.nodelists()[1] == "--nodelist=node1,node3"


def test_a_node_slurm_reports_down_is_lost_too(tmp_path: Path, fast: dict[str, list[str]]) -> None:
    spec = make_spec(tmp_path)
    fast["down"] = ["node1"]
    assert supervisor(spec, Popen(FakeProc([7]))).run() == 7  # no request came: the step's own code
    assert step_record(spec, 1).lost_nodes == ["node1"]


@pytest.mark.parametrize("code", [-signal.SIGKILL, 300])
def test_no_request_after_a_failed_step_ends_with_1_for_codes_out_of_range(tmp_path: Path, code: int) -> None:
    assert supervisor(make_spec(tmp_path), Popen(FakeProc([code]))).run() == 1


@pytest.mark.parametrize(("nodes", "why"), [
    (["node1", "node4"], "node4 is not in the allocation"),
    (["node1"], "one node for a two-node segment"),
    (["node1", "node2", "node3"], "three nodes for a two-node segment"),
    (["node1", "node2"], "node2 was lost: no longer held by the job"),
])
def test_a_request_that_does_not_fit_the_allocation_ends_the_supervisor_with_1(
        tmp_path: Path, fast: dict[str, list[str]], nodes: list[str], why: str) -> None:
    spec = make_spec(tmp_path)
    fast["held"] = ["node1", "node3"]
    ask(tmp_path, spec, nodes)
    first = FakeProc([None])
    popen = Popen(first)  # a second step would fail the test: Popen has no process left for it
    assert supervisor(spec, popen).run() == 1, why
    assert first.terminated and len(popen.calls) == 1
    refused = step_record(spec, 2)  # the controller learns why instead of judging a step with no output
    assert refused.ended and refused.note.startswith("refused:")


def test_a_request_whose_spec_is_for_another_segment_ends_with_1(tmp_path: Path) -> None:
    spec = make_spec(tmp_path)
    nxt = ask(tmp_path, spec, ["node1", "node3"], index=3)
    spec3 = str(SegmentPaths(Path(nxt.segment_dir)).spec)
    write_record(AllocationPaths(Path(spec.allocation_dir)).request,  # asks for 2, hands the spec of 3
                 StepRequest(segment=2, nodes=["node1", "node3"], spec_file=spec3))
    popen = Popen(FakeProc([None]))
    assert supervisor(spec, popen).run() == 1 and len(popen.calls) == 1


def test_a_request_with_an_unreadable_spec_ends_with_1(tmp_path: Path) -> None:
    spec = make_spec(tmp_path)
    paths = AllocationPaths(Path(spec.allocation_dir))
    paths.root.mkdir(parents=True)
    write_record(paths.request, StepRequest(segment=2, nodes=["node1", "node3"], spec_file=str(tmp_path / "nope")))
    popen = Popen(FakeProc([None]))
    assert supervisor(spec, popen).run() == 1 and len(popen.calls) == 1


def test_a_step_that_ignores_sigterm_is_killed(tmp_path: Path) -> None:
    spec = make_spec(tmp_path)
    def controller(n: int) -> None:
        if n == 1:
            ask(tmp_path, spec, ["node1", "node3"])

    first = FakeProc([None], on_poll=controller, obeys_terminate=False)
    popen = Popen(first, FakeProc([0]))
    assert supervisor(spec, popen).run() == 0
    assert first.terminated and first.killed and step_record(spec, 1).exit_code == -signal.SIGKILL


def test_sigterm_stops_the_step_and_ends_the_supervisor(tmp_path: Path) -> None:
    spec = make_spec(tmp_path)
    holder: list[AllocationSupervisor] = []
    first = FakeProc([None], on_poll=lambda n: holder[0]._on_signal(signal.SIGTERM, None) if n == 2 else None)
    popen = Popen(first)
    sup = supervisor(spec, popen)
    holder.append(sup)
    assert sup.run() == 0
    assert first.terminated and "signal" in step_record(spec, 1).note and len(popen.calls) == 1


def test_allocation_and_job_id_come_from_slurm_s_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_JOB_ID", "777")
    monkeypatch.setenv("SLURM_JOB_NODELIST", "gpu[01-03]")
    sup = AllocationSupervisor(make_spec(tmp_path, allocation_dir=""), host=Host(popen=Popen()))
    assert sup.job_id == "777" and sup.allocation == ["gpu01", "gpu02", "gpu03"]
    assert sup.paths.root == SegmentPaths.of(tmp_path / "run", 1).allocation  # default: under the segment


def test_the_first_step_runs_the_submitted_spec_not_one_left_by_an_earlier_job(tmp_path: Path) -> None:
    spec = make_spec(tmp_path, resume_from="/ckpt/iter_0001000")
    stale = SegmentPaths(Path(spec.segment_dir)).spec
    stale.parent.mkdir(parents=True, exist_ok=True)
    stale.write_text(spec.model_copy(update={"resume_from": "/ckpt/iter_0000500"}).model_dump_json())
    assert supervisor(spec, Popen(FakeProc([0]))).run() == 0
    assert SegmentSpec.model_validate_json(stale.read_text()).resume_from == "/ckpt/iter_0001000"
    assert stale.stat().st_mode & 0o777 == 0o600  # it holds the config's environment


@pytest.mark.parametrize("state,down", [("down*", True), ("fail", True), ("idle*", False), ("mix*", False),
                                        ("alloc", False)])
def test_only_nodes_slurm_declared_down_count_as_lost(state: str, down: bool) -> None:
    sinfo = f"node2 {state}\nnode1 alloc\n"  # sinfo's answer, played
    assert allocation.down_nodes(["node1", "node2"], lambda argv: sinfo) == (["node2"] if down else [])
