"""A run's earlier allocations, read from the same logs: a series of `slurm-<jobid>.out` files,
or allocations appended to one file (a requeue with `--open-mode=append`: each begins with its own
start lines). The last allocation is judged; the earlier ones are its history, replayed through the
policy as the controller would have lived them (a strike per weak verdict, the same failure at the
same step on other nodes), so DECISIONS.md decides with the history it asks for."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from itertools import zip_longest

from orchestrator.blacklist import Blacklist
from orchestrator.diagnose.classify import Context, classify, infer_job_state
from orchestrator.diagnose.culprits import all_hosts
from orchestrator.diagnose.nodes import node_evidence
from orchestrator.diagnose.scan import NodeScan
from orchestrator.evidence import NodeEvidence
from orchestrator.model import Decision, Owner, Verdict
from orchestrator.policy import decide
from orchestrator.settings import Goal, Policy
from orchestrator.state import RunState, SegmentRecord

T0 = datetime(2000, 1, 1, tzinfo=UTC)
# `slurm-%j.out` (and .err): one allocation per job id; array tasks (`slurm-%A_%a`) are other runs
JOB_FILE = re.compile(r"^slurm-(\d+)\.(?:out|err|log|txt)$")
Allocation = list[NodeEvidence]
# Slurm's end banner names the job's batch host: a job-wide file with no host prefixes still tells
# two allocations apart by it
BANNER_HOST = re.compile(r"\*\*\* (?:JOB|STEP) [\d.]+ ON (\S+) ")


def job_of(name: str) -> int | None:
    m = JOB_FILE.match(name)
    return int(m.group(1)) if m else None


def split_allocations(scans: list[tuple[str, NodeScan]],
                      exit_codes: dict[str, int | None] | None = None
                      ) -> tuple[list[Allocation], Allocation]:
    """(earlier allocations oldest first, the last one) from the scanned files (name, scan). A
    file's job is its name's (`slurm-<id>.out`), else the one its start line named (`==== job N
    ====`, `SLURM_JOB_ID=N`); each part of a file an older job's start line began goes with that
    job's files. Other parts a file held before its last are history by position; files that name
    no job belong to the last allocation."""
    jobs = [(job_of(name) or s.job, s) for name, s in scans]
    older = {p.job for _, s in scans for p in s.earlier if p.job is not None}
    ids = sorted({j for j, _ in jobs if j is not None} | older)
    last_id = ids[-1] if ids else None
    history: list[Allocation] = []
    for job in ids[:-1]:
        parts = [p for j, s in jobs for p in s.earlier if p.job == job and j != job]
        group = [s for j, s in jobs if j == job]
        history += _earlier(group) + [[node_evidence(s) for s in [*parts, *group]]]
    current = [s for j, s in jobs if j in (None, last_id)]
    history += _earlier(current, set(ids[:-1]))
    return history, [node_evidence(s) for s in current]


def _earlier(group: list[NodeScan], elsewhere: frozenset[int] | set[int] = frozenset()
             ) -> list[Allocation]:
    """The allocations the files of one job held before their last, by position (those an older
    job's start line began, `elsewhere`, went with that job's files)."""
    parts = zip_longest(*([p for p in s.earlier if p.job not in elsewhere] for s in group))
    return [[node_evidence(s) for s in part if s is not None] for part in parts]


def _segment(index: int, alloc: Allocation, v: Verdict, d: Decision | None = None) -> SegmentRecord:
    ends = [n.last_iteration for n in alloc if n.last_iteration is not None]
    return SegmentRecord(index=index, job_name="offline", job_id=f"allocation-{index}",
                         nodes=_hosts(alloc), end_iteration=max(ends, default=None),
                         cause=v.cause, culprit_nodes=list(v.culprit_nodes), rule=v.rule,
                         action=d.action if d else None, decision_rule=d.rule if d else "")


def _hosts(alloc: Allocation) -> list[str]:
    banners = {h.group(1) for n in alloc for m in n.matches if (h := BANNER_HOST.search(m.text))}
    return sorted(all_hosts(alloc) | banners | {h for n in alloc for h in n.listed})


def _run(segments: list[SegmentRecord], blacklist: Blacklist) -> RunState:
    return RunState(run="offline", created_at=T0, updated_at=T0, segments=segments,
                    blacklist=blacklist)


def decide_with_history(history: list[Allocation], current: Allocation, verdict: Verdict,
                        policy: Policy | None = None, goal: Goal | None = None
                        ) -> tuple[Decision, Verdict]:
    """The policy's decision for the last allocation after the earlier ones were lived (their
    decisions and strikes, as the controller records them); the job's repeat (the same failure at
    the same step on other nodes) names nobody."""
    policy, goal = policy or Policy(), goal or Goal()
    segs: list[SegmentRecord] = []
    bl = Blacklist()
    for i, alloc in enumerate(history, 1):
        stalled = any(n.top_frames or n.stuck_detail for n in alloc)
        v = classify(infer_job_state(alloc), alloc, Context(stalled=stalled))
        d = decide(_run([*segs, _segment(i, alloc, v)], bl), v, policy, goal, T0)
        segs.append(_segment(i, alloc, v, d))
        for node in d.blame_nodes:
            bl = bl.record(node, v.cause, v.summary[:200], f"allocation-{i}", T0, hard=d.hard,
                           expiry=timedelta(hours=policy.blacklist_expiry_h))
    state = _run([*segs, _segment(len(history) + 1, current, verdict)], bl)
    d = decide(state, verdict, policy, goal, T0)
    if d.rule == "repeats_on_other_nodes":
        verdict = verdict.model_copy(update={"culprit_nodes": (), "blame": False,
                                             "owner": Owner.JOB})
    return d, verdict
