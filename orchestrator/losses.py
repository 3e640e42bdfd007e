"""The training loss as the ranks print it, and when it went bad (issue 41). Pure.

`loss_of` reads the training loss from a progress line in the formats frameworks print (Megatron
`lm loss: 6.9E+00`, Hugging Face `{'loss': 2.34, ...}`, Lightning and tqdm `loss=2.35`, nanoGPT
`iter 100: loss 4.23`, llm.c `train loss 4.5` and its main.log `trl:10.9`, torchtitan `loss:  8.12`,
fairseq `| loss 9.1 |` and its JSON, composer `loss/train/total: 3.4`, OLMo
`train/CrossEntropyLoss=7.2`, NeMo `reduced_train_loss=2.3`, OpenNMT-py `xent: 2.13`), never an
evaluation's (`val loss`, `eval_loss`, `validation loss`) nor a component or the loss scale.
`LossSeries` watches one node's losses: a loss printed as NaN or Inf `nan_points` times in a row,
or a spike (a loss more than `spike_score` noise deviations and `spike_rise` of the level above the
level, `confirm_points` times in a row, judged once `min_points` were seen, or at once with the
previous segment's baseline as its seed) is an anomaly, with its onset: the step of its first
point. The level is the median of the last `level_points` normal losses (a curve still falling in
its warm-up is judged against where it is, not where it was); the noise is the robust spread of the
step-to-step changes over the last `window` normal losses (a trend is no noise). Warm-up,
evaluations and a noisy fine-tune's ordinary spread do not trip it; a single outlier does not
either (it never enters the baseline).
"""

from __future__ import annotations

import math
import re
import statistics
from collections import deque
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict

from orchestrator.model import LossAnomaly

_VALUE = r"[-+]?(?:\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|\.\d+|nan|inf(?:inity)?)"
_KEY = (r"(?<![\w/.-])((?:(?:lm|train|training|total|avg|mean|average|reduced_train)[ _/])?"
        r"(?:CrossEntropy)?loss(?:/train(?:/total)?)?|xent|trl(?=:))")  # OpenNMT-py, llm.c main.log
LOSS = re.compile(_KEY + r"""["']?\s*(?:[:=]\s*|\s+)["']?(""" + _VALUE + r")(?![\w.])",
                  re.IGNORECASE)
# a block without one of them has no loss line: nothing to decode
_WORDS = r"(?i)loss|xent|trl:"
LOSS_WORD, LOSS_BYTES = re.compile(_WORDS), re.compile(_WORDS.encode())
# the word right before the key says it is an evaluation's loss
_EVAL_BEFORE = re.compile(r"(?:\b|_)(?:val|valid|validation|eval|evaluation|test|dev)[\s_/-]*$",
                          re.IGNORECASE)
_ANSI = re.compile(r"\x1b\[[\d;]*[A-Za-z]")
LINE_CHARS = 4096  # a line's first 4 KB: where frameworks print their loss


def loss_of(line: str) -> float | None:
    """The training loss a progress line prints (NaN and Inf included), or None."""
    text = _ANSI.sub("", line[:LINE_CHARS]) if "\x1b" in line else line[:LINE_CHARS]
    if not LOSS_WORD.search(text):
        return None
    for m in LOSS.finditer(text):
        if _EVAL_BEFORE.search(text, max(0, m.start() - 24), m.start()):
            continue
        try:
            return float(m.group(2))
        except ValueError:  # pragma: no cover - the pattern admits only numbers, nan and inf
            continue
    return None


class LossRule(BaseModel):
    """When a loss series is anomalous (the `loss` section of a run config carries these)."""
    model_config = ConfigDict(frozen=True)
    window: int = 100
    min_points: int = 20
    spike_score: float = 6.0
    spike_rise: float = 0.25
    confirm_points: int = 2
    nan_points: int = 2
    level_points: int = 5
    # the baseline the previous segment of the run ended with (its normal losses): a spike right
    # after a resume is judged at once, not after `min_points`
    seed: tuple[float, ...] = ()


