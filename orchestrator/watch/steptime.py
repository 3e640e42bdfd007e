"""The step time the training prints itself, read from a node's last lines: a prior for the step
cadence before the controller has seen enough progress to learn it (docs/CAUSES.md, "The cadence
from the first minute"). The formats are the real ones of the common stacks:

- Megatron-LM: `iteration 10/ 1000 | ... | elapsed time per iteration (ms): 1147.6 |` (the mean over
  the log interval; one such line per log interval);
- tqdm bars (HF Trainer, accelerate, Lightning): `| 20/500 [00:10<04:01,  1.99it/s]`, `26.77s/it]`;
- DeepSpeed's pipeline engine: `steps: 10 loss: 0.5 iter time (s): 0.512 samples/sec: 31.25`;
- lines with their own time and a step (torchtitan `[titan] 2025-06-04 08:51:58,557 - root - INFO -
  step: 10 ...`, DeepSpeed's `[2023-12-29 13:02:49,654] ... global_step=10, ...SamplesPerSec=...`):
  their tokens or samples per second need a batch size nobody prints there, so the time between two
  such lines is the period instead.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import UTC, datetime

from orchestrator.diagnose.blocks import group_int
from orchestrator.diagnose.origin import parse_line

MEGATRON = re.compile(r"elapsed time per iteration \(ms\):\s*(\d+(?:\.\d+)?)")
PIPE = re.compile(r"\biter time \(s\):\s*(\d+(?:\.\d+)?)")
TQDM = re.compile(r"(\d+(?:\.\d+)?)\s*(it/s|s/it)\b")
TITAN_TS = re.compile(r"\[titan\]\s+(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3})")
LONGEST_S = 3600.0  # a printed step time above this is not believed (a misread number)


def printed_step_s(text: str) -> float | None:
    """The seconds per step one line prints, or None. A tqdm bar redrawn with carriage returns:
    its last drawing that shows a rate."""
    for part in reversed(text.split("\r")):
        if m := MEGATRON.search(part):
            return _sane(float(m.group(1)) / 1000.0)
        if m := PIPE.search(part):
            return _sane(float(m.group(1)))
        if m := TQDM.search(part):
            value = float(m.group(1))
            return _sane(value if m.group(2) == "s/it" else 1.0 / value if value > 0 else 0.0)
    return None


def _sane(s: float) -> float | None:
    return s if 0.0 < s <= LONGEST_S else None


def _stamp(text: str) -> datetime | None:
    if m := TITAN_TS.search(text):
        return datetime.fromisoformat(f"{m.group(1)}.{m.group(2)}").replace(tzinfo=UTC)
    return parse_line(text).ts


def line_period_s(tail: Iterable[tuple[int, str]], progress: re.Pattern[str]) -> float | None:
    """Seconds between progress lines, from a node's last lines: the newest printed step time times
    the iterations between its last two progress lines (one without the other: one iteration), else
    the time between the last two progress lines that carry a time. None: the lines say nothing."""
    seen: list[tuple[int, datetime | None, float | None]] = []  # iteration, time, printed step
    for _, line in tail:
        text = next((p for p in reversed(line.split("\r")) if p.strip()), "")
        it = group_int(progress.search(text))
        if it is not None:
            seen.append((it, _stamp(text), printed_step_s(line)))
    if not seen:
        return None
    stride = seen[-1][0] - seen[-2][0] if len(seen) > 1 and seen[-1][0] > seen[-2][0] else 1
    printed = next((s for _, _, s in reversed(seen) if s is not None), None)
    if printed is not None:
        return printed * stride
    (i1, t1, _), (i2, t2, _) = seen[-2] if len(seen) > 1 else seen[-1], seen[-1]
    if t1 is None or t2 is None or i2 <= i1 or t2 <= t1:
        return None
    return _sane((t2 - t1).total_seconds())
