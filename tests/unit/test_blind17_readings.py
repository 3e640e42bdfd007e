"""Readings taught by blind17's misses (issue 38), each through `diagnose_dir` on variants of the real text."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.test_blind14_readings import _diagnose, _said, _steps

FAULT = "Memory access fault by GPU node-{n} (Agent handle: 0x7d63730) on address 0x14c46b5d9000. Reason: {why}."


@pytest.mark.parametrize("why", ["Unknown", "Page not present or supervisor privilege"])
def test_rocms_memory_access_fault_on_every_gcd_is_the_jobs_and_on_one_a_strike(tmp_path: Path, why: str) -> None:
    hosts = ["nid005001", "nid005002"]
    every = {f"{h}.out": [*_steps(), *[FAULT.format(n=4 + g, why=why) for g in range(8)]] for h in hosts}
    assert _said(_diagnose(tmp_path / "all", every)) == ("user_bug", [], "stop_and_alert")
    one = {"nid005001.out": [*_steps(), FAULT.format(n=4, why=why)], "nid005002.out": [*_steps(), "Terminated"]}
    d = _diagnose(tmp_path / "one", one)
    assert d["culprit_nodes"] == ["nid005001"] and d["action"] == "resubmit", d["reason"]


@pytest.mark.parametrize("error", ["RuntimeError: can't create new thread at interpreter shutdown",
                                   "RuntimeError: cannot schedule new futures after interpreter shutdown",
                                   "ImportError: sys.meta_path is None, Python is likely shutting down"])
def test_an_error_python_raised_while_shutting_down_stops_nothing(tmp_path: Path, error: str) -> None:
    """A DataLoader's __del__ failing as the interpreter exits, on every node after the last save: not the job's
    bug, never a stop."""
    tail = ["Exception ignored in: <function _MultiProcessingDataLoaderIter.__del__ at 0x7f3a2c1d5ea0>",
            "Traceback (most recent call last):", "    self._shutdown_workers()", error]
    d = _diagnose(tmp_path, {f"asr-g2{i}.out": [*_steps(), "Checkpoint saved to ./outputs2/model.pt.ep20", *tail]
                             for i in (1, 2)})
    assert d["action"] != "stop_and_alert" and d["cause"] != "user_bug", d["reason"]


def test_a_dev_shm_full_on_one_node_only_is_that_nodes_local_store(tmp_path: Path) -> None:
    """ENOSPC on one node whose /dev/shm is full of an earlier job's files while the others' is nearly empty: that
    node's local store (exclude), not the job's (never a stop)."""
    def node(use: str, enospc: bool) -> list[str]:
        return [*_steps(), *(["OSError: [Errno 28] No space left on device"] if enospc else ["Terminated"]),
                "# epilog: df -h /dev/shm", "Filesystem      Size  Used Avail Use% Mounted on",
                f"tmpfs           252G  {use}  {'0' if use == '252G' else '251G'} {'100' if use == '252G' else '1'}% "
                "/dev/shm"]
    d = _diagnose(tmp_path, {"lambda-g41.out": node("1.2G", False), "lambda-g42.out": node("252G", True),
                             "lambda-g43.out": node("1.2G", False)})
    assert _said(d) == ("filesystem", ["lambda-g42"], "resubmit_exclude"), d["reason"]
