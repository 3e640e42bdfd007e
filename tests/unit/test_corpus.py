"""The labelled corpus (tests/data/corpus, built by tests/data/build_corpus.py from real error text)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.cli import app
from scripts.diagnose_accuracy import CORPUS, evaluate

runner = CliRunner()


def test_corpus_accuracy_and_no_wrongly_excluded_node() -> None:
    res = evaluate()
    cases, rows = res["cases"], res["rows"]
    assert isinstance(cases, int) and cases >= 40
    assert isinstance(rows, list)
    causes = {json.loads((c / "expected.json").read_text())["cause"] for c in CORPUS.iterdir() if c.is_dir()}
    assert causes >= {"gpu_ecc", "gpu_lost", "gpu_oom_startup", "user_oom", "nccl_timeout", "network", "hang",
                      "node_fail", "filesystem", "host_oom", "preempted", "timelimit", "user_bug", "segfault",
                      "bus_error", "success", "unknown"}
    misses = [r for r in rows if not (r["cause_ok"] and r["culprit_ok"] and r["action_ok"])]
    accuracy = [res["cause_accuracy"], res["culprit_accuracy"], res["action_accuracy"]]
    assert all(isinstance(a, float) and a >= 0.95 for a in accuracy), (accuracy, misses)
    assert res["wrongly_excluded_nodes"] == 0


def test_diagnose_cli_json_shape() -> None:
    r = runner.invoke(app, ["diagnose", str(CORPUS / "ecc-bigscience-cascade" / "logs"), "--json"])
    assert r.exit_code == 0, r.output
    v = json.loads(r.output)
    assert set(v) >= {"cause", "culprit_nodes", "blame", "action", "confidence", "evidence"}
    assert v["cause"] == "gpu_ecc" and v["culprit_nodes"] == ["gpu-a012"] and v["blame"]
    roles = {e["role"] for e in v["evidence"]}
    assert roles == {"root", "secondary"}
    assert all(set(e) == {"node", "file", "line", "text", "role"} for e in v["evidence"])


def test_diagnose_bad_dirs(tmp_path: Path) -> None:
    assert runner.invoke(app, ["diagnose", str(tmp_path / "missing")]).exit_code == 2
    assert runner.invoke(app, ["diagnose", str(tmp_path)]).exit_code == 2
    (tmp_path / "node1.out").write_text("")
    r = runner.invoke(app, ["diagnose", str(tmp_path), "--json"])
    assert r.exit_code == 0 and json.loads(r.output)["cause"] == "unknown"


@pytest.mark.parametrize("name", ["ecc-after-monster-line", "node-fail-nul-padding", "unknown-garbage-bytes"])
def test_hostile_bytes_do_not_crash(name: str) -> None:
    assert runner.invoke(app, ["diagnose", str(CORPUS / name / "logs")]).exit_code == 0