@dataclass
class LossSeries:
    """One node's printed losses, judged as they come; `found` holds the first anomaly."""
    rule: LossRule = field(default_factory=LossRule)
    node: str = ""
    points: int = 0
    last: float | None = None
    sound: int | None = None  # the step of the newest sound loss (one that entered the baseline)
    newest: tuple[int, float] | None = None  # the newest finite loss with its step (the curve's)
    found: LossAnomaly | None = None
    _base: deque[float] = field(default_factory=deque)
    _run: list[tuple[int | None, float, str]] = field(default_factory=list)
    _nan: list[tuple[int | None, float, str]] = field(default_factory=list)
    _printed: int | None = None  # the last step a loss line printed itself

    def __post_init__(self) -> None:
        self._base.extend(v for v in self.rule.seed[-self.rule.window:] if math.isfinite(v))

    def baseline(self) -> tuple[float, ...]:
        """The normal losses the series judges by (the next segment's seed)."""
        return tuple(self._base)

    def add(self, step: int | None, value: float, line: str,
            own: bool = True) -> LossAnomaly | None:
        """One printed loss; the anomaly it completes, if any (reported once). A step its line
        prints (`own`: not one taken from elsewhere in the block) lower than the last such step is
        a restart in the same log (from scratch, or an older checkpoint): the baseline starts
        over."""
        if own and step is not None:
            if self._printed is not None and step < self._printed:
                self._base.clear()
                self._run, self._nan = [], []
            self._printed = step
        self.points += 1
        self.last = value
        if step is not None and math.isfinite(value):
            self.newest = (step, value)
        if self.found is not None:
            return None
        r = self.rule
        if not math.isfinite(value):
            self._nan.append((step, value, line))
            if len(self._nan) >= r.nan_points:
                self.found = self._anomaly("nan", self._nan, self._median())
            return self.found
        self._nan = []
        if len(self._base) >= r.min_points:
            level, spread = self._level(), self._noise()
            line_up = max(r.spike_score * spread, r.spike_rise * abs(level), 1e-12)
            if self._has_level() and value - level > line_up:
                self._run.append((step, value, line))
                if len(self._run) >= r.confirm_points:
                    self.found = self._anomaly("spike", self._run, level)
                return self.found
        self._run = []
        self._base.append(value)
        self.sound = step if step is not None else self.sound
        if len(self._base) > r.window:
            self._base.popleft()
        return None

    def feed_bytes(self, block: bytes, progress: re.Pattern[str], fallback: int | None) -> None:
        """Every line of a block of complete lines that prints a training loss; only those lines
        are decoded. A line's step is its own progress, else `fallback` (the block's last)."""
        done = -1
        for m in LOSS_BYTES.finditer(block):
            if m.start() < done:
                continue  # a second `loss` on a line already read
            start = block.rfind(b"\n", 0, m.start()) + 1
            end = block.find(b"\n", m.start())
            done = end = len(block) if end < 0 else end
            line = block[start:min(end, start + LINE_CHARS)].decode("utf-8", "replace")
            for part in line.split("\r") if "\r" in line else (line,):
                if (value := loss_of(part)) is not None:
                    own = step_of(part, progress, None)
                    self.add(fallback if own is None else own, value, part, own is not None)

    def _median(self) -> float | None:
        return statistics.median(self._base) if self._base else None

    def _has_level(self) -> bool:
        """A loss wandering around zero (a policy-gradient objective) has no level to spike from:
        the window's median is within the window's robust spread of zero."""
        med = statistics.median(self._base)
        return abs(med) > 1.4826 * statistics.median(abs(x - med) for x in self._base)

    def _level(self) -> float:
        """Where the curve is now: the median of the newest normal losses."""
        n = max(1, min(self.rule.level_points, len(self._base)))
        return statistics.median(list(self._base)[-n:])

    def _noise(self) -> float:
        """The losses' own noise, not their trend: the robust spread (1.4826 x MAD) of the step-to-
        step changes, over sqrt(2) (a change holds two points' noise)."""
        b = list(self._base)
        steps = [b[i + 1] - b[i] for i in range(len(b) - 1)]
        mid = statistics.median(steps)
        return 1.4826 * statistics.median(abs(d - mid) for d in steps) / math.sqrt(2)

    def _anomaly(self, kind: str, run: list[tuple[int | None, float, str]],
                 baseline: float | None) -> LossAnomaly:
        onset = next((s for s, _, _ in run if s is not None), None)
        value = max(v for _, v, _ in run) if kind == "spike" else run[0][1]
        return LossAnomaly(kind=kind, onset=onset, value=value, baseline=baseline,
                           line=run[0][2][:300], node=self.node)


def step_of(line: str, progress: re.Pattern[str], fallback: int | None) -> int | None:
    """The iteration a line's progress names (its last), else `fallback`."""
    found = fallback
    for m in progress.finditer(line[:LINE_CHARS]):
        try:
            found = int(m.group(1))
        except (IndexError, TypeError, ValueError):
            continue
    return found


def losses_in(text: str, progress: re.Pattern[str]) -> list[tuple[int | None, float, str]]:
    """(step, loss, line) of every line of `text` that prints a training loss; the step is the
    line's own progress, else the last one seen before it."""
    out: list[tuple[int | None, float, str]] = []
    step: int | None = None
    for line in re.split(r"[\r\n]", text):
        step = step_of(line, progress, step)
        if (value := loss_of(line)) is not None:
            out.append((step, value, line))
    return out
