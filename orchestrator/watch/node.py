"""What the controller keeps of one node while it watches a segment: the node's log tail and scan,
its exit record, heartbeat and stack dump, the losses it printed, and when each was seen."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from orchestrator.contract import DumpRecord, ExitRecord
from orchestrator.diagnose.prefilter import Prefilter
from orchestrator.diagnose.scan import NodeScan
from orchestrator.losses import LOSS_BYTES, LossSeries
from orchestrator.tail import LogTail


@dataclass
class NodeWatch:
    """The controller's view of one node: its log tail and scan, exit record, heartbeat, dump."""
    tail: LogTail
    scan: NodeScan
    progress_seen_at: datetime | None = None
    last_iteration: int | None = None
    exit_record: ExitRecord | None = None
    dump: DumpRecord | None = None
    exit_seen_at: datetime | None = None
    pending_read: Any = None
    heartbeat: str = ""
    heartbeat_seen_at: datetime | None = None
    dump_mtime: str = ""
    # its log, heartbeat, exit and dump file names, once
    names: tuple[str, str, str, str] = ("", "", "", "")
    losses: LossSeries | None = None  # the loss its ranks print (None: not watched)

    def feed(self, first: int, block: bytes, prefilter: Prefilter, newlines: int) -> None:
        """A block of complete lines of its log: scanned, and its printed losses judged."""
        self.scan.feed_bytes(first, block, prefilter, newlines)
        if self.losses is not None and LOSS_BYTES.search(block):
            self.losses.feed_bytes(block, self.scan.progress, self.scan.last_iteration)
