"""Which files in a segment's logs/ are the job's nodes: a log counts once its node is one the
scheduler ran the job on, or its agent has written a record (heartbeat, exit record, dump). Anything
else (200,000 stray files, a copied log, a user's own `*.log`) is ignored with one warning, and
never costs a read, a scan or a verdict."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from loguru import logger

from orchestrator.contract import node_of_log, node_of_record


@dataclass
class Roster:
    """Owns the judgement of names in logs/ and nodes/: each name is looked at once; a log whose
    node is not confirmed yet waits (an agent's log is written just before its first heartbeat) and
    is taken when it is."""
    confirmed: set[str] = field(default_factory=set)
    # node -> its log's file name, not confirmed yet
    waiting: dict[str, str] = field(default_factory=dict)
    _seen_logs: set[str] = field(default_factory=set)
    _seen_records: set[str] = field(default_factory=set)
    _listed: bool = False  # the scheduler has said which nodes the job runs on
    _warned: bool = False

    def scheduled(self, nodes: Iterable[str]) -> None:
        """Nodes the scheduler says the job (or its step) runs on."""
        self.confirmed.update(nodes)
        self._listed = self._listed or bool(self.confirmed)

    def new_nodes(self, logs: Iterable[str], records: Iterable[str],
                  known: Iterable[str]) -> list[str]:
        """Nodes (sorted) whose logs count from now on; `known` are those that already do."""
        for name in set(records) - self._seen_records:
            self._seen_records.add(name)
            node = node_of_record(name)
            if node is not None:
                self.confirmed.add(node)
        for name in set(logs) - self._seen_logs:
            self._seen_logs.add(name)
            node = node_of_log(name)
            if node is not None:
                self.waiting[node] = name
        taken = sorted((self.confirmed & self.waiting.keys()) - set(known))
        for node in taken:
            del self.waiting[node]
        return taken

    def warn_strays(self, final: bool) -> None:
        """Said once, when the scheduler has listed the job's nodes (or the segment ended) and some
        logs still belong to none of them."""
        if self._warned or not (self._listed or final) or not self.waiting:
            return
        self._warned = True
        some = ", ".join(sorted(self.waiting)[:3])
        logger.warning("{} file(s) in logs/ belong to no node of this job (e.g. {}): ignored",
                       len(self.waiting), some)
