#!/usr/bin/env python3
"""Accuracy of `orchestrator diagnose` on the labelled corpus in tests/data/corpus/.

For every case: cause, culprit set and action against expected.json, and nodes that would be
excluded wrongly (blamed but not a culprit). Prints one row per cause and the totals.
Usage: python scripts/diagnose_accuracy.py [--json]
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

from orchestrator.diagnose.offline import diagnose_dir

CORPUS = Path(__file__).resolve().parents[1] / "tests" / "data" / "corpus"


def evaluate(corpus: Path = CORPUS) -> dict[str, object]:
    rows = []
    for case in sorted(p for p in corpus.iterdir() if p.is_dir()):
        exp = json.loads((case / "expected.json").read_text())
        got = diagnose_dir(case / "logs")
        wrong = sorted(set(got["culprit_nodes"]) - set(exp["culprit_nodes"])) if got["blame"] else []
        rows.append({
            "case": case.name, "expected": exp["cause"], "got": got["cause"],
            "cause_ok": got["cause"] == exp["cause"],
            "culprit_ok": sorted(got["culprit_nodes"]) == exp["culprit_nodes"],
            "action_ok": got["action"] == exp["action"], "wrongly_excluded": wrong,
            "culprits": got["culprit_nodes"], "expected_culprits": exp["culprit_nodes"],
        })
    n = len(rows)
    return {
        "cases": n,
        "cause_accuracy": sum(r["cause_ok"] for r in rows) / n,
        "culprit_accuracy": sum(r["culprit_ok"] for r in rows) / n,
        "action_accuracy": sum(r["action_ok"] for r in rows) / n,
        "wrongly_excluded_nodes": sum(len(r["wrongly_excluded"]) for r in rows),
        "rows": rows,
    }


def main() -> int:
    res = evaluate()
    if "--json" in sys.argv:
        print(json.dumps(res, indent=2))
        return 0
    by: dict[str, list[dict[str, object]]] = defaultdict(list)
    for r in res["rows"]:  # type: ignore[union-attr]
        by[str(r["expected"])].append(r)
    print(f"{'cause':<18}{'cases':>6}{'cause':>8}{'culprit':>9}{'action':>8}{'wrong-excl':>11}")
    for cause, rs in sorted(by.items()):
        k = len(rs)
        print(f"{cause:<18}{k:>6}{sum(bool(r['cause_ok']) for r in rs) / k:>8.0%}"
              f"{sum(bool(r['culprit_ok']) for r in rs) / k:>9.0%}{sum(bool(r['action_ok']) for r in rs) / k:>8.0%}"
              f"{sum(len(r['wrongly_excluded']) for r in rs):>11}")  # type: ignore[arg-type]
    print(f"{'TOTAL':<18}{res['cases']:>6}{res['cause_accuracy']:>8.0%}{res['culprit_accuracy']:>9.0%}"
          f"{res['action_accuracy']:>8.0%}{res['wrongly_excluded_nodes']:>11}")
    for r in res["rows"]:  # type: ignore[union-attr]
        if not (r["cause_ok"] and r["culprit_ok"] and r["action_ok"]):
            print(f"  MISS {r['case']}: expected {r['expected']} {r['expected_culprits']}, "
                  f"got {r['got']} {r['culprits']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
