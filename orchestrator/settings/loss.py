"""`loss`: watching the loss the ranks print, and when it went bad (issue 41)."""

from __future__ import annotations

from pydantic import Field

from orchestrator.losses import LossRule
from orchestrator.settings.base import Section

_D = LossRule()


class LossCfg(Section):
    """When a printed loss is an anomaly that rolls the run back (`policy.nan_rollbacks` bounds
    the rollbacks; 0 stops at the first)."""
    watch: bool = Field(True, description="Read the training loss from the progress lines and "
                        "cancel the segment when it goes NaN/Inf or spikes: the next segment "
                        "resumes from a checkpoint written before the onset.")
    window: int = Field(_D.window, ge=5, le=100_000, description="Printed losses in the baseline "
                        "(the last normal ones; its median and median absolute deviation).")
    min_points: int = Field(_D.min_points, ge=3, le=100_000, description="Losses a segment prints "
                            "before a spike can be judged (warm-up, a resume's first steps).")
    spike_score: float = Field(_D.spike_score, gt=0, le=1e6, description="A spike is more than "
                               "this many noise deviations (the robust spread of the step-to-step "
                               "changes) above the level ...")
    spike_rise: float = Field(_D.spike_rise, ge=0, le=1e6, description="... and more than this "
                              "fraction of the level above it (0.25: 25% higher).")
    level_points: int = Field(_D.level_points, ge=1, le=100_000, description="The level: the "
                              "median of this many newest normal losses (where the curve is now).")
    confirm_points: int = Field(_D.confirm_points, ge=1, le=10_000, description="Printed losses in "
                                "a row above the spike line before it counts (an outlier is not a "
                                "spike).")
    nan_points: int = Field(_D.nan_points, ge=1, le=10_000, description="Printed NaN/Inf losses in "
                            "a row before they count (a skipped overflow step prints one).")

    def rule(self) -> LossRule | None:
        """The detector's terms; None when the loss is not watched."""
        return None if not self.watch else LossRule(window=self.window, min_points=self.min_points,
                        spike_score=self.spike_score, spike_rise=self.spike_rise,
                        confirm_points=self.confirm_points, nan_points=self.nan_points,
                        level_points=self.level_points)
