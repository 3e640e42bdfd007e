"""Pure: the verdicts of the classifier's longer rules (diagnose.classify.RULES): who stalled a
segment, how the scheduler ended it, and the root error by precedence and time order."""

from __future__ import annotations

import re
from datetime import timedelta

from orchestrator.contract import NODE_MARKER
from orchestrator.diagnose.culprits import (
    COLLECTIVE_CALL,
    all_hosts,
    as_hosts,
    behind_in_log,
    by_stack_host,
    origin,
    progress_culprit,
    silent,
    stack_outliers,
)
from orchestrator.diagnose.judge import (
    NodeMatch,
    earliest_root,
    hardware_hosts,
    progress_stopped_early,
)
from orchestrator.diagnose.rules import (
    COLLECTIVE,
    DEVICE_FRAME,
    IN_BACKWARD,
    PROGRAM_WAIT,
    judge_root,
)
from orchestrator.diagnose.verdicts import Context, evs, verdict
from orchestrator.evidence import Match, NodeEvidence
from orchestrator.model import Cause, Evidence, JobStatus, Owner, Role, Verdict

# Root-cause precedence when several non-cascade causes appear in one segment.
PRECEDENCE: tuple[Cause, ...] = (
    Cause.GPU_ECC,
    Cause.GPU_LOST,
    Cause.NODE_FAIL,
    Cause.GPU_OOM_STARTUP,
    Cause.USER_OOM,  # refined into gpu_oom_startup / user_oom below
    Cause.HOST_OOM,
    Cause.NETWORK,  # an HCA's own error (a root); transport errors of peers are cascade
    Cause.FILESYSTEM,
    Cause.BUS_ERROR,
    Cause.SEGFAULT,
    Cause.HANG,
    Cause.USER_BUG,
)


def who_stalled(nodes: list[NodeEvidence], secondary: list[Evidence],
                stuck_only: bool = False) -> Verdict | None:
    """Who stalled the segment: a process in D state, an agent that stopped answering, a rank
    outside the collective everyone else waits in, or the node whose progress stopped first."""
    stuck = [n for n in nodes if n.stuck_detail]
    if stuck:
        fs = any(n.fs_suspect for n in stuck)
        found = [Evidence(node=n.node, file=n.file, text=n.stuck_detail, cause=Cause.HANG)
                 for n in stuck]
        if fs:
            return verdict(Cause.FILESYSTEM, [n.node for n in stuck], False, 0.8, found + secondary,
                            "a training process is stuck in filesystem I/O: the shared filesystem, "
                            "not the node", "stuck_in_filesystem", Owner.SHARED)
        return verdict(Cause.HANG, [n.node for n in stuck], True, 0.9, found + secondary,
                        "a training process was stuck while the others waited", "stuck_process",
                       Owner.NODE)
    if stuck_only:
        return None
    if (outlier := _outside(nodes, secondary)) is not None:
        return outlier
    shared = {f for n in by_stack_host(nodes) for f in n.top_frames if f}
    only = next(iter(shared)) if len(shared) == 1 else program_wait_everywhere(nodes)
    if (only and PROGRAM_WAIT.search(only) and not COLLECTIVE.search(only)
        and not DEVICE_FRAME.search(only)):
        return verdict(Cause.HANG, [], False, 0.6, secondary, "every rank waits in the program's "
                       f"own code ({only}), none in a collective: the program's hang",
                       "hang_in_program_code", Owner.JOB)
    behind = progress_culprit(nodes)
    if behind:
        return verdict(Cause.HANG, behind, True, 0.6, secondary, "progress stopped first on "
                       + ",".join(behind), "progress_stopped_first", Owner.NODE)
    return None


def program_wait_everywhere(nodes: list[NodeEvidence]) -> str:
    """Every host's dumps show the same innermost frames (a main thread and its helpers), one a wait
    in the program's own code and none in a collective, backward or a device call: that frame."""
    hosts = [n for n in by_stack_host(nodes) if n.top_frames]
    sets = {frozenset(f for f in n.top_frames if f) for n in hosts}
    if len(hosts) < 2 or len(sets) != 1:
        return ""
    frames = sorted(next(iter(sets)))
    if any(COLLECTIVE_CALL.search(f) or IN_BACKWARD.search(f) or DEVICE_FRAME.search(f)
           for f in frames):
        return ""
    return next((f for f in frames if PROGRAM_WAIT.search(f) and not COLLECTIVE.search(f)), "")


