"""The only loop with side effects: plan -> submit -> watch -> classify -> decide -> act -> report."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from datetime import datetime, timedelta

from loguru import logger

from orchestrator import checkpoint as ckpt_mod
from orchestrator.agent.main import PREFLIGHT_EXIT
from orchestrator.agent.preflight import with_timeout
from orchestrator.backends.base import Backend, BackendError, SchedulerUnavailable
from orchestrator.blacklist import Blacklist, ExcludePlan
from orchestrator.clock import Clock
from orchestrator.diagnose.classify import Context, classify
from orchestrator.diagnose.signatures import Signature, build_table
from orchestrator.model import HARDWARE_CAUSES, Action, Cause, JobRef, JobState, JobStatus, RunStatus, Verdict
from orchestrator.plan import plan
from orchestrator.policy import decide
from orchestrator.settings import Settings
from orchestrator.shared import SharedBlacklist
from orchestrator.state import STOP_REQUEST, HardwareEvent, RunState, SegmentRecord, StateStore, take_requests
from orchestrator.watch.segment import SegmentWatch

Notify = Callable[[str, str], object]


class FilesystemStall(Exception):
    """The shared filesystem did not answer in time: nothing is decided on a guess."""
HARDWARE_MEMORY = timedelta(days=7)  # a node that had a hardware fault this recently: OOM there is a poisoned GPU
PENDING_NOTE_S = 600.0  # how often a pending job's wait is logged
DUMP_LEAD_S = 30.0  # stack dumps are requested this long before the stall limit


def user_signatures(settings: Settings) -> tuple[Signature, ...]:
    return build_table([Signature(s.name, s.pattern, s.cause, s.blame, s.cascade, source="config")
                        for s in settings.signatures])


class Controller:
    def __init__(self, settings: Settings, backend: Backend, clock: Clock, store: StateStore,
                 notify: Notify | None = None, python: str = sys.executable,
                 failpoint: Callable[[str], None] | None = None):
        self.failpoint = failpoint or (lambda name: None)
        self.s, self.backend, self.clock, self.store = settings, backend, clock, store
        self.notify = notify or (lambda title, body: None)
        self.python = python
        self.signatures = user_signatures(settings)
        self.progress = re.compile(settings.progress_regex)
        self.stop_requested = ""
        self.reload_requested = False
        self.reloader: Callable[[], Settings] | None = None
        self._watch: SegmentWatch | None = None
        self._running_since: datetime | None = None
        self._unreachable_since: datetime | None = None
        self._pending_note: datetime | None = None

    # ---- lifecycle -------------------------------------------------------------------------
    def request_stop(self, why: str = "signal") -> None:
        self.stop_requested = why
        self.clock.wake()

    def request_reload(self) -> None:
        self.reload_requested = True
        self.clock.wake()

    def apply_requests(self, state: RunState) -> None:
        """Blacklist edits queued by `orchestrator blacklist ...`, a stop asked by `orchestrator stop`,
        and on SIGHUP the policy, watch and goal sections re-read from the config file."""
        if (self.s.run_dir / STOP_REQUEST).exists():
            (self.s.run_dir / STOP_REQUEST).unlink(missing_ok=True)
            self.request_stop("orchestrator stop")
        if self.reload_requested and self.reloader is not None:
            self.reload_requested = False
            try:
                new = self.reloader()
            except Exception as exc:  # noqa: BLE001 - a bad edit must not kill a running controller
                logger.error("reload failed; keeping the old settings: {}", exc)
            else:
                self.s = self.s.model_copy(update={"policy": new.policy, "watch": new.watch, "goal": new.goal})
                logger.info("reloaded policy, watch and goal from {}", self.s.config_path)
        now = self.clock.now()
        changed = False
        for req in take_requests(self.s.run_dir):
            nodes = [str(n) for n in req.get("nodes", [])]  # type: ignore[attr-defined]
            if req.get("op") == "add":
                hours = float(req.get("hours", 72))  # type: ignore[arg-type]
                state.blacklist = state.blacklist.add_manual(nodes, str(req.get("reason", "added by hand")), now,
                                                             timedelta(hours=hours))
            elif req.get("op") == "remove":
                state.blacklist = state.blacklist.remove_all(nodes)
            elif req.get("op") == "clear":
                state.blacklist = Blacklist()
            logger.info("blacklist request applied op={} nodes={}", req.get("op"), ",".join(nodes) or "-")
            changed = True
        if changed:
            self.save(state)

    def load_or_init(self) -> RunState:
        state = self.store.load()
        if state is None:
            now = self.clock.now()
            state = RunState(run=self.s.name, created_at=now, updated_at=now)
            self.save(state)
        return state

    def save(self, state: RunState) -> None:
        state.updated_at = self.clock.now()
        self.store.save(state)

    def run(self) -> RunState:
        (self.s.run_dir / STOP_REQUEST).unlink(missing_ok=True)  # meant for a controller that has exited
        state = self.load_or_init()
        state.target_iteration = self.s.goal.target_iteration
        log = logger.bind(run=state.run)
        if state.status == RunStatus.STOPPED:
            log.warning("resuming a stopped run (it stopped because: {})", state.stop_reason)
            state.status, state.stop_reason = RunStatus.RUNNING, ""
            self.save(state)
        log.info("controller start run={} status={} segments={}", state.run, state.status, len(state.segments))
        while state.status == RunStatus.RUNNING and not self.stop_requested:
            self.apply_requests(state)
            if self.stop_requested:
                break
            self.step(state)
        if self.stop_requested and state.status == RunStatus.RUNNING:
            log.info("controller exit reason={} (the job, if any, keeps running)", self.stop_requested)
        if self._watch:
            self._watch.close()
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

    # ---- plan + submit ---------------------------------------------------------------------
    def exclude_plan(self, blacklist: Blacklist, now: datetime) -> ExcludePlan:
        inventory = self.backend.nodes()
        cap = self.s.policy.max_excluded_nodes
        if inventory is not None:
            cap = min(cap, len(inventory) - self.s.resources.nodes)
        return blacklist.exclude_plan(now, self.s.policy.strike_threshold, cap,
                                      set(inventory) if inventory is not None else None)

    def shared(self) -> SharedBlacklist | None:
        p = self.s.policy.shared_blacklist
        return SharedBlacklist(p if p.is_absolute() else self.s.config_dir / p) if p else None

    def next_spec(self, state: RunState):  # noqa: ANN201 - SegmentSpec
        now = self.clock.now()
        shared = self.shared()
        if shared is not None:
            try:
                state.blacklist = shared.merge_into(state.blacklist)
            except (OSError, ValueError) as exc:
                logger.warning("shared blacklist unreadable, using the run's own: {}", exc)
        skip = frozenset(p for p, n in state.bad_checkpoints.items() if n >= 2)
        done, ckpt = with_timeout(lambda: ckpt_mod.find_latest(self.s.checkpoint, skip), self.s.watch.read_timeout_s)
        if not done:
            raise FilesystemStall(f"{self.s.checkpoint.dir} did not answer within {self.s.watch.read_timeout_s:.0f}s")
        if isinstance(ckpt, BaseException):
            raise FilesystemStall(f"{self.s.checkpoint.dir}: {ckpt}")
        excl = self.exclude_plan(state.blacklist.prune(now), now)
        return plan(self.s, state, ckpt, excl, self.python), excl

    def submit_next(self, state: RunState) -> None:
        try:
            spec, excl = self.next_spec(state)
        except FilesystemStall as exc:
            logger.bind(run=state.run).warning("filesystem stall: {}; not submitting until it answers", exc)
            self.clock.sleep(self.s.watch.poll_interval_s)
            return
        if spec.resume_from is None and any(n >= 2 for n in state.bad_checkpoints.values()):
            self._stop(state, "every complete checkpoint failed to load (or none is older than the bad ones): "
                       f"{', '.join(p for p, n in state.bad_checkpoints.items() if n >= 2)}; starting from scratch "
                       "would lose the run: fix or remove them, then run again")
            return
        log = logger.bind(run=state.run, segment=spec.index)
        if excl.note:
            log.warning("exclude note={}", excl.note)
        seg = SegmentRecord(index=spec.index, job_name=spec.job_name, excluded=list(spec.exclude),
                            resumed_from=spec.resume_from, start_iteration=spec.start_iteration,
                            backend=self.backend.name)
        state.segments.append(seg)
        state.wait_until = None
        self.save(state)  # intent first: a crash before the id is recorded is detected on restart
        self.failpoint("after_intent")
        try:
            ref = self.backend.submit(spec)
        except SchedulerUnavailable as exc:
            log.warning("submit deferred reason=scheduler-unreachable detail={}", exc)
            self.clock.sleep(self.s.watch.poll_interval_s)
            return
        except BackendError as exc:
            state.segments.pop()
            self._stop(state, f"submission rejected: {exc}")
            return
        self.failpoint("after_submit")
        self._attach(state, seg, ref)
        self.failpoint("after_record")
        log.info("segment submitted job={} exclude={} resume_from={} start_iteration={}",
                 ref.job_id, spec.exclude_hostlist or "-", spec.resume_from or "-", spec.start_iteration)

    def _attach(self, state: RunState, seg: SegmentRecord, ref: JobRef) -> None:
        seg.job_id, seg.submitted_at = ref.job_id, ref.submitted_at
        self.save(state)
        self._new_watch(seg)

    def _new_watch(self, seg: SegmentRecord) -> None:
        if self._watch:
            self._watch.close()
        spec_dir = self.s.run_dir / "segments" / f"{seg.index:04d}"
        self._watch = SegmentWatch(spec_dir, self.signatures, self.progress, self.s.watch.read_timeout_s)
        self._running_since = None

    def recover_intent(self, state: RunState, seg: SegmentRecord) -> None:
        """The controller died between submitting and recording the job id: find the job by name."""
        try:
            live = self.backend.find_jobs(seg.job_name)
        except SchedulerUnavailable:
            self.clock.sleep(self.s.watch.poll_interval_s)
            return
        if live:
            ref = sorted(live, key=lambda r: r.submitted_at)[-1]
            logger.bind(run=state.run, segment=seg.index).warning(
                "re-attached by job name job={} name={}", ref.job_id, seg.job_name)
            self._attach(state, seg, ref)
            return
        state.segments.pop()
        self.submit_next(state)

    # ---- watch -----------------------------------------------------------------------------
    def watch_once(self, state: RunState, seg: SegmentRecord) -> None:
        assert seg.job_id and seg.submitted_at
        if self._watch is None:
            self._new_watch(seg)
            logger.bind(run=state.run, segment=seg.index).info("watching job={}", seg.job_id)
        watch = self._watch
        assert watch is not None
        ref = JobRef(job_id=seg.job_id, submitted_at=seg.submitted_at, backend=seg.backend or self.backend.name)
        now = self.clock.now()
        try:
            status = self.backend.poll([ref]).get(seg.job_id, JobStatus(state=JobState.UNKNOWN))
            if self._unreachable_since:
                logger.info("scheduler reachable again after {}", now - self._unreachable_since)
            self._unreachable_since = None
        except SchedulerUnavailable as exc:
            self._unreachable_since = self._unreachable_since or now
            logger.warning("scheduler unreachable since {} ({}); waiting, not resubmitting",
                           self._unreachable_since.isoformat(timespec="seconds"), exc)
            self.clock.sleep(self.s.watch.poll_interval_s)
            return
        if status.nodes and status.nodes_final:
            watch.slurm_nodes = list(status.nodes)  # COMPLETING lists only the nodes still busy
        self.failpoint("poll")
        watch.poll(now, final=status.state.terminal)
        changed = self._update_progress(seg, status, watch, now)
        if status.state.terminal:
            self.conclude(state, seg, status)
            return
        if status.state == JobState.RUNNING and self._running_since is None:
            self._running_since = now
            seg.queue_note = ""
            logger.bind(run=state.run, segment=seg.index).info(
                "job={} running on {} after {:.0f}s in the queue", seg.job_id, ",".join(status.nodes) or "?",
                (now - seg.submitted_at).total_seconds())
        if status.state == JobState.PENDING and (self._pending_note is None or
                                                 (now - self._pending_note).total_seconds() >= PENDING_NOTE_S):
            self._pending_note = now
            where = getattr(self.backend, "queue_position", lambda r: "")(ref)
            seg.queue_note = f"pending {(now - seg.submitted_at).total_seconds():.0f}s, reason {status.reason or '-'}" \
                + (f", {where}" if where else "")
            changed = True
            logger.bind(run=state.run, segment=seg.index).info("job={} {}", seg.job_id, seg.queue_note)
        reason = self._should_cancel(seg, watch, now)
        if reason:
            seg.cancelled_by_controller, seg.cancelled_at = reason, now
            self.save(state)
            logger.bind(run=state.run, segment=seg.index).warning("cancel job={} reason={}", seg.job_id, reason)
            self.backend.cancel(ref)
            return
        if changed:
            self.save(state)
        self.clock.sleep(self.s.watch.poll_interval_s)

    def _update_progress(self, seg: SegmentRecord, status: JobStatus, watch: SegmentWatch, now: datetime) -> bool:
        changed = False
        # squeue lists only the nodes still busy once a job is completing: trust RUNNING and accounting
        if status.nodes and status.nodes_final:
            if list(status.nodes) != seg.nodes:
                seg.nodes, changed = list(status.nodes), True
        elif not watch.slurm_nodes and watch.nodes and sorted(watch.nodes) != seg.nodes:
            seg.nodes, changed = sorted(watch.nodes), True  # no full list from the scheduler: the agents' logs
        it = watch.max_iteration()
        if it is not None and it != seg.end_iteration:
            seg.end_iteration = it
            seg.first_progress_at = seg.first_progress_at or now
            seg.last_progress_at = now
            changed = True
        return changed

    def _should_cancel(self, seg: SegmentRecord, watch: SegmentWatch, now: datetime) -> str:
        w = self.s.watch
        failed = watch.failed_nodes()
        preflight = sorted(n for n in failed if watch.exit_code(n) == PREFLIGHT_EXIT)
        if preflight:
            return f"preflight failed on {','.join(preflight)}; no training can run there"
        if failed:
            first = min(failed.values())
            if (now - first).total_seconds() >= w.cascade_grace_s:
                return f"training failed on {','.join(sorted(failed))}; peers would wait forever"
            return ""
        if self._running_since is None:
            return ""
        ref_time = watch.last_progress() or self._running_since
        limit = w.stall_timeout_s if watch.last_progress() else w.startup_timeout_s
        quiet = (now - ref_time).total_seconds()
        lead = min(DUMP_LEAD_S, limit / 2)  # ask for stack dumps early so they are in when the limit hits
        if quiet < limit - lead:
            if watch.dumps_requested_at is not None:
                watch.clear_dumps()  # progress resumed: those dumps describe no stall
            return ""
        if watch.dumps_requested_at is None:
            watch.request_dumps(now)
            logger.warning("no progress for {:.0f}s (stall limit {:.0f}s): asked every node for stack dumps",
                           quiet, limit)
        if quiet >= limit:
            return f"stall: no progress for {quiet:.0f}s (limit {limit:.0f}s)"
        return ""

    # ---- classify + decide + act -----------------------------------------------------------
    def conclude(self, state: RunState, seg: SegmentRecord, status: JobStatus) -> None:
        assert self._watch is not None
        now = self.clock.now()
        nodes = self._watch.evidence()
        ctx = Context(
            recent_hardware=frozenset(h.node for h in state.hardware_events if now - h.time < HARDWARE_MEMORY),
            start_iteration=seg.start_iteration,
            stalled=seg.cancelled_by_controller.startswith("stall"),
            cancelled_by_controller=seg.cancelled_by_controller,
        )
        verdict = classify(status, nodes, ctx)
        if self._watch.fs_stalls and verdict.cause in (Cause.UNKNOWN, Cause.HANG) and not verdict.blame:
            verdict = verdict.model_copy(update={"cause": Cause.FILESYSTEM, "action": Action.WAIT_AND_RESUBMIT,
                                                 "summary": "; ".join(self._watch.fs_stalls[:3])})
        seg.job_state, seg.ended_at = status.state, now
        seg.cause, seg.culprit_nodes = verdict.cause, list(verdict.culprit_nodes)
        seg.confidence, seg.evidence = verdict.confidence, list(verdict.evidence)
        self.failpoint("before_decide")
        decision = decide(state, verdict, self.s.policy, self.s.goal, now)
        self.act(state, seg, verdict, decision.action, decision.reason, decision.blame_nodes, decision.hard,
                 decision.wait_s, decision.checkpoint_failed)

    def act(self, state: RunState, seg: SegmentRecord, verdict: Verdict, action: Action, reason: str,
            blame: tuple[str, ...], hard: bool, wait_s: float, checkpoint_failed: str | None = None) -> None:
        now = self.clock.now()
        log = logger.bind(run=state.run, segment=seg.index, job=seg.job_id)
        seg.action, seg.reason = action, reason
        root = next((e for e in verdict.evidence if e.role == "root"), None)
        for node in blame:
            ev = next((e for e in verdict.evidence if e.node == node and e.role == "root"), root)
            text = f"{ev.file}:{ev.line}: {ev.text}" if ev else verdict.summary
            state.blacklist = state.blacklist.record(
                node, verdict.cause, text, seg.job_id or "", now, hard=hard,
                expiry=timedelta(hours=self.s.policy.blacklist_expiry_h))
            log.warning("blacklist node={} cause={} hard={} evidence={!r}", node, verdict.cause.value, hard, text[:200])
            self._publish(state, node, text)
            if verdict.cause in HARDWARE_CAUSES:
                state.hardware_events.append(HardwareEvent(node=node, cause=verdict.cause, job_id=seg.job_id or "",
                                                           time=now))
                state.hardware_events = state.hardware_events[-500:]
            self.notify(f"{state.run}: node {node} blacklisted", f"{verdict.cause.value}: {text[:300]}")
            self.failpoint("after_blacklist")
        if checkpoint_failed:
            state.bad_checkpoints[checkpoint_failed] = state.bad_checkpoints.get(checkpoint_failed, 0) + 1
        log.info("segment ended job={} state={} cause={} culprits={} confidence={:.2f} action={} reason={!r}",
                 seg.job_id, seg.job_state, verdict.cause.value, ",".join(verdict.culprit_nodes) or "-",
                 verdict.confidence, action.value, reason)
        self.notify(f"{state.run}: segment {seg.index} ended ({verdict.cause.value})",
                    f"culprits={','.join(verdict.culprit_nodes) or '-'} action={action.value}: {reason}")
        if action == Action.DONE:
            state.status, state.stop_reason = RunStatus.DONE, reason
            self.notify(f"{state.run}: done", reason)
        elif action == Action.STOP_AND_ALERT:
            self._stop(state, reason)
            return
        elif action == Action.WAIT_AND_RESUBMIT:
            state.wait_until = now + timedelta(seconds=wait_s)
        self.save(state)
        self.failpoint("after_conclude")

    def _publish(self, state: RunState, node: str, text: str) -> None:
        entry = state.blacklist.get(node)
        shared = self.shared()
        if shared is not None and entry is not None:
            try:
                shared.publish([entry])
            except OSError as exc:
                logger.warning("could not write the shared blacklist: {}", exc)
        if self.s.policy.drain_blacklisted and entry is not None and entry.hard:
            drain = getattr(self.backend, "drain", None)
            if drain is not None:
                try:
                    drain(node, f"orchestrator {state.run}: {entry.cause.value} job {entry.job_id}")
                except Exception as exc:  # noqa: BLE001 - draining is a courtesy; the run goes on
                    logger.warning("drain of {} failed: {}", node, exc)

    def _stop(self, state: RunState, reason: str) -> None:
        state.status, state.stop_reason = RunStatus.STOPPED, reason
        self.save(state)
        logger.bind(run=state.run).error("controller stopped reason={!r}", reason)
        self.notify(f"{state.run}: STOPPED, needs a human", reason)
