"""Readings taught by blind14's misses (issue 38), each held on more than one variant of the text: a job's own
rank -> host map and host/address lists, Open MPI's openib and Gloo's TCP pair naming the peer, a named peer whose
own output stops mid-write, UCX's signal handler naming its host, an epilog section header naming the host of the
node report under it (nvidia-smi's ERR!, ibstat's Polling port), and a CUDA illegal access re-raised by the
watchdog. Every case goes through `diagnose_dir`, the offline path a user runs (prefilter included)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from orchestrator.diagnose.offline import diagnose_dir


def _steps(n: int = 3, start: int = 100) -> list[str]:
    return [f" iteration {start + 10 * i:>8}/   10000 | lm loss: 2.{i}E+00 |" for i in range(n)]


def _diagnose(tmp_path: Path, files: dict[str, list[str]], cut: str = "") -> dict[str, Any]:
    """`cut`: the file whose last line is written half (no newline: the host died mid-write)."""
    logs = tmp_path / "logs"
    logs.mkdir(parents=True)
    for name, lines in files.items():
        (logs / name).write_text("\n".join(lines) + ("\n[2025-06-01 11:10:40] [INFO] [Rank 8] gradient acc"
                                                     if name == cut else "\n"))
    return diagnose_dir(logs)


def _said(d: dict[str, Any]) -> tuple[str, list[str], str]:
    return d["cause"], list(d["culprit_nodes"]), d["action"]


ILLEGAL = ("Process group watchdog thread terminated with exception: CUDA error: an illegal memory access was "
           "encountered")


@pytest.mark.parametrize("tag", ["rank map: 0-7 gx-011, 8-15 gx-014, 16-23 gx-017",
                                 "rank->host: 0-7 gx-011, 8-15 gx-014, 16-23 gx-017",
                                 "Rank mapping: 0-7 -> gx-011; 8-15 -> gx-014; 16-23 -> gx-017"])
def test_a_jobs_own_rank_map_names_the_host_of_one_ranks_crash(tmp_path: Path, tag: str) -> None:
    d = _diagnose(tmp_path, {"slurm-4242.out": [tag, *_steps(), f"[rank9]:[E0504 03:12:44.99 ProcessGroupNCCL.cpp:1899]"
                                                                 f" [PG ID 0 Rank 9] {ILLEGAL}"]})
    assert _said(d) == ("user_bug", ["gx-014"], "resubmit"), d["reason"]  # one rank's crash: a strike


def test_the_same_illegal_access_on_every_node_is_the_jobs(tmp_path: Path) -> None:
    lines = [f"RuntimeError: {ILLEGAL.split(': ', 1)[1]}"]
    d = _diagnose(tmp_path, {"gx-011.out": [*_steps(), *lines], "gx-014.out": [*_steps(), *lines]})
    assert _said(d)[2] == "stop_and_alert", d["reason"]


OPENIB = ("[[13535,1],{r}][btl_openib_component.c:3645:handle_wc] from {src} to: {dst} error polling LP CQ with "
          "status RETRY EXCEEDED ERROR status number 12 for wr_id 209907960 opcode 0  vendor error 129 qp_idx 3")


def test_openib_errors_from_two_hosts_naming_one_peer_exclude_it(tmp_path: Path) -> None:
    d = _diagnose(tmp_path, {"slurm-88412.out": [
        "[1,0]<stdout>:Train Epoch: 31 [0/1281167 (0%)]\tLoss: 1.602000",
        "[1,0]<stdout>:Train Epoch: 31 [10240/1281167 (1%)]\tLoss: 1.598000",
        OPENIB.format(r=17, src="c-2-09", dst="c-2-11"), OPENIB.format(r=5, src="c-2-05", dst="c-2-11")]})
    assert _said(d) == ("network", ["c-2-11"], "resubmit_exclude"), d["reason"]


def test_one_openib_report_is_a_strike_on_the_peer(tmp_path: Path) -> None:
    d = _diagnose(tmp_path, {"slurm-88412.out": [
        "[1,0]<stdout>:Train Epoch: 31 [0/1281167 (0%)]\tLoss: 1.602000",
        "[1,0]<stdout>:Train Epoch: 31 [10240/1281167 (1%)]\tLoss: 1.598000",
        OPENIB.format(r=17, src="c-2-09", dst="c-2-11")]})
    assert _said(d) == ("network", ["c-2-11"], "resubmit"), d["reason"]


GLOO = ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer "
        "[172.28.0.12]:14004")
GLOO_READ = ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:589] Read error [172.28.0.12]:25266: "
             "Connection reset by peer")


@pytest.mark.parametrize("error", [GLOO, GLOO_READ])
def test_gloo_errors_from_two_hosts_naming_one_address_exclude_its_host(tmp_path: Path, error: str) -> None:
    def start(host: str, ip: str, rank: int) -> str:
        return f"{host} ({ip}): dist.init_process_group(backend='gloo', world_size=3, rank={rank}) ok"

    d = _diagnose(tmp_path, {"wk-a1.out": [start("wk-a1", "172.28.0.11", 0), *_steps(), error],
                             "wk-a2.out": [start("wk-a2", "172.28.0.12", 1), *_steps()],
                             "wk-a3.out": [start("wk-a3", "172.28.0.13", 2), *_steps(), error]})
    assert _said(d) == ("network", ["wk-a2"], "resubmit_exclude"), d["reason"]


def test_one_gloo_error_in_a_job_wide_file_is_a_strike_on_the_host_its_address_maps_to(tmp_path: Path) -> None:
    d = _diagnose(tmp_path, {"slurm-60412.out": [
        "hosts: lab-gpu3=192.168.70.91 (rank 0-1), lab-gpu4=192.168.70.92 (rank 2-3)", *_steps(),
        GLOO_READ.replace("172.28.0.12", "192.168.70.92"),
        "srun: error: lab-gpu3: task 0: Exited with exit code 1"]})
    assert _said(d) == ("network", ["lab-gpu4"], "resubmit"), d["reason"]


def test_a_named_peer_whose_output_stops_mid_write_died(tmp_path: Path) -> None:
    """Both peers lost the connection to 10.77.1.11, and that host's own log stops in the middle of a line: the
    node died (node_fail), it did not merely drop packets."""
    def start(host: str, ip: str) -> str:
        return f"{host} ({ip}): init ok"

    error = GLOO.replace("172.28.0.12", "10.77.1.11")
    d = _diagnose(tmp_path, {"g-s03.log": [start("g-s03", "10.77.1.10"), *_steps(), error],
                             "g-s04.log": [start("g-s04", "10.77.1.11"), *_steps()],
                             "g-s09.log": [start("g-s09", "10.77.1.12"), *_steps(), error]},
                  cut="g-s04.log")
    assert _said(d) == ("node_fail", ["g-s04"], "resubmit_exclude"), d["reason"]
    whole = _diagnose(tmp_path / "whole", {"g-s03.log": [start("g-s03", "10.77.1.10"), *_steps(), error],
                                           "g-s04.log": [start("g-s04", "10.77.1.11"), *_steps()],
                                           "g-s09.log": [start("g-s09", "10.77.1.12"), *_steps(), error]})
    assert _said(whole) == ("network", ["g-s04"], "resubmit_exclude"), whole["reason"]


@pytest.mark.parametrize("prefix", ["", "Sun Oct 12 04:41:17 2025[1,3]<stderr>:"])
def test_ucx_signal_handler_lines_name_their_host_and_the_same_crash_everywhere_is_the_jobs(
        tmp_path: Path, prefix: str) -> None:
    crash = prefix + "[{h}:140515:0:140515] Caught signal 11 (Segmentation fault: address not mapped to object at " \
                     "address 0x54000009)"
    d = _diagnose(tmp_path, {"slurm-661203.out": [crash.format(h="dgx-0911"), crash.format(h="dgx-0912")]})
    assert _said(d) == ("segfault", [], "stop_and_alert"), d["reason"]
    one = _diagnose(tmp_path / "one", {"slurm-661203.out": [
        f"{prefix}[dgx-0911:140515:0:140515] ib_md.c:100 UCX INFO ok", *_steps(), crash.format(h="dgx-0912")]})
    assert _said(one) == ("segfault", ["dgx-0912"], "resubmit"), one["reason"]


SMI_ERR = ["|   3  NVIDIA H100 80GB HBM3          On  |   00000000:5D:00.0 Off |                 ERR! |",
           "|ERR!  ERR!  ERR!             ERR! / ERR! |   79870MiB /  81559MiB |    ERR!      Default |"]


@pytest.mark.parametrize("header", ["=== epilog gpu-b2-13: nvidia-smi ===", "---- gpu-b2-13 nvidia-smi ----",
                                    "### epilog gpu-b2-13 ###"])
def test_a_node_report_under_an_epilog_header_is_that_hosts(tmp_path: Path, header: str) -> None:
    d = _diagnose(tmp_path, {"slurm-4471203.out": [
        *_steps(), "[rank19]: RuntimeError: CUDA error: unspecified launch failure",
        "srun: error: gpu-b2-13: task 19: Exited with exit code 1",
        "srun: error: gpu-b2-11: tasks 0-7: Terminated", header, *SMI_ERR]})
    assert _said(d) == ("gpu_lost", ["gpu-b2-13"], "resubmit_exclude"), d["reason"]


def test_a_header_that_names_no_host_names_nobody(tmp_path: Path) -> None:
    d = _diagnose(tmp_path, {"slurm-4471203.out": [*_steps(), "=== epilog: nvidia-smi ===", *SMI_ERR,
                                                   "slurmstepd: error: *** JOB 4471203 ON gpu-b2-11 CANCELLED AT "
                                                   "2025-03-01T10:00:00 DUE TO TIME LIMIT ***"]})
    assert d["culprit_nodes"] == [] and d["cause"] == "timelimit", d["reason"]


@pytest.mark.parametrize("state", ["Polling", "Disabled"])
def test_an_ib_port_without_link_on_one_node_explains_its_peers_transport_errors(tmp_path: Path, state: str) -> None:
    retry = ("[{h}:27796:0:27796] ib_mlx5_log.c:113  FATAL: Error on QP 0x6b10 wqe[057]: Transport retry count "
             "exceeded (synd 0x15 vend 0x81) opcode SEND")
    ibstat = ["=== epilog: ibstat mlx5_0 ===", "CA 'mlx5_0'", "\tPort 1:", "\t\tState: Down",
              f"\t\tPhysical state: {state}"]
    d = _diagnose(tmp_path, {"lx-1125.out": [*_steps(), retry.format(h="lx-1125")],
                             "lx-1126.out": [*_steps(), retry.format(h="lx-1126")],
                             "lx-1127.out": [*_steps(), *ibstat]})
    assert _said(d) == ("network", ["lx-1127"], "resubmit_exclude"), d["reason"]