def _in_device_call(nodes: list[NodeEvidence]) -> set[str]:
    return {n.node for n in nodes for f in n.top_frames if DEVICE_FRAME.search(f)
            and not COLLECTIVE.search(f)}


def _outside(nodes: list[NodeEvidence], secondary: list[Evidence]) -> Verdict | None:
    """Ranks outside the collective the others wait in, from two sources: the stacks (an odd
    innermost frame) and the flight recorders (fewer collectives enqueued). Both agreeing, or the
    stacks alone, name the nodes; the recorders alone name them as suspects (a strike: a rank stuck
    in its own data loader is behind too, and only its stack would tell); two sources that name
    different nodes name nobody."""
    # the recorders' analysis printed in the log names a rank whose host the log maps
    named = behind_in_log(nodes)
    nodes = by_stack_host(nodes)
    odd, common = stack_outliers(nodes)
    behind = sorted({n.node for n in nodes if n.flight_detail} | {h for _, _, h in named})
    flight = [Evidence(node=n.node, file=n.file, text=n.flight_detail, cause=Cause.HANG)
              for n in nodes if n.flight_detail] + evs([(n, m) for n, m, _ in named], Role.ROOT)
    if odd and behind and set(odd) != set(behind):
        return verdict(Cause.HANG, [], False, 0.5, flight + secondary,
                       f"the sources disagree: the stacks put {','.join(odd)} outside {common}, "
                       f"the flight recorders {','.join(behind)} behind: nobody named",
                       "sources_disagree", Owner.NOBODY)
    if not odd and not behind:
        return None
    if not odd and set(behind) <= _in_device_call(nodes):  # the one stack the log holds
        return verdict(Cause.HANG, behind, True, 0.85, flight + secondary,
                       f"ranks on {','.join(behind)} never enqueued the collective the others wait "
                       "in (flight recorder), stuck inside a device call", "stuck_in_device_call",
                       Owner.NODE)
    if not odd:
        return verdict(Cause.HANG, behind, True, 0.75, flight + secondary,
                       f"ranks on {','.join(behind)} never enqueued the collective the others wait "
                       "in (flight recorder)", "behind_in_collectives", Owner.NODE_SUSPECT)
    frames = [f for n in nodes if n.node in odd for f in n.top_frames if f and f != common]
    found = [Evidence(node=n.node, file=n.file, text="innermost frames "
                   f"{', '.join(n.top_frames)}; the others wait in {common}", cause=Cause.HANG)
             for n in nodes if n.node in odd]
    if frames and COLLECTIVE_CALL.search(common) and all(COLLECTIVE_CALL.search(f) for f in frames):
        return verdict(Cause.HANG, [], False, 0.7, found + flight + secondary,
                       f"the rank outside {common} waits in another collective ({frames[0]}): the "
                       "ranks called different collectives, a deadlock in the program's own code",
                       "collectives_differ", Owner.JOB)
    if frames and not any(DEVICE_FRAME.search(f) for f in frames) and any(PROGRAM_WAIT.search(f)
                                                                         for f in frames):
        return verdict(Cause.HANG, [], False, 0.7, found + flight + secondary,
                       f"the rank outside {common} waits in the program's own code "
                       f"({frames[0]}): a deadlock or a stuck data loader, not a node",
                       "hang_in_program_code", Owner.JOB)
    return verdict(Cause.HANG, odd, True, 0.9 if behind else 0.8, found + flight + secondary,
                   f"ranks on {','.join(odd)} are not in {common}, where all the others wait"
                   + (" (the flight recorders agree)" if behind else ""), "outside_collective",
                   Owner.NODE)


# processes that did not end with the scheduler's signals: their node's fault, whatever ended it
UNKILLABLE = frozenset({"unkillable"})


