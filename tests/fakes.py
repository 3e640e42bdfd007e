"""A fake cluster implementing the Backend protocol on a FakeClock.

Jobs are allocated like Slurm (lowest free nodes, honouring --exclude). A running job "trains" one
iteration per `step_s` of fake time: it appends Megatron-style progress lines to every node's log,
writes Megatron checkpoints, and plays the faults configured per node. Nothing sleeps for real.

A segment with spares (`spec.spares > 0`) allocates `nodes + spares` like a --no-kill job and plays the
allocation supervisor (orchestrator/agent/allocation.py): the first `spec.nodes` nodes run the step, a
StepRecord is written when a step starts and when it ends, and a StepRequest for a later segment stops
the step and starts the next one in the same job (same job id, no queue). `crash(node)` takes a node out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from orchestrator.backends.base import BackendDefaults, BackendError, SchedulerUnavailable
from orchestrator.clock import FakeClock
from orchestrator.contract import (
    AllocationPaths,
    ExitRecord,
    SegmentPaths,
    StepEnd,
    StepRecord,
    StepRequest,
    read_record,
    start_line,
    write_record,
)
from orchestrator.model import JobRef, JobState, JobStatus, SegmentSpec

ECC_LINE = ("RuntimeError: transform: failed to synchronize: cudaErrorECCUncorrectable: "
            "uncorrectable ECC error encountered")
OOM_LINE = "RuntimeError: CUDA error: out of memory"
NCCL_LINE = ("[Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, "
             "Timeout(ms)=600000) ran for 600109 milliseconds before timing out.")
STEP_KILLED_EXIT = 1  # srun's exit code when Slurm killed the step because one of its nodes failed


@dataclass
class Fault:
    # ecc | oom_startup | bug | nan | hang | segfault | ft_stop (nan, hang, segfault: once unless sticky)
    # | nanloss, spike: from `at` on the ranks print a NaN loss or one nine times the usual and train on (once
    # unless sticky: the first job that reaches `at`)
    kind: str
    at: int = 0
    sticky: bool = True


@dataclass
class FakeJob:
    ref: JobRef
    spec: SegmentSpec  # the running step's spec: the submitted one, or the one a StepRequest asked for
    nodes: list[str]  # the step's nodes (every node of a job without spares)
    started: datetime  # when the step started
    state: JobState = JobState.RUNNING
    iteration: int = 0
    exited: dict[str, int] = field(default_factory=dict)
    stalled: bool = False
    allocation: list[str] = field(default_factory=list)  # every node allocated, spares included (batch host first)
    held: list[str] = field(default_factory=list)  # the nodes the job holds now (a crashed node leaves it)
    submitted: SegmentSpec | None = None  # the spec the job was submitted with (its time limit, allocation_dir)
    job_started: datetime | None = None
    steps: list[tuple[int, list[str]]] = field(default_factory=list)  # (segment, nodes) per step, like sacct
    step_record: StepRecord | None = None  # the running (or last) step's record, spares only
    waiting_since: datetime | None = None  # the step ended and the supervisor waits for the controller

    @property
    def with_spares(self) -> bool:
        return self.submitted is not None and bool(self.submitted.allocation_dir)


class FakeCluster(BackendDefaults):
    name = "fake"

    def __init__(self, clock: FakeClock, nodes: list[str], target: int, ckpt_dir: Path, step_s: float = 1.0,
                 ckpt_every: int = 10, faults: dict[str, Fault] | None = None):
        self.clock, self.node_names, self.target, self.ckpt_dir = clock, nodes, target, Path(ckpt_dir)
        self.step_s, self.ckpt_every = step_s, ckpt_every
        self.faults = faults or {}
        self.loss_job: str | None = None  # the job a once-only nanloss/spike fault fired in
        self.corrupt: set[int] = set()  # checkpoints (by iteration) that fail to load
        self.jobs: dict[str, FakeJob] = {}
        self.submitted: list[SegmentSpec] = []
        self.drained: list[tuple[str, str]] = []  # drain(node, reason) calls, as scontrol would get them
        self.polls = 0
        self.unavailable_until: datetime | None = None
        self.down: set[str] = set()  # crashed nodes: no new job gets them
        self.admin_drained: set[str] = set()  # drained by an admin (sinfo: drain/drng): no new job gets them
        self.drain_reasons: dict[str, str] = {}  # their reasons, as sinfo's %E shows them
        self.sinfo_fails = False  # sinfo does not answer: the usable nodes are unknown
        self.request_wait_s = 300.0  # the supervisor's REQUEST_WAIT_S: a failed step with no request ends the job
        self.rejected: list[str] = []  # requests the supervisor refused (the job then failed)
        self.polled: list[JobRef] = []  # every ref the controller polled with, in order
        clock.on_advance.append(self._tick)

    # ---- Backend protocol ------------------------------------------------------------------
    def nodes(self) -> list[str]:
        return list(self.node_names)

    def usable_nodes(self) -> list[str] | None:
        if self.sinfo_fails:
            return None
        return [n for n in self.node_names if n not in self.down and n not in self.admin_drained]

    def drained_reasons(self, nodes: frozenset[str]) -> dict[str, str] | None:
        if self.sinfo_fails:
            return None
        return {n: self.drain_reasons.get(n, "drained") for n in self.admin_drained if n in nodes}

    def render(self, spec: SegmentSpec) -> str:
        return f"fake submit {spec.job_name} exclude={spec.exclude_hostlist}"

    def submit(self, spec: SegmentSpec) -> JobRef:
        free = [n for n in self.node_names
                if n not in spec.exclude and n not in self.down and n not in self.admin_drained]
        if len(free) < spec.nodes + spec.spares:
            raise BackendError("Requested node configuration is not available")
        self.submitted.append(spec)
        ref = JobRef(job_id=str(100 + len(self.submitted)), submitted_at=self.clock.now(), backend=self.name)
        alloc = free[: spec.nodes + spec.spares]
        job = FakeJob(ref, spec, alloc[: spec.nodes], self.clock.now(), iteration=spec.start_iteration,
                      allocation=list(alloc), held=list(alloc), submitted=spec, job_started=self.clock.now())
        self.jobs[ref.job_id] = job
        self._start_step(job)
        return ref

    def poll(self, refs: list[JobRef]) -> dict[str, JobStatus]:
        self.polls += 1
        if self.unavailable_until and self.clock.now() < self.unavailable_until:
            raise SchedulerUnavailable("slurm_load_jobs error: Unable to contact slurm controller")
        self.polled.extend(refs)
        out = {}
        for r in refs:
            j = self.jobs.get(r.job_id)
            out[r.job_id] = JobStatus(state=j.state, nodes=tuple(j.held)) if j else JobStatus(state=JobState.UNKNOWN)
        return out

    def drain(self, node: str, reason: str) -> None:
        self.drained.append((node, reason))

    def cancel(self, ref: JobRef) -> None:
        j = self.jobs[ref.job_id]
        if not j.state.terminal:
            j.state = JobState.CANCELLED
            if j.with_spares:  # scancel: the supervisor gets SIGTERM and stops the step
                self._end_step(j, None, note="stopped by a signal", end=StepEnd.SIGNALLED)

    def find_jobs(self, job_name: str) -> list[JobRef]:
        return [j.ref for j in self.jobs.values()
                if (j.submitted or j.spec).job_name == job_name and not j.state.terminal]

    # ---- faults from outside the training ----------------------------------------------------
    def crash(self, node: str, batch_host_keeps_job: bool = False) -> None:
        """The node dies. A job without spares, or whose batch host it was, ends NODE_FAIL; a --no-kill job with
        spares loses the node (it leaves the job's node list) and, if the step used it, Slurm kills the step:
        its StepRecord ends with lost_nodes=[node] while the job keeps running. `batch_host_keeps_job` plays what
        Slurm 22.05 does when a --no-kill job's batch host fails: the node leaves the job, the batch step and the
        training step die with it (no supervisor is left to write a record), and the job stays RUNNING."""
        self.down.add(node)
        for job in self.jobs.values():
            if job.state.terminal or node not in job.held:
                continue
            if job.with_spares and node == job.allocation[0] and batch_host_keeps_job:
                job.held.remove(node)
                job.stalled = True  # the step is gone: nothing trains, nothing writes a record
                continue
            if not job.with_spares or node == job.allocation[0]:
                job.state = JobState.NODE_FAIL
                continue
            job.held.remove(node)
            if node in job.nodes and job.waiting_since is None:
                self._end_step(job, STEP_KILLED_EXIT, lost=[node])

    def crash_batch_host(self, job_id: str) -> None:
        self.crash(self.jobs[job_id].allocation[0])

    # ---- the allocation supervisor -------------------------------------------------------------
    def _alloc_paths(self, job: FakeJob) -> AllocationPaths:
        assert job.submitted is not None
        return AllocationPaths(Path(job.submitted.allocation_dir))

    def _start_step(self, job: FakeJob) -> None:
        spec = job.spec
        job.steps.append((spec.index, list(job.nodes)))
        if job.with_spares:
            job.step_record = StepRecord(segment=spec.index, job_id=job.ref.job_id, nodes=list(job.nodes),
                                         allocation=list(job.allocation), started=self.clock.now().isoformat())
            paths = self._alloc_paths(job)
            paths.root.mkdir(parents=True, exist_ok=True)
            write_record(paths.step(spec.index), job.step_record)
        for rank, node in enumerate(job.nodes):
            self._log(job, node, "agent: " + start_line(spec.index, job.ref.job_id, node, rank, spec.resume_from))
            if spec.start_iteration in self.corrupt:
                self._log(job, node, f"{rank}: RuntimeError: PytorchStreamReader failed reading zip archive: "
                                     "failed finding central directory")
                self._exit(job, node, 1)
            fault = self.faults.get(node)
            if fault and (fault.kind == "oom_startup" or (fault.kind == "ecc" and spec.start_iteration >= fault.at
                                                          and fault.sticky)):
                self._log(job, node, f"{rank}: {OOM_LINE}")
                self._exit(job, node, 1)
        if spec.start_iteration in self.corrupt:
            self._finish(job, JobState.FAILED)

    def _end_step(self, job: FakeJob, code: int | None, lost: list[str] | None = None, note: str = "",
                  end: StepEnd = StepEnd.EXITED) -> None:
        if job.step_record is None or job.step_record.ended:
            return
        job.step_record = job.step_record.model_copy(update={
            "ended": self.clock.now().isoformat(), "exit_code": code, "lost_nodes": lost or [], "note": note,
            "end": end})
        write_record(self._alloc_paths(job).step(job.step_record.segment), job.step_record)
        job.waiting_since = self.clock.now()

    def _finish(self, job: FakeJob, state: JobState) -> None:
        """The training ended on every node of the step: a job without spares ends; with spares the supervisor
        records the step's end and ends the job on success, else waits for the controller's request."""
        if not job.with_spares:
            job.state = state
            return
        code = 0 if state == JobState.COMPLETED else next((c for c in job.exited.values() if c), 1)
        self._end_step(job, code)
        if code == 0:
            job.state = JobState.COMPLETED

    def _take_request(self, job: FakeJob) -> bool:
        """A request for a later segment: stop the step, start the next one in the job; True if one was taken."""
        req = read_record(self._alloc_paths(job).request, StepRequest)
        if req is None or req.segment <= job.spec.index:
            return False
        self._end_step(job, None, note=f"stopped: the controller started segment {req.segment}",
                       end=StepEnd.SUPERSEDED)
        try:
            spec = SegmentSpec.model_validate_json(Path(req.spec_file).read_text())
        except (OSError, ValueError) as exc:
            return self._reject(job, f"unreadable spec {req.spec_file}: {exc}")
        bad = [n for n in req.nodes if n not in job.held]
        if bad or len(req.nodes) != spec.nodes or spec.index != req.segment:
            return self._reject(job, f"segment {req.segment}: nodes {','.join(bad or req.nodes)} do not fit")
        job.spec, job.nodes, job.started, job.iteration = spec, list(req.nodes), self.clock.now(), spec.start_iteration
        job.exited, job.stalled, job.waiting_since = {}, False, None
        self._start_step(job)
        return True

    def _reject(self, job: FakeJob, why: str) -> bool:
        self.rejected.append(why)
        job.state = JobState.FAILED  # the supervisor exits 1: the job ends
        return True

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
        assert job.submitted is not None and job.job_started is not None
        if (now - job.job_started).total_seconds() > job.submitted.time_limit_min * 60:
            job.state = JobState.TIMEOUT
            return
        if job.with_spares and (self._take_request(job) or job.waiting_since is not None):
            if job.waiting_since and (now - job.waiting_since).total_seconds() > self.request_wait_s:
                job.state = JobState.FAILED  # no decision from the controller: the supervisor ends the job
            return
        if job.exited and any(c != 0 for c in job.exited.values()) or job.stalled:
            return  # peers wait in the collective for the failed rank
        want = min(self.target, job.spec.start_iteration + int((now - job.started).total_seconds() / self.step_s))
        while job.iteration < want:
            it = job.iteration + 1
            for rank, node in enumerate(job.nodes):
                f = self.faults.get(node) or self.faults.get("all")
                if f and f.at == it and self._fire(job, node, rank, f):
                    return
            job.iteration = it
            for rank, node in enumerate(job.nodes):
                loss = self._loss(job, it, node)
                self._log(job, node, f"{rank}:  iteration {it:8d}/{self.target:8d} | lm loss: {loss} |")
            if it % self.ckpt_every == 0 or it == self.target:
                self._checkpoint(job, it)
        if job.iteration >= self.target:
            for node in job.nodes:
                self._exit(job, node, 0)
            self._finish(job, JobState.COMPLETED)

    def _loss(self, job: FakeJob, it: int, node: str) -> str:
        """The loss a node's rank prints: 1.0 (+- 1%), or the nanloss/spike fault's from its iteration on."""
        f = self.faults.get(node) if self.faults.get(node) is not None else self.faults.get("all")
        usual = f"{1.0 + 0.01 * ((it * 7) % 3 - 1):.2f}"
        if f is None or f.kind not in ("nanloss", "spike") or it < f.at:
            return usual
        if not f.sticky and self.loss_job not in (None, job.ref.job_id):
            return usual
        self.loss_job = job.ref.job_id
        return "nan" if f.kind == "nanloss" else "9.0"

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
            self._finish(job, JobState.FAILED)
            return True
        if f.kind == "nan":  # a framework's own check: every rank raises at the same step
            for r, n in enumerate(job.nodes):
                self._log(job, n, f"{r}: FloatingPointError: Loss is NaN at iteration {f.at}")
                self._exit(job, n, 1)
            if not f.sticky:
                self.faults.pop(node, None)
                self.faults.pop("all", None)
            self._finish(job, JobState.FAILED)
            return True
        if f.kind == "ft_stop":  # NVRx ft_launcher gave up inside the job: every launcher exits 93
            for r, n in enumerate(job.nodes):
                self._log(job, n, f"{r}: [default] Progress tracker detected no progress across restarts. No more "
                                  "restarts will be attempted.")
                self._log(job, n, f"{r}: [NVRx] [ERROR] NVRx decided the job must not be restarted (no_progress): "
                                  "Progress tracker detected no progress across restarts.. Agent's exit code = 93")
                self._exit(job, n, 93)
            self._finish(job, JobState.FAILED)
            return True
        if f.kind == "segfault":
            self._log(job, node, f"{rank}: Fatal Python error: Segmentation fault")
            self._exit(job, node, 139)
            if not f.sticky:  # a one-off crash: the next job runs clean
                self.faults.pop(node, None)
            return True
        if f.kind == "hang":
            job.stalled = True
            if not f.sticky:
                self.faults.pop(node, None)
            return True
        return False
