"""Verdicts from cascade errors alone (the initiating fault left no error line of its own):
requeues, spot notices, transport errors that point at a host, silent hosts, a host's own hardware
report, a lone crashed rank, every rank killed at once."""

from __future__ import annotations

import re

from orchestrator.diagnose.culprits import (
    all_hosts,
    origin,
    peer_culprits,
    progress_culprit,
    silent,
)
from orchestrator.diagnose.judge import hardware_hosts
from orchestrator.diagnose.verdicts import Context, NodeMatch, ev, evs, verdict
from orchestrator.evidence import NodeEvidence
from orchestrator.model import Cause, Evidence, JobStatus, Owner, Role, Verdict

BANNERS = frozenset({"job_timelimit", "job_preempted", "job_requeue", "job_node_fail",
                     "spot_termination"})


def killed_everywhere(nodes: list[NodeEvidence], secondary: list[NodeMatch], kinds: list[NodeMatch],
                       state_cause: Cause | None) -> Verdict | None:
    """Every host's ranks SIGKILLed with no error of their own and no cancel, preemption or
    time-limit line: the OOM killer (loading shards, gathering a state dict): the job's own memory
    use."""
    kills = [(n, m) for n, m in kinds if m.kind == "killed"]
    if not kills or state_cause is not None or any(m.signature in BANNERS
                                                   or "CANCELLED AT" in m.text
                                                   for _, m in secondary):
        return None
    if _step_torn_down(nodes):
        return None
    hosts = {h for n, m in kills if (h := origin(n, m))}
    everyone = all_hosts(nodes)
    if len(everyone) > 1 and hosts >= everyone:
        return verdict(Cause.HOST_OOM, [], False, 0.75, evs(kills, Role.ROOT),
                        "every rank was killed (SIGKILL) at once with no error of its own: the OOM "
                        "killer", "killed_everywhere", Owner.JOB)
    return None


HEARTBEAT_LOST = re.compile(r"heartbeat timeout\. This indicates that the remote task has failed"
                            r"|stopped sending heartbeats|missed \d+ heartbeats"
                            r"|[Hh]eartbeat (?:lost|expired) (?:from|for) (?:task|node|worker)")
# srun ends the step once a task failed otherwise (--kill-on-bad-exit): the others' `Killed` that
# follows is that teardown, not the OOM killer
_STEP_ABORTED = re.compile(r"srun: Job step aborted: Waiting up to \d+ seconds")
_TASK_FAILED = re.compile(r"srun: error: \S+: tasks? [\d,-]+: (?!Killed)(Aborted|Exited with exit "
                          r"code [1-9]|Segmentation fault|Bus error|Floating point exception)")


def _step_torn_down(nodes: list[NodeEvidence]) -> bool:
    lines = [text for n in nodes for _, text in n.tail]
    return (any(_STEP_ABORTED.search(t) for t in lines)
            and any(_TASK_FAILED.search(t) for t in lines))


# errors of the reporting rank's own endpoint, naming no peer: NCCL's IB completion errors,
# libfabric's (Cray MPICH `OFI poll failed`, EFA provider warnings). Not UCX's `Transport retry
# count exceeded`: the peer did not answer (blind14 case-020: the port down was the peer's)
OWN_ENDPOINT = frozenset({"nccl_ib_peer", "ofi_cq_error"})


def cascade_cause(secondary: list[NodeMatch]) -> Cause:
    """IB completion errors, or transport errors with no collective timeout, are the network's;
    otherwise the peers only saw a collective time out."""
    if any(m.signature == "nccl_ib_peer" for _, m in secondary):
        return Cause.NETWORK
    causes = {m.cause for _, m in secondary}
    timed_out = any("timeout" in m.text.lower() or "timed out" in m.text.lower() for _,
                    m in secondary)
    return Cause.NETWORK if Cause.NETWORK in causes and not timed_out else Cause.NCCL_TIMEOUT