def scheduler_end(job: JobStatus, cause: Cause, nodes: list[NodeEvidence], roots: list[NodeMatch],
                   secondary: list[NodeMatch]) -> Verdict:
    """Slurm ended the job (time limit, preemption). If progress had stopped long before, that was a
    hang; a node whose processes could not be killed at that end is excluded, the cause stays."""
    found = evs(roots + secondary, Role.SECONDARY)
    requeue = [(n, m) for n, m in secondary if m.signature == "job_requeue"]
    if requeue and cause == Cause.PREEMPTED:
        return verdict(cause, [], False, 0.8, evs(requeue, Role.ROOT) + found,
                       "the job was requeued: the same job "
                        "comes back", "requeued", Owner.SHARED)
    unkillable = sorted({h for n, m in roots if m.signature in UNKILLABLE and (h := origin(n, m))})
    stuck = stuck_before_end(nodes, roots) if cause == Cause.TIMELIMIT else []
    gap = progress_stopped_early(nodes, secondary) if cause == Cause.TIMELIMIT else None
    if gap is not None:
        behind = stuck or unkillable or progress_culprit(nodes) or silent(
            nodes, [(n, m) for n, m in secondary if m.signature != "job_timelimit"])
        # a report in the log puts a rank behind (a stall inspector, the flight recorder): a suspect
        named = [] if behind else sorted({h for _, _, h in behind_in_log(nodes)})
        return verdict(Cause.HANG, behind or named, bool(behind or named), 0.6, found,
                        f"progress stopped {mins(gap)} before the time limit: a hang, not the time "
                        "limit" + (f"; it stopped first on {','.join(behind or named)}"
                                   if behind or named else ""), "progress_stopped_before_limit",
                       Owner.NODE if behind else Owner.NODE_SUSPECT if named else Owner.NOBODY)
    if unkillable:
        return verdict(cause, unkillable, True, 0.85, evs([(n, m) for n, m in roots if m.signature
                                                          in UNKILLABLE], Role.ROOT) + found,
                       f"Slurm ended the job ({job.state.value}) and the processes on "
                       f"{','.join(unkillable)} did not end with its signals: that node",
                       "unkillable_at_end", Owner.NODE)
    if stuck and not any(n.last_progress_ts for n in nodes):
        return verdict(Cause.HANG, stuck, True, 0.7, found,
                       f"a process on {','.join(stuck)} was stuck (the kernel's own report) before "
                       "the time limit, and no progress line says the job still trained: a hang",
                       "stuck_before_limit", Owner.NODE)
    return verdict(cause, [], False, 0.9, found, f"Slurm ended the job: {job.state.value}",
                   "scheduler_ended", Owner.NOBODY)


def before_end(nodes: list[NodeEvidence], found: list[NodeMatch]) -> list[NodeMatch]:
    """The matches printed before Slurm's end banner in their file (after it: its teardown)."""
    ends = {n.file: min((m.line for m in n.matches if m.signature in END_BANNERS), default=None)
            for n in nodes}
    return [(n, m) for n, m in found if (end := ends.get(n.file)) is None or m.line < end]


def stuck_before_end(nodes: list[NodeEvidence], roots: list[NodeMatch]) -> list[str]:
    """Hosts with a process stuck (D state, hung task) printed before Slurm's end banner in the same
    file (after it, the stuck process is the teardown's), unless every host of the job reports it
    (then the cause is shared)."""
    ends = {n.file: min((m.line for m in n.matches if m.signature in END_BANNERS), default=None)
            for n in nodes}
    stuck = sorted({h for n, m in roots if m.cause == Cause.HANG and (h := origin(n, m))
                    and ((end := ends.get(n.file)) is None or m.line < end)})
    everyone = all_hosts(nodes)
    return [] if len(everyone) > 1 and set(stuck) >= everyone else stuck


END_BANNERS = frozenset({"job_timelimit", "job_preempted"})
# a hung task's kernel call trace through the exit path: the process was dying (the end's signal)
EXITING = re.compile(r"\b(?:do_exit|do_group_exit|get_signal)\+")


