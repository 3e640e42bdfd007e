"""Find the newest *complete* checkpoint for each supported layout.

Each preset lists complete candidates newest first; `find_latest` returns the first one not in
`skip` (checkpoints that failed to load before), so a bad newest checkpoint falls back to the
previous.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from orchestrator.model import Frozen
from orchestrator.settings import CheckpointCfg


class Checkpoint(Frozen):
    """A checkpoint found on disk: its path, iteration, and whether it is complete."""
    path: str
    iteration: int | None = None


def _has_files(d: Path) -> bool:
    return d.is_dir() and any(p.is_file() and p.stat().st_size > 0 for p in d.rglob("*"))


def _last_int(name: str) -> int | None:
    nums = re.findall(r"\d+", name)
    return int(nums[-1]) if nums else None


def _megatron(root: Path, cfg: CheckpointCfg) -> list[Checkpoint]:
    tracker = root / "latest_checkpointed_iteration.txt"
    if not tracker.is_file():
        return []
    text = tracker.read_text(errors="replace").strip()
    if text == "release":
        d = root / "release"
        return [Checkpoint(path=str(d), iteration=None)] if _has_files(d) else []
    if not text.isdigit():
        return []
    latest = int(text)
    out = []
    for d in root.glob("iter_*"):
        m = re.fullmatch(r"iter_(\d+)", d.name)
        if m and int(m.group(1)) <= latest and _has_files(d):
            out.append(Checkpoint(path=str(d), iteration=int(m.group(1))))
    return sorted(out, key=lambda c: c.iteration or 0, reverse=True)


def _deepspeed(root: Path, cfg: CheckpointCfg) -> list[Checkpoint]:
    latest = root / "latest"
    if not latest.is_file():
        return []
    tag = latest.read_text(errors="replace").strip()
    tag_step = _last_int(tag)
    out = []
    for d in root.iterdir():
        if not d.is_dir() or not any(d.glob("*model_states.pt")):
            continue
        step = _last_int(d.name)
        if d.name == tag or (step is not None and tag_step is not None and step < tag_step):
            out.append(Checkpoint(path=str(d), iteration=step))
    return sorted(out, key=lambda c: (c.path.endswith("/" + tag), c.iteration or 0), reverse=True)


def _hf(root: Path, cfg: CheckpointCfg) -> list[Checkpoint]:
    out = []
    for d in root.glob("checkpoint-*"):
        m = re.fullmatch(r"checkpoint-(\d+)", d.name)
        if m and (d / "trainer_state.json").is_file():
            out.append(Checkpoint(path=str(d), iteration=int(m.group(1))))
    return sorted(out, key=lambda c: c.iteration or 0, reverse=True)


def _zip_complete(f: Path) -> bool:
    """A torch/Lightning .ckpt is a zip archive: complete files end with an end-of-central-directory
    record."""
    try:
        size = f.stat().st_size
        if size < 22:
            return False
        with f.open("rb") as fh:
            fh.seek(max(0, size - 65557))
            return b"PK\x05\x06" in fh.read()
    except OSError:
        return False


def _lightning(root: Path, cfg: CheckpointCfg) -> list[Checkpoint]:
    files = [f for f in root.rglob("*.ckpt") if f.is_file() and _zip_complete(f)]

    def step(f: Path) -> int | None:
        m = re.search(r"step=(\d+)", f.name)
        return int(m.group(1)) if m else None

    files.sort(key=lambda f: (f.name == "last.ckpt", f.stat().st_mtime), reverse=True)
    return [Checkpoint(path=str(f), iteration=step(f)) for f in files]


def _glob(root: Path, cfg: CheckpointCfg) -> list[Checkpoint]:
    assert cfg.glob
    out = []
    for entry in root.glob(cfg.glob):
        if cfg.marker:
            if not (entry.is_dir() and (entry / cfg.marker).is_file()):
                continue
        elif not (_has_files(entry) or (entry.is_file() and entry.stat().st_size > 0)):
            continue
        out.append((entry, _last_int(entry.name)))
    out.sort(key=lambda e: (e[1] if e[1] is not None else -1, e[0].stat().st_mtime), reverse=True)
    return [Checkpoint(path=str(e), iteration=n) for e, n in out]


PRESETS: dict[str, Callable[[Path, CheckpointCfg], list[Checkpoint]]] = {
    "megatron": _megatron,
    "deepspeed": _deepspeed,
    "hf": _hf,
    "lightning": _lightning,
    "glob": _glob,
}


def candidates(cfg: CheckpointCfg) -> list[Checkpoint]:
    root = Path(cfg.dir)
    if not root.is_dir():
        return []
    return PRESETS[cfg.preset](root, cfg)


def find_latest(cfg: CheckpointCfg, skip: frozenset[str] = frozenset()) -> Checkpoint | None:
    """Newest complete checkpoint not in `skip`, or None when the run starts from scratch."""
    return next((c for c in candidates(cfg) if c.path not in skip), None)
