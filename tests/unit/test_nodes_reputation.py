"""The nodes' reputation across runs (issue 40 item 4): a verdict of run A, published to the shared blacklist with
A's name, keeps its evidence in run B's ledger and status; `orchestrator nodes` ranks the nodes over runs and the
shared file, each with a drain-ready line that no shell expands."""

from __future__ import annotations

import json
import shlex
from datetime import UTC, datetime, timedelta
from pathlib import Path

from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.model import BlacklistEntry, Cause, EntrySource, RunStatus
from orchestrator.shared_blacklist import SharedBlacklist
from orchestrator.views.nodes import Failure, from_shared, reputation
from orchestrator.views.status import drain_commands, status_json
from tests.fakes import Fault
from tests.unit.test_controller_fake import make

T = datetime(2026, 12, 1, tzinfo=UTC)


def _f(run: str, job: str, strong: bool = True, hours: int = 0, cause: str = "gpu_ecc") -> Failure:
    return Failure(run, job, cause, strong, T + timedelta(hours=hours), "Xid 48: DBE")


def test_a_verdict_of_run_a_reaches_run_b_with_its_run_and_evidence(tmp_path: Path) -> None:
    shared = str(tmp_path / "cluster-blacklist.json")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    ctl_a, _, _ = make(tmp_path / "a", {"node3": Fault("ecc", at=35)}, name="run-a",
                       policy={"shared_blacklist": shared})
    assert ctl_a.run().status == RunStatus.DONE
    published = SharedBlacklist(Path(shared)).entries()
    assert [(e.node, e.run) for e in published] == [("node3", "run-a")]
    ctl_b, cluster_b, clock_b = make(tmp_path / "b", name="run-b", policy={"shared_blacklist": shared})
    state_b = ctl_b.run()
    assert cluster_b.submitted[0].exclude == ("node3",)
    row = status_json(state_b, clock_b.now())["blacklist"][0]
    assert row["node"] == "node3" and row["from_run"] == "run-a" and "ECC" in row["evidence"], row
    assert "orchestrator run-a: gpu_ecc" in drain_commands(state_b, clock_b.now())[0]
    # the CLI over both runs and the shared file: node3 once per verdict, run A's
    res = CliRunner().invoke(app, ["nodes", str(tmp_path), "--shared", shared, "--json"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)
    assert [(r["node"], r["runs"], r["failures"], r["strong"]) for r in rows] == [("node3", ["run-a"], 1, 1)]
    assert rows[0]["drain_command"].startswith("scontrol update NodeName=node3 State=DRAIN Reason=\"[node_problem] ")


def test_the_nodes_that_failed_more_runs_come_first_and_a_verdict_counts_once() -> None:
    found = [("n1", _f("a", "1")), ("n1", _f("a", "2")), ("n1", _f("a", "3", strong=False)),
             ("n2", _f("a", "4", strong=False)), ("n2", _f("b", "9", strong=False, hours=2)),
             ("n2", _f("b", "9", strong=False, hours=2)),  # the ledger and the shared file: one verdict
             ("n3", _f("c", "7", hours=5))]
    rows = reputation(found)
    assert [(r.node, len(r.runs), len(r.failures), r.strong) for r in rows] == [
        ("n2", 2, 2, 0), ("n1", 1, 3, 2), ("n3", 1, 1, 1)]
    assert rows[0].drain_reason().startswith("[node_suspect] gpu_ecc: 2 failure(s) in 2 run(s), last job 9 (b)")
    assert rows[1].drain_reason().startswith("[node_problem] ")


def test_the_drain_line_is_bounded_and_nothing_in_it_expands_in_a_shell() -> None:
    evil = Failure("r", "5", "hang", True, T, 'stuck $(touch /tmp/pwned) `id` "quoted" \\ ' + "x" * 400)
    line = reputation([("gpu-7", evil)])[0].drain_command()
    argv = shlex.split(line)
    reason = argv[-1].removeprefix("Reason=")
    assert argv[:4] == ["scontrol", "update", "NodeName=gpu-7", "State=DRAIN"], argv
    assert "$(touch /tmp/pwned)" not in line.replace("\\$", "") and len(reason) <= 200, reason


def test_manual_entries_in_the_shared_file_are_no_failures() -> None:
    mk = {"cause": Cause.GPU_ECC, "evidence": "/r/seg/logs/n1.log:3: Xid 79", "job_id": "8", "since": T,
          "expires": T + timedelta(days=1)}
    auto = BlacklistEntry(node="n1", run="a", **mk)
    manual = BlacklistEntry(node="n2", source=EntrySource.MANUAL, **mk)
    assert [(n, f.run, f.evidence) for n, f in from_shared([auto, manual])] == [("n1", "a", "Xid 79")]


def test_bad_targets_are_refused_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("x")
    res = CliRunner().invoke(app, ["nodes", str(tmp_path / "notes.txt")])
    assert res.exit_code == 2 and "neither a directory of runs nor a config file" in res.output
    res = CliRunner().invoke(app, ["nodes", "--shared", str(tmp_path / "missing.json")])
    assert res.exit_code == 2 and "no such shared blacklist file" in res.output
    (tmp_path / "bad.json").write_text("[1, 2]")
    res = CliRunner().invoke(app, ["nodes", str(tmp_path), "--shared", str(tmp_path / "bad.json")])
    assert res.exit_code == 1 and "not a shared blacklist" in res.output
    res = CliRunner().invoke(app, ["nodes", str(tmp_path)])
    assert res.exit_code == 0 and "no node failed" in res.output
