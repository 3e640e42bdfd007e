"""Which node slows the job: the agents' profiles (each rank's share of samples spent waiting in a
collective) asked for once the pace shows a slowdown, and the pure judgement on them. In a lock-step
job every rank waits for the slowest at each collective, so the slowest rank waits least; a node is
as slow as its slowest rank. It is named only when it stands apart from every other node, every
node answered, and the runner-up is clearly behind; otherwise nobody is named, and why is said."""

from __future__ import annotations

import functools
import statistics
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from orchestrator.contract import DumpRecord, SegmentPaths, read_record
from orchestrator.timeout import call_with_timeout

ANSWER_WAIT_S = 30.0  # the profile takes 5 s; a node that has not answered in this is left out
MIN_SAMPLES = 50  # fewer samples of a rank than this say nothing
APART = 0.5  # the slowest node waits at most this fraction of the others' median share...
MARGIN = 0.05  # ...and at least this much less (a share of samples) than the others' median


@dataclass(frozen=True)
class SlowNode:
    """The node the profiles name (or "" with `why` when nobody stands out) and the evidence."""
    node: str
    evidence: str
    share: float = 0.0  # its share of samples waiting in collectives
    others: float = 0.0  # the median share of the other nodes
    incomplete: bool = False  # a node's profile is missing or holds no rank: worth asking again


def share(rec: DumpRecord) -> float | None:
    """The node's share: its slowest rank's (the least waiting), over ranks with enough samples."""
    shares = [p.waiting / p.samples for p in rec.processes if p.samples >= MIN_SAMPLES]
    return min(shares) if shares else None


def unanswered(records: dict[str, DumpRecord], nodes: frozenset[str],
               shares: dict[str, float]) -> str:
    """Why the profiles are incomplete ("" when they are not): who did not answer, and whose answer
    holds no rank with enough samples, with the agent's own reasons."""
    why = [f"{n} (no answer)" for n in sorted(nodes - set(records))]
    for n in sorted(set(records) & (nodes - set(shares))):
        thin = [f"pid {p.pid}: {p.samples} samples" for p in records[n].processes]
        why.append(f"{n} (no rank with {MIN_SAMPLES} samples or more: "
                   f"{'; '.join([*thin, *records[n].left_out][:4]) or 'no process'})")
    return ", ".join(why)


def localize(records: dict[str, DumpRecord], nodes: frozenset[str]) -> SlowNode:
    """Pure: the node whose ranks wait least in collectives, if it stands apart."""
    shares = {n: s for n, rec in records.items() if n in nodes and (s := share(rec)) is not None}
    if missing := unanswered(records, nodes, shares):
        return SlowNode("", f"no profile from {missing}: the slow node may be one of them "
                            "(py-spy missing, refused or starved, or the agent busy)",
                        incomplete=True)
    if len(shares) < 2:
        return SlowNode("", "one node: nothing to compare")
    ranked = sorted(shares.items(), key=lambda kv: kv[1])
    (node, low), (second, runner_up) = ranked[0], ranked[1]
    others = statistics.median(s for n, s in shares.items() if n != node)
    text = ", ".join(f"{n} {s:.0%}" for n, s in ranked)
    if low > APART * others or others - low < MARGIN:
        return SlowNode("", f"no node stands apart in the time waiting in collectives ({text})")
    if runner_up - low < MARGIN or runner_up <= APART * others:
        return SlowNode("", f"{node} and {second} both wait little in collectives ({text}): "
                            "nobody named")
    return SlowNode(node, f"{node}'s ranks wait {low:.0%} of the time in collectives, the other "
                          f"nodes' {others:.0%} (median; {text}): the others wait for it", low,
                    others)


class Profiles:
    """One profile request of a segment at a time: written to the segment's directory, answered by
    each agent in nodes/NODE.profile.json, read with the read timeout (a hung filesystem leaves a
    node unanswered, never the controller stuck)."""

    def __init__(self, segment_dir: Path, read_timeout_s: float, kind: str = "profile") -> None:
        """`kind` names the requests (a survey's and a slowdown's share the agent's request file:
        an answer is the current request's only)."""
        self.paths, self._timeout, self._kind = SegmentPaths(segment_dir), read_timeout_s, kind
        self.asked_at: datetime | None = None
        self._id = ""

    def request(self, now: datetime) -> None:
        self.asked_at, self._id = now, f"{self._kind} {now.isoformat()}"
        call_with_timeout(lambda: self.paths.profile_request.write_text(self._id + "\n"),
                          self._timeout)

    def answers(self, nodes: frozenset[str]) -> dict[str, DumpRecord]:
        """The nodes that answered the current request: every read in one worker under one read
        timeout (a hung filesystem costs one timeout a poll, not one per node)."""
        done, got = call_with_timeout(functools.partial(self._read_all, sorted(nodes)),
                                      self._timeout)
        return got if done and isinstance(got, dict) else {}

    def _read_all(self, nodes: list[str]) -> dict[str, DumpRecord]:
        out = {}
        for node in nodes:
            rec = read_record(self.paths.profile(node), DumpRecord)
            if isinstance(rec, DumpRecord) and rec.request == self._id:
                out[node] = rec
        return out

    def verdict(self, nodes: frozenset[str], now: datetime) -> SlowNode | None:
        """The judgement once every node answered (or ANSWER_WAIT_S passed); None before, or with
        no request open. A verdict closes the request."""
        if self.asked_at is None:
            return None
        got = self.answers(nodes)
        if set(got) < nodes and (now - self.asked_at).total_seconds() < ANSWER_WAIT_S:
            return None
        self.asked_at = None
        return localize(got, nodes)
