"""The segment's life as one pure transition (issue 24): the controller's ledger is a fold of its observations.

Each scenario of the fake-controller and spares tests is run with the controller's journal on; every
(ledger, observation, time) is then replayed through `advance` alone and must give the same transition
(ledger, effects, outcome), the chain must link (each transition starts from the previous one's ledger),
the input ledger must be left as it was, and the last ledger must be what the controller saved.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from orchestrator.clock import FakeClock
from orchestrator.loop import observations as o
from orchestrator.loop.advance import HANDLERS, Phase, advance, phase
from orchestrator.loop.controller import Controller
from orchestrator.loop.effects import Alert
from orchestrator.model import CancelReason, JobRef, JobState, JobStatus, RunStatus
from orchestrator.state import RunState, StateStore
from tests.fakes import FakeCluster, Fault
from tests.unit import test_controller_fake as plain
from tests.unit import test_controller_spares as spares

Make = Callable[..., tuple[Controller, FakeCluster, FakeClock]]

SCENARIOS: dict[str, tuple[Make, dict[str, Any]]] = {
    "sticky ecc excluded": (plain.make, {"faults": {"node3": Fault("ecc", at=35)}}),
    "user bug stops": (plain.make, {"faults": {"all": Fault("bug", at=25)}}),
    "time limit resumes": (plain.make, {"target": 300, "resources": {"nodes": 2, "time_limit_min": 2},
                                        "watch": {"poll_interval_s": 5}}),
    "hang cancelled": (plain.make, {"faults": {"node2": Fault("hang", at=20, sticky=False)},
                                    "watch": {"stall_timeout_s": 30, "poll_interval_s": 2}}),
    "no-progress breaker": (plain.make, {"faults": {n: Fault("segfault", at=1) for n in plain.NODES},
                                         "policy": {"max_no_progress_segments": 2, "strike_threshold": 5}}),
    "every node broken": (plain.make, {"faults": {n: Fault("ecc", at=5 * (i + 1)) for i, n in enumerate(plain.NODES)},
                                       "resources": {"nodes": 3}, "policy": {"max_segments": 6}}),
    "ecc restarts on the spare": (spares.make, {"faults": {"node2": Fault("ecc", at=35)}}),
    "two spares, two restarts": (spares.make, {"faults": {"node2": Fault("ecc", at=25), "node3": Fault("ecc", at=40)},
                                               "nodes": [*spares.NODES, "node5"], "resources": {"spare_nodes": 2}}),
    "user bug in a job with spares": (spares.make, {"faults": {"all": Fault("bug", at=25)}}),
}


def journal_of(tmp_path: Path, make: Make, kw: dict[str, Any]) -> tuple[Controller, RunState]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    ctl, _, _ = make(tmp_path, **kw)
    ctl.journal = []
    return ctl, ctl.run()


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_scenario_replays_from_its_observations_alone(tmp_path: Path, name: str) -> None:
    make, kw = SCENARIOS[name]
    ctl, final = journal_of(tmp_path, make, kw)
    assert ctl.journal, "the controller fed advance nothing"
    first = ctl.journal[0][0]
    ledger = first
    for before, obs, now, t in ctl.journal:
        assert before == ledger, f"{type(obs).__name__}: the ledger changed outside advance"
        frozen = before.model_dump_json()
        again = advance(before, obs, ctl.s, now)
        assert again == t, f"{type(obs).__name__}: not the same transition on replay"
        assert before.model_dump_json() == frozen, f"{type(obs).__name__}: advance changed its input"
        ledger = t.ledger
    assert ledger == final
    saved = StateStore(ctl.s.run_dir).load()
    assert saved is not None and saved.model_dump() == final.model_dump()
    kinds = {type(obs) for _, obs, _, _ in ctl.journal}
    assert {o.Planned, o.Submitted, o.Polled, o.Ended} <= kinds  # every scenario submits, polls and judges


def test_the_scenarios_together_feed_the_observations_of_a_segment_s_life(tmp_path: Path) -> None:
    seen: set[type] = set()
    for i, name in enumerate(sorted(SCENARIOS)):
        make, kw = SCENARIOS[name]
        ctl, _ = journal_of(tmp_path / str(i), make, kw)
        assert ctl.journal is not None
        seen |= {type(obs) for _, obs, _, _ in ctl.journal}
    must = {o.Planned, o.Submitted, o.Polled, o.QueueNoted, o.Cancelling, o.Ended, o.AllocationKnown,
            o.RestartedInJob, o.JobEnding, o.CheckpointSeen, o.Started}
    assert must <= seen, must - seen


def test_every_observation_has_a_handler() -> None:
    members = set(o.Observation.__args__)
    assert members == set(HANDLERS)


def test_a_segment_s_phases_follow_its_observations(tmp_path: Path) -> None:
    ctl, cluster, clock = plain.make(tmp_path)
    from orchestrator.loop.submission import prepare

    state = ctl.load_or_init()
    prepared = prepare(ctl.s, state, cluster, clock.now(), "python")
    steps: list[o.Observation] = [
        o.Planned(prepared.spec, "fake", prepared.blacklist),
        o.Submitted(JobRef(job_id="7", submitted_at=clock.now(), backend="fake")),
        o.Polled(JobStatus(state=JobState.PENDING), (), (), None),
        o.Polled(JobStatus(state=JobState.RUNNING, nodes=("node1",)), ("node1",), ("node1",), 3),
        o.Cancelling(CancelReason.STALL, "stall: no progress for 99s (limit 90s)"),
        o.Ended(JobStatus(state=JobState.CANCELLED, nodes=("node1",)), ()),
    ]
    phases = []
    for obs in steps:
        state = advance(state, obs, ctl.s, clock.now()).ledger
        assert state.current is not None
        phases.append(phase(state.current))
    assert phases == [Phase.PLANNED, Phase.SUBMITTED, Phase.PENDING, Phase.RUNNING, Phase.CANCELLING, Phase.ENDED]
    seg = state.current
    assert seg is not None and seg.cancel_reason == CancelReason.STALL and seg.end_iteration == 3
    assert seg.action is not None and state.status == RunStatus.RUNNING


def test_an_observation_that_changes_nothing_says_so(tmp_path: Path) -> None:
    ctl, _, clock = plain.make(tmp_path)
    state = ctl.load_or_init()
    t = advance(state, o.Started(state.target_iteration), ctl.s, clock.now())
    assert not t.changed and t.ledger is state
    t = advance(state, o.Halted("the scheduler did not answer for 2 h"), ctl.s, clock.now())
    assert t.changed and t.ledger.status == RunStatus.STOPPED and state.status == RunStatus.RUNNING
    assert [type(e).__name__ for e in t.effects] == ["Alert"]
    # issue 37: a plain start leaves a stopped run stopped; only a resume on purpose goes on
    assert not advance(t.ledger, o.Started(None), ctl.s, clock.now()).changed
    back = advance(t.ledger, o.Started(None, resume=True), ctl.s, clock.now())
    assert back.ledger.status == RunStatus.RUNNING and "it stopped because: the scheduler" in back.note


def test_a_slowdown_is_recorded_once_alerted_and_shown_in_status_and_events(tmp_path: Path) -> None:
    from orchestrator.loop.events import events
    from orchestrator.views.status import status_json

    ctl, cluster, clock = plain.make(tmp_path)
    from orchestrator.loop.submission import prepare

    state = ctl.load_or_init()
    prepared = prepare(ctl.s, state, cluster, clock.now(), "python")
    for obs in (o.Planned(prepared.spec, "fake", prepared.blacklist),
                o.Submitted(JobRef(job_id="7", submitted_at=clock.now(), backend="fake")),
                o.Polled(JobStatus(state=JobState.RUNNING, nodes=("node1",)), ("node1",), ("node1",), 3)):
        state = advance(state, obs, ctl.s, clock.now()).ledger
    slow = o.SlowedDown(1.27, clock.now(), "the job runs 1.27x slower than before: ...")
    t = advance(state, slow, ctl.s, clock.now())
    alert = t.effects[0]
    assert t.changed and len(t.effects) == 1 and isinstance(alert, Alert) and "1.27x" in alert.title
    again = advance(t.ledger, slow, ctl.s, clock.now())
    assert not again.changed and again.effects == ()  # the same slowdown: no second alert
    seg = status_json(t.ledger, clock.now())["segments"][-1]
    assert seg["slowdown"]["factor"] == 1.27 and seg["slowdown"]["since"]
    assert [e[1] for e in events(t.ledger, clock.now())].count("slowdown") == 1
