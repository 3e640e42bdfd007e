"""What the watchdog knows beyond one poll's snapshot, kept across the polls of one segment: the
step cadence (its early stall limit), whether a checkpoint is being written, whether the current
stacks confirm a hang, the job's pace (a slowdown and when it began) and, once it slowed, the
profiles that name the slow node and whether swapping it for a spare is worth a restart."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Protocol

from orchestrator.loop import observations as o
from orchestrator.loop.drains import Drains
from orchestrator.loop.injob import job_submitted_at
from orchestrator.loop.supervise import EARLY_FLOOR_S, Seen
from orchestrator.model import CancelReason
from orchestrator.settings import Settings, Watch
from orchestrator.spares import swap_gain_s, worth_swapping
from orchestrator.state import RunState, SegmentRecord
from orchestrator.watch.cadence import Cadence, written_since
from orchestrator.watch.losswatch import first_anomaly
from orchestrator.watch.pace import Pace, Slowdown
from orchestrator.watch.pauses import pausing
from orchestrator.watch.segment import SegmentWatch
from orchestrator.watch.slownode import Profiles, SlowNode
from orchestrator.watch.steptime import line_period_s
from orchestrator.watch.straggler import Asker, Straggler, Survey
from orchestrator.watch.stuck import hang_confirmed, silent_nodes

DEFAULT_STARTUP_S = 120.0  # a restart's start-up when this segment's own is unknown
# never less: a step's teardown, a new step's launch, imports, rendezvous and the checkpoint's load
# (the segment's own start-up is measured from when the controller saw it run: that can be late)
MIN_STARTUP_S = 30.0
PROFILE_TRIES = 3  # profiles asked for one slowdown, while they come back incomplete and it lasts
REACH_EVERY_S = 10.0  # the scheduler is asked about silent nodes at most this often


class Reach(Protocol):
    """What the vigil asks the scheduler about silent and drained nodes (the backend's)."""

    def unreachable(self, nodes: frozenset[str]) -> frozenset[str] | None: ...

    def ping_window_s(self) -> float: ...

    def drained_reasons(self, nodes: frozenset[str]) -> dict[str, str] | None: ...


@dataclass(frozen=True)
class SwapTerms:
    """What a swap for a spare would cost and gain: free spares, the seconds left of the job's time
    limit, the iterations left to the goal, the segment's start-up and its newest checkpoint (the
    work after it is lost at a restart: the vigil knows when it saw it)."""
    spares: int = 0
    remaining_s: float = 0.0
    iterations_left: int | None = None
    startup_s: float | None = None
    batch_host: str = ""  # a step cannot restart without it (the supervisor runs there)


@dataclass(frozen=True)
class SlowStep:
    """What the pace and the profiles say at one poll: observations for the ledger, a line for the
    log, and (non-empty) the sentence for cancelling the step to swap the slow node."""
    observations: tuple[o.Observation, ...] = ()
    notes: tuple[str, ...] = ()
    swap: str = ""
    reason: CancelReason = CancelReason.SLOW_NODE  # or DRAINED: an admin's drain, swapped out

    def unless(self, cancel: str) -> SlowStep:
        """No swap when the job is being cancelled for another reason: the node is struck."""
        if not cancel or not self.swap:
            return self
        return SlowStep(tuple(replace(ob, swap=False) if isinstance(ob, o.SlowNodeFound) else ob
                              for ob in self.observations), self.notes)


class Vigil:
    """The cadence and pace of one segment, fed once per poll."""

    def __init__(self, checkpoint_dir: Path, w: Watch, segment_dir: Path | None = None,
                 prior: float | None = None, reach: Reach | None = None,
                 asker: Asker | None = None) -> None:
        """`prior`: the previous segment's cadence, the seed of this one's (a new Vigil per
        segment and per spare swap: nothing else carries over). `reach`: the scheduler, asked
        about the nodes whose agent fell silent. `asker`: the survey's profiles (a fake's)."""
        self.cadence, self.pace = Cadence(seed=prior), Pace(w.pace_window_s)
        self._poll = w.poll_interval_s
        self._dir, self._timeout = checkpoint_dir, w.read_timeout_s
        self.reported: Slowdown | None = None  # the slowdown last reported
        self._tries = 0  # profile requests for it
        self.profiles = Profiles(segment_dir, w.read_timeout_s) if segment_dir else None
        self.survey = Survey(asker or (Profiles(segment_dir, w.read_timeout_s, "survey")
                                       if segment_dir else None),
                             w.survey_every_s, w.survey_after_s)
        self._ckpt: tuple[str | None, datetime] | None = None  # the newest checkpoint, seen when
        self._reach, self._reach_at = reach, None  # type: tuple[Reach | None, datetime | None]
        self._down: frozenset[str] | None = None  # the scheduler's last answer on silent nodes
        self._last: datetime | None = None  # the last progress, and the newest iteration, seen
        self._iteration: int | None = None
        self.drains = Drains(reach, w.swap_drained)
        self._loss_told = False  # the printed loss went bad and the segment was cancelled for it

    def seen(self, watch: SegmentWatch, base: Seen, now: datetime) -> Seen:
        """`base` with the cadence, a checkpoint save in progress and the stacks' confirmation."""
        last = self._last = base.last_progress
        self.cadence.see(last)
        if not self.cadence.seeded and not self.cadence.learned:
            self.cadence.seed(printed_period(watch, self._poll))
        self.pace.see(now, it := watch.max_iteration())
        self._iteration = it
        cadence = self.cadence.value()
        recent = now - timedelta(seconds=max(EARLY_FLOOR_S / 2, 2 * (cadence or 0.0)))
        # only while quiet: a directory walk per poll of a healthy run would be waste
        saving = (last is not None and last < recent and cadence is not None
                  and written_since(self._dir, recent, self._timeout))
        asked = watch.dumps_requested_at
        # the logs' last lines are read only once stacks were asked for (the job is quiet)
        paused = pausing(nw.scan for nw in watch.nodes.values()
                         if nw.exit_record is None) if asked else ""
        answering = frozenset(n for n, nw in watch.nodes.items() if asked and nw.dump is None
                              and nw.exit_record is None and nw.heartbeat_seen_at is not None
                              and nw.heartbeat_seen_at > asked)
        confirmed, down = self._reached(watch, asked, now,
                                        hang_confirmed(watch.nodes, asked, now, paused))
        return replace(base, cadence_s=cadence, first_step=self.cadence.first_step,
                       pausing=saving, answering=answering,
                       confirmed=confirmed, unreachable=down)

    def _reached(self, watch: SegmentWatch, asked: datetime | None, now: datetime,
                 confirmed: str) -> tuple[str, frozenset[str]]:
        """(the confirmation, the silent nodes the scheduler cannot reach). A hang confirmed only
        by silent agents is a late heartbeat: the scheduler is asked whether it reaches those
        nodes. Not reached: a node failure (the second value). Reached: the confirmation waits
        until the silence outlasts the scheduler's own ping window (it may not have pinged
        since), then stands: the node's job is frozen, its slurmd alive. Unknown: it stands."""
        silent = silent_nodes(watch.nodes, asked) if confirmed and self._reach else frozenset()
        if not silent or self._reach is None:
            return confirmed, frozenset()
        beats = [b for n in silent if (b := watch.nodes[n].heartbeat_seen_at) is not None]
        held_until = min(beats, default=asked or now) + timedelta(
            seconds=self._reach.ping_window_s())
        if (self._reach_at is None or (now - self._reach_at).total_seconds() >= REACH_EVERY_S
                or self._reach_at < held_until <= now):  # a fresh answer when the wait ends
            self._reach_at, self._down = now, self._reach.unreachable(silent)
        if self._down is None:
            return confirmed, frozenset()
        if self._down & silent:
            return confirmed, self._down & silent
        return ("" if now < held_until else confirmed), frozenset()

    def new_slowdown(self) -> Slowdown | None:
        """A slowdown not reported yet (or one that grew by half since): report it once."""
        sd = self.pace.slowdown()
        if sd is None or (self.reported is not None and sd.factor < 1.5 * self.reported.factor):
            return None
        self.reported = sd
        return sd


    def slow(self, watch: SegmentWatch, now: datetime, checkpoint: str | None,
             terms_now: Callable[[], SwapTerms]) -> SlowStep:
        """The pace's news (`_slow`), the printed loss gone bad (the segment is cancelled to roll
        back) and the admins' drains of the step's nodes: a drained node is swapped for a free
        spare at the next complete checkpoint, a slow one when it pays."""
        found = self._slow(watch, now, checkpoint, terms_now)
        if (bad := first_anomaly(watch)) is not None and not self._loss_told:
            self._loss_told = True  # cancelled once: the verdict and the rollback follow its end
            why = f"{bad.sentence()}: cancelled to roll back to a checkpoint written before it"
            return SlowStep(found.observations, (*found.notes, why), why, CancelReason.LOSS_ANOMALY)
        live = frozenset(n for n, nw in watch.nodes.items() if nw.exit_record is None)
        drain = self.drains.step(live, now, checkpoint,
                                 lambda: ((t := terms_now()).spares, t.batch_host))
        obs = found.observations + drain.observations
        if drain.swap and not found.swap:
            return SlowStep(obs, (*found.notes, drain.swap), drain.swap, CancelReason.DRAINED)
        return replace(found, observations=obs)

    def _slow(self, watch: SegmentWatch, now: datetime, checkpoint: str | None,
              terms_now: Callable[[], SwapTerms]) -> SlowStep:
        """A new slowdown is reported and the agents asked for profiles; once they answered, the
        slow node is named (or why nobody is), and swapped when a spare is free and the time it
        saves over the rest of the segment exceeds a restart's cost, else struck."""
        obs: tuple[o.Observation, ...] = ()
        notes: tuple[str, ...] = ()
        if self._ckpt is None or self._ckpt[0] != checkpoint:
            self._ckpt = (checkpoint, now)
        if sd := self.new_slowdown():
            obs = (o.SlowedDown(sd.factor, sd.since, slowdown_note(sd)),)
            notes = (slowdown_note(sd),)
            if self.profiles is not None:
                self.profiles.request(now)
                self._tries = 1
        live = frozenset(n for n, nw in watch.nodes.items() if nw.exit_record is None)
        if st := self._surveyed(live, now):
            return self._act(st.node, st.evidence, (st.factor, st.since, self.pace.recent_s()),
                             obs, notes, now, terms_now)
        found = self.profiles.verdict(live, now) if self.profiles is not None else None
        if found is None or self.reported is None:
            return SlowStep(obs, notes)
        if not found.node:
            return SlowStep(obs, (*notes, self._nobody(found, now)))
        sd = self.reported
        return self._act(found.node, found.evidence, (sd.factor, sd.since, sd.now_s), obs, notes,
                         now, terms_now)

    def _surveyed(self, live: frozenset[str], now: datetime) -> Straggler | None:
        """The survey's poll: the job moves when progress was seen within two cadences."""
        last, cadence = self._last, self.cadence.value() or self._poll
        moving = last is not None and (now - last).total_seconds() <= 2 * max(cadence,
                                                                             self._poll)
        busy = self.profiles is not None and self.profiles.asked_at is not None
        return self.survey.step(now, live, moving, self._iteration, busy)

    def _act(self, node: str, evidence: str, pace: tuple[float, datetime, float | None],
             obs: tuple[o.Observation, ...], notes: tuple[str, ...], now: datetime,
             terms_now: Callable[[], SwapTerms]) -> SlowStep:
        """The slow node named: swapped for a spare when one is free and the time it saves over
        the rest of the segment exceeds a restart's cost, else struck (once a segment)."""
        assert self._ckpt is not None
        factor, since, now_s = pace
        self.survey.done = True
        terms = terms_now()  # only now: the spares read the shared blacklist
        startup = DEFAULT_STARTUP_S if terms.startup_s is None else max(MIN_STARTUP_S,
                                                                        terms.startup_s)
        cost = startup + (now - self._ckpt[1]).total_seconds()
        left = terms.remaining_s
        if terms.iterations_left is not None and now_s is not None:
            left = min(left, terms.iterations_left * now_s)
        gain = swap_gain_s(factor, left)
        host = node == terms.batch_host
        swap = terms.spares > 0 and not host and worth_swapping(factor, left, cost)
        why = (f"; a swap saves ~{gain:.0f}s of the {left:.0f}s left against a restart's "
               f"~{cost:.0f}s" + (" (no free spare)" if not terms.spares else
                                  " (it is the batch host: no restart inside the job)" if host
                                  else ""))
        evidence += why
        obs += (o.SlowNodeFound(node, factor, since, evidence, swap),)
        return SlowStep(obs, (*notes, f"slow node {node}: {evidence}"),
                        swap=f"slow node {node} ({factor:.2f}x): swapped for a spare: "
                             f"{evidence}" if swap else "")

    def _nobody(self, found: SlowNode, now: datetime) -> str:
        """The line for a verdict that names nobody; incomplete profiles are asked for again while
        the slowdown lasts (a node's answer can come back empty once: a starved py-spy, an agent
        busy), at most PROFILE_TRIES times."""
        line = f"the job slowed; no slow node named: {found.evidence}"
        if (not found.incomplete or self._tries >= PROFILE_TRIES or self.profiles is None
                or self.pace.slowdown() is None):
            return line
        self._tries += 1
        self.profiles.request(now)
        return f"{line}; profiles asked again ({self._tries} of {PROFILE_TRIES})"


def printed_period(watch: SegmentWatch, poll_s: float) -> float | None:
    """The period of progress sightings the live nodes' last lines print (never under the poll
    interval: a sighting is one poll at best); the largest over the nodes; None: none printed."""
    found = [s for nw in watch.nodes.values() if nw.exit_record is None
             and (s := line_period_s(nw.scan.tail, nw.scan.progress)) is not None]
    return max([poll_s, *found]) if found else None


def prior_cadence(state: RunState, seg: SegmentRecord) -> float | None:
    """The cadence learned by the newest segment before `seg` that learned one."""
    return next((s.step_cadence_s for s in reversed(state.segments)
                 if s.index < seg.index and s.step_cadence_s is not None), None)


def swap_terms(s: Settings, state: RunState, seg: SegmentRecord, spares: int,
               running_since: datetime | None, iteration: int | None, now: datetime) -> SwapTerms:
    """The terms of a swap from the ledger: the job's time limit counts from its submission (an
    overestimate of the time used, so a swap is never over-sold)."""
    start = job_submitted_at(state, seg) or now
    target = state.target_iteration or s.goal.target_iteration
    began = running_since or seg.submitted_at
    return SwapTerms(
        spares=spares,
        remaining_s=s.resources.time_limit_min * 60 - (now - start).total_seconds(),
        iterations_left=target - iteration if target and iteration is not None else None,
        startup_s=((seg.first_progress_at - began).total_seconds()
                   if seg.first_progress_at and began else None),
        batch_host=seg.allocation[0] if seg.allocation else "")


def slowdown_note(sd: Slowdown) -> str:
    return (f"the job runs {sd.factor:.2f}x slower than before: {sd.now_s:.3f} s per iteration "
            f"since {sd.since:%Y-%m-%d %H:%M:%S}, {sd.baseline_s:.3f} s before (a lock-step job "
            "runs at the pace of its slowest node)")