def stuck_alive(nodes: list[NodeEvidence], roots: list[NodeMatch]) -> set[str]:
    """Hosts whose processes were stuck (D state) outside the exit path: their node was stuck before
    the end came, so a step it could not kill is its failure, not the end's teardown."""
    dying = {n.node for n in nodes if any(EXITING.search(t) for _, t in n.tail)}
    return {h for n, m in roots if m.cause == Cause.HANG and (h := origin(n, m)) and h not in dying}


def mins(d: timedelta) -> str:
    return f"{d.total_seconds() / 60:.0f} min"


# lines the kernel printed (dmesg, syslog, the NVIDIA driver), not a rank
KERNEL_LINE = re.compile(r"NVRM:|\bkernel: |^\[\s*\d+\.\d+\] |^\[\w{3} \w{3} +\d+ [\d:]+ \d{4}\] |"
                         r"Out of memory: Kill|oom-kill|\bXid\b")
KERNEL_FILES = ("dmesg", "kern", "syslog", "messages")


def root_label(n: NodeEvidence, m: Match) -> str:
    """What printed the root line, for the summary: the node's own report (ORCH-NODE), the kernel
    (dmesg, the GPU driver), or a rank of the training (a line with no rank: the first error)."""
    # a job-wide file's line that names no host is not its file's "host" (slurm-77.out)
    where = origin(n, m) or (f"a host {n.file.rsplit('/', 1)[-1]} does not name" if n.job_wide
                             else n.node)
    if NODE_MARKER in m.text[:32]:
        return f"the node's own report on {where}"
    if KERNEL_LINE.search(m.text) or any(k in (m.file or n.file).rsplit("/", 1)[-1].lower()
                                         for k in KERNEL_FILES):
        return f"kernel log line on {where}"
    return f"first-rank error (rank {m.rank})" if m.rank is not None else "first error"


def best_root(roots: list[NodeMatch]) -> tuple[NodeMatch, str]:
    rank = {c: i for i, c in enumerate(PRECEDENCE)}
    best = min(roots, key=lambda nm: rank.get(nm[1].cause, len(rank)))
    first = earliest_root(roots, best)
    return (first, "earliest_error") if first is not None else (best, "")


def from_roots(nodes: list[NodeEvidence], roots: list[NodeMatch], secondary: list[NodeMatch],
                kinds: list[NodeMatch], ctx: Context) -> Verdict:
    best, order_rule = best_root(roots)
    cause = best[1].cause
    culprit_matches = [(n, m) for n, m in roots if m.cause == cause]
    # time order picked a root: later errors of the same cause elsewhere are its cascade
    if order_rule:
        culprit_matches = [(n, m) for n, m in culprit_matches if origin(n, m) == origin(*best)]
    named = [(n, m) for n, m in culprit_matches if m.named_node]
    if named:  # a line that names the failed host outranks where the line was printed
        culprit_matches = named
    culprits = as_hosts(sorted({h for n, m in culprit_matches if (h := origin(n, m))}), nodes)
    everyone = all_hosts(nodes)
    symmetric = len(everyone) > 1 and set(culprits) >= everyone
    hw = hardware_hosts(kinds)
    same_text = len({re.sub(r"\d+", "N", m.text.strip()) for _, m in culprit_matches}) == 1
    judged = judge_root(cause, best[1], culprits, symmetric, hw, nodes, ctx, same_text)
    cause, culprits, owner, rule, note = judged
    # e.g. a ps listing with no host on its lines
    if not culprits and cause in (Cause.HANG, Cause.NODE_FAIL):
        culprits = silent(nodes, secondary)
    evidence = evs(culprit_matches, Role.ROOT)
    evidence += evs([(n, m) for n, m in kinds if m.kind == "hw" and origin(n, m) in culprits],
                    Role.ROOT, 10)
    evidence += evs([nm for nm in roots + secondary if nm not in culprit_matches], Role.SECONDARY,
                    30)
    blame = owner in (Owner.NODE, Owner.NODE_SUSPECT) and bool(culprits)
    conf = 0.9 if blame or owner == Owner.JOB else 0.7
    rule = f"{rule}+{order_rule}" if order_rule else rule
    return verdict(cause, culprits, blame, conf, evidence, note
                   or f"{root_label(*best)}: {best[1].text[:160]}", rule, owner)
