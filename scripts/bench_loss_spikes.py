#!/usr/bin/env python3
"""The loss detector (orchestrator/losses.py) on real public loss curves (tests/data/loss_curves: a
helper built and labelled them blind, labels frozen before any detector run), beside a floor in the
same run: the naive rules a script would use (any printed loss line with `nan`/`inf`, or a loss 50%
above the one printed before it).

    python scripts/bench_loss_spikes.py [--dir tests/data/loss_curves] [--json OUT]

Per case: the label (none / spike / nan and its onset), the losses read, how many came before the
onset (the detector judges spikes only after `loss.min_points`), what each detector found. Then:
false alarms on the healthy curves, anomalies found, onsets at or before the labelled one (a later
onset could let a rollback resume from a checkpoint written after the loss went bad).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestrator.losses import LossRule, LossSeries, losses_in  # noqa: E402
from orchestrator.settings import PROGRESS_REGEX  # noqa: E402

Point = tuple[int | None, float, str]


def detector(points: list[Point], rule: LossRule) -> tuple[str, int | None]:
    series = LossSeries(rule)
    for step, value, line in points:
        series.add(step, value, line)
    found = series.found
    return (found.kind, found.onset) if found else ("none", None)


def floor(points: list[Point]) -> tuple[str, int | None]:
    prev = None
    for step, value, line in points:
        if not math.isfinite(value) or re.search(r"\b(?:nan|inf)\b", line, re.IGNORECASE):
            return "nan", step
        if prev is not None and prev > 0 and value > 1.5 * prev:
            return "spike", step
        prev = value
    return "none", None


def score(label: dict[str, object], found: tuple[str, int | None]) -> str:
    """'ok', 'false alarm', 'missed', 'found late' (onset after the label's) or 'ok (early)'."""
    want, onset = str(label["anomaly"]), label.get("onset_step")
    kind, at = found
    if want == "none":
        return "ok" if kind == "none" else "false alarm"
    if kind == "none":
        return "missed"
    if isinstance(onset, int) and at is not None and at > onset:
        return "found late"
    return "ok" if at == onset else "ok (early)"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", type=Path, default=ROOT / "tests" / "data" / "loss_curves")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    rule, progress = LossRule(), re.compile(PROGRESS_REGEX)
    rows = []
    for case in sorted(p for p in args.dir.iterdir() if (p / "label.json").is_file()):
        label = json.loads((case / "label.json").read_text())
        points = losses_in((case / "train.log").read_text(errors="replace"), progress)
        onset = label.get("onset_step")
        before = sum(1 for s, _, _ in points if isinstance(onset, int) and s is not None and s < onset)
        mine, naive = detector(points, rule), floor(points)
        rows.append({"case": case.name, "label": label["anomaly"], "onset": onset, "losses": len(points),
                     "before_onset": before if isinstance(onset, int) else None,
                     "detector": mine, "detector_score": score(label, mine),
                     "floor": naive, "floor_score": score(label, naive)})
    print(f"{'case':52} {'label':6} {'onset':>6} {'losses':>6} {'before':>6}  {'detector':22} {'floor':22}")
    for r in rows:
        d, f = r["detector"], r["floor"]
        print(f"{r['case'][:52]:52} {r['label']:6} {r['onset'] if r['onset'] is not None else '-':>6} "
              f"{r['losses']:>6} {r['before_onset'] if r['before_onset'] is not None else '-':>6}  "
              f"{d[0] + '@' + str(d[1]) + ' ' + r['detector_score']:22} "
              f"{f[0] + '@' + str(f[1]) + ' ' + r['floor_score']:22}")
    for who in ("detector", "floor"):
        healthy = [r for r in rows if r["label"] == "none"]
        bad = [r for r in rows if r["label"] != "none"]
        judgeable = [r for r in bad if r["label"] == "nan" or (r["before_onset"] or 0) >= rule.min_points]
        alarms = sum(r[f"{who}_score"] == "false alarm" for r in healthy)
        found = sum(r[f"{who}_score"].startswith("ok") for r in bad)
        found_j = sum(r[f"{who}_score"].startswith("ok") for r in judgeable)
        late = sum(r[f"{who}_score"] == "found late" for r in bad)
        print(f"== {who}: false alarms {alarms}/{len(healthy)} healthy; anomalies found with a safe onset "
              f"{found}/{len(bad)} ({found_j}/{len(judgeable)} of those with >= {rule.min_points} losses before "
              f"a spike's onset, or a NaN); found late {late}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
