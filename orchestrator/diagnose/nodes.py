"""A whole file scanned block by block, and the evidence value a scan gives the classifier."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from orchestrator.diagnose.origin import JOB_WIDE
from orchestrator.diagnose.prefilter import Prefilter
from orchestrator.diagnose.scan import NodeScan
from orchestrator.diagnose.signatures import Signature
from orchestrator.evidence import NodeEvidence
from orchestrator.model import LossAnomaly


def scan_file(path: Path, node: str, signatures: tuple[Signature, ...], progress: re.Pattern[str],
              prefilter: Prefilter) -> NodeScan:
    """A whole file, block by block (bounded memory whatever its size)."""
    from orchestrator.tail import LogTail

    scan = NodeScan(node, str(path), signatures, progress)
    tail = LogTail(path)
    while True:
        blocks = tail.read_chunks(final=True)
        if not blocks:
            # a last line cut off mid-write says, as NUL padding does, the host stopped abruptly
            scan.nul_padding = scan.nul_padding or _cut_mid_line(path)
            return scan
        for first, block, newlines in blocks:
            scan.feed_bytes(first, block, prefilter, newlines)


def _cut_mid_line(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            f.seek(0, 2)
            if f.tell() == 0:
                return False
            f.seek(-1, 2)
            return f.read(1) != b"\n"
    except OSError:
        return False


def node_evidence(scan: NodeScan, exit_code: int | None = None, stuck_detail: str = "",
              top_frames: tuple[str, ...] = (), fs_suspect: bool = False,
              loss: LossAnomaly | None = None, loss_sound_to: int | None = None) -> NodeEvidence:
    # a file whose own start line lists the allocation's nodes, its name not among them, is the
    # job's output (`gpt7b-lumi.out`), not a host's
    hm = scan.host_map
    job_wide = bool(JOB_WIDE.match(scan.node)) or (len(hm.listed) > 1
                                                   and scan.node not in hm.listed)
    matches = tuple(scan.matches)
    if job_wide and (hm.tasks or hm.ranks or hm.pids):
        matches = tuple(replace(m, host=m.host or hm.host_of(m.task, m.rank)
                                or hm.host_of_text(m.text)) for m in matches)
    if hm.addresses:  # a line whose prefix gave only an address (Ray's `ip=`): the host it maps to
        matches = tuple(replace(m, host=hm.addresses.get(m.host, m.host)) if m.host else m
                        for m in matches)
    if hm.ranks:  # a peer named by its rank (MPICH): its host, by the job's rank map
        matches = tuple(replace(m, peer_ip=hm.host_of(None, int(m.peer_ip[5:])) or m.peer_ip)
                        if m.peer_ip and m.peer_ip.startswith("rank:") else m for m in matches)
    return NodeEvidence(
        node=scan.node,
        file=scan.file,
        matches=matches,
        first_iteration=scan.first_iteration,
        last_iteration=scan.last_iteration,
        last_progress_ts=scan.last_progress_ts,
        exit_code=exit_code if exit_code is not None else (0 if scan.completed else None),
        tail=tuple(scan.tail),
        stuck_detail=stuck_detail or scan.stuck,
        top_frames=top_frames or tuple(scan.top_frames),
        fs_suspect=fs_suspect,
        addresses=frozenset(scan.addresses),
        address_hosts=tuple(sorted(hm.addresses.items())),
        abrupt_end=scan.nul_padding,
        signalled_at=scan.signalled_at,
        hosts=frozenset(scan.hosts | hm.hosts()),
        job_wide=job_wide,
        listed=frozenset(hm.listed),
        gpus=tuple(sorted(hm.gpus.items())),
        loss=loss,
        loss_sound_to=loss_sound_to,
    )
