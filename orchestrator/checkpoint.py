"""Find the newest *complete* checkpoint for each supported layout.

Each preset lists complete candidates newest first; `find_latest` returns the first one not in
`skip` (checkpoints that failed to load before), so a bad newest checkpoint falls back to the
previous. The layouts, as the frameworks write them (tests/data/checkpoints/README.md cites the
sources): accelerate `save_state` dirs whose last file written is `random_states_0.pkl`; DCP and
torchtitan `step-N` dirs complete with the `.metadata` DCP writes last; NeMo `.ckpt` files and
distributed-checkpoint dirs (`metadata.json`), less those with a `-unfinished` marker. Every
directory candidate must also be whole (`_whole`): every shard a Hugging Face index lists present
and non-empty, DCP shards with their `.metadata` (issue 41).
"""

from __future__ import annotations

import json
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


def _whole(d: Path) -> bool:
    """A checkpoint directory with every shard a Hugging Face index (`*.index.json` weight_map)
    lists present and non-empty, and its DCP shards (`*.distcp`) beside the `.metadata` DCP writes
    last: what a save cut short leaves otherwise. (An empty file alone proves nothing: a DCP rank
    with nothing to write leaves one.)"""
    files = [p for p in d.rglob("*") if p.is_file()] if d.is_dir() else []
    for index in (p for p in files if p.name.endswith(".index.json")):
        try:
            listed = set(json.loads(index.read_text(errors="replace"))["weight_map"].values())
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return False
        if not all(isinstance(n, str) and (f := index.parent / n).is_file() and f.stat().st_size
                   for n in listed):
            return False
    return all((p.parent / ".metadata").is_file() for p in files if p.suffix == ".distcp")


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
        if m and int(m.group(1)) <= latest and _has_files(d) and _whole(d):
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
        if not d.is_dir() or not any(d.glob("*model_states.pt")) or not _whole(d):
            continue
        step = _last_int(d.name)
        if d.name == tag or (step is not None and tag_step is not None and step < tag_step):
            out.append(Checkpoint(path=str(d), iteration=step))
    return sorted(out, key=lambda c: (c.path.endswith("/" + tag), c.iteration or 0), reverse=True)


def _hf(root: Path, cfg: CheckpointCfg) -> list[Checkpoint]:
    out = []
    for d in root.glob("checkpoint-*"):
        m = re.fullmatch(r"checkpoint-(\d+)", d.name)
        if m and (d / "trainer_state.json").is_file() and _whole(d):
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


def _numbered(dirs: list[tuple[Path, int]], done: str) -> list[Checkpoint]:
    """The dirs holding their completion file `done`, highest number (then newest) first."""
    out = [(d, n) for d, n in dirs if (d / done).is_file() and _whole(d)]
    out.sort(key=lambda e: (e[1], e[0].stat().st_mtime), reverse=True)
    return [Checkpoint(path=str(d), iteration=n) for d, n in out]


def _named(root: Path, rx: re.Pattern[str]) -> list[tuple[Path, int]]:
    out = []
    for d in root.iterdir() if root.is_dir() else ():
        m = rx.fullmatch(d.name)
        if m and d.is_dir():
            out.append((d, int(m.group(1))))
    return out


ACCELERATE = re.compile(r"(?:checkpoint|step|epoch)_(\d+)")
DCP = re.compile(r"step[-_](\d+)")
TORCHTITAN = re.compile(r"step-(\d+)")


def _accelerate(root: Path, cfg: CheckpointCfg) -> list[Checkpoint]:
    # `save_state(DIR)`, or project_dir/checkpoints/checkpoint_N with automatic_checkpoint_naming
    dirs = _named(root, ACCELERATE) + _named(root / "checkpoints", ACCELERATE)
    return _numbered(dirs, "random_states_0.pkl")


def _dcp(root: Path, cfg: CheckpointCfg) -> list[Checkpoint]:
    return _numbered(_named(root, DCP), ".metadata")


def _torchtitan(root: Path, cfg: CheckpointCfg) -> list[Checkpoint]:
    return _numbered(_named(root, TORCHTITAN), ".metadata")


def _nemo_done(p: Path) -> bool:
    base = str(p).removesuffix(".ckpt").removesuffix("-EMA")
    if Path(base + "-unfinished").exists():
        return False
    return _zip_complete(p) if p.is_file() else (p / "metadata.json").is_file()


