#!/usr/bin/env python3
"""Accuracy of `orchestrator diagnose` on the labelled cases, per split.

Splits: `corpus` (tests/data/corpus/: the project's own cases, real text with sources) and `blind`-`blind4`
(each built by a helper from sources it found itself, without reading the engine; its labels were frozen before
the engine first ran on them). Labels follow DECISIONS.md (the product's policy). For every case: cause, culprit
set and action against expected.json, nodes that would be excluded wrongly (blamed by an exclusion but not a
culprit), and the two costly errors apart: runs stopped on a fault that was not the job's, and repeating failures
resubmitted. Then the same per rule that fired, and over the whole corpus.
Usage: python scripts/diagnose_accuracy.py [--json] [--baseline] [--split corpus|blind|blind2|...|blind8]
(--baseline: also the floor, a first-regex-wins grep over the same signature table, per split)
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from orchestrator.offline.diagnosis import diagnose_dir

DATA = Path(__file__).resolve().parents[1] / "tests" / "data"
CORPUS = DATA / "corpus"
SPLITS = {"corpus": CORPUS, "blind": DATA / "blind", "blind2": DATA / "blind2", "blind3": DATA / "blind3",
          "blind4": DATA / "blind4", "blind5": DATA / "blind5", "blind6": DATA / "blind6",
          "blind7": DATA / "blind7", "blind8": DATA / "blind8", "blind9": DATA / "blind9",
          "blind10": DATA / "blind10", "blind11": DATA / "blind11", "blind12": DATA / "blind12",
          "blind13": DATA / "blind13", "blind14": DATA / "blind14", "blind15": DATA / "blind15",
          "blind16": DATA / "blind16", "blind17": DATA / "blind17", "blind18": DATA / "blind18",
          "blind19": DATA / "blind19", "blind20": DATA / "blind20"}
# blind splits scored, but not yet held to the bar by tests/unit/test_corpus.py: their honest first
# run is in docs/BENCHMARKS.md (blind20: the engine has not been changed for it; blind9-blind19:
# changed for some of their misses since, see BENCHMARKS)
HELD_OUT = {"blind9", "blind10", "blind11", "blind12", "blind13", "blind14", "blind15", "blind16",
            "blind17", "blind18", "blind19", "blind20"}
STOP, DONE = "stop_and_alert", "done"


def evaluate(corpus: Path = CORPUS) -> dict[str, Any]:
    rows = []
    for case in sorted(p for p in corpus.iterdir() if p.is_dir()):
        exp = json.loads((case / "expected.json").read_text())
        got = diagnose_dir(case / "logs")
        excluded = got["culprit_nodes"] if got["action"] == "resubmit_exclude" else []
        wrong = sorted(set(excluded) - set(exp["culprit_nodes"]))
        rows.append({
            "case": case.name, "expected": exp["cause"], "got": got["cause"],
            "cause_ok": got["cause"] == exp["cause"],
            "culprit_ok": sorted(got["culprit_nodes"]) == exp["culprit_nodes"],
            "action_ok": got["action"] == exp["action"], "wrongly_excluded": wrong,
            "culprits": got["culprit_nodes"], "expected_culprits": exp["culprit_nodes"],
            "action": got["action"], "expected_action": exp["action"], "rule": got.get("rule", ""),
            # the two costly errors: a run stopped on a fault that was not the job's (hours until a human looks),
            # and a failure that repeats resubmitted (a queue wait and a start-up, again)
            "stopped_wrongly": got["action"] == STOP and exp["action"] != STOP,
            "repeat_resubmitted": exp["action"] == STOP and got["action"] not in (STOP, DONE),
        })
    n = len(rows)
    return {
        "cases": n,
        "cause_accuracy": sum(r["cause_ok"] for r in rows) / n,
        "culprit_accuracy": sum(r["culprit_ok"] for r in rows) / n,
        "action_accuracy": sum(r["action_ok"] for r in rows) / n,
        "wrongly_excluded_nodes": sum(len(r["wrongly_excluded"]) for r in rows),
        "stopped_wrongly": sum(r["stopped_wrongly"] for r in rows),
        "repeat_resubmitted": sum(r["repeat_resubmitted"] for r in rows),
        "rows": rows,
    }


def table(name: str, res: dict[str, Any]) -> None:
    rows: list[dict[str, Any]] = res["rows"]
    by: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by[str(r["expected"])].append(r)
    print(f"== {name} ==")
    print(f"{'cause':<18}{'cases':>6}{'cause':>8}{'culprit':>9}{'action':>8}{'wrong-excl':>11}")
    for cause, rs in sorted(by.items()):
        k = len(rs)
        print(f"{cause:<18}{k:>6}{sum(bool(r['cause_ok']) for r in rs) / k:>8.0%}"
              f"{sum(bool(r['culprit_ok']) for r in rs) / k:>9.0%}{sum(bool(r['action_ok']) for r in rs) / k:>8.0%}"
              f"{sum(len(r['wrongly_excluded']) for r in rs):>11}")
    print(f"{'TOTAL':<18}{res['cases']:>6}{res['cause_accuracy']:>8.1%}{res['culprit_accuracy']:>9.1%}"
          f"{res['action_accuracy']:>8.1%}{res['wrongly_excluded_nodes']:>11}")
    print(f"costly errors: {res['stopped_wrongly']} run(s) stopped on a fault that was not the job's, "
          f"{res['repeat_resubmitted']} repeating failure(s) resubmitted")
    for r in rows:
        if not (r["cause_ok"] and r["culprit_ok"] and r["action_ok"]):
            print(f"  MISS {r['case']}: expected {r['expected']} {r['expected_culprits']} {r['expected_action']}, "
                  f"got {r['got']} {r['culprits']} {r['action']}")


NAIVE_ACTION = {"gpu_ecc": "resubmit_exclude", "gpu_lost": "resubmit_exclude", "gpu_oom_startup": "resubmit_exclude",
                "node_fail": "resubmit_exclude", "user_bug": "stop_and_alert", "user_oom": "stop_and_alert",
                "filesystem": "wait_and_resubmit", "success": "done"}


def grep_baseline(corpus: Path) -> dict[str, float]:
    """The floor: a one-line first-regex-wins grep over the same signature table. The first line (file by file,
    in order) that any non-informational signature matches names the cause, the file's host is the culprit when
    the signature blames, and the action follows the cause alone."""
    from orchestrator.diagnose.signatures import build_table

    table = [s for s in build_table() if s.kind in ("", "done")]
    rows = []
    for case in sorted(p for p in corpus.iterdir() if p.is_dir()):
        exp = json.loads((case / "expected.json").read_text())
        cause, culprits = "unknown", []
        for f in sorted((case / "logs").iterdir()):
            hit = next((s for line in f.read_text(errors="replace").splitlines() for s in table
                        if s.regex.search(line[:8192])), None)
            if hit is not None:
                cause = hit.cause.value
                culprits = [f.name.split(".")[0]] if hit.blame and not f.name.startswith("slurm") else []
                break
        action = NAIVE_ACTION.get(cause, "resubmit")
        rows.append((cause == exp["cause"], sorted(culprits) == exp["culprit_nodes"], action == exp["action"]))
    n = len(rows) or 1
    return {"cause": sum(r[0] for r in rows) / n, "culprit": sum(r[1] for r in rows) / n,
            "action": sum(r[2] for r in rows) / n}


def rule_table(results: dict[str, dict[str, Any]]) -> None:
    """Per rule that fired (over every split): how often the action it led to was right."""
    by: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for res in results.values():
        for r in res["rows"]:
            by[str(r["rule"]) or "-"].append(r)
    print("== per rule (all splits) ==")
    print(f"{'rule':<44}{'cases':>6}{'cause':>8}{'culprit':>9}{'action':>8}")
    for rule, rs in sorted(by.items()):
        k = len(rs)
        print(f"{rule:<44}{k:>6}{sum(bool(r['cause_ok']) for r in rs) / k:>8.0%}"
              f"{sum(bool(r['culprit_ok']) for r in rs) / k:>9.0%}{sum(bool(r['action_ok']) for r in rs) / k:>8.0%}")


def whole(results: dict[str, dict[str, Any]]) -> None:
    rows = [r for res in results.values() for r in res["rows"]]
    n = len(rows) or 1
    print(f"== whole corpus ({len(rows)} cases) == cause {sum(r['cause_ok'] for r in rows) / n:.1%}, culprit "
          f"{sum(r['culprit_ok'] for r in rows) / n:.1%}, action {sum(r['action_ok'] for r in rows) / n:.1%}, "
          f"wrongly excluded {sum(len(r['wrongly_excluded']) for r in rows)}, stopped wrongly "
          f"{sum(r['stopped_wrongly'] for r in rows)}, repeats resubmitted "
          f"{sum(r['repeat_resubmitted'] for r in rows)}")


def main() -> int:
    only = sys.argv[sys.argv.index("--split") + 1] if "--split" in sys.argv else None
    results = {name: evaluate(path) for name, path in SPLITS.items() if only in (None, name) and path.is_dir()}
    if "--json" in sys.argv:
        print(json.dumps(results, indent=2))
        return 0
    for name, res in results.items():
        table(name, res)
    rule_table(results)
    whole(results)
    if "--baseline" in sys.argv:
        print("== the floor: first-regex-wins grep with the same signatures ==")
        for name, path in SPLITS.items():
            if only in (None, name) and path.is_dir():
                b = grep_baseline(path)
                print(f"{name:<8} cause {b['cause']:.1%}  culprit {b['culprit']:.1%}  action {b['action']:.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
