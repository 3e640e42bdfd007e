"""`logs -f`: the run's node logs as they grow, every node's new lines in time order; into each new
segment the controller submits (unless one segment was asked for), until the run ends (done,
stopped or cancelled), when what is left is printed and the command exits 0."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from orchestrator.cli.common import err, loaded, out
from orchestrator.clock import Clock
from orchestrator.contract import LOG_SUFFIX, SegmentPaths
from orchestrator.model import RunStatus
from orchestrator.state import SegmentRecord, StateStore
from orchestrator.tail import LogTail
from orchestrator.views.nodelogs import merge
from orchestrator.views.text import clean

POLL_S = 1.0


def node_logs(paths: SegmentPaths, node: str | None, noted: set[Path] | None = None) -> list[Path]:
    """The segment's node logs (one node's if `node`): regular files only. A symlink in their place
    (to /etc/shadow, say) is said (once per path in `noted`) and skipped, as `diagnose` skips it."""
    if paths.logs.is_symlink() or paths.root.is_symlink():  # the directory itself, to /var/log say
        if noted is None or paths.logs not in noted:
            err.print(f"note: {clean(paths.logs)} is a symlink, not the segment's logs: not shown",
                      markup=False, highlight=False)
        if noted is not None:
            noted.add(paths.logs)
        return []
    listed = sorted(paths.logs.glob(f"*{LOG_SUFFIX}")) if paths.logs.is_dir() else []
    if node is not None:
        listed = [p for p in listed if p.name == f"{node}{LOG_SUFFIX}"]
    for link in (p for p in listed if p.is_symlink()):
        if noted is None or link not in noted:
            err.print(f"note: {clean(link)} is a symlink, not a node log: not shown", markup=False,
                      highlight=False)
        if noted is not None:
            noted.add(link)
    return [p for p in listed if p.is_file() and not p.is_symlink()]


def node_name(path: Path) -> str:
    return path.name[: -len(LOG_SUFFIX)]


def show(lines: list[tuple[str, str]], labelled: bool) -> None:
    """Print (node, line) pairs, each line after its node's name when `labelled`."""
    for name, line in lines:
        shown = clean(line)
        out.print(f"{clean(name)}: {shown}" if labelled else shown, markup=False, highlight=False,
                  soft_wrap=True)


class Follower:
    """Owns `logs -f`'s position: the segment followed, where each of its node logs was read up to,
    and each node's last line time (so a line without one, read by the next poll, stays after its
    own)."""

    def __init__(self, store: StateStore, where: str, node: str | None, pinned: int | None,
                 clock: Clock):
        self.store, self.where, self.node, self.pinned, self.clock = (store, where, node, pinned,
                                                                      clock)
        self.segment: int | None = None
        self.tails: dict[Path, LogTail] = {}
        self.last: dict[str, datetime] = {}
        self.noted: set[Path] = set()

    def start(self, segment: int | None, offsets: dict[Path, int],
              last: dict[str, datetime]) -> None:
        """Follow `segment` from `offsets` (what was printed already); a log not in them, from its
        start."""
        self.segment, self.last = segment, last
        self.tails = {p: LogTail(p, at) for p, at in offsets.items()}

    def run(self) -> None:
        """Poll until the run ends (or Ctrl-C, or the clock is woken)."""
        try:
            while self.poll():
                if not self.clock.sleep(POLL_S):
                    return
        except KeyboardInterrupt:
            return

    def poll(self) -> bool:
        """Print what is new; False once the run has ended (what it left printed). The state is read
        before the logs: a run seen ended had written all its lines before."""
        state = loaded(self.store, self.where)
        ended = state.status != RunStatus.RUNNING
        newest = state.segments[-1] if state.segments else None
        if self.pinned is None and newest is not None and newest.index != self.segment:
            self._drain(final=True)
            self._switch(newest)
        self._drain(final=ended)
        return not ended

    def _switch(self, seg: SegmentRecord) -> None:
        out.print(f"== segment {seg.index} (job {clean(seg.job_id or '?')}) ==", markup=False,
                  highlight=False, soft_wrap=True)
        self.segment, self.tails, self.last = seg.index, {}, {}

    def _drain(self, final: bool) -> None:
        if self.segment is None:
            return
        paths = SegmentPaths.of(self.store.run_dir, self.segment)
        for path in node_logs(paths, self.node, self.noted):
            self.tails.setdefault(path, LogTail(path))
        blocks = {node_name(p): [text for _, text in t.read_new(final=final)]
                  for p, t in self.tails.items()}
        show(merge(blocks, self.last), self.node is None)
