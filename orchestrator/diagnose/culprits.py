"""Who is to blame, from per-node evidence: the host a line points at, every host of the job, the
node whose progress stopped first, the node the peers waited for (silence), the rank outside the
collective everyone else waits in, and the host transport errors point at."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import replace

from orchestrator.evidence import Match, NodeEvidence


def origin(n: NodeEvidence, m: Match) -> str | None:
    """The host a line blames: named in the line, printed by a prefixed host, or the file's own
    host."""
    return m.named_node or m.host or (None if n.job_wide else n.node)


def all_hosts(nodes: list[NodeEvidence]) -> set[str]:
    hosts: set[str] = set()
    for n in nodes:
        hosts |= set(n.hosts) if n.job_wide else {n.node}
    return hosts


QUIET_SIGNATURES = frozenset({"job_timelimit", "job_preempted", "job_requeue", "job_node_fail"})


def silent(nodes: list[NodeEvidence], secondary: list[tuple[NodeEvidence, Match]]) -> list[str]:
    """Hosts that printed no complaint while their peers timed out or aborted: the ones the peers
    waited for."""
    everyone = all_hosts(nodes)
    if len(everyone) < 2:
        return []
    complaints = [(n, m) for n, m in secondary if m.signature not in QUIET_SIGNATURES]
    if any(origin(n, m) is None for n, m in complaints):
        return []  # some complaints cannot be tied to a host: silence proves nothing
    loud = {h for n, m in complaints if (h := origin(n, m))}
    quiet = sorted(everyone - loud)
    return quiet if loud and 0 < len(quiet) < len(loud) else []  # the quiet ones are the exception


def node_fail_culprits(nodes: list[NodeEvidence]) -> list[str]:
    """Slurm says a node failed: the host whose output ends abruptly (NUL padding), else the one
    behind."""
    dead = sorted(n.node for n in nodes if n.abrupt_end and not n.job_wide)
    return dead if 0 < len(dead) < len(nodes) else progress_culprit(nodes)


def progress_culprit(nodes: list[NodeEvidence]) -> list[str]:
    """The node whose progress stopped first (strictly behind all others that print progress), if
    there is one. A node that prints no progress at all (frameworks often log on one rank only) is
    never 'behind'."""
    its = {n.node: n.last_iteration for n in nodes if n.last_iteration is not None
           and not n.job_wide}
    if len(its) < 2:
        return []
    low = min(its.values())
    behind = [k for k, v in its.items() if v == low]
    return behind if len(behind) < len(its) and max(its.values()) > low else []


# A rank's innermost named frame is a collective of the framework's own API (py-spy prints
# "barrier (torch/distributed/distributed_c10d.py:4166)"): it waits for its peers, it is not stuck
COLLECTIVE_CALL = re.compile(r"^\w+ \((?:\S*/)?(?:torch/distributed/(?:distributed_c10d"
                             r"|_functional_collectives)\b|deepspeed/comm/)")


def by_stack_host(nodes: list[NodeEvidence]) -> list[NodeEvidence]:
    """The nodes as their stacks name them: a frame tagged `@host` (a job-wide file's dump under a
    header naming its host) counts as that host's, each host one node; tags taken off."""
    out: list[NodeEvidence] = []
    for n in nodes:
        per: dict[str, list[str]] = {}
        for f in n.top_frames:
            frame, _, host = f.rpartition("@") if "@" in f else (f, "", "")
            per.setdefault(host if host and n.job_wide else n.node, []).append(frame)
        out += ([replace(n, top_frames=tuple(fs)) if h == n.node else
                 NodeEvidence(node=h, file=n.file, top_frames=tuple(fs)) for h, fs in per.items()]
                or [n])
    return out


def behind_in_log(nodes: list[NodeEvidence]) -> list[tuple[NodeEvidence, Match, str]]:
    """Ranks a report printed in the log puts behind the collective the others wait in (the
    flight recorder's analysis through the rank map, NCCL RAS by its node's address), with their
    host when the log ties it."""
    owner = address_owners(nodes)
    out = []
    for n in nodes:
        for m in n.matches:
            host = m.kind == "behind" and (_peer_host(m.peer_ip, owner) if m.peer_ip else m.host)
            if host:
                out.append((n, m, host))
    return out


