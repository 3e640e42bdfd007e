"""How long the training takes to write a checkpoint, timed from the lines it prints; and the saves
a segment's training reported, from its nodes' exit records or, where an agent was killed before
it wrote one, from the node's log.

Megatron-LM (and the stacks built on it: NeMo, ms-swift, Megatron-DeepSpeed) print
`saving checkpoint at iteration N to DIR ...` before a save and `successfully saved checkpoint from
iteration N to DIR` after it (older versions: `... at iteration N`). The agent sees every line as it
is printed, so the time between the two is the write time; the controller hands it to the checkpoint
interval advice (Young/Daly) instead of a configured guess.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from orchestrator.contract import EXIT_SUFFIX, LOG_SUFFIX, ExitRecord, SegmentPaths, read_record
from orchestrator.files import read_regular

START = re.compile(r"(?<!successfully )\bsaving checkpoint at iteration\s+(\d+)", re.IGNORECASE)
END = re.compile(r"successfully saved checkpoint (?:from|at) iteration\s+(\d+)(?:\s+to\s+(\S+))?",
                 re.IGNORECASE)
KEEP = 20
KEEP_DIRS = 4


@dataclass
class CheckpointTimer:
    """Owns the pending save (iteration, start time), the last write durations, in seconds, and the
    directories the saves named ("... to DIR": where a missing checkpoint.dir had checkpoints)."""
    durations: list[float] = field(default_factory=list)
    dirs: list[str] = field(default_factory=list)
    _start: tuple[int, float] | None = None

    def feed(self, text: str, t: float) -> bool:
        """Look at one output line printed at monotonic time `t`; True when a save was timed."""
        if "heckpoint" not in text:
            return False
        if m := START.search(text):
            self._start = (int(m.group(1)), t)
            return False
        m = END.search(text)
        if m is not None and m.group(2) and m.group(2) not in self.dirs:
            self.dirs = (self.dirs + [m.group(2)])[-KEEP_DIRS:]
        if m is None or self._start is None or self._start[0] != int(m.group(1)):
            return False
        self.durations = (self.durations + [max(0.0, t - self._start[1])])[-KEEP:]
        self._start = None
        return True


# a node log's line as the agent writes it: `2026-12-05T14:35:14.831Z RANK: text`
_STAMPED = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?)Z \S+: ")
LOG_TAIL = 16 << 20  # the last bytes of a node log read for its saves
MAX_NODES = 4096


@dataclass(frozen=True)
class NodeSaves:
    """The saves one node's training reported: their write times, the directories they named and
    the last saved iteration."""
    node: str
    durations: tuple[float, ...]
    dirs: tuple[str, ...]
    iteration: int | None = None


def saves_in_log(path: Path, node: str) -> NodeSaves:
    """The saves a node log shows, timed by the agent's stamps on the lines (what the node's exit
    record would hold). Its last LOG_TAIL bytes are read; an unreadable log shows none."""
    timer, last = CheckpointTimer(), None
    try:
        data = read_regular(path, LOG_TAIL, last=True)
    except OSError:
        data = b""
    for raw in data.split(b"\n"):
        if b"heckpoint" not in raw:
            continue
        line = raw.decode(errors="replace")
        if (m := _STAMPED.match(line)) is None:
            continue
        text = line[m.end():]
        timer.feed(text, datetime.fromisoformat(m.group(1) + "+00:00").timestamp())
        if done := END.search(text):
            last = int(done.group(1))
    return NodeSaves(node, tuple(timer.durations), tuple(timer.dirs), last)


def reported_saves(segment_dir: Path) -> list[NodeSaves]:
    """Per node of a segment, the saves its training reported: from the node's exit record, or,
    for a node whose agent wrote none (killed with the job: a reboot, a node failure), from its
    log. A node that reported no save is left out."""
    paths = SegmentPaths(segment_dir)
    out: dict[str, NodeSaves] = {}
    for f in sorted(paths.nodes.glob(f"*{EXIT_SUFFIX}"))[:MAX_NODES]:
        r = read_record(f, ExitRecord)
        if r is not None:
            out[r.node] = NodeSaves(r.node, tuple(r.checkpoint_write_s), tuple(r.checkpoint_dirs),
                                    r.iteration)
    for log in sorted(paths.logs.glob(f"*{LOG_SUFFIX}"))[:MAX_NODES]:
        node = log.name.removesuffix(LOG_SUFFIX)
        if node not in out and not (paths.exit(node)).exists():
            out[node] = saves_in_log(log, node)
    return [x for x in out.values() if x.durations or x.dirs]
