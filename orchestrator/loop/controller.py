"""The only loop with side effects: observe -> `advance` (pure) -> save -> carry out the effects.

Owns the order of steps and the I/O between them: polling the backend, feeding the segment watcher,
saving state, submitting. It never writes the ledger: every change is an observation (see
`observations`) that `advance.advance` turns into a new ledger and effects. Pure functions decide:
`submission.prepare` (next spec), `supervise.supervise` (cancel / dumps), `conclude.conclude`
(through `advance`); `runner.EffectRunner` carries out alerts, publishes, drains and cancels.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from loguru import logger

from orchestrator import failpoints
from orchestrator.backends.base import Backend, BackendError, SchedulerUnavailable
from orchestrator.clock import Clock
from orchestrator.contract import SegmentPaths
from orchestrator.diagnose.linear import progress_pattern
from orchestrator.diagnose.signatures import table_for
from orchestrator.loop import observations as o
from orchestrator.loop import operator
from orchestrator.loop.effects import Cancel
from orchestrator.loop.exports import Exports
from orchestrator.loop.injob import in_allocation, job_submitted_at
from orchestrator.loop.keeper import Keeper
from orchestrator.loop.modes import Mode, OwnJob
from orchestrator.loop.notes import Notes, log_end
from orchestrator.loop.outage import Outage, SchedulerPoll
from orchestrator.loop.runner import EffectRunner, Notify
from orchestrator.loop.steps import Steps
from orchestrator.loop.submission import (
    FilesystemStall,
    Preparer,
    observe_checkpoint,
    prepare,
    shared_path,
    unloadable,
)
from orchestrator.loop.supervise import Seen, Supervision, supervise
from orchestrator.loop.vigil import Vigil, prior_cadence, swap_terms
from orchestrator.model import JobRef, JobState, JobStatus, RunStatus
from orchestrator.settings import PROGRESS_REGEX, Settings
from orchestrator.state import RunState, SegmentRecord, StateStore
from orchestrator.watch.losswatch import loss_terms, newest_loss
from orchestrator.watch.reader import Listing, scan_dir
from orchestrator.watch.segment import SegmentWatch


class Controller(Keeper):
    """Owns the run loop and its I/O: observe (poll the backend, feed the watcher), call the pure
    functions, carry out what they return, save the state; decides nothing. A test may give it
    `prepare` (a next spec meeting a hung checkpoint directory) and `listing` (one that hangs)."""
    def __init__(self, settings: Settings, backend: Backend, clock: Clock, store: StateStore,
                 notify: Notify | None = None, python: str = sys.executable,
                 failpoint: Callable[[str], None] | None = None, prepare: Preparer = prepare,
                 listing: Callable[[Path], Listing] = scan_dir):
        super().__init__(settings, clock, store, EffectRunner(
            backend, notify or (lambda title, body: None), shared_path(settings)))
        self.failpoint = failpoint or failpoints.hit
        self.backend, self.python, self.prepare, self.listing = backend, python, prepare, listing
        self.signatures = table_for(settings.signatures)
        self.progress = progress_pattern(settings.progress_regex, PROGRESS_REGEX)
        self._watch: SegmentWatch | None = None
        self._vigil = Vigil(self.s.checkpoint.dir, self.s.watch)
        self.notes = Notes(backend.queue_position)
        self.resume = False  # run --resume
        self._stall = Outage("filesystem stall")
        self._sched = SchedulerPoll(backend, self._outage, self.s.watch.scheduler_poll_s)
        self.steps, self.own = Steps(self), OwnJob()  # the two placements' executors (modes.Mode)
        self.exports = Exports()  # metrics file and endpoint, heartbeat, events.jsonl, every poll

    def run(self) -> RunState:
        operator.forget_stale_stop(self.s)
        state = self.load_or_init()
        log = logger.bind(run=state.run)
        if (t := self.advance(o.Started(self.s.goal.target_iteration, self.resume))).note:
            log.warning(t.note)
        if t.changed:
            self.save()
        log.info("controller start run={} status={} segments={}", state.run, state.status,
                 len(state.segments))
        while self.state.status == RunStatus.RUNNING and not self.stop_requested:
            self.apply_requests(self.state)
            if self.stop_requested:
                break
            self.step(self.state)
            self.exports.after_poll(self.s, self.state, self.clock.now(), self._outage.seen_at)
        self.take_stop_request()
        state = self.state
        if self.stop_requested and state.status == RunStatus.RUNNING:
            log.info("controller exit reason={} ({})", self.stop_requested, "the job, if any, "
                     "keeps running" if self.keep_job else "the job is cancelled next")
        if self._watch:
            self._watch.close()
        self.exports.close()
        return state

    def step(self, state: RunState) -> RunState:
        """One turn of the loop on `state`; the ledger after it."""
        self.state = state
        seg = state.current
        if seg is None or seg.action is not None:
            now = self.clock.now()
            if state.wait_until and now < state.wait_until:
                self.clock.sleep(min(self.s.watch.poll_interval_s,
                                     (state.wait_until - now).total_seconds()))
                return self.state
            self.submit_next()
        elif seg.job_id is None:
            self.recover_intent(seg)
        else:
            self.watch_once(seg)
        return self.state

    # ---- submit ----------------------------------------------------------------------------
    def submit_next(self) -> None:
        try:
            prepared = self.prepare(self.s, self.state, self.backend, self.clock.now(), self.python)
        except FilesystemStall as exc:
            self._held(self._stall, self.s.policy.filesystem_stall_max_s, str(exc))
            return
        self._stall.clear(self.clock.now())
        spec = prepared.spec
        if why := unloadable(self.state, spec):
            self._stop(why)
            return
        if prepared.exclude.note:
            logger.bind(run=self.state.run).warning("exclude note={}", prepared.exclude.note)
        self.advance(o.Planned(spec, self.backend.name, prepared.blacklist, prepared.checkpoint))
        self.save()  # intent first: a crash before the id is recorded is detected on restart
        self.failpoint("after_intent")
        try:
            ref = self.backend.submit(spec)
        except SchedulerUnavailable as exc:
            self._held(self._outage, self.s.policy.scheduler_outage_max_s, str(exc))
            return
        except BackendError as exc:
            self.advance(o.Withdrawn())
            self._stop(f"submission rejected: {exc}")
            return
        self._outage.clear(self.clock.now())
        self.failpoint("after_submit")
        self._attach(ref)
        self.failpoint("after_record")
        logger.bind(run=self.state.run).info(
            "segment submitted job={} exclude={} spares={} resume_from={} start_iteration={}",
            ref.job_id, spec.exclude_hostlist or "-", spec.spares, spec.resume_from or "-",
            spec.start_iteration)

    def _attach(self, ref: JobRef, reattached: bool = False) -> None:
        self.advance(o.Submitted(ref))
        self.save()
        assert (seg := self.state.current) is not None
        self.new_watch(seg, reattached)

    def mode(self, seg: SegmentRecord) -> Mode:
        """The executor of the segment's placement (the one place that tells a job from a step)."""
        return self.steps if in_allocation(seg) else self.own

    def new_watch(self, seg: SegmentRecord, reattached: bool = False) -> None:
        if self._watch:
            self._watch.close()
        root = SegmentPaths.of(self.s.run_dir, seg.index).root
        self._watch = SegmentWatch(root, self.signatures, self.progress,
                                   self.s.watch.read_timeout_s, listing=self.listing,
                                   first_only=self.s.resources.launch_nodes == "first",
                                   loss_rule=loss_terms(self.s, self._watch, seg))
        self._vigil = Vigil(self.s.checkpoint.dir, self.s.watch, root,  # the seed alone carries
                            prior_cadence(self.state, seg), self.backend)
        self._sched.reset()
        self.notes.reset(reattached)  # re-attached: the controller started while the job ran

    def recover_intent(self, seg: SegmentRecord) -> None:
        """The controller died between submitting and recording the job id: find the job by name."""
        try:
            live = self.backend.find_jobs(seg.job_name)
        except SchedulerUnavailable as exc:
            self._held(self._outage, self.s.policy.scheduler_outage_max_s, str(exc))
            return
        if live:
            ref = max(live, key=lambda r: r.submitted_at)
            logger.warning("segment {} re-attached by job name job={} name={}", seg.index,
                           ref.job_id, seg.job_name)
            self._attach(ref, reattached=True)
            return
        self.advance(o.Withdrawn())
        self.submit_next()

    # ---- watch -----------------------------------------------------------------------------
    def watch_once(self, seg: SegmentRecord) -> None:
        assert seg.job_id and seg.submitted_at
        if self._watch is None:
            self.new_watch(seg, reattached=True)
            logger.bind(run=self.state.run, segment=seg.index).info("watching job={}", seg.job_id)
        assert (watch := self._watch) is not None
        ref = JobRef(job_id=seg.job_id, backend=seg.backend or self.backend.name,
                     submitted_at=job_submitted_at(self.state, seg) or seg.submitted_at)
        now = self.clock.now()
        status = self._sched.status(ref, now, watch.turns())
        if status is None:
            watch.poll(now)  # blind to the scheduler, not to the node logs
            self.clock.sleep(self.s.watch.poll_interval_s)
            return
        status = self.mode(seg).observe(seg, status)  # with spares: the step's (its end ends it)
        if status.nodes and status.nodes_final and status.state != JobState.PENDING:
            # COMPLETING lists only the nodes still busy, PENDING the batch host
            watch.slurm_nodes = list(status.nodes)
        self.failpoint("poll")
        watch.poll(now, final=status.state.terminal)
        before = seg.end_iteration
        changed = self.advance(o.Polled(status, tuple(watch.slurm_nodes), tuple(watch.nodes),
                                        watch.max_iteration(), newest_loss(watch))).changed
        assert (now_seg := self.state.current) is not None
        seg = now_seg
        if seg.end_iteration != before and (path := observe_checkpoint(self.s, self.state)):
            # progress: seen, its loss later is a lost filesystem
            self.advance(o.CheckpointSeen(path))
        if status.state.terminal and watch.judgeable(now, self.s.policy.filesystem_stall_max_s):
            self.conclude(status)
            return
        # it ended, but its logs cannot be read now: judge it once they can be
        if status.state.terminal:
            self.clock.sleep(self.s.watch.poll_interval_s)
            return
        note = self.notes.update(self.state, seg, status, ref, now,
                                 watch.last_output_at is not None)
        if note is not None:
            changed = self.advance(o.QueueNoted(note)).changed or changed
        if self._supervise(ref, now):
            return
        if changed:
            self.save()
        self.clock.sleep(self.s.watch.poll_interval_s)

    def _supervise(self, ref: JobRef, now: datetime) -> bool:
        """Carry out the watchdog's decision; True if the job was cancelled."""
        watch, seg = self._watch, self.state.current
        assert watch is not None and seg is not None
        codes = {n: c for n in watch.nodes if (c := watch.exit_code(n)) is not None}
        seen = self._vigil.seen(watch, Seen(
            failed=watch.failed_nodes(), exit_codes=codes, last_progress=watch.last_progress(),
            running_since=self.notes.running_since, dumps_requested_at=watch.dumps_requested_at,
            last_output=watch.last_output_at, nodes=frozenset(watch.nodes),
            dumps_in=watch.dumps_in(), blind=watch.blind_since is not None), now)
        slow = self._vigil.slow(watch, now, self.state.checkpoint_seen, lambda: swap_terms(
            self.s, self.state, seg, len(self.mode(seg).free(seg, now)), self.notes.running_since,
            watch.max_iteration(), now))
        sv = supervise(seen, now, self.s.watch)
        for ob in (slow := slow.unless(sv.cancel)).observations:
            self.effects.run(self.advance(ob).effects)
            self.save()
        for line in slow.notes:
            logger.warning(line)
        if slow.swap:
            sv = Supervision(cancel=slow.swap, reason=slow.reason)
        if sv.clear_dumps:
            watch.clear_dumps()
        if sv.request_dumps:
            watch.request_dumps(now)
        if sv.note:
            logger.warning(sv.note)
        if not sv.cancel or sv.reason is None:
            return False
        self.advance(o.Cancelling(sv.reason, sv.cancel))
        # the step stops when the next one starts, or the job ends
        if self.mode(seg).cancel_ends_segment:
            watch.poll(now, final=True)
            self.conclude(JobStatus(state=JobState.CANCELLED, nodes=tuple(seg.nodes)))
            return True
        self.save()
        self.effects.one(Cancel(ref, sv.cancel))
        self._sched.hurry()
        return True

    # ---- conclude --------------------------------------------------------------------------
    def conclude(self, status: JobStatus) -> None:
        assert self._watch is not None and (seg := self.state.current) is not None
        now = self.clock.now()
        mode = self.mode(seg)
        lost = tuple(mode.lost)
        self.failpoint("before_decide")
        t = self.advance(o.Ended(status, tuple(self._watch.evidence()),
                                 tuple(self._watch.fs_stalls), lost,
                                 self._watch.checkpoint_write_s(), self._vigil.cadence.value()))
        assert (out := t.outcome) is not None
        if path := observe_checkpoint(self.s, self.state):
            self.advance(o.CheckpointSeen(path))
        log_end(self.state, out)
        # before the save, as a crash here re-concludes (publish is idempotent)
        self.effects.run(t.effects)
        # with spares: restart inside the job, or end it; a crash before the save re-concludes
        mode.after(out, now)
        self.failpoint("after_blacklist")
        self.save()
        self.failpoint("after_conclude")
