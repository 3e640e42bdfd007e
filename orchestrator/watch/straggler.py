"""A node slow from the start (issue 39): the nodes compared with each other, not the job with its
own past (a node slow from its first iteration makes no change point). On a schedule from early in
the segment every agent profiles its ranks for a few seconds (the same `py-spy record` as the
slowdown's profiles); in a lock-step job the slow node's ranks wait least in the collectives, its
peers most. A node is named when it waits less than every other node in consecutive samples that
span at least CONFIRM_S (by time, never by a count of polls), and their pooled counts set it apart
(a two-proportion z against the runner-up, and an absolute gap). A sample whose profiles are
incomplete, or caught a save, an eval or a pause, is unknown: it neither confirms nor clears."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from orchestrator.contract import DumpRecord
from orchestrator.watch.slownode import ANSWER_WAIT_S, MIN_SAMPLES, unanswered

Z_MIN = 3.5  # pooled over the chain: the runner-up waits this many standard errors more...
GAP_MIN = 0.04  # ...and at least this much more (a share of samples)
EACH_GAP = 0.01  # each sample of the chain: the node the lowest by at least this much
CONFIRM_S = 20.0  # the chain's samples span at least this long
CHAIN = 6  # the samples pooled, at most (the newest)
PAUSE_SHARE = 0.05  # a rank with more of its samples in a save or an eval: an unknown sample


class Asker(Protocol):
    """The profile requests (slownode.Profiles, or a fake)."""
    asked_at: datetime | None

    def request(self, now: datetime) -> None: ...

    def answers(self, nodes: frozenset[str]) -> dict[str, DumpRecord]: ...


@dataclass(frozen=True)
class Sample:
    """One survey: each node's slowest rank's (waiting, samples); `why` non-empty: unknown."""
    at: datetime
    counts: dict[str, tuple[int, int]]
    why: str = ""

    def share(self, node: str) -> float:
        w, n = self.counts[node]
        return w / n

    @property
    def ranked(self) -> list[str]:
        return sorted(self.counts, key=self.share)


@dataclass(frozen=True)
class Straggler:
    """The node named, the evidence, the slowdown its shares imply, and since when it stood out."""
    node: str
    evidence: str
    factor: float
    since: datetime


def sample(records: dict[str, DumpRecord], nodes: frozenset[str], at: datetime) -> Sample:
    """Pure: one survey's answers as a sample (unknown, and why, unless every node answered with a
    rank of MIN_SAMPLES samples and no rank was caught saving or evaluating)."""
    counts: dict[str, tuple[int, int]] = {}
    for n, rec in records.items():
        ranks = [p for p in rec.processes if p.samples >= MIN_SAMPLES]
        if n in nodes and ranks:
            p = min(ranks, key=lambda p: p.waiting / p.samples)
            counts[n] = (p.waiting, p.samples)
    if missing := unanswered(records, nodes, {n: 0.0 for n in counts}):
        return Sample(at, counts, f"no profile from {missing}")
    if busy := sorted(n for n, rec in records.items() if n in nodes and any(
            p.pausing > PAUSE_SHARE * p.samples for p in rec.processes)):
        return Sample(at, counts, f"a save or an eval in the profile of {', '.join(busy)}")
    if len(counts) < 2:
        return Sample(at, counts, "one node: nothing to compare")
    return Sample(at, counts)


def judge(chain: list[Sample]) -> Straggler | None:
    """Pure: the node the chain (consecutive known samples, the same node the lowest in each) sets
    apart, or None."""
    if len(chain) < 2 or (chain[-1].at - chain[0].at).total_seconds() < CONFIRM_S:
        return None
    node = chain[-1].ranked[0]
    for s in chain:
        if s.ranked[0] != node or s.share(s.ranked[1]) - s.share(node) < EACH_GAP:
            return None
    pooled = {n: (sum(s.counts[n][0] for s in chain), sum(s.counts[n][1] for s in chain))
              for n in chain[-1].counts if all(n in s.counts for s in chain)}
    if node not in pooled or len(pooled) < 2:
        return None
    share = {n: w / t for n, (w, t) in pooled.items()}
    second = min((n for n in pooled if n != node), key=share.__getitem__)
    gap = share[second] - share[node]
    p = (pooled[node][0] + pooled[second][0]) / (pooled[node][1] + pooled[second][1])
    se = math.sqrt(max(p * (1 - p), 1e-9) * (1 / pooled[node][1] + 1 / pooled[second][1]))
    if gap < GAP_MIN or gap / se < Z_MIN:
        return None
    others = statistics.median(s for n, s in share.items() if n != node)
    factor = max(1.0, (1 - share[node]) / max(1e-3, 1 - others))
    text = ", ".join(f"{n} {share[n]:.0%}" for n in sorted(share, key=share.__getitem__))
    span = (chain[-1].at - chain[0].at).total_seconds()
    return Straggler(node, f"{node}'s ranks wait {share[node]:.0%} of the time in collectives, "
                           f"the other nodes' {others:.0%} (median; {text}; {len(chain)} profiles "
                           f"over {span:.0f}s, z={gap / se:.1f} against {second}): the others wait "
                           f"for it from the start (at least ~{factor:.2f}x)", factor, chain[0].at)


class Survey:
    """The schedule and the chain of one segment's surveys (a new Survey per segment and spare
    swap; a restart from an earlier iteration or a new set of nodes clears it too)."""

    def __init__(self, asker: Asker | None, every_s: float, after_s: float) -> None:
        self._asker, self._every, self._after = asker, every_s, after_s
        self.chain: list[Sample] = []
        self.last: Sample | None = None  # the newest sample, known or not
        self.done = False  # a node was named: no more surveys this segment
        self._next: datetime | None = None
        self._nodes: frozenset[str] = frozenset()
        self._iteration: int | None = None
        self._void = False  # the open request's window held a pause: its answer is unknown

    def clear(self) -> None:
        self.chain, self._next, self._void = [], None, False
        if self._asker is not None:
            self._asker.asked_at = None

    def step(self, now: datetime, nodes: frozenset[str], moving: bool, iteration: int | None,
             busy: bool = False) -> Straggler | None:
        """One poll: `moving`, progress was seen lately (no pause, no hang); `busy`, another
        profile request is open (this one waits its turn)."""
        if self._asker is None or self._every <= 0 or self.done:
            return None
        if nodes != self._nodes or (iteration is not None and self._iteration is not None
                                    and iteration < self._iteration):
            self.clear()  # a step or a spare swap: nothing carries over
        self._nodes, self._iteration = nodes, iteration
        if self._asker.asked_at is not None:
            self._void |= not moving
            return self._answered(now, nodes)
        if not moving or busy:
            return None
        if self._next is None:
            self._next = now + timedelta(seconds=self._after)
        if now >= self._next:
            self._asker.request(now)
            self._next, self._void = now + timedelta(seconds=self._every), False
        return None

    def _answered(self, now: datetime, nodes: frozenset[str]) -> Straggler | None:
        asked = self._asker.asked_at if self._asker is not None else None
        assert asked is not None and self._asker is not None
        got = self._asker.answers(nodes)
        if set(got) < nodes and (now - asked).total_seconds() < ANSWER_WAIT_S:
            return None
        self._asker.asked_at = None
        s = sample(got, nodes, asked)
        if self._void and not s.why:
            s = Sample(asked, s.counts, "the job paused during the profile")
        self.last = s
        if s.why:
            return None  # unknown: neither confirms nor clears
        low, second = s.ranked[:2]
        if s.share(second) - s.share(low) < EACH_GAP:
            self.chain = []  # a tie: evidence against nobody, and for nobody
            return None
        if self.chain and self.chain[-1].ranked[0] != low:
            self.chain = []
        self.chain = [*self.chain, s][-CHAIN:]
        found = judge(self.chain)
        self.done = found is not None
        return found
