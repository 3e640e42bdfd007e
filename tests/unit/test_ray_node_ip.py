"""Issue 38 (blind6 case-026): Ray names a dead node by its IP ("Task failed because the node it was running on is
dead or unavailable. Node IP: X, node ID: Y", on one line or two: ray's normal_task_submitter.cc and a user's
report), and `ray start` prints each host's own address ("Local node IP: X", bare or after scripts.py's log
prefix): the dead node is the host that joined with that address, not the driver that reported it."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.offline.diagnosis import diagnose_dir

STEPS = "".join(f"(RayTrainWorker pid=22104, ip=10.1.94.146) [step {i}00] loss=2.{i:02d}\n" for i in range(1, 30))
DIED = [
    "Task failed because the node it was running on is dead or unavailable. Node IP: 10.1.94.148, node ID: "
    "97d5a2526a8e8ccc56f29e1a8d9c03b108f4e9950ebfa00fa469bb3e. This can happen when a (1) raylet crashes "
    "unexpectedly (OOM, etc.) (2) raylet has lagging heartbeats due to slow network or busy workload.\n",
    "Task failed because the node it was running on is dead or unavailable.\nNode IP: 10.1.94.148, node ID: "
    "97d5a2526a8e8ccc56f29e1a8d9c03b108f4e9950ebfa00fa469bb3e.\nThis can happen if the node was preempted, had a "
    "hardware failure, or its raylet crashed unexpectedly.\n",
]
JOINED = ["2022-01-28 13:09:49,429\tINFO scripts.py:605 -- Local node IP: {ip}\n", "    Local node IP: {ip}\n"]


@pytest.mark.parametrize("died", DIED)
@pytest.mark.parametrize("joined", JOINED)
def test_the_node_ray_says_died_is_the_host_that_joined_with_its_address(tmp_path: Path, died: str,
                                                                         joined: str) -> None:
    hosts = {"gpu-a01": "10.1.94.146", "gpu-a02": "10.1.94.147", "gpu-a03": "10.1.94.148"}
    for host, ip in hosts.items():
        body = f"+ ray start --address=10.1.94.146:6379 --block\n{joined.format(ip=ip)}"
        if host == "gpu-a01":
            body += (STEPS + "ray.exceptions.RayTaskError(NodeDiedError): ray::_RayTrainWorker__execute.get_next() "
                     "(pid=0, ip=10.1.94.148)\n" + died + "srun: error: gpu-a01: task 0: Exited with exit code 1\n")
        (tmp_path / f"{host}.out").write_text(body)
    got = diagnose_dir(tmp_path)
    assert got["cause"] == "node_fail" and got["culprit_nodes"] == ["gpu-a03"], got["summary"]
    assert got["action"] == "resubmit_exclude"


def test_a_loopback_local_node_ip_is_no_hosts_address(tmp_path: Path) -> None:
    """Every host of a single-machine-style setup prints 127.0.0.1: that address names none of them."""
    died = DIED[0].replace("10.1.94.148", "127.0.0.1")
    for host in ("gpu-a01", "gpu-a02"):
        tail = STEPS + died if host == "gpu-a01" else ""
        (tmp_path / f"{host}.out").write_text("Local node IP: 127.0.0.1\n" + tail)
    got = diagnose_dir(tmp_path)
    assert not (got["action"] == "resubmit_exclude" and set(got["culprit_nodes"]) & {"gpu-a01", "gpu-a02"}), got
