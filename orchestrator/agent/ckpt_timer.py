"""How long the training takes to write a checkpoint, timed from the lines it prints.

Megatron-LM (and the stacks built on it: NeMo, ms-swift, Megatron-DeepSpeed) print
`saving checkpoint at iteration N to DIR ...` before a save and `successfully saved checkpoint from
iteration N to DIR` after it (older versions: `... at iteration N`). The agent sees every line as it
is printed, so the time between the two is the write time; the controller hands it to the checkpoint
interval advice (Young/Daly) instead of a configured guess.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

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