def stack_outliers(nodes: list[NodeEvidence]) -> tuple[list[str], str]:
    """Nodes with a rank outside the frame where (strictly) most ranks wait: 'not in the
    collective'."""
    nodes = by_stack_host(nodes)
    frames = Counter(f for n in nodes for f in n.top_frames if f)
    if len(frames) < 2:
        return [], ""
    (common, count), = frames.most_common(1)
    if count * 2 <= sum(frames.values()):
        # no frame most ranks share (a dump or two in the log): a rank outside the framework's
        # collective call where the other ranks wait, alone on its node
        calls = sorted(f for f in frames if COLLECTIVE_CALL.search(f))
        odd = [n.node for n in nodes if any(f and not COLLECTIVE_CALL.search(f)
                                            for f in n.top_frames)]
        return (odd, calls[0]) if calls and len(odd) == 1 and len(nodes) > 1 else ([], "")
    odd = [n.node for n in nodes if any(f and f != common for f in n.top_frames)]
    return (odd, common) if 0 < len(odd) < len(nodes) else ([], "")


RETRY = re.compile(r"status=12\b|RETRY_EXC|retry.?exceeded|vendor err 129\b", re.IGNORECASE)
IPV4 = re.compile(r"^\d+\.\d+\.\d+\.\d+$")
INSTANCE = re.compile(r"^i-[0-9a-f]{8,17}$")  # an EC2 instance id (EFA names a peer by it)
# a work request flushed (status 5) when the queue pair went to error: the aftermath of another
# completion error, not a peer that stopped answering
FLUSHED = re.compile(r"with (?:error |status=)5\b|WR_FLUSH_ERR|\bflush(?:ed)? error", re.IGNORECASE)


def address_owners(nodes: list[NodeEvidence]) -> dict[str, str]:
    """IP address -> host, from what the hosts announced (NCCL INFO, localGid) and job-wide files'
    ties."""
    owner = {ip: n.node for n in nodes if not n.job_wide for ip in n.addresses}
    owner.update({ip: h for n in nodes for ip, h in n.address_hosts})
    return owner


def as_hosts(names: list[str], nodes: list[NodeEvidence]) -> list[str]:
    """Culprits named by address (Ray names dead nodes by IP) as the hosts that own those
    addresses."""
    if not any(IPV4.match(x) for x in names):
        return names
    owner = address_owners(nodes)
    hosts = all_hosts(nodes)

    def host(x: str) -> str:  # cloud hosts are often named after their address (ip-10-0-3-192)
        aws = "ip-" + x.replace(".", "-")
        return owner.get(x) or (aws if aws in hosts else x)

    # an address no host owns names nobody
    return sorted({h for x in names if not IPV4.match(h := host(x))})


def _peer_host(peer: str, owner: dict[str, str]) -> str | None:
    """The host a transport error names: an address or LID through the map, a host name as is."""
    if (peer in owner or IPV4.match(peer) or peer.startswith(("lid:", "rank:"))
            or INSTANCE.match(peer)):
        return owner.get(peer)
    return peer


def peer_culprits(nodes: list[NodeEvidence],
                  secondary: list[tuple[NodeEvidence, Match]]) -> tuple[list[str], int]:
    """The host the transport errors point at, and how many hosts name it. Several hosts naming one
    peer (NCCL INFO maps addresses to hosts): that peer. A single host reporting IB completion
    errors: that host's own link is as suspect as the peer, and it is the one with evidence; a
    refused connection: the peer, which is not listening."""
    owner = address_owners(nodes)
    if any(RETRY.search(m.text) for _, m in secondary if m.peer_ip):  # the flushes followed it
        secondary = [(n, m) for n, m in secondary if not (m.peer_ip and FLUSHED.search(m.text))]
    # a reporter no line names counts once, whatever it printed (a job-wide file without prefixes)
    reports = {(origin(n, m) or "?", _peer_host(m.peer_ip, owner), m.signature)
               for n, m in secondary if m.peer_ip}
    if any(r != "?" for r, _, _ in reports):  # lines of known hosts: the others are theirs
        reports = {x for x in reports if x[0] != "?"}
    votes: Counter[str] = Counter(peer for r, peer, _ in {(r, p, "") for r, p, _ in reports} if peer
                                  and peer != r)
    reporters = {r for r, _, _ in reports}
    if len(reporters) == 1 and all(sig == "nccl_ib_peer" for _, _, sig in reports):
        if len(all_hosts(nodes)) < 2:
            return [], 0
        retry = any(RETRY.search(m.text) for _, m in secondary if m.peer_ip)
        named = sorted({p for r, p, _ in reports if p and p != r})
        # a retry-exceeded completion (status 12) names a peer that stopped answering; other
        # statuses (a local protection or length error) are the reporter's own
        return (named, 1) if retry and len(named) == 1 else (sorted(reporters - {"?"}), 1)
    if not votes:
        return [], 0
    top = max(votes.values())
    # the host most peers name (others may name a reporter back)
    named = [h for h, v in votes.items() if v == top]
    # naming every host of the job names nobody
    everyone = all_hosts(nodes) | set(votes) | (reporters - {"?"})
    return (sorted(named), top) if len(named) < len(everyone) else ([], 0)
