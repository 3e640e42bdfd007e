"""The controller's side of an allocation with spare nodes: read the supervisor's step records, and
after a verdict either restart the training inside the job (write the next spec and a StepRequest)
or cancel the job so that a new segment follows. Decisions are the pure functions of `injob`; this
carries them out.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Protocol

from loguru import logger

from orchestrator import failpoints
from orchestrator.backends.base import Backend
from orchestrator.clock import Clock
from orchestrator.contract import (
    AllocationPaths,
    SegmentPaths,
    StepEnd,
    StepRecord,
    StepRequest,
    read_record,
    write_private,
    write_record,
)
from orchestrator.loop.advance import Transition
from orchestrator.loop.conclude import Outcome
from orchestrator.loop.effects import Alert, Cancel
from orchestrator.loop.injob import (
    AfterStep,
    after_step,
    free_spares,
    job_submitted_at,
    step_status,
)
from orchestrator.loop.observations import (
    AllocationKnown,
    CheckpointSeen,
    JobEnding,
    Observation,
    RestartedInJob,
)
from orchestrator.loop.runner import EffectRunner
from orchestrator.loop.submission import FilesystemStall, Preparer, merged_blacklist, unloadable
from orchestrator.model import JobRef, JobState, JobStatus, SegmentSpec
from orchestrator.settings import Settings
from orchestrator.state import RunState, SegmentRecord
from orchestrator.timeout import call_with_timeout


class Host(Protocol):
    """What the steps executor needs from the controller."""
    s: Settings
    backend: Backend
    clock: Clock
    effects: EffectRunner
    python: str
    state: RunState
    prepare: Preparer

    def advance(self, obs: Observation) -> Transition: ...

    def save(self, state: RunState | None = None) -> None: ...

    def new_watch(self, seg: SegmentRecord, reattached: bool = False) -> None: ...


def _ref(state: RunState, seg: SegmentRecord) -> JobRef:
    at = job_submitted_at(state, seg)
    assert seg.job_id and at
    return JobRef(job_id=seg.job_id, submitted_at=at, backend=seg.backend)


class Steps:
    """Owns the controller's I/O with one allocation supervisor: step records in, specs and step
    requests out, and the job's current node list (a failed node leaves a --no-kill job)."""

    # a cancelled segment is judged at once; its step stops when the next one starts
    cancel_ends_segment = True

    def __init__(self, host: Host):
        self.host = host
        self.held: list[str] = []
        self.job_state: JobStatus | None = None
        self.record: StepRecord | None = None
        self._ensured: set[int] = set()

    def paths(self, seg: SegmentRecord) -> AllocationPaths:
        return AllocationPaths(Path(seg.allocation_dir))

    def _read(self, seg: SegmentRecord) -> StepRecord | None:
        done, rec = call_with_timeout(lambda: read_record(self.paths(seg).step(seg.index),
                                                          StepRecord),
                                      self.host.s.watch.read_timeout_s)
        # the shared filesystem did not answer: keep what was read last for this segment
        if not done:
            return (self.record if self.record is not None and self.record.segment == seg.index
                    else None)
        if not isinstance(rec, StepRecord) or (rec.job_id and seg.job_id
                                               and rec.job_id != seg.job_id):
            return None  # none yet, or an earlier job's record of a reused segment number
        return rec

    def observe(self, seg: SegmentRecord, job: JobStatus) -> JobStatus:
        """The segment's status from the job's and its step record; remembers the nodes the job
        holds."""
        if seg.in_job_of is not None and seg.index not in self._ensured:
            self._ensure_request(seg)
        self.job_state = job
        rec = self.record = self._read(seg)
        if rec is not None and rec.allocation and not seg.allocation:
            self.host.advance(AllocationKnown(tuple(rec.allocation)))
        # only RUNNING: sacct lists a job that is starting as PENDING on its batch host alone
        if job.nodes and job.nodes_final and job.state == JobState.RUNNING:
            self.held = list(job.nodes)
            # Slurm took a node of the running step out of the job: the step is dead even if no
            # record says so (the batch host's failure kills the supervisor with it, and Slurm keeps
            # the job on the other nodes)
            if (rec is not None and not rec.ended
                and (gone := [n for n in rec.nodes if n not in job.nodes])):
                rec = self.record = rec.model_copy(update={"ended": "lost", "lost_nodes": gone,
                                                                 "end": StepEnd.LOST})
        if rec is None and not job.state.terminal:
            # the step has not started: no node of it is known yet
            return job.model_copy(update={"nodes": ()})
        return step_status(job, rec)

    @property
    def lost(self) -> list[str]:
        return list(self.record.lost_nodes) if self.record else []

    def after(self, out: Outcome, now: datetime) -> None:
        """After a segment's verdict: restart inside the job, or cancel the job (a new segment
        follows)."""
        state, seg = self.host.state, self.host.state.current
        assert seg is not None
        job_ended = self.job_state is None or self.job_state.state.terminal
        rec, held = self.record, self.held or seg.allocation
        step_ok = rec is not None and bool(rec.ended) and rec.exit_code == 0
        spares = self.free(seg, now)
        nxt = after_step(state, seg, out.verdict, out.decision, spares, job_ended, step_ok, held)
        log = logger.bind(run=state.run, segment=seg.index, job=seg.job_id)
        if nxt.cancel_job:
            log.info("ending job {}: {}", seg.job_id, nxt.cancel_job)
            self._end_job(seg, nxt.cancel_job)
        elif nxt.restart.ok:
            self.restart(seg, nxt, spares, now)

    def free(self, seg: SegmentRecord, now: datetime) -> list[str]:
        """The spares of the segment's job free now: held, not lost, not excluded by any run's
        blacklist nor blamed in this job."""
        state = self.host.state
        bl = merged_blacklist(self.host.s, state.blacklist, (state.run, state.created_at),
                              now).excluding(now, self.host.s.policy.strike_threshold)
        banned = {e.node for e in bl} | state.blamed_in_job(seg)  # other runs' blacklist included
        # a spare an admin (or a health check) drained, or Slurm set down, is never promoted; when
        # sinfo does not answer, that is unknown: the spares stay as they were
        up = self.host.backend.usable_nodes()
        if up is not None:
            out = sorted(n for n in seg.allocation if n not in seg.nodes and n not in up)
            if out:
                logger.bind(run=state.run, segment=seg.index, job=seg.job_id).warning(
                    "spare node(s) {} drained or down in Slurm: not promoted", ",".join(out))
            banned |= set(out)
        return free_spares(seg, self.held or seg.allocation, self.lost, banned)

    def _end_job(self, seg: SegmentRecord, why: str) -> None:
        """End the segment's job (a new segment follows); the segment's reason says why not in the
        job."""
        self.host.advance(JobEnding(why))
        self.host.effects.one(Cancel(_ref(self.host.state, seg), why))

    def restart(self, seg: SegmentRecord, nxt: AfterStep, spares: list[str], now: datetime) -> None:
        h = self.host
        try:
            prepared = h.prepare(h.s, h.state, h.backend, now, h.python)
        except FilesystemStall as exc:
            self._end_job(seg, f"no restart inside the job: {exc}")
            return
        if unloadable(h.state, prepared.spec):
            self._end_job(seg, "no restart inside the job: no loadable checkpoint")
            return
        left = [n for n in spares if n not in nxt.restart.promote]
        spec = prepared.spec.model_copy(update={"allocation_dir": seg.allocation_dir,
                                                "spares": len(left)})
        if not self._io(lambda: self._write_spec(spec)):
            self._end_job(seg, "no restart inside the job: the run directory did not answer")
            return
        failpoints.hit("after_spec_write")
        if prepared.checkpoint:
            h.advance(CheckpointSeen(prepared.checkpoint))
        h.advance(RestartedInJob(spec, nxt.nodes, nxt.restart.drop, nxt.restart.promote,
                                 prepared.blacklist))
        h.save()  # the record first: a crash before the request is written is repaired on restart
        state, new = h.state, h.state.segments[-1]
        self._request(new)
        swap = ", ".join(f"{a} -> {b}" for a,
                         b in zip(nxt.restart.drop, nxt.restart.promote, strict=True))
        logger.bind(run=state.run, segment=new.index, job=new.job_id).warning(
            "restart inside job {} on {} ({}), resume_from={}, {} spare(s) left", new.job_id,
            ",".join(new.nodes), swap, spec.resume_from or "-", len(left))
        h.effects.one(Alert(f"{state.run}: segment {new.index} restarted inside job {new.job_id}",
                            f"{swap}; resume from {spec.resume_from or 'scratch'}; {len(left)} "
                            "spare(s) left"))
        h.new_watch(new)

    def _io(self, fn: Callable[[], object]) -> bool:
        """Run a write on the shared filesystem in a worker with the read timeout; True if it
        returned."""
        done, result = call_with_timeout(fn, self.host.s.watch.read_timeout_s)
        if done and isinstance(result, OSError):
            logger.warning("allocation file: {}", result)
        return done and not isinstance(result, BaseException)

    def _write_spec(self, spec: SegmentSpec) -> None:
        path = SegmentPaths.of(spec.run_dir, spec.index).spec
        path.parent.mkdir(parents=True, exist_ok=True)
        write_private(path, spec.model_dump_json())

    def _request(self, seg: SegmentRecord) -> None:
        """Ask the supervisor for the segment's step; until that write lands, every poll asks
        again."""
        spec_file = SegmentPaths.of(self.host.s.run_dir, seg.index).spec
        req = StepRequest(segment=seg.index, nodes=list(seg.nodes), spec_file=str(spec_file),
                          time=self.host.clock.now().isoformat())
        if self._io(lambda: write_record(self.paths(seg).request, req)):
            failpoints.hit("after_step_request")
            self._ensured.add(seg.index)

    def _ensure_request(self, seg: SegmentRecord) -> None:
        """After a controller restart: a restart recorded in the state whose request never reached
        the supervisor is asked for again (the spec was written before the record)."""
        done, req = call_with_timeout(lambda: read_record(self.paths(seg).request, StepRequest),
                                      self.host.s.watch.read_timeout_s)
        if not done:
            return
        if not isinstance(req, StepRequest) or req.segment < seg.index:
            self._request(seg)
        else:
            self._ensured.add(seg.index)
