"""Readings taught by blind18's misses (issue 38), each through `diagnose_dir` on variants of the real text."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.diagnose.origin import HOSTS_ROW, IP_HOST_MAP
from tests.unit.test_blind14_readings import _diagnose, _said, _steps

TIMEOUT = ("[E1203 10:13:00.5 ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog caught collective operation timeout: "
           "WorkNCCL(SeqNum=49102, OpType=ALLREDUCE, NumelIn=2, NumelOut=2, Timeout(ms)=600000) ran for 600078 "
           "milliseconds before timing out.")


@pytest.mark.parametrize("op", ["ncclGroupEnd", "ncclAllReduce"])
def test_xlas_nccl_operation_failed_in_a_python_error_is_the_peers_cascade_not_the_jobs_bug(tmp_path: Path,
                                                                                          op: str) -> None:
    """JAX on GPU: the peers' `JaxRuntimeError: ... NCCL operation ncclGroupEnd() failed: remote process exited` is
    what they saw of a node that went silent (its log stops mid-line, the coordination service lost its heartbeat):
    that node, never a stop."""
    err = (f"jax.errors.JaxRuntimeError: INTERNAL: external/xla/xla/service/gpu/nccl_utils.cc:301: NCCL operation "
           f"{op}() failed: remote process exited or there was a network error")
    beat = ("ERROR jax._src.distributed: Terminating process because the JAX distributed service detected fatal "
            "errors. absl::Status: UNAVAILABLE: The following tasks are unhealthy (stopped sending heartbeats): "
            "/job:jax_worker/replica:0/task:1")
    files = {f"gh-n10{i}.log": [*_steps(), err, beat] for i in (1, 3)}
    files["gh-n102.log"] = _steps()
    d = _diagnose(tmp_path, files, cut="gh-n102.log")
    assert d["action"] != "stop_and_alert" and d["cause"] != "user_bug", d["reason"]
    assert d["culprit_nodes"] == ["gh-n102"], d["reason"]


@pytest.mark.parametrize("stat", ["D", "Ds", "Dl"])
def test_a_ps_aux_row_in_state_d_names_its_host(tmp_path: Path, stat: str) -> None:
    """A stall monitor's `ps aux` (USER PID %CPU %MEM VSZ RSS TTY STAT START TIME COMMAND) under host prefixes: the
    host whose ranks sit in D is the hang's, the others' collective timeouts follow."""
    ps = ["trains-gpu-01: root  265  5.6 10.9 16228604 3609288 ?  Sl   May13 533:20 python -u train.py",
          f"trains-gpu-02: root  441  0.0  0.5 2240644 255304 ?  {stat}    May13   0:09 python -u train.py",
          "trains-gpu-03: root  301  5.6 10.9 16228604 3609288 ?  Sl   May13 532:40 python -u train.py"]
    d = _diagnose(tmp_path, {"slurm-481207.out": [*_steps(), "=== stall detector: collecting ps ===", *ps,
                                                   *[f"[rank{r}]:" + TIMEOUT.format(r=r) for r in (0, 8)]]})
    assert _said(d) == ("hang", ["trains-gpu-02"], "resubmit_exclude"), d["reason"]


@pytest.mark.parametrize("line", [
    "libfabric:71220:1733214021::efa:cq:rxr_cq_handle_cq_error():162<warn> Unable to write to EQ: Missing or "
    "unavailable event queue. err: Input/output error (5) prov_errno: Unknown error -11 (-11)",
    "libfabric:5121:1700000000::efa:ep_ctrl:efa_rdm_ep_close():1093<warn> Unable to close ep: Input/output error"])
def test_a_libfabric_provider_error_on_one_host_is_its_endpoint_not_a_filesystem(tmp_path: Path, line: str) -> None:
    """EFA over aws-ofi-nccl: one rank's provider error (errno text EIO) and `NET/OFI Request ... completed with error`,
    the others only time out: a strike on that host's link, never a filesystem wait."""
    bad = [*_steps(), line, "p5-dy-st-3:71220:71311 [3] NCCL INFO NET/OFI Request 0x7f1c2e0b8 completed with error. "
           "RC: 5. Error: Input/output error. Completed length: 0"]
    files = {f"p5-dy-st-{i}.log": [*_steps(), TIMEOUT.format(r=8 * i)] for i in (1, 2, 4)}
    d = _diagnose(tmp_path, {**files, "p5-dy-st-3.log": bad})
    assert _said(d) == ("network", ["p5-dy-st-3"], "resubmit"), d["reason"]


@pytest.mark.parametrize("row", ["192.168.17.147  cn-g018  ib0", "192.168.17.147 cn-g018 cn-g018.cluster cn-g018-ib"])
def test_an_etc_hosts_row_with_aliases_maps_the_peer_address_to_its_host(tmp_path: Path, row: str) -> None:
    peer = ("{h}:73076:73185 [4] transport/net_ib.cc:1296 NCCL WARN NET/IB : Got completion from peer "
            "192.168.17.147<38560> with error 12, opcode 0, len 0, vendor err 129 (Recv)")
    lines = ["== node map (getent hosts) ==", "192.168.17.141  cn-g017  ib0", row, "192.168.17.162  cn-g021  ib0",
             *_steps(), *[f"{h}: " + peer.format(h=h) for h in ("cn-g017", "cn-g021")]]
    d = _diagnose(tmp_path, {"slurm-918344.out": lines})
    assert d["culprit_nodes"] == ["cn-g018"] and d["cause"] == "network", d["reason"]


def test_a_long_row_of_address_pairs_that_fails_at_its_end_is_refused_at_once() -> None:
    """The map pattern is atomic: a hosts line of a thousand pairs ending in junk was tried every way its spaces could
    split (exponential: this test did not finish before); now it is refused in one pass."""
    assert IP_HOST_MAP.fullmatch("10.0.0.1 gpu1 " * 1000 + "x!") is None
    assert IP_HOST_MAP.fullmatch("10.0.0.1 gpu1 , " * 1000) is not None
    assert HOSTS_ROW.fullmatch("10.0.0.1 " + "gpu1 " * 2000 + "!") is None

