"""Preparing the next segment: merge the shared blacklist, find the newest complete checkpoint (with
a timeout: a hung filesystem defers the submission, it never hangs the loop), cap the exclude list
so the job stays placeable, and plan the SegmentSpec. The controller, the dry run and the ETTR
simulation use these same functions.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from loguru import logger

from orchestrator import checkpoint as ckpt_mod
from orchestrator import numerics
from orchestrator.backends.base import Backend
from orchestrator.blacklist import Blacklist, ExcludePlan, compress
from orchestrator.contract import SegmentPaths
from orchestrator.model import SegmentSpec
from orchestrator.plan import UnsafeValue, plan, spares
from orchestrator.saves import reported_saves
from orchestrator.settings import CheckpointCfg, Policy, Settings
from orchestrator.shared_blacklist import SharedBlacklist
from orchestrator.state import RunState
from orchestrator.timeout import call_with_timeout


class FilesystemStall(Exception):
    """The shared filesystem did not answer in time: nothing is decided on a guess."""


def exclude_cap(policy: Policy, inventory: int | None, nodes_needed: int) -> int:
    """At most max_excluded_nodes, and never so many that the job cannot be placed."""
    cap = policy.max_excluded_nodes
    return cap if inventory is None else min(cap, inventory - nodes_needed)


def exclude_plan(blacklist: Blacklist, policy: Policy, inventory: list[str] | None,
                 nodes_needed: int,
                 now: datetime, fixed: list[str] | tuple[str, ...] = ()) -> ExcludePlan:
    """The blacklist's plan plus the config's resources.exclude (`fixed`: always out, first in the
    cap; names the cluster does not know are left out, with a note, as sbatch would refuse them)."""
    known = set(inventory) if inventory is not None else None
    fixed_known = sorted(n for n in fixed if known is None or n in known)
    cap = exclude_cap(policy, len(inventory) if inventory is not None else None, nodes_needed)
    got = blacklist.prune(now).exclude_plan(now, policy.strike_threshold,
                                            max(0, cap - len(fixed_known)), known)
    if not fixed:
        return got
    notes = [got.note] if got.note else []
    if unknown := [n for n in fixed if n not in fixed_known]:
        notes.append("resources.exclude names nodes the cluster does not know: "
                     f"{compress(unknown)} (left out)")
    return ExcludePlan(nodes=tuple(sorted(set(got.nodes) | set(fixed_known))), dropped=got.dropped,
                       note="; ".join(notes))


def shared_path(settings: Settings) -> Path | None:
    p = settings.policy.shared_blacklist
    return (p if p.is_absolute() else settings.config_dir / p) if p else None


def merged_blacklist(settings: Settings, own: Blacklist, run: tuple[str, datetime] | None = None,
                     now: datetime | None = None) -> Blacklist:
    path = shared_path(settings)
    if path is None:
        return own
    try:
        return SharedBlacklist(path).merge_into(own, run, now)
    except (OSError, ValueError) as exc:
        logger.warning("shared blacklist unreadable, using the run's own: {}", exc)
        return own


def reported_into(run_dir: Path, index: int, ckpt_dir: Path, workdir: Path | None) -> bool:
    """Whether segment `index`'s training reported a save into ckpt_dir, or into a directory above
    or below it ("successfully saved checkpoint ... to DIR", in its nodes' exit records): then a
    missing ckpt_dir lost checkpoints. A save elsewhere, or none named, tells nothing."""
    saves = reported_saves(SegmentPaths.of(run_dir, index).root)
    mine = Path(os.path.normpath(ckpt_dir.absolute()))
    for said in {d for x in saves for d in x.dirs}:
        there = Path(os.path.normpath(Path(workdir or ".", said).absolute()))
        if there == mine or there in mine.parents or mine in there.parents:
            return True
    return False


def _saves_counted(settings: Settings, state: RunState) -> bool:
    """Whether the training's reported saves mean checkpoints are lost when none is found: where
    checkpoint.dir exists (emptied), or where a save named it (removed: an unmounted parent). A
    directory never created that no save named is no loss: the training saves elsewhere."""
    d = settings.checkpoint.dir
    return d.is_dir() or any(
        reported_into(settings.run_dir, s.index, d, settings.workdir) for s in state.segments
        if s.index > state.scratch_after and s.checkpoint_write_s is not None)


def _lost_checkpoints(settings: Settings, state: RunState, dir_exists: bool,
                      is_dir: bool = True) -> str:
    """Why "no checkpoint" cannot mean "start from scratch" for this run, or ''. Once a run has
    resumed from a checkpoint, or made progress and its checkpoint directory's parent is gone too,
    the filesystem is missing (unmounted, deleted): wait for it, never start over. (A run that made
    progress before its first checkpoint legitimately has no checkpoint directory yet, so a missing
    directory alone is not enough.)"""
    skip = {p for p, n in state.bad_checkpoints.items() if n >= 2}
    resumed = [s for s in state.segments if s.resumed_from and s.resumed_from not in skip
               and s.index > state.scratch_after]
    where = settings.checkpoint.dir
    if resumed:
        return (f"no complete checkpoint in {where}, but segment {resumed[-1].index} resumed from "
                f"{resumed[-1].resumed_from}: unmounted or deleted? not starting from scratch "
                "(`orchestrator run --from-scratch` starts from iteration 0 on purpose)")
    seen = state.checkpoint_seen
    if seen and seen not in skip:
        return (f"no complete checkpoint in {where}, but {seen} was there after the run reached "
                f"iteration {state.best_iteration()}: emptied, moved or unmounted? not starting "
                "from scratch (`orchestrator run --from-scratch` starts from iteration 0 on "
                "purpose)")
    live = [s for s in state.segments if s.index > state.scratch_after]
    best = max((s.end_iteration or 0 for s in live), default=0)
    if is_dir and (saved := [s for s in live if s.checkpoint_write_s is not None]):
        # the training itself said it saved one ("successfully saved checkpoint ..."), even where
        # no controller was watching when it did (killed, then the mount came back empty or not
        # at all); `is_dir`: _saves_counted
        return (f"no complete checkpoint in {where}, but the training of segment "
                f"{saved[-1].index} reported saving checkpoints (the run reached iteration "
                f"{best}): emptied, moved or unmounted? not starting from scratch (`orchestrator "
                "run --from-scratch` starts from iteration 0 on purpose)")
    if best > 0 and not dir_exists:
        return (f"{where} and its parent do not exist although the run reached iteration {best}: "
                "unmounted? not starting from scratch (create the directory to start from scratch "
                "on purpose)")
    return ""


# checkpoint.find_latest
Finder = Callable[[CheckpointCfg, frozenset[str]], ckpt_mod.Checkpoint | None]


def find_checkpoint(settings: Settings, state: RunState,
                    find: Finder = ckpt_mod.find_latest) -> ckpt_mod.Checkpoint | None:
    """The newest complete checkpoint (`find`, in a worker with the read timeout: a test passes one
    that hangs)."""
    bad = frozenset(p for p, n in state.bad_checkpoints.items() if n >= 2)

    def look() -> tuple[ckpt_mod.Checkpoint | None, bool, bool]:
        after = _after_onset(settings, state)  # the loss went NaN: none written after it
        found = find(settings.checkpoint, bad | after)
        d = settings.checkpoint.dir
        return (found, found is not None or d.is_dir() or d.parent.is_dir(),
                found is None and not after and _saves_counted(settings, state))

    done, result = call_with_timeout(look, settings.watch.read_timeout_s)
    if not done:
        raise FilesystemStall(f"{settings.checkpoint.dir} did not answer within "
                              f"{settings.watch.read_timeout_s:.0f}s")
    if isinstance(result, BaseException):
        raise FilesystemStall(f"{settings.checkpoint.dir}: {result}")
    assert isinstance(result, tuple)
    ckpt: ckpt_mod.Checkpoint | None = result[0]
    dir_exists, is_dir = bool(result[1]), bool(result[2])
    if ckpt is None:
        lost = _lost_checkpoints(settings, state, dir_exists, is_dir)
        if lost:
            raise FilesystemStall(lost)
    return ckpt


def rollback_ceiling(state: RunState) -> int | None:
    """The iteration from which the checkpoints are suspect (the loss went NaN there), or None."""
    return numerics.run_ceiling(state.segments, state.scratch_after)


def _after_onset(settings: Settings, state: RunState) -> frozenset[str]:
    """The checkpoints written at or after a rollback's onset (or of no known iteration)."""
    limit = rollback_ceiling(state)
    if limit is None:
        return frozenset()
    return frozenset(c.path for c in ckpt_mod.candidates(settings.checkpoint)
                     if c.iteration is None or c.iteration >= limit)


def observe_checkpoint(settings: Settings, state: RunState) -> str | None:
    """After a segment: remember the newest complete checkpoint, so that one emptied before the next
    segment is a lost filesystem, not a reason to start from scratch. Best effort: a directory that
    does not answer or holds none changes nothing here (the next submission looks again)."""
    skip = frozenset(p for p, n in state.bad_checkpoints.items() if n >= 2)
    done, found = call_with_timeout(lambda: ckpt_mod.find_latest(settings.checkpoint, skip),
                                    settings.watch.read_timeout_s)
    return found.path if done and isinstance(found, ckpt_mod.Checkpoint) else None


@dataclass(frozen=True)
class Prepared:
    """The next segment's spec, its exclude plan, and the blacklist it was planned from."""
    spec: SegmentSpec
    exclude: ExcludePlan
    blacklist: Blacklist  # the run's blacklist with the shared one merged in
    spares_note: str = ""  # why the segment gets fewer spares than asked for
    checkpoint: str | None = None  # the newest complete checkpoint found (the one it resumes)


def prepare(settings: Settings, state: RunState, backend: Backend, now: datetime, python: str,
            find: Finder = ckpt_mod.find_latest) -> Prepared:
    """The next segment's spec. Raises FilesystemStall when the checkpoint directory does not
    answer."""
    bl = merged_blacklist(settings, state.blacklist, (state.run, state.created_at), now)
    ckpt = find_checkpoint(settings, state, find)
    inventory = backend.nodes()
    n, k, note = settings.resources.nodes, spares(settings, state), ""
    up = backend.usable_nodes() if k else inventory
    # spares only from nodes that are up and that the blacklist leaves
    if k and inventory is not None:
        out = exclude_plan(bl, settings.policy, inventory, n, now, settings.resources.exclude).nodes
        usable = len(set(up if up is not None else inventory) - set(out))
        if (cut := max(0, min(k, usable - n))) < k:
            note = (f"{cut} instead of {k}: only {usable} usable node(s) (up, not blacklisted) for "
                    f"{n} needed")
            logger.warning("spare nodes: {}", note)
        k = cut
    excl = exclude_plan(bl, settings.policy, inventory, n + k, now, settings.resources.exclude)
    try:
        spec = plan(settings, state, ckpt, excl, python, k)
    except UnsafeValue as exc:  # a checkpoint's name on disk: never pasted, nothing submitted
        raise FilesystemStall(f"{exc} (rename the checkpoint)") from None
    return Prepared(spec, excl, bl, note, ckpt.path if ckpt else None)


# prepare, as the controller calls it
Preparer = Callable[[Settings, RunState, Backend, datetime, str], Prepared]


def unloadable(state: RunState, spec: SegmentSpec) -> str:
    """Why starting this spec would lose the run (every complete checkpoint failed to load), or
    ''."""
    bad = [p for p, n in state.bad_checkpoints.items() if n >= 2]
    if spec.resume_from is None and (limit := rollback_ceiling(state)) is not None:
        return (f"the loss went NaN at iteration {limit} and no complete checkpoint was written "
                "before it: starting from scratch would lose the run; choose a checkpoint (or "
                "--from-scratch), then 'orchestrator run --resume'")
    if spec.resume_from is None and bad:
        return ("every complete checkpoint failed to load (or none is older than the bad ones): "
                f"{', '.join(bad)}; starting from scratch would lose the run: fix or remove them, "
                "then run again")
    return ""
