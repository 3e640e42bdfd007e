"""The controller's ledger and what keeps it: the one `advance` call site, the patient save, the
start from the saved state, the two ways a run stops for a human (a condition held too long, a
refusal), and the operator's requests applied between polls (stop, reload, queued edits)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from loguru import logger

from orchestrator.clock import Clock
from orchestrator.loop import observations as o
from orchestrator.loop import operator
from orchestrator.loop.advance import Transition, advance
from orchestrator.loop.outage import Outage, save_patiently
from orchestrator.loop.runner import EffectRunner
from orchestrator.settings import Settings
from orchestrator.state import RunState, StateError, StateStore


class Keeper:
    """Owns the run ledger in memory (`state`, a new value after every observation) and its
    saves."""

    def __init__(self, settings: Settings, clock: Clock, store: StateStore, effects: EffectRunner):
        self.s, self.clock, self.store, self.effects = settings, clock, store, effects
        self.state = RunState.begin(settings.name, clock.now())  # load_or_init reads the saved one
        self.stop_requested = ""
        # --cancel-on-exit, or `orchestrator cancel BY` (cancel_asked): the job is cancelled at exit
        self.keep_job, self.cancel_asked = True, ""
        self.reload_requested = False
        self.reloader: Callable[[], Settings] | None = None
        self._outage = Outage("scheduler unreachable")
        # every (ledger before, observation, time, transition), when a list is given (replays,
        # debugging)
        self.journal: list[tuple[RunState, o.Observation, datetime, Transition]] | None = None

    def request_stop(self, why: str = "signal") -> None:
        self.stop_requested = why
        self.clock.wake()

    def take_stop_request(self) -> None:
        """`orchestrator stop` or `orchestrator cancel`, asked through the run directory (their
        SIGTERM may come first: the file says which of the two it was)."""
        asked = operator.stop_requested(self.s)
        if asked is not None and asked.startswith("cancel"):
            self.cancel_asked = asked.removeprefix("cancel").strip() or "orchestrator cancel"
            self.keep_job = False
        if asked is not None:
            self.request_stop(asked.split()[0] if asked.startswith("cancel") else
                              "orchestrator stop")

    def request_reload(self) -> None:
        self.reload_requested = True
        self.clock.wake()

    def apply_requests(self, state: RunState) -> RunState:
        self.state = state
        self.take_stop_request()
        if self.reload_requested and self.reloader is not None:
            self.reload_requested = False
            self.s = operator.reload(self.s, self.reloader)
        edited = operator.queued_edits(self.s.run_dir, self.state, self.clock.now())
        if edited is not None and self.advance(edited).changed:
            self.save()
        return self.state

    def advance(self, obs: o.Observation) -> Transition:
        """The ledger after `obs` (kept, not saved: the caller saves when `changed`)."""
        now = self.clock.now()
        t = advance(self.state, obs, self.s, now)
        if self.journal is not None:
            self.journal.append((self.state, obs, now, t))
        self.state = t.ledger
        return t

    def load_or_init(self) -> RunState:
        state = self.store.load()
        if state is None:
            self.state = RunState.begin(self.s.name, self.clock.now())
            self.save()
        elif state.run != self.s.name:
            raise StateError(f"{self.s.run_dir} holds run {state.run!r}, not {self.s.name!r}: give "
                             "this config its own run_dir (or rename it back)")
        else:
            self.state = state
        return self.state

    def save(self, state: RunState | None = None) -> None:
        self.state = state or self.state
        save_patiently(self.store, self.state, self.clock, self.s.watch.poll_interval_s,
                       self.s.policy.filesystem_stall_max_s, lambda: bool(self.stop_requested))

    def _held(self, outage: Outage, limit_s: float, detail: str) -> None:
        """A condition blocks submitting: alert once, stop once it lasted beyond `limit_s`, else
        wait."""
        first = outage.since is None
        held = outage.note(self.state.run, self.clock.now(), limit_s, detail[:500])
        if first:  # said once per outage; the alert too
            logger.bind(run=self.state.run).warning("{}: {}; not submitting until it answers",
                                                    outage.what, detail[:500])
        self.effects.run(held.alerts)
        if held.stop:
            self._stop(held.stop)
        else:
            self.clock.sleep(self.s.watch.poll_interval_s)

    def _stop(self, reason: str) -> None:
        t = self.advance(o.Halted(reason))
        self.save()
        logger.bind(run=self.state.run).error("controller stopped reason={!r}", reason)
        self.effects.run(t.effects)