def _named_by_cascade(nodes: list[NodeEvidence], secondary: list[NodeMatch]) -> Verdict | None:
    """A requeue, a spot notice, or transport errors that point at one host."""
    requeue = [(n, m) for n, m in secondary if m.signature == "job_requeue"]
    if requeue:
        return verdict(Cause.PREEMPTED, [], False, 0.7, evs(requeue, Role.SECONDARY, 10),
                        "the job was requeued: the same job comes back", "requeued", Owner.SHARED)
    spot = [(n, m) for n, m in secondary if m.signature == "spot_termination"]
    if spot:
        return verdict(Cause.PREEMPTED, [], False, 0.7, evs(spot, Role.ROOT, 10),
                        "the cloud reclaimed the instances (spot termination): resubmit",
                       "preempted", Owner.NOBODY)
    local = sorted({h for n, m in secondary if m.signature in OWN_ENDPOINT and not m.peer_ip
                    and (h := origin(n, m))})
    hosts = all_hosts(nodes)
    if len(local) > 1 and set(local) >= set(hosts) and all(n.last_iteration is None for n in nodes):
        return verdict(Cause.NETWORK, [], False, 0.7, evs(secondary, Role.ROOT, 10),
                       "every node's own endpoint failed the same way before any step: the job's "
                       "environment or transport settings (locked memory, provider options), not "
                       "one node", "own_endpoint_everywhere", Owner.JOB)
    # a local completion error (protection, length; a libfabric or UCX endpoint's): its HCA
    if len(local) == 1 and len(hosts) > 1:
        return verdict(Cause.NETWORK, local, True, 0.6, evs(secondary, Role.ROOT, 10),
                       f"IB completion errors on {local[0]} with no peer named: its own link",
                       "local_ib_error", Owner.NODE_SUSPECT)
    peers, votes = peer_culprits(nodes, secondary)
    if peers:
        found = [ev(n, m, Role.ROOT) for n, m in secondary if m.peer_ip][:10]
        found += [ev(n, m, Role.SECONDARY) for n, m in secondary if not m.peer_ip][:20]
        strong = votes >= 2
        by = {n.node: n for n in nodes}
        # the peers lost the connection to a host whose own output stops mid-write: it died
        dead = all(p in by and by[p].abrupt_end for p in peers)
        return verdict(Cause.NODE_FAIL if dead else Cause.NETWORK, peers, True,
                       0.8 if strong else 0.6, found,
                       f"transport errors point at {','.join(peers)} ({votes} host(s) name it; "
                       "addresses from the log)" + (" and its output ends abruptly" if dead
                                                    else ""), "peers_name_host" if strong
                       else "one_peer_names_host", Owner.NODE if strong else Owner.NODE_SUSPECT)
    return None


COLLECTIVE_TIMEOUT = re.compile(r"collective operation timeout|Timeout\(ms\)=\d")


# a watchdog's timed-out work: its process group (when named), sequence number, operation and size
WORK = re.compile(r"(?:\[PG (?:ID )?(?P<pg>\d+)[^\]]*\] )?(?:\[Rank \d+\] )?Watchdog caught "
                  r"collective operation timeout: WorkNCCL\(SeqNum=(?P<seq>\d+), "
                  r"OpType=(?P<op>\w+), NumelIn=(?P<n>\d+)")


def mismatched_work(secondary: list[NodeMatch]) -> str | None:
    """The sequence number at which ranks of one process group timed out in collectives of
    different operations or sizes (`SeqNum=3437 ALLREDUCE 4311252` beside `SeqNum=3437 ALLREDUCE
    1`): the ranks called different collectives, no node's fault."""
    seen: dict[tuple[str, str], set[tuple[str, str]]] = {}
    for _, m in secondary:
        if "WorkNCCL(SeqNum=" in m.text and (w := WORK.search(m.text)):
            seen.setdefault((w.group("pg") or "0", w.group("seq")), set()).add(
                (w.group("op"), w.group("n")))
    return next((f"SeqNum={seq}" for (_, seq), calls in sorted(seen.items()) if len(calls) > 1),
                None)


def _after_timeouts(kinds: list[NodeMatch], secondary: list[NodeMatch]) -> bool:
    """Every exit a launcher reported comes after a collective timeout printed above it in the
    same file: it followed the timeouts, it did not begin them."""
    timed = [(n.file, m.line) for n, m in secondary if COLLECTIVE_TIMEOUT.search(m.text)]
    ends = [(n.file, m.line) for n, m in kinds if m.kind in ("crash", "killed")]
    return bool(ends) and all(any(f == g and t < line for g, t in timed) for f, line in ends)


