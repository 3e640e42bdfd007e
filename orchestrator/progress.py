"""The training's progress as its lines print it: the default progress pattern (group 1: the
iteration) of a dozen frameworks, the loading and evaluation bars that are not training, and the
iteration a line holds. Plain `re`, no settings: the node agent reads it too (issue 42: the agent
does not import the settings model)."""

from __future__ import annotations

import re

from orchestrator.patterns import LINE_CHARS

# The default progress line: group 1 is the iteration. Megatron, GPT-NeoX, NeMo and nanotron
# `iteration N/M`; DeepSpeed `step=N` / `steps: N`; torchtitan `step: N` (ANSI colour codes before
# the number); OLMo `[step=N/M`; fairseq `num_updates=N`; composer `[batch=N/M]`; tqdm bars `| N/M
# [` (HF Trainer, Lightning, accelerate); plain `step N:` / `iter N:` / `[step N]` lines; PyTorch's
# and Horovod's examples' `Train Epoch: N [x/y (p%)]` and Pointcept-style `Epoch: [N/M][i/K]` (the
# epoch); RL trainers' `rollout N:` (slime, miles); a dict or JSON line's `'step':
# N,`. A checkpoint file name
# such as `step=49.ckpt` is not progress.
PROGRESS_REGEX = (
    r"(?:\biteration:?\s+(?=\d+\s*/\s*\d)"
    r"|(?:^|[^\w.-]|\x1b\[[\d;]*m)(?:global_)?steps?(?:=|:\s*)(?=\d+(?:[\s,/\]|]|\x1b|$))"
    r"|\bnum_updates=(?=\d)"
    r"|\[batch=(?=\d+/\d)"
    r"|\|\s*(?=\d+/\d+\s*\[)"
    r"|(?:^|[^\w.-])(?:[Ii]ter|[Ss]tep|[Ii]teration)\s+(?=\d+\s*(?::|/|\||,|\]|$))"
    r"|\bTrain Epoch:\s+(?=\d+\s*\[\d)|\bEpoch: \[(?=\d+/\d+\]\[\d+/\d+\])"
    r"|(?:^|[^\w.-])rollout\s+(?=\d+:\s)"
    r"|[\"'](?:global_)?step[\"']\s*:\s*(?=\d+\s*[,}])"
    r")(\d+)"
)

# A tqdm bar of loading, not training (`Loading checkpoint shards: 100%|####| 4/4 [...]`, datasets'
# `Map:`), or an eval's own counter (Lightning's `Validation DataLoader 0:  40%|####  | 8/20 [...]`
# and its sanity check, test and predict bars; Megatron's `Evaluating iter 10/100`): never
# progress, whatever the progress regex says. Only lines the progress regex matched are asked.
NOT_TRAINING = (r"(?:(?:[Ll]oading|[Dd]ownloading|[Ff]etching|[Rr]esolving|[Ee]xtracting|"
                r"[Gg]enerating|[Tt]okeniz\w*|Map|Filter|shards|Validation|Validating|"
                r"Sanity Checking|Testing|Predicting)[^|\r\n]*\||\bEvaluating iter \d)")
NOT_PROGRESS = re.compile(NOT_TRAINING)
NOT_PROGRESS_BYTES = re.compile(NOT_TRAINING.encode())
# one of them is named on every such line: most lines need no regex to be told apart
_WORDS = ("oading", "ownloading", "etching", "esolving", "xtracting", "enerating", "okeniz",
          "Map", "Filter", "shards", "Valid", "Sanity", "Testing", "Predicting", "Evaluating")
_WORDS_BYTES = tuple(w.encode() for w in _WORDS)


def not_training(line: str) -> bool:
    """A loading bar (checkpoint shards, a dataset map) or an eval's counter, not training
    progress."""
    return any(w in line for w in _WORDS) and NOT_PROGRESS.search(line) is not None


def not_training_bytes(line: bytes) -> bool:
    return any(w in line for w in _WORDS_BYTES) and NOT_PROGRESS_BYTES.search(line) is not None


def last_iteration(rx: re.Pattern[str], text: str) -> int | None:
    """The iteration of the last progress match in `text`; tqdm bars rewrite one line with carriage
    returns, so each `\\r`-separated part counts as a line and the last match wins."""
    found = None
    for part in re.split(r"[\r\n]", text):
        if not_training(part):
            continue
        for m in rx.finditer(part, 0, LINE_CHARS):  # a line's first 8 KB (a lookaround's time)
            try:
                found = int(m.group(1))
            except (TypeError, ValueError, IndexError):
                continue
    return found
