"""Issue 37: `blacklist add` records cause `manual`, lasts the config's policy.blacklist_expiry_h unless --hours
says otherwise, expands a hostlist into one entry per node, and refuses a node the cluster does not list (the local
backend's virtual nodes, Slurm's sinfo) unless --force; when the list cannot be had it says so and takes the names."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.cli import app
from tests.conftest import base_config, write_config


def _entries(tmp: Path) -> dict[str, dict[str, str]]:
    state = json.loads((tmp / "run" / "state.json").read_text())
    return {e["node"]: e for e in state["blacklist"]["entries"]}


def _hours(entry: dict[str, str]) -> float:
    return (datetime.fromisoformat(entry["expires"]) - datetime.fromisoformat(entry["since"])).total_seconds() / 3600


def test_a_hostlist_is_one_manual_entry_per_node_for_the_configured_expiry(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, base_config(tmp_path, policy={"blacklist_expiry_h": 5}))
    res = CliRunner().invoke(app, ["blacklist", "add", str(cfg), "node[2-3]"])
    assert res.exit_code == 0, res.output
    assert "for 5 h" in res.output
    entries = _entries(tmp_path)
    assert sorted(entries) == ["node2", "node3"]
    assert all(e["cause"] == "manual" and _hours(e) == 5 for e in entries.values())
    res = CliRunner().invoke(app, ["blacklist", "add", str(cfg), "node4", "--hours", "1.5"])
    assert res.exit_code == 0 and _hours(_entries(tmp_path)["node4"]) == 1.5


def test_nodes_the_local_cluster_does_not_have_are_refused_unless_forced(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, base_config(tmp_path))  # the local backend: node1..node4
    res = CliRunner().invoke(app, ["blacklist", "add", str(cfg), "node[4-6]"])
    assert res.exit_code == 2
    assert "node[5-6]: not a node of the cluster (local backend: node[1-4])" in res.output and "--force" in res.output
    assert not (tmp_path / "run").exists()  # nothing changed, not even a ledger begun
    res = CliRunner().invoke(app, ["blacklist", "add", str(cfg), "node[5-6]", "--force"])
    assert res.exit_code == 0, res.output
    assert sorted(_entries(tmp_path)) == ["node5", "node6"]


def _slurm_config(tmp: Path) -> Path:
    return write_config(tmp, base_config(tmp, backend={"kind": "slurm"}))


def test_slurm_nodes_are_checked_against_sinfo(tmp_path: Path, fake_slurm_bin: Path) -> None:
    cfg = _slurm_config(tmp_path)  # the fake sinfo lists node1..node4
    res = CliRunner().invoke(app, ["blacklist", "add", str(cfg), "node9"])
    assert res.exit_code == 2 and "node9: not a node of the cluster (slurm backend: node[1-4])" in res.output
    res = CliRunner().invoke(app, ["blacklist", "add", str(cfg), "node3"])
    assert res.exit_code == 0, res.output
    assert list(_entries(tmp_path)) == ["node3"]


def test_without_the_clusters_list_the_names_are_taken_and_that_is_said(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "sinfo").write_text("#!/bin/sh\necho 'slurm_load_node: Unable to contact slurm controller' >&2\nexit 1\n")
    (bindir / "sinfo").chmod(0o755)
    monkeypatch.setenv("PATH", str(bindir))
    res = CliRunner().invoke(app, ["blacklist", "add", str(_slurm_config(tmp_path)), "node9"])
    assert res.exit_code == 0, res.output
    assert "node list cannot be had now; node9 taken unchecked" in res.output
    assert list(_entries(tmp_path)) == ["node9"]


def test_a_run_directory_says_that_the_default_expiry_is_used(tmp_path: Path) -> None:
    """The re-probe (F6): `blacklist add RUN_DIR NODE` recorded the 72 h default for a run whose config says 24 h,
    and said nothing; a run directory has no config to ask, so it says which expiry it takes."""
    cfg = write_config(tmp_path, base_config(tmp_path, policy={"blacklist_expiry_h": 24}))
    assert CliRunner().invoke(app, ["blacklist", "add", str(cfg), "node1"]).exit_code == 0  # the run exists
    res = CliRunner().invoke(app, ["blacklist", "add", str(tmp_path / "run"), "node2"])
    assert res.exit_code == 0, res.output
    assert "policy.blacklist_expiry_h is not known here; the default 72 h is used" in " ".join(res.output.split())
    res = CliRunner().invoke(app, ["blacklist", "add", str(tmp_path / "run"), "node3", "--hours", "24"])
    assert "expiry_h is not known" not in " ".join(res.output.split()) and _hours(_entries(tmp_path)["node3"]) == 24