def _lone_crash(nodes: list[NodeEvidence], secondary: list[NodeMatch],
                kinds: list[NodeMatch]) -> Verdict | None:
    """One host's rank exited (and not after the timeouts above it): a strike on it; its only error
    a transport one (no host named, no peer) is its own endpoint's."""
    crashed = sorted({h for n, m in kinds if m.kind in ("crash", "killed") and (h := origin(n, m))})
    if len(crashed) != 1 or len(all_hosts(nodes)) < 2 or _after_timeouts(kinds, secondary):
        return None
    link = any(m.cause == Cause.NETWORK and not m.peer_ip and origin(n, m) in (None, crashed[0])
               for n, m in secondary)
    return verdict(Cause.NETWORK if link else Cause.UNKNOWN, crashed, True, 0.5,
                   evs([(n, m) for n, m in kinds if m.kind in ("crash", "killed")], Role.ROOT, 10)
                   + evs(secondary, Role.SECONDARY, 20),
                   f"a rank on {crashed[0]} exited with "
                   + ("a transport error of its own" if link else "an error and printed none")
                   + "; the others followed: a strike", "unexplained_crash", Owner.NODE_SUSPECT)


def from_cascade(nodes: list[NodeEvidence], secondary: list[NodeMatch], kinds: list[NodeMatch],
                 ctx: Context, job: JobStatus) -> Verdict:
    named = _named_by_cascade(nodes, secondary)
    if named is not None:
        return named
    hw = hardware_hosts(kinds)
    quiet = silent(nodes, secondary)
    if quiet and not set(quiet) <= set(hw):  # a quiet host's own hardware report says more
        return silent_verdict(nodes, quiet, secondary)
    if hw and secondary:
        hosts = sorted(hw)
        return verdict(hw[hosts[0]] if hw[hosts[0]] != Cause.UNKNOWN else Cause.NODE_FAIL, hosts,
                       True, 0.7,
                        evs([(n, m) for n, m in kinds if origin(n, m) in hosts], Role.ROOT, 10)
                        + evs(secondary, Role.SECONDARY, 20),
                        f"the peers failed; {','.join(hosts)} reported a hardware error of its own",
                        "node_reports_hardware", Owner.NODE)
    if (lone := _lone_crash(nodes, secondary, kinds)) is not None:
        return lone
    if (work := mismatched_work(secondary)) is not None:
        return verdict(Cause.HANG, [], False, 0.7, evs(secondary, Role.SECONDARY, 30),
                       f"the ranks timed out in collective {work} called with different operations "
                       "or sizes: they called different collectives, a deadlock in the program's "
                       "own code", "collectives_differ", Owner.JOB)
    if secondary:
        cause = cascade_cause(secondary)
        behind = progress_culprit(nodes)
        return verdict(cause, behind, bool(behind), 0.5, evs(secondary, Role.SECONDARY, 30),
                        "only cascade errors: the initiating fault left no line"
                        + (f"; progress stopped first on {','.join(behind)}" if behind else ""),
                        "progress_stopped_first" if behind else "collective_timeout_nobody",
                        Owner.NODE_SUSPECT if behind else Owner.NOBODY)
    if ctx.stalled:
        return verdict(Cause.HANG, [], False, 0.5, [], "no progress before the stall timeout; no "
                                                       "node stood out",
                        "stalled_nobody", Owner.NOBODY)
    failing = [n for n in nodes if n.exit_code not in (0, None)]
    found = [Evidence(node=n.node, file=n.file, line=ln, text=t, role=Role.CONTEXT)
             for n in failing for ln, t in n.tail[-3:]]
    return verdict(Cause.UNKNOWN, [], False, 0.3, found[:20],
                    f"job {job.state.value}; no known error signature"
                    + (f"; non-zero exit on {','.join(n.node for n in failing)}" if failing
                       else ""), "no_signature", Owner.NOBODY)


def silent_verdict(nodes: list[NodeEvidence], quiet: list[str],
                   secondary: list[NodeMatch]) -> Verdict:
    by = {n.node: n for n in nodes}
    dead = [h for h in quiet if h in by and by[h].abrupt_end]
    # the peers' coordination lost its heartbeats: a process that hangs keeps sending them (JAX's
    # and Ray's come from a thread of their own); the quiet node died
    lost = any(HEARTBEAT_LOST.search(t) for t in [m.text for _, m in secondary]
               + [t for n in nodes for _, t in n.tail])
    dead = dead or (quiet if lost else [])
    cause = Cause.NODE_FAIL if dead else Cause.HANG
    names = dead or quiet
    return verdict(cause, names, True, 0.7, evs(secondary, Role.SECONDARY, 30),
                    f"the peers timed out waiting; {','.join(names)} printed no error"
                    + (" and its output ends abruptly" if dead
                       else " (it stopped making progress)"), "silent_node", Owner.NODE)
