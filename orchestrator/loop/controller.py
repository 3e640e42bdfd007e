"""The only loop with side effects: observe -> call a pure function -> carry out what it returned.

Owns the order of steps and the I/O between them: polling the backend, feeding the segment watcher,
saving state, submitting. What to do is decided elsewhere: `submission.prepare` (next spec),
`supervise.supervise` (cancel / dumps), `conclude.conclude` (verdict, decision, ledger edits),
`operator` (requests); `effects.EffectRunner` carries out alerts, publishes, drains and cancels.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from datetime import datetime

from loguru import logger

from orchestrator import failpoints
from orchestrator.backends.base import Backend, BackendError, SchedulerUnavailable
from orchestrator.clock import Clock
from orchestrator.contract import SegmentPaths
from orchestrator.diagnose.linear import progress_pattern
from orchestrator.diagnose.signatures import table_for
from orchestrator.loop import operator, progress
from orchestrator.loop.conclude import apply_outcome, conclude, log_blame
from orchestrator.loop.effects import Alert, Cancel, EffectRunner, Notify
from orchestrator.loop.exports import Exports
from orchestrator.loop.injob import in_allocation, job_submitted_at
from orchestrator.loop.notes import Notes
from orchestrator.loop.outage import Outage, poll_job, save_patiently
from orchestrator.loop.steps import Steps
from orchestrator.loop.submission import FilesystemStall, intent, observe_checkpoint, prepare, shared_path, unloadable
from orchestrator.loop.supervise import Seen, supervise
from orchestrator.model import JobRef, JobState, JobStatus, RunStatus
from orchestrator.settings import PROGRESS_REGEX, Settings
from orchestrator.state import RunState, SegmentRecord, StateError, StateStore
from orchestrator.watch.segment import SegmentWatch


class Controller:
    """Owns the run loop and its I/O: observe (poll the backend, feed the watcher), call the pure
    functions, carry out what they return, save the state. Decides nothing itself."""
    def __init__(self, settings: Settings, backend: Backend, clock: Clock, store: StateStore,
                 notify: Notify | None = None, python: str = sys.executable,
                 failpoint: Callable[[str], None] | None = None):
        self.failpoint = failpoint or failpoints.hit
        self.s, self.backend, self.clock, self.store = settings, backend, clock, store
        self.effects = EffectRunner(backend, notify or (lambda title, body: None), shared_path(settings))
        self.python = python
        self.signatures = table_for(settings.signatures)
        self.progress = progress_pattern(settings.progress_regex, PROGRESS_REGEX)
        self.stop_requested, self.reload_requested = "", False
        self.reloader: Callable[[], Settings] | None = None
        self._watch: SegmentWatch | None = None
        self.notes = Notes(backend.queue_position)
        self.keep_job = True  # False with --cancel-on-exit: the caller cancels the job after run()
        self._stall, self._outage = Outage("filesystem stall"), Outage("scheduler unreachable")
        self.steps = Steps(self)  # segments that run as steps of a job with spare nodes
        self.exports = Exports()  # metrics file and endpoint, heartbeat, events.jsonl, after every poll

    # ---- lifecycle -------------------------------------------------------------------------
    def request_stop(self, why: str = "signal") -> None:
        self.stop_requested = why
        self.clock.wake()

    def request_reload(self) -> None:
        self.reload_requested = True
        self.clock.wake()

    def apply_requests(self, state: RunState) -> None:
        if operator.stop_requested(self.s):
            self.request_stop("orchestrator stop")
        if self.reload_requested and self.reloader is not None:
            self.reload_requested = False
            self.s = operator.reload(self.s, self.reloader)
        if operator.apply_blacklist_requests(self.s, state, self.clock.now()):
            self.save(state)

    def load_or_init(self) -> RunState:
        state = self.store.load()
        if state is None:
            state = RunState(run=self.s.name, created_at=self.clock.now(), updated_at=self.clock.now())
            self.save(state)
        elif state.run != self.s.name:
            raise StateError(f"{self.s.run_dir} holds run {state.run!r}, not {self.s.name!r}: give this config its "
                             "own run_dir (or rename it back)")
        return state

    def save(self, state: RunState) -> None:
        state.updated_at = self.clock.now()
        save_patiently(self.store, state, self.clock, self.s.watch.poll_interval_s,
                       self.s.policy.filesystem_stall_max_s, lambda: bool(self.stop_requested))

    def run(self) -> RunState:
        operator.forget_stale_stop(self.s)
        state = self.load_or_init()
        log = logger.bind(run=state.run)
        if why := operator.resume(state, self.s.goal.target_iteration):
            log.warning(why)
            self.save(state)
        log.info("controller start run={} status={} segments={}", state.run, state.status, len(state.segments))
        while state.status == RunStatus.RUNNING and not self.stop_requested:
            self.apply_requests(state)
            if self.stop_requested:
                break
            self.step(state)
            self.exports.after_poll(self.s, state, self.clock.now(), self._outage.seen_at)  # never stops the loop
        if self.stop_requested and state.status == RunStatus.RUNNING:
            log.info("controller exit reason={} ({})", self.stop_requested,
                     "the job, if any, keeps running" if self.keep_job else "the job is cancelled next")
        if self._watch:
            self._watch.close()
        self.exports.close()
        return state

    def step(self, state: RunState) -> None:
        seg = state.current
        if seg is None or seg.action is not None:
            now = self.clock.now()
            if state.wait_until and now < state.wait_until:
                self.clock.sleep(min(self.s.watch.poll_interval_s, (state.wait_until - now).total_seconds()))
                return
            self.submit_next(state)
        elif seg.job_id is None:
            self.recover_intent(state, seg)
        else:
            self.watch_once(state, seg)

    # ---- submit ----------------------------------------------------------------------------
    def submit_next(self, state: RunState) -> None:
        log = logger.bind(run=state.run)
        try:
            prepared = prepare(self.s, state, self.backend, self.clock.now(), self.python)
        except FilesystemStall as exc:
            self._held(state, self._stall, self.s.policy.filesystem_stall_max_s, str(exc))
            return
        self._stall.clear(self.clock.now())
        spec, state.blacklist = prepared.spec, prepared.blacklist
        if why := unloadable(state, spec):
            self._stop(state, why)
            return
        if prepared.exclude.note:
            log.warning("exclude note={}", prepared.exclude.note)
        state.segments.append(seg := intent(spec, self.backend.name))
        state.wait_until = None
        self.save(state)  # intent first: a crash before the id is recorded is detected on restart
        self.failpoint("after_intent")
        try:
            ref = self.backend.submit(spec)
        except SchedulerUnavailable as exc:
            self._held(state, self._outage, self.s.policy.scheduler_outage_max_s, str(exc))
            return
        except BackendError as exc:
            state.segments.pop()
            self._stop(state, f"submission rejected: {exc}")
            return
        self._outage.clear(self.clock.now())
        self.failpoint("after_submit")
        self._attach(state, seg, ref)
        self.failpoint("after_record")
        log.info("segment submitted job={} exclude={} spares={} resume_from={} start_iteration={}", ref.job_id,
                 spec.exclude_hostlist or "-", spec.spares, spec.resume_from or "-", spec.start_iteration)

    def _attach(self, state: RunState, seg: SegmentRecord, ref: JobRef, reattached: bool = False) -> None:
        seg.job_id, seg.submitted_at = ref.job_id, ref.submitted_at
        self.save(state)
        self.new_watch(seg, reattached)

    def new_watch(self, seg: SegmentRecord, reattached: bool = False) -> None:
        if self._watch:
            self._watch.close()
        root = SegmentPaths.of(self.s.run_dir, seg.index).root
        self._watch = SegmentWatch(root, self.signatures, self.progress, self.s.watch.read_timeout_s)
        self.notes.reset(reattached)  # re-attached: the controller started while the job was already there

    def recover_intent(self, state: RunState, seg: SegmentRecord) -> None:
        """The controller died between submitting and recording the job id: find the job by name."""
        try:
            live = self.backend.find_jobs(seg.job_name)
        except SchedulerUnavailable as exc:  # the same outage as a refused sbatch: bounded by the same limit
            self._held(state, self._outage, self.s.policy.scheduler_outage_max_s, str(exc))
            return
        if live:
            ref = max(live, key=lambda r: r.submitted_at)
            logger.warning("segment {} re-attached by job name job={} name={}", seg.index, ref.job_id, seg.job_name)
            self._attach(state, seg, ref, reattached=True)
            return
        state.segments.pop()
        self.submit_next(state)

    # ---- watch -----------------------------------------------------------------------------
    def watch_once(self, state: RunState, seg: SegmentRecord) -> None:
        assert seg.job_id and seg.submitted_at
        if self._watch is None:
            self.new_watch(seg, reattached=True)
            logger.bind(run=state.run, segment=seg.index).info("watching job={}", seg.job_id)
        assert (watch := self._watch) is not None
        ref = JobRef(job_id=seg.job_id, submitted_at=job_submitted_at(state, seg) or seg.submitted_at,
                     backend=seg.backend or self.backend.name)
        now = self.clock.now()
        status = poll_job(self.backend, self._outage, ref, now)
        if status is None:
            watch.poll(now)  # blind to the scheduler, not to the node logs
            self.clock.sleep(self.s.watch.poll_interval_s)
            return
        if in_allocation(seg):
            status = self.steps.observe(seg, status)  # the step's nodes; a step that ended ends the segment
        if status.nodes and status.nodes_final and status.state != JobState.PENDING:
            watch.slurm_nodes = list(status.nodes)  # COMPLETING lists only the nodes still busy, PENDING the batch host
        self.failpoint("poll")
        watch.poll(now, final=status.state.terminal)
        before = seg.end_iteration
        changed = progress.record_progress(seg, status, watch.slurm_nodes, list(watch.nodes), watch.max_iteration(),
                                           now)
        if seg.end_iteration != before:  # progress: a checkpoint may have landed; seen, its loss is a lost filesystem
            observe_checkpoint(self.s, state)
        if status.state.terminal and watch.judgeable(now, self.s.policy.filesystem_stall_max_s):
            self.conclude(state, seg, status)
            return
        if status.state.terminal:  # it ended, but its logs cannot be read now: judge it once they can be
            self.clock.sleep(self.s.watch.poll_interval_s)
            return
        flows = watch.last_output_at is not None
        changed = self.notes.update(state, seg, status, ref, now, flows) or changed
        if self._supervise(state, seg, ref, now):
            return
        if changed:
            self.save(state)
        self.clock.sleep(self.s.watch.poll_interval_s)

    def _supervise(self, state: RunState, seg: SegmentRecord, ref: JobRef, now: datetime) -> bool:
        """Carry out the watchdog's decision; True if the job was cancelled."""
        watch = self._watch
        assert watch is not None
        codes = {n: c for n in watch.nodes if (c := watch.exit_code(n)) is not None}
        seen = Seen(failed=watch.failed_nodes(), exit_codes=codes, last_progress=watch.last_progress(),
                    running_since=self.notes.running_since, dumps_requested_at=watch.dumps_requested_at,
                    last_output=watch.last_output_at,
                    nodes=frozenset(watch.nodes), dumps_in=watch.dumps_in(), blind=watch.blind_since is not None)
        sv = supervise(seen, now, self.s.watch)
        if sv.clear_dumps:
            watch.clear_dumps()
        if sv.request_dumps:
            watch.request_dumps(now)
        if sv.note:
            logger.warning(sv.note)
        if not sv.cancel:
            return False
        seg.cancelled_by_controller, seg.cancelled_at = sv.cancel, now
        if in_allocation(seg):  # end the segment now; the step stops when the next one starts, or the job ends
            watch.poll(now, final=True)
            self.conclude(state, seg, JobStatus(state=JobState.CANCELLED, nodes=tuple(seg.nodes)))
            return True
        self.save(state)
        self.effects.one(Cancel(ref, sv.cancel))
        return True

    # ---- conclude --------------------------------------------------------------------------
    def conclude(self, state: RunState, seg: SegmentRecord, status: JobStatus) -> None:
        assert self._watch is not None
        now = self.clock.now()
        lost = tuple(self.steps.lost) if in_allocation(seg) else ()
        out = conclude(state, seg, status, self._watch.evidence(), self._watch.fs_stalls, self.s.policy,
                       self.s.goal, now, lost, str(self.s.checkpoint.dir))
        self.failpoint("before_decide")
        log = logger.bind(run=state.run, segment=seg.index, job=seg.job_id)
        v, d = out.verdict, out.decision
        apply_outcome(state, seg, status, out, now)
        seg.checkpoint_write_s = self._watch.checkpoint_write_s()
        observe_checkpoint(self.s, state)
        log_blame(log, state, v, d)
        log.info("segment ended job={} state={} cause={} culprits={} confidence={:.2f} action={} reason={!r}",
                 seg.job_id, seg.job_state, v.cause.value, ",".join(v.culprit_nodes) or "-", v.confidence,
                 d.action.value, d.reason)
        if state.status == RunStatus.STOPPED:
            log.error("controller stopped reason={!r}", d.reason)
        self.effects.run(out.effects)  # before the save, as a crash here re-concludes (publish is idempotent)
        if in_allocation(seg):  # restart inside the job, or end the job; a crash before the save re-concludes
            self.steps.after(state, seg, out, now)
        self.failpoint("after_blacklist")
        self.save(state)
        self.failpoint("after_conclude")

    def _held(self, state: RunState, outage: Outage, limit_s: float, detail: str) -> None:
        """A condition blocks submitting: alert once, stop once it lasted beyond `limit_s`, else wait."""
        first = outage.since is None
        held = outage.note(state.run, self.clock.now(), limit_s, detail[:500])
        if first:  # said once per outage; the alert too
            logger.bind(run=state.run).warning("{}: {}; not submitting until it answers", outage.what, detail[:500])
        self.effects.run(held.alerts)
        if held.stop:
            self._stop(state, held.stop)
        else:
            self.clock.sleep(self.s.watch.poll_interval_s)

    def _stop(self, state: RunState, reason: str) -> None:
        state.status, state.stop_reason = RunStatus.STOPPED, reason
        self.save(state)
        logger.bind(run=state.run).error("controller stopped reason={!r}", reason)
        self.effects.one(Alert(f"{state.run}: STOPPED, needs a human", reason))
