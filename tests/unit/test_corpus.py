"""The labelled corpus (tests/data/corpus, built by tests/data/build_corpus.py from real error text)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from orchestrator.cli import app
from scripts.diagnose_accuracy import CORPUS, HELD_OUT, SPLITS, evaluate

runner = CliRunner()


def _score(results: list[dict[str, Any]]) -> tuple[float, float, float, int]:
    rows = [r for res in results for r in res["rows"]]
    n = len(rows)
    return (sum(r["cause_ok"] for r in rows) / n, sum(r["culprit_ok"] for r in rows) / n,
            sum(r["action_ok"] for r in rows) / n, sum(len(r["wrongly_excluded"]) for r in rows))


def test_corpus_accuracy_and_no_wrongly_excluded_node() -> None:
    """Issue 20's bar (labels by DECISIONS.md): >= 97% cause, culprit and action on the whole labelled set, >= 93%
    on each blind split, no healthy node excluded anywhere and no run stopped on a fault that was not the job's."""
    own = evaluate(CORPUS)
    blinds = [evaluate(path) for name, path in SPLITS.items() if name.startswith("blind") and name not in HELD_OUT]
    assert own["cases"] + sum(b["cases"] for b in blinds) >= 360 and all(b["cases"] >= 40 for b in blinds)
    causes = {json.loads((c / "expected.json").read_text())["cause"] for c in CORPUS.iterdir() if c.is_dir()}
    assert causes >= {"gpu_ecc", "gpu_lost", "gpu_oom_startup", "user_oom", "nccl_timeout", "network", "hang",
                      "node_fail", "filesystem", "host_oom", "preempted", "timelimit", "user_bug", "segfault",
                      "bus_error", "success", "unknown"}
    misses = [r["case"] for res in (own, *blinds) for r in res["rows"]
              if not (r["cause_ok"] and r["culprit_ok"] and r["action_ok"])]
    *whole, wrong = _score([own, *blinds])
    assert all(a >= 0.97 for a in whole), (whole, misses)
    for b in blinds:
        *blind_acc, _ = _score([b])
        assert all(a >= 0.93 for a in blind_acc), (blind_acc, misses)
    assert wrong == 0, misses
    assert sum(r["stopped_wrongly"] for res in (own, *blinds) for r in res["rows"]) == 0, misses


def test_diagnose_cli_json_shape() -> None:
    r = runner.invoke(app, ["diagnose", str(CORPUS / "ecc-bigscience-cascade" / "logs"), "--json"])
    assert r.exit_code == 0, r.output
    v = json.loads(r.output)
    assert set(v) >= {"cause", "culprit_nodes", "blame", "action", "confidence", "evidence"}
    assert v["cause"] == "gpu_ecc" and v["culprit_nodes"] == ["gpu-a012"] and v["blame"]
    roles = {e["role"] for e in v["evidence"]}
    assert roles == {"root", "secondary"}
    assert all(set(e) == {"node", "file", "line", "text", "role", "source"} for e in v["evidence"])
    assert v["rule"] == "node_hardware" and v["owner"] == "node" and v["policy_rule"] == "node_fault"


def test_diagnose_bad_dirs(tmp_path: Path) -> None:
    assert runner.invoke(app, ["diagnose", str(tmp_path / "missing")]).exit_code == 2
    assert runner.invoke(app, ["diagnose", str(tmp_path)]).exit_code == 2
    (tmp_path / "node1.out").write_text("")
    r = runner.invoke(app, ["diagnose", str(tmp_path), "--json"])
    assert r.exit_code == 0 and json.loads(r.output)["cause"] == "unknown"


@pytest.mark.parametrize("name", ["ecc-after-monster-line", "node-fail-nul-padding", "unknown-garbage-bytes"])
def test_hostile_bytes_do_not_crash(name: str) -> None:
    """Monster lines, NUL padding and invalid UTF-8: no crash, and still the right verdict."""
    r = runner.invoke(app, ["diagnose", str(CORPUS / name / "logs"), "--json"])
    assert r.exit_code == 0, r.output
    got, exp = json.loads(r.output), json.loads((CORPUS / name / "expected.json").read_text())
    assert (got["cause"], got["culprit_nodes"]) == (exp["cause"], exp["culprit_nodes"])


def test_diagnose_a_run_directory_reads_its_latest_segment(tmp_path: Path) -> None:
    """Pointed at a run directory, diagnose judges the newest segment's logs, never state.json or the
    controller's own log as if they were nodes; a symlink leading out of the directory is not followed."""
    (tmp_path / "state.json").write_text("{}")
    (tmp_path / "controller.log").write_text("ERROR Traceback ValueError: x\n")
    for seg, text in (("0001", "RuntimeError: CUDA error: uncorrectable ECC error encountered\n"),
                      ("0002", "srun: error: Node failure on node2\n")):
        logs = tmp_path / "segments" / seg / "logs"
        logs.mkdir(parents=True)
        (logs / "node1.log").write_text(text)
    outside = tmp_path.parent / f"{tmp_path.name}-outside.log"
    outside.write_text("RuntimeError: CUDA error: uncorrectable ECC error encountered\n")
    (tmp_path / "segments" / "0002" / "logs" / "node9.log").symlink_to(outside)
    r = runner.invoke(app, ["diagnose", str(tmp_path), "--json"])
    assert r.exit_code == 0, r.output
    got = json.loads(r.output)
    assert got["cause"] == "node_fail" and got["culprit_nodes"] == ["node2"], got


def test_diagnose_with_a_config_uses_its_signatures(tmp_path: Path) -> None:
    """A site's own message, taught in the config, changes what `diagnose --config` says."""
    from tests.conftest import base_config, write_config

    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "node1.log").write_text(" iteration 5/ 10\nSITE-HEALTH: node1 failed PCIe link check\n")
    (logs / "node2.log").write_text(" iteration 5/ 10\n")
    plain = json.loads(runner.invoke(app, ["diagnose", str(logs), "--json"]).output)
    assert plain["cause"] == "unknown"
    sig = {"name": "site_pcie", "pattern": r"SITE-HEALTH: \S+ failed PCIe", "cause": "gpu_lost", "blame": True}
    cfg = write_config(tmp_path, base_config(tmp_path, signatures=[sig]))
    r = runner.invoke(app, ["diagnose", str(logs), "--config", str(cfg), "--json"])
    assert r.exit_code == 0, r.output
    got = json.loads(r.output)
    assert (got["cause"], got["culprit_nodes"], got["action"]) == ("gpu_lost", ["node1"], "resubmit_exclude")


def test_a_held_out_split_is_scored_and_its_first_run_is_reported() -> None:
    """A hold-out is measured, not yet held to the bar: it has 40+ cases, every case scores, and its honest first
    run is in docs/BENCHMARKS.md."""
    bench = (CORPUS.parents[2] / "docs" / "BENCHMARKS.md").read_text()
    for name in HELD_OUT:
        res = evaluate(SPLITS[name])
        assert res["cases"] >= 40 and len(res["rows"]) == res["cases"]
        assert f"**{name}** (issue 38" in bench and "first run" in bench