def _nemo(root: Path, cfg: CheckpointCfg) -> list[Checkpoint]:
    found = [p for p in root.rglob("*") if (p.is_file() and p.suffix == ".ckpt")
             or (p.is_dir() and (p / "metadata.json").is_file())]
    done = [p for p in found if _nemo_done(p)]

    def key(p: Path) -> tuple[int, bool, float]:
        m = re.search(r"step=(\d+)", p.name)
        return (int(m.group(1)) if m else -1, "-last" in p.name, p.stat().st_mtime)

    done.sort(key=key, reverse=True)
    return [Checkpoint(path=str(p), iteration=k if (k := key(p)[0]) >= 0 else None) for p in done]


PRESETS: dict[str, Callable[[Path, CheckpointCfg], list[Checkpoint]]] = {
    "megatron": _megatron,
    "deepspeed": _deepspeed,
    "hf": _hf,
    "lightning": _lightning,
    "accelerate": _accelerate,
    "dcp": _dcp,
    "torchtitan": _torchtitan,
    "nemo": _nemo,
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


# What a preset takes for one of its checkpoints, complete or not (a half-written newest one is
# still its own): names at the top of checkpoint.dir (accelerate: also under checkpoints/).
_NAMES = {
    "megatron": re.compile(r"iter_\d+|latest_checkpointed_iteration\.txt|release"),
    "deepspeed": re.compile(r"latest|global_step\d+"),
    "hf": re.compile(r"checkpoint-\d+"),
    "accelerate": ACCELERATE,
    "dcp": DCP,
    "torchtitan": TORCHTITAN,
}
CKPT_FILE = re.compile(r".*\.(?:pt|pth|bin|ckpt|safetensors|distcp|pkl|nemo|metadata)|latest\w*"
                       r"|metadata\.json|common\.pt", re.I)
MAX_LOOK = 2000  # entries looked at: a directory of millions is not listed whole


def _entries(root: Path, limit: int = MAX_LOOK) -> list[Path]:
    out = []
    for p in root.iterdir() if root.is_dir() else ():
        out.append(p)
        if len(out) >= limit:
            break
    return sorted(out)


def _holds_ckpt_file(d: Path, depth: int = 3) -> bool:
    if depth == 0:
        return False
    return any(CKPT_FILE.fullmatch(p.name) if p.is_file() else _holds_ckpt_file(p, depth - 1)
               for p in _entries(d, 200))


def checkpoint_like(root: Path) -> list[str]:
    """The names at the top of `root` that look like checkpoints: checkpoint-like files, and
    directories holding one (three levels down at most); logs and empty directories do not."""
    return [p.name for p in _entries(root)
            if (CKPT_FILE.fullmatch(p.name) if p.is_file() else _holds_ckpt_file(p))]


def recognises(preset: str, cfg: CheckpointCfg) -> bool:
    """Whether `preset` takes any entry of cfg.dir for one of its checkpoints (complete or not)."""
    root = Path(cfg.dir)
    if preset == "glob":
        return bool(cfg.glob) and next(iter(root.glob(cfg.glob or "")), None) is not None
    if preset in ("lightning", "nemo"):
        return any(p.suffix == ".ckpt" or (p.is_dir() and (p / "metadata.json").is_file())
                   for _, p in zip(range(MAX_LOOK * 10), root.rglob("*"), strict=False))
    names = [p.name for p in _entries(root)]
    if preset == "accelerate":
        names += [p.name for p in _entries(root / "checkpoints")]
    return any(_NAMES[preset].fullmatch(n) for n in names)


def preset_problem(cfg: CheckpointCfg) -> str:
    """One line when cfg.dir holds what looks like checkpoints and the preset recognises none of
    them (every segment would start from scratch): what is there and the presets that would
    match. '' for an absent or empty directory, or one the preset reads."""
    root = Path(cfg.dir)
    seen = checkpoint_like(root) if root.is_dir() else []
    if not seen or recognises(cfg.preset, cfg):
        return ""
    fits = [p for p in PRESETS if p not in ("glob", cfg.preset) and recognises(p, cfg)]
    shown = ", ".join(seen[:4]) + (f" (+{len(seen) - 4} more)" if len(seen) > 4 else "")
    fix = (" or ".join(f"--set checkpoint.preset={p}" for p in fits) if fits else
           "--set checkpoint.preset=glob --set checkpoint.glob=PATTERN (no preset knows these)")
    return (f"checkpoint.dir {root} holds {shown}, and checkpoint.preset {cfg.preset} recognises "
            f"none of them (every segment would start from scratch): {fix}")
