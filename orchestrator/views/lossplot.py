"""The report's loss panel (issue 41): each segment's printed loss curve by iteration, coloured by
how the segment ended, with the onsets the run rolled back from."""

from __future__ import annotations

from typing import Any

from orchestrator.state import SegmentRecord


def has_losses(segs: list[SegmentRecord]) -> bool:
    return any(s.losses for s in segs)


def loss_panel(ax: Any, segs: list[SegmentRecord], colours: dict[str, str]) -> None:
    """Every segment's curve (the ledger's thinned points) and a dashed line at each rollback's
    onset: the checkpoints at or after it were not resumed from."""
    for s in segs:
        if s.losses:
            steps, values = zip(*s.losses, strict=True)
            colour = colours.get(s.cause.value if s.cause else "running", "#1e88e5")
            ax.plot(steps, values, color=colour, linewidth=1.2, label=f"segment {s.index}")
        if s.rollback_below is not None:
            ax.axvline(s.rollback_below, color="#c62828", linestyle="--", linewidth=1)
    ax.set_xlabel("iteration")
    ax.set_ylabel("loss")
    ax.set_title("loss the ranks printed (dashed: a rollback's onset)", loc="left")
    ax.grid(alpha=0.3)
    if len([s for s in segs if s.losses]) <= 12:
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=9)
