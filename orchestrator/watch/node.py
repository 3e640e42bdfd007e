"""What the controller keeps of one node while it watches a segment: the node's log tail and scan,
its exit record, heartbeat and stack dump, and when each was seen."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from orchestrator.contract import DumpRecord, ExitRecord
from orchestrator.diagnose.scan import NodeScan
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
