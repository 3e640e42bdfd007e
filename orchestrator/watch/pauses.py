"""Pure: does a node's log say an eval or a checkpoint save is running? The lines the common stacks
print when one begins and ends (docs/CAUSES.md, "Pauses"). While one runs, one rank busy outside
the collective every other rank waits in is what a rank-0 eval or save looks like, not a hang."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Protocol

# a pause begins (or goes on): HF Trainer, Megatron, Lightning's progress bar, DeepSpeed's
# checkpoint engine, torchtitan, and the plain words a custom loop prints
PAUSE_BEGIN = re.compile(
    r"\*{5} Running (?:Evaluation|Prediction) \*{5}|\bEvaluating iter \d+\s*/|"
    r"\b(?:Validation|Sanity Checking)(?: DataLoader \d+)?:|"
    r"\bSaving (?:model |the )?checkpoint\b|"  # Megatron (any case), HF, torchtitan
    r"\bCheckpoint \S+ is about to be saved|\b(?:running|starting) (?:evaluation|validation)\b",
    re.IGNORECASE)
# ... and is over (training goes on: the next silence is the training's own)
PAUSE_END = re.compile(
    r"\bsaved checkpoint\b|\bCheckpoint \S+ is ready now|"  # Megatron's `successfully saved ...`
    r"\bFinished saving the checkpoint|\bvalidation loss at iteration",
    re.IGNORECASE)


class _Scan(Protocol):
    """What is read of a node's scan: its last lines and its progress pattern."""
    @property
    def tail(self) -> Iterable[tuple[int, str]]: ...

    @property
    def progress(self) -> re.Pattern[str]: ...


def pause_line(scan: _Scan) -> str:
    """The line that began a pause still running (no progress line nor an end after it), or ""."""
    for _, line in reversed(list(scan.tail)):
        # a progress bar redrawn with carriage returns: its last drawing counts
        text = next((part for part in reversed(line.split("\r")) if part.strip()), "")
        if PAUSE_END.search(text):
            return ""
        # before the progress test: an eval's own counter (`Evaluating iter 10/100`, the
        # validation bar's `8/20`) reads as progress to the default pattern
        if PAUSE_BEGIN.search(text):
            return text.strip()[:200]
        if scan.progress.search(text):
            return ""
    return ""


def pausing(scans: Iterable[_Scan]) -> str:
    """The first node log (of `scans`) whose last lines say a pause runs, or ""."""
    return next((line for s in scans if (line := pause_line(s))), "")
