"""A fake cluster implementing the Backend protocol on a FakeClock.

Jobs are allocated like Slurm (lowest free nodes, honouring --exclude). A running job "trains" one
iteration per `step_s` of fake time: it appends Megatron-style progress lines to every node's log,
writes Megatron checkpoints, and plays the faults configured per node. Nothing sleeps for real.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from orchestrator.backends.base import BackendError, SchedulerUnavailable
from orchestrator.clock import FakeClock
from orchestrator.contract import ExitRecord, SegmentPaths, start_line, write_record
from orchestrator.model import JobRef, JobState, JobStatus, SegmentSpec

ECC_LINE = ("RuntimeError: transform: failed to synchronize: cudaErrorECCUncorrectable: "
            "uncorrectable ECC error encountered")
OOM_LINE = "RuntimeError: CUDA error: out of memory"
NCCL_LINE = ("[Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, "
             "Timeout(ms)=600000) ran for 600109 milliseconds before timing out.")


@dataclass
class Fault:
    kind: str  # ecc | oom_startup | bug | hang | segfault
    at: int = 0
    sticky: bool = True


@dataclass
class FakeJob:
    ref: JobRef
    spec: SegmentSpec
    nodes: list[str]
    started: datetime
    state: JobState = JobState.RUNNING
    iteration: int = 0
    exited: dict[str, int] = field(default_factory=dict)
    stalled: bool = False


class FakeCluster:
    name = "fake"

    def __init__(self, clock: FakeClock, nodes: list[str], target: int, ckpt_dir: Path, step_s: float = 1.0,
                 ckpt_every: int = 10, faults: dict[str, Fault] | None = None):
        self.clock, self.node_names, self.target, self.ckpt_dir = clock, nodes, target, Path(ckpt_dir)
        self.step_s, self.ckpt_every = step_s, ckpt_every
        self.faults = faults or {}
        self.corrupt: set[int] = set()  # checkpoints (by iteration) that fail to load
        self.jobs: dict[str, FakeJob] = {}
        self.submitted: list[SegmentSpec] = []
        self.polls = 0
        self.unavailable_until: datetime | None = None
        clock.on_advance.append(self._tick)

    # ---- Backend protocol ------------------------------------------------------------------
    def nodes(self) -> list[str]:
        return list(self.node_names)

    def render(self, spec: SegmentSpec) -> str:
        return f"fake submit {spec.job_name} exclude={spec.exclude_hostlist}"

    def submit(self, spec: SegmentSpec) -> JobRef:
        free = [n for n in self.node_names if n not in spec.exclude]
        if len(free) < spec.nodes:
            raise BackendError("Requested node configuration is not available")
        self.submitted.append(spec)
        ref = JobRef(job_id=str(100 + len(self.submitted)), submitted_at=self.clock.now(), backend=self.name)
        job = FakeJob(ref, spec, free[: spec.nodes], self.clock.now(), iteration=spec.start_iteration)
        self.jobs[ref.job_id] = job
        for rank, node in enumerate(job.nodes):
            self._log(job, node, "agent: " + start_line(spec.index, ref.job_id, node, rank, spec.resume_from))
            if spec.start_iteration in self.corrupt:
                self._log(job, node, f"{rank}: RuntimeError: PytorchStreamReader failed reading zip archive: "
                                     "failed finding central directory")
                self._exit(job, node, 1)
                job.state = JobState.FAILED
            fault = self.faults.get(node)
            if fault and (fault.kind == "oom_startup" or (fault.kind == "ecc" and spec.start_iteration >= fault.at
                                                          and fault.sticky)):
                self._log(job, node, f"{rank}: {OOM_LINE}")
                self._exit(job, node, 1)
        return ref

    def poll(self, refs: list[JobRef]) -> dict[str, JobStatus]:
        self.polls += 1
        if self.unavailable_until and self.clock.now() < self.unavailable_until:
            raise SchedulerUnavailable("slurm_load_jobs error: Unable to contact slurm controller")
        out = {}
        for r in refs:
            j = self.jobs.get(r.job_id)
            out[r.job_id] = JobStatus(state=j.state, nodes=tuple(j.nodes)) if j else JobStatus(state=JobState.UNKNOWN)
        return out

    def cancel(self, ref: JobRef) -> None:
        j = self.jobs[ref.job_id]
        if not j.state.terminal:
            j.state = JobState.CANCELLED

    def find_jobs(self, job_name: str) -> list[JobRef]:
        return [j.ref for j in self.jobs.values() if j.spec.job_name == job_name and not j.state.terminal]

    # ---- the simulated training ------------------------------------------------------------
    def _log(self, job: FakeJob, node: str, text: str) -> None:
        paths = SegmentPaths(Path(job.spec.segment_dir))
        paths.logs.mkdir(parents=True, exist_ok=True)
        with paths.log(node).open("a") as fh:
            fh.write(f"{self.clock.now().isoformat()} {text}\n")

    def _exit(self, job: FakeJob, node: str, code: int) -> None:
        job.exited[node] = code
        paths = SegmentPaths(Path(job.spec.segment_dir))
        paths.nodes.mkdir(parents=True, exist_ok=True)
        write_record(paths.exit(node), ExitRecord(node=node, exit_code=code))

    def _checkpoint(self, job: FakeJob, it: int) -> None:
        root = self.ckpt_dir
        d = root / f"iter_{it:07d}" / "mp_rank_00"
        d.mkdir(parents=True, exist_ok=True)
        (d / "model_optim_rng.pt").write_text(str(it))
        (root / "latest_checkpointed_iteration.txt").write_text(str(it))

    def _tick(self, now: datetime) -> None:
        for job in self.jobs.values():
            if job.state == JobState.RUNNING:
                self._advance(job, now)

    def _advance(self, job: FakeJob, now: datetime) -> None:
        elapsed = (now - job.started).total_seconds()
        if elapsed > job.spec.time_limit_min * 60:
            job.state = JobState.TIMEOUT
            return
        if job.exited and any(c != 0 for c in job.exited.values()) or job.stalled:
            return  # peers wait in the collective for the failed rank
        want = min(self.target, job.spec.start_iteration + int(elapsed / self.step_s))
        while job.iteration < want:
            it = job.iteration + 1
            for rank, node in enumerate(job.nodes):
                f = self.faults.get(node) or self.faults.get("all")
                if f and f.at == it and self._fire(job, node, rank, f):
                    return
            job.iteration = it
            for node in job.nodes:
                self._log(job, node, f"{job.nodes.index(node)}:  iteration {it:8d}/{self.target:8d} | lm loss: 1.0 |")
            if it % self.ckpt_every == 0 or it == self.target:
                self._checkpoint(job, it)
        if job.iteration >= self.target:
            for node in job.nodes:
                self._exit(job, node, 0)
            job.state = JobState.COMPLETED

    def _fire(self, job: FakeJob, node: str, rank: int, f: Fault) -> bool:
        if f.kind == "ecc":
            self._log(job, node, f"{rank}: {ECC_LINE}")
            self._exit(job, node, 134)
            for r, peer in enumerate(job.nodes):
                if peer != node:
                    self._log(job, peer, f"{r}: " + NCCL_LINE.format(r=r))
            return True
        if f.kind == "bug":
            for r, n in enumerate(job.nodes):
                self._log(job, n, f"{r}: Traceback (most recent call last):")
                self._log(job, n, f"{r}: ValueError: could not broadcast input array from shape (8,32)")
                self._exit(job, n, 1)
            job.state = JobState.FAILED
            return True
        if f.kind == "segfault":
            self._log(job, node, f"{rank}: Fatal Python error: Segmentation fault")
            self._exit(job, node, 139)
            return True
        if f.kind == "hang":
            job.stalled = True
            if not f.sticky:
                self.faults.pop(node, None)
            return True
        return False
