"""The node's own evidence (orchestrator/agent/nodefacts.py): kernel lines, NVML through the stand-in at the
library boundary (tests/nvml_standin.py), InfiniBand and cgroup counters in fake trees, mounts that hang.

The kernel lines are the kernel's own message formats as they were posted in public issues and patches (the
source of each is named beside it); timestamps, pids and addresses are changed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from orchestrator.agent import kernelfacts, nodefacts, nvmlfacts, sysfacts
from orchestrator.contract import NodeFact, NodeFactsRecord, SegmentPaths, read_record
from orchestrator.model import SegmentSpec

STANDIN = str(Path(__file__).resolve().parents[1] / "nvml_standin.py")
START = datetime(2024, 5, 7, 6, 45, tzinfo=UTC)

ISO_DMESG = "\n".join((
    # before the agent started: dropped though relevant (leptonai/gpud#46)
    "2024-05-07T06:40:12,529862+00:00 NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, "
    "Graphics SM Warp Exception on (GPC 7, TPC 7, SM 0): Illegal Instruction Parameter",
    # a boot message of the EDAC driver (andikleen/mce-inject#2)
    "2024-05-07T06:40:13,807485+00:00 EDAC MC1: Giving out device to module sb_edac controller Broadwell "
    "SrcID#0_Ha#0: DEV 0000:7f:12.0 (INTERRUPT)",
    # noise after the start (leptonai/gpud#1209; Bumblebee-Project/Bumblebee#628)
    "2024-05-07T06:45:01,000000+00:00 workqueue: ib_cache_event_task [ib_core] hogged CPU for >10000us 4 times, "
    "consider switching to WQ_UNBOUND",
    "2024-05-07T06:45:01,100000+00:00 EXT4-fs (md127p3): re-mounted 0f3cd65a-338b-4574-bba3-ecef214e1917 r/w.",
    "2024-05-07T06:45:01,200000+00:00 perf samples too long (2502 > 2500), lowering "
    "kernel.perf_event_max_sample_rate to 50000",
    # GPU: Xid 79 (NVIDIA/NVSentinel#155), 94 (leptonai/gpud#1174), 48 with physAddr (NVIDIA/gpu-operator#1146),
    # 63 (stas00/ml-engineering compute/accelerator/nvidia/debug.md), a multi-line fallen-off-the-bus record
    "2024-05-07T06:50:00,000001+00:00 NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.",
    "2024-05-07T06:50:00,100000+00:00 NVRM: Xid (PCI:0000:9b:00): 94, pid=4321, name=python3, Contained ECC error",
    "2024-05-07T06:50:00,200000+00:00 NVRM: Xid (PCI:0000:07:00): 48, pid='<unknown>', name=<unknown>, An "
    "uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at physAddr 0x7fdf0de80 "
    "partition 5, subpartition 1",
    "2024-05-07T06:50:00,300000+00:00 NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for "
    "remapping, reset gpu to activate.",
    "2024-05-07T06:50:01,308145+00:00 NVRM: The NVIDIA GPU 0000:b3:00.0",
    "                                  NVRM: (PCI ID: 10de:26b5) installed in this system has",
    "                                  NVRM: fallen off the bus and is not responding to commands.",
    # host memory: openstreetmap/operations#300, andikleen/mcelog#70, the EDAC skx UE report on linux-edac
    "2024-05-07T06:51:00,529862+00:00 mce: [Hardware Error]: Machine check events logged",
    "2024-05-07T06:51:00,529877+00:00 EDAC MC0: 4 CE error on CPU#0Channel#2_DIMM#0 (channel:2 slot:0 page:0x0)",
    "2024-05-07T06:51:00,633608+00:00 EDAC MC3: 1 UE memory read error on CPU_SrcID#0_MC#3_Chan#0_DIMM#0 "
    "(channel:0 slot:0 page:0x7e025e offset:0x400 grain:32)",
    "2024-05-07T06:51:00,700000+00:00 mce: [Hardware Error]: CPU 0: Machine Check: 0 Bank 4: a600000000020408",
    # the OOM killer, in this very format (equinor/ert#7797); its stack lines are dropped
    "2024-05-07T06:52:41,678628+00:00 pool invoked oom-killer: gfp_mask=0x6200ca(GFP_HIGHUSER_MOVABLE), order=0",
    "2024-05-07T06:52:41,678661+00:00  oom_kill_process.cold.33+0xb/0x10",
    "2024-05-07T06:52:41,679685+00:00 oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,"
    "mems_allowed=0,global_oom,task_memcg=/user.slice,task=python,pid=1234,uid=21417",
    "2024-05-07T06:52:41,679700+00:00 Out of memory: Killed process 1234 (python) total-vm:87033376kB, "
    "anon-rss:60356340kB, file-rss:0kB, shmem-rss:0kB, UID:21417 pgtables:169956kB oom_score_adj:0",
    # local disks: raspberrypi/rpi-eeprom#378, Joshua-Riek/ubuntu-rockchip#155
    "2024-05-07T06:53:03,393779+00:00 blk_update_request: critical medium error, dev nvme0n1, sector 534080 "
    "op 0x1:(WRITE) flags 0x800 phys_seg 1 prio class 0",
    "2024-05-07T06:53:04,991192+00:00 nvme nvme0: controller is down; will reset: CSTS=0xffffffff, "
    "PCI_STATUS read failed (134)",
    "2024-05-07T06:53:05,076587+00:00 Buffer I/O error on dev nvme0n1, logical block 62514752, async page read",
    # shared filesystems: Lustre's LCONSOLE_ERROR_MSG(0x167, ...) in ptlrpc/import.c and
    # jade-hpc-gpu/jade-hpc-gpu.github.io#14; nfs-ganesha/nfs-ganesha#1295
    "2024-05-07T06:54:17,000000+00:00 LustreError: 11-0: jmain01-MDT0000-mdc-ffff88203810d800: operation "
    "obd_ping to node 172.31.126.88@o2ib failed: rc = -107",
    "2024-05-07T06:54:18,000000+00:00 LustreError: 167-0: jmain01-MDT0000-mdc-ffff88203810d800: This client was "
    "evicted by jmain01-MDT0000; in progress operations using this service will fail.",
    "2024-05-07T06:54:19,000000+00:00 Lustre: 2449:0:(client.c:2141:ptlrpc_expire_one_request()) Skipped 24 "
    "previous similar messages",
    "2024-05-07T06:55:39,453001+00:00 nfs: server 100.73.159.36 not responding, still trying",
    "2024-05-07T06:55:59,760083+00:00 nfs: server 100.73.159.36 OK",
    # links: linux-rdma "IB/cache: Add log messages for IB device state changes" (Maher Sanalla), charmplusplus/
    # charm#2532, linux-rdma "RDMA/mlx5: Align mkc page size capability check to PRM" (2025-07-09)
    "2024-05-07T06:56:43,974372+00:00 mlx5_core 0000:53:00.0 mlx5_3: Port: 1 Link DOWN",
    "2024-05-07T06:56:43,968257+00:00 mlx5_core 0000:53:00.0 enp83s0f0np0: Link down",
    "2024-05-07T06:56:44,904971+00:00 mlx5_core 0000:04:00.0: mlx5_cmd_check:795:(pid 9993): RTR2RTS_QP(0x504) "
    "op_mod(0x0) failed, status bad parameter(0x3), syndrome (0x4bb88f)",
    "2024-05-07T06:56:45,000000+00:00 mlx5_core 0000:c1:00.0: mlx5_cmd_out_err:832:(pid 0): CREATE_MKEY(0x200) "
    "op_mod(0x0) failed, status bad parameter(0x3), syndrome (0x38a711), err(-22)",
    "2024-05-07T06:56:46,000000+00:00 mlx5_core 0000:53:00.0 mlx5_3: Port: 1 Link ACTIVE",
))


def test_kernel_lines_keep_the_families_since_the_start() -> None:
    kept = kernelfacts.kernel_lines(ISO_DMESG, START)
    text = "\n".join(kept)
    assert kept[0] == "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus."
    for words in ("): 94, pid=4321", "): 48, pid=", "): 63, pid=1896", "Machine check events logged",
                  "1 UE memory read error", "4 CE error", "invoked oom-killer", "oom-kill:constraint",
                  "Out of memory: Killed process 1234 (python)", "critical medium error, dev nvme0n1",
                  "controller is down", "Buffer I/O error", "rc = -107", "This client was evicted by",
                  "not responding, still trying", "nfs: server 100.73.159.36 OK", "Port: 1 Link DOWN",
                  "enp83s0f0np0: Link down", "mlx5_cmd_check", "mlx5_cmd_out_err", "Port: 1 Link ACTIVE"):
        assert words in text, words
    # a multi-line record is one line, with the GPU's address
    assert ("NVRM: The NVIDIA GPU 0000:b3:00.0 NVRM: (PCI ID: 10de:26b5) installed in this system has "
            "NVRM: fallen off the bus and is not responding to commands.") in kept
    for noise in ("Graphics SM Warp Exception", "Giving out device", "hogged CPU", "EXT4-fs", "perf samples",
                  "oom_kill_process.cold", "Skipped 24 previous"):
        assert noise not in text, noise
    assert not any(line[:4].isdigit() for line in kept)  # the timestamps are gone
    assert kernelfacts.kernel_lines(ISO_DMESG, datetime(2030, 1, 1, tzinfo=UTC)) == []


def test_kernel_lines_with_raw_timestamps() -> None:
    raw = ("[   49.261458] NVRM: GPU at 0000:01:00.0 has fallen off the bus.\n"  # Bumblebee-Project/Bumblebee#554
           "[ 4182.497622] nfs: server 10.0.0.2 not responding, timed out\n"  # csabahenk/cirros#9
           "[ 4183.000001] audit: type=1400 audit(1422097665.398:66): apparmor=\"STATUS\"\n"
           "[ 4184.000000] NVRM: Xid (PCI:0000:06:00): 79, GPU has fallen off the bus.\n")
    assert kernelfacts.kernel_lines(raw, 4183.5) == ["NVRM: Xid (PCI:0000:06:00): 79, GPU has fallen off the bus."]
    assert kernelfacts.kernel_lines(raw, 100.0)[0] == "nfs: server 10.0.0.2 not responding, timed out"
    assert len(kernelfacts.kernel_lines(raw, None)) == 3  # the start time unknown: every relevant line


def test_kernel_lines_are_bounded_and_the_last_are_kept() -> None:
    text = "\n".join(f"[{1000 + i}.000000] NVRM: Xid (PCI:0000:3b:00): 79, pid={i}, " + "x" * 900
                     for i in range(500))
    kept = kernelfacts.kernel_lines(text, 0.0)
    assert len(kept) == kernelfacts.MAX_KERNEL_LINES and "pid=499," in kept[-1] and "pid=300," in kept[0]
    assert max(len(line) for line in kept) == kernelfacts.MAX_LINE_CHARS


def _runner(answers: dict[str, Any]) -> kernelfacts.Runner:
    """A fake subprocess.run: argv[1] (or "raw") -> (rc, stdout, stderr) or an exception to raise."""
    def run(argv: list[str], **_kw: Any) -> subprocess.CompletedProcess[bytes]:
        answer = answers[argv[1] if len(argv) > 1 else "raw"]
        if isinstance(answer, BaseException):
            raise answer
        rc, out, err = answer
        return subprocess.CompletedProcess(argv, rc, out.encode(), err.encode())
    return run


def test_dmesg_falls_back_to_raw_and_says_why_it_cannot_read() -> None:
    busybox = _runner({"--time-format": (1, "", "dmesg: unrecognized option '--time-format'"),
                       "raw": (0, "[ 1.0] nfs: server x OK\n", "")})
    assert kernelfacts.read_dmesg(busybox) == ("[ 1.0] nfs: server x OK\n", "")
    denied = "dmesg: read kernel buffer failed: Operation not permitted"
    assert kernelfacts.read_dmesg(_runner({"--time-format": (1, "", denied), "raw": (1, "", denied)})) == (None, denied)
    assert kernelfacts.read_dmesg(_runner({"--time-format": FileNotFoundError()}))[1] == "dmesg not installed"
    slow = _runner({"--time-format": subprocess.TimeoutExpired(["dmesg"], 1.5)})
    assert "did not answer within 1.5s" in kernelfacts.read_dmesg(slow)[1]


# ---- NVML through the stand-in ---------------------------------------------------------------------------

def _gpus(n: int = 8, **kw: Any) -> list[dict[str, Any]]:
    return [{"ecc_volatile_uncorrected": 0, "remapped": [0, 0, 0, 0], "retired_pending": 0, "procs": [],
             "util": 100, "sm_clock": 1410, **kw} for _ in range(n)]


@pytest.fixture
def standin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    f = tmp_path / "nvml.json"
    f.write_text(json.dumps({"*": _gpus()}))
    monkeypatch.setenv("ORCH_NVML_STANDIN", str(f))
    monkeypatch.setenv("ORCH_NVML_STANDIN_NODE", "node1")
    return f


def _set(f: Path, gpus: list[dict[str, Any]]) -> None:
    f.write_text(json.dumps({"*": gpus}))


def _readings(f: Path, end: list[dict[str, Any]], expected: int = 8,
              owner: nvmlfacts.Owner = lambda pid: "job") -> list[NodeFact]:
    base = nvmlfacts.read(STANDIN, nvmlfacts.BASELINE_FIELDS)
    _set(f, end)
    after = nvmlfacts.read(STANDIN, nvmlfacts.END_FIELDS)
    assert isinstance(base, nvmlfacts.NvmlReading) and isinstance(after, nvmlfacts.NvmlReading)
    return nvmlfacts.compare(after, base, expected, owner)


def _abnormal(facts: list[NodeFact]) -> list[str]:
    return [f.text for f in facts if f.severity == "abnormal"]


def test_the_standin_has_pynvml_s_names_and_values() -> None:
    real = pytest.importorskip("pynvml")
    mod = nvmlfacts.load_module(STANDIN)
    names = [n for n in dir(mod) if n.startswith(("NVML_", "NVMLError", "nvml"))]
    for name in names:
        assert hasattr(real, name), name
        if name.startswith("NVML_"):
            assert getattr(mod, name) == getattr(real, name), name
    assert isinstance(mod.NVMLError(15), mod.NVMLError_GpuIsLost) and mod.NVMLError_GpuIsLost().value == 15
    assert str(mod.NVMLError(3)) == str(real.NVMLError(3)) == "Not Supported"


def test_a_normal_reading_is_one_summary_line(standin: Path) -> None:
    facts = _readings(standin, _gpus())
    assert not _abnormal(facts) and facts[0].text == "8 GPUs, no ECC errors during the segment"


def test_ecc_errors_that_rose_during_the_segment(standin: Path) -> None:
    end = _gpus()
    end[3]["ecc_volatile_uncorrected"] = 2
    assert _abnormal(_readings(standin, end)) == [
        "GPU 3: volatile uncorrectable ECC errors rose 0 -> 2 during the segment"]


def test_lost_gpus_and_missing_ones(standin: Path) -> None:
    end = _gpus(7)
    end[1]["lost"] = True
    end[4]["errors"] = {"nvmlDeviceGetTotalEccErrors": 15}  # NVML_ERROR_GPU_IS_LOST on a call
    assert _abnormal(_readings(standin, end)) == [
        "7 GPUs visible, 8 expected",
        "GPU 1: Unable to determine the device handle for GPU (GPU is lost)",
        "GPU 4: Unable to determine the device handle for GPU (GPU is lost)"]
    _set(standin, _gpus())
    assert _abnormal(_readings(standin, _gpus(7), expected=0)) == ["7 GPUs visible, 8 expected"]  # vs the start


def test_memory_held_by_a_process_that_is_not_the_job_s(standin: Path) -> None:
    end = _gpus()
    end[0]["procs"] = [{"pid": 4242, "used": int(30.2 * 2**30)}, {"pid": 7, "used": 2**30}]
    end[2]["procs"] = [{"pid": 99999, "used": 2**30}]
    whose = {4242: "other", 7: "job", 99999: "invisible"}
    facts = _readings(standin, end, owner=whose.__getitem__)
    assert _abnormal(facts) == ["GPU 0: 30.2 GiB held by pid 4242 that is not the job's"]
    assert any("pid 99999, not visible here" in f.text and f.severity == "normal" for f in facts)


def test_remapping_and_retirement(standin: Path) -> None:
    end = _gpus()
    end[2]["remapped"] = [0, 1, 0, 1]
    end[5]["retired_pending"] = 1
    end[6]["remapped"] = [0, 0, 1, 0]
    assert _abnormal(_readings(standin, end)) == [
        "GPU 2: uncorrectable remapped rows rose 0 -> 1 during the segment", "GPU 2: row remap failure",
        "GPU 5: pages pending retirement", "GPU 6: row remapping pending (takes effect at the next GPU reset)"]


def test_not_supported_is_that_field_only(standin: Path) -> None:
    calls = ["nvmlDeviceGetRetiredPagesPendingStatus", "nvmlDeviceGetTotalEccErrors", "nvmlDeviceGetClockInfo"]
    _set(standin, _gpus(2, not_supported=calls))
    facts = _readings(standin, _gpus(2, not_supported=calls, ecc_volatile_uncorrected=5), expected=2)
    assert not _abnormal(facts)
    assert "GPU 0: not supported: volatile ECC counters, retired pages, SM clock" in [f.text for f in facts]
    assert facts[-1].text == "utilization by GPU (%): 100 100; SM clock (MHz): - -"


def test_without_nvml_it_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ORCH_NVML_STANDIN", raising=False)
    assert nvmlfacts.read(STANDIN, nvmlfacts.END_FIELDS) == "no NVML (NVML Shared Library Not Found)"
    assert str(nvmlfacts.read("no_such_nvml_module", nvmlfacts.END_FIELDS)).startswith("no NVML (No module")


# ---- InfiniBand and cgroups in fake trees ----------------------------------------------------------------

def _port(root: Path, dev: str, port: str, state: str, **counters: int) -> None:
    d = root / dev / "ports" / port
    (d / "counters").mkdir(parents=True, exist_ok=True)
    (d / "state").write_text(f"{'4' if state == 'ACTIVE' else '1'}: {state}\n")
    (d / "phys_state").write_text("5: LinkUp\n" if state == "ACTIVE" else "3: Disabled\n")
    for name in sysfacts.IB_COUNTERS:
        (d / "counters" / name).write_text(f"{counters.get(name, 0)}\n")


def test_ib_ports_that_went_down_or_counted_errors(tmp_path: Path) -> None:
    _port(tmp_path, "mlx5_0", "1", "ACTIVE", link_downed=1)
    _port(tmp_path, "mlx5_1", "1", "ACTIVE")
    _port(tmp_path, "mlx5_2", "1", "DOWN")  # never cabled: not this segment's news
    base = sysfacts.read_ib(tmp_path)
    assert not _abnormal(sysfacts.compare_ib(base, base))
    _port(tmp_path, "mlx5_0", "1", "ACTIVE", link_downed=4, symbol_error=2)
    _port(tmp_path, "mlx5_1", "1", "DOWN")
    assert _abnormal(sysfacts.compare_ib(sysfacts.read_ib(tmp_path), base)) == [
        "mlx5_0 port 1: symbol_error +2 during the segment", "mlx5_0 port 1: link_downed +3 during the segment",
        "mlx5_1 port 1: state DOWN (was ACTIVE), phys_state Disabled"]


def test_cgroup_v2_oom_kills_in_the_job_cgroup(tmp_path: Path) -> None:
    path = "/system.slice/slurmstepd.scope/job_77/step_0/user/task_0"
    own, job = tmp_path / path.strip("/"), tmp_path / "system.slice/slurmstepd.scope/job_77"
    own.mkdir(parents=True)
    (own / "memory.events").write_text("low 0\nhigh 0\nmax 5\noom 0\noom_kill 0\noom_group_kill 0\n")
    (job / "memory.events").write_text("low 0\nhigh 0\nmax 9\noom 1\noom_kill 0\noom_group_kill 0\n")
    files = sysfacts.memory_cgroups(f"0::{path}\n", tmp_path)
    assert files[0] == own / "memory.events" and files[-1] == job / "memory.events" and len(files) == 4
    base = sysfacts.read_events(files)
    assert [f.severity for f in sysfacts.compare_cgroup(base, base)] == ["normal"]
    (own / "memory.events").write_text("low 0\nhigh 0\nmax 7\noom 0\noom_kill 2\noom_group_kill 0\n")
    (job / "memory.events").write_text("low 0\nhigh 0\nmax 12\noom 3\noom_kill 2\noom_group_kill 0\n")
    assert _abnormal(sysfacts.compare_cgroup(sysfacts.read_events(files), base)) == [
        "oom_kill 0 -> 2 during the segment (memory.events)", "oom 1 -> 3 during the segment (job_77/memory.events)",
        "oom_kill 0 -> 2 during the segment (job_77/memory.events)"]


def test_cgroup_v1_memory_controller_wins_on_a_hybrid_host(tmp_path: Path) -> None:
    own = tmp_path / "memory/slurm/uid_1000/job_5/step_0/task_0"
    own.mkdir(parents=True)
    (own / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 0\n")
    proc_cgroup = "12:memory:/slurm/uid_1000/job_5/step_0/task_0\n1:name=systemd:/x\n0::/\n"
    files = sysfacts.memory_cgroups(proc_cgroup, tmp_path)
    assert files[0] == own / "memory.oom_control"
    base = sysfacts.read_events(files)  # the parents have no file here: skipped
    (own / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 1\n")
    assert _abnormal(sysfacts.compare_cgroup(sysfacts.read_events(files), base)) == [
        "oom_kill 0 -> 1 during the segment (memory.oom_control)"]


def test_process_owner_reads_the_tree_and_the_job_cgroup(tmp_path: Path) -> None:
    for pid, ppid, cg in ((10, 1, "job_3/step_0"), (11, 10, "job_3/step_0"), (12, 11, "job_3/step_0"),
                          (20, 1, "job_3/step_1"), (30, 1, "job_4/step_0")):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(f"{pid} (py thon) S {ppid} 0 0\n")
        (tmp_path / str(pid) / "cgroup").write_text(f"0::/slurm/{cg}\n")
    owner = sysfacts.ProcessOwner(10, tmp_path)
    assert [owner(p) for p in (12, 20, 30, 40)] == ["job", "job", "other", "invisible"]


# ---- the collector ---------------------------------------------------------------------------------------

def _spec(tmp_path: Path, **kw: Any) -> SegmentSpec:
    return SegmentSpec(run_name="r", index=1, job_name="r.seg0001", nodes=1, tasks_per_node=1, gpus_per_node=8,
                       time_limit_min=5, command=("true",), workdir=str(tmp_path), run_dir=str(tmp_path),
                       segment_dir=str(tmp_path / "s"), progress_regex=r"it (\d+)", **kw)


def _facts(tmp_path: Path, lines: list[str], kind: type[nodefacts.NodeFacts] = nodefacts.NodeFacts,
           **probes: Any) -> nodefacts.NodeFacts:
    (tmp_path / "s" / "nodes").mkdir(parents=True, exist_ok=True)
    (tmp_path / "proc" / "self").mkdir(parents=True, exist_ok=True)
    (tmp_path / "proc" / "self" / "cgroup").write_text("0::/\n")
    (tmp_path / "proc" / "uptime").write_text("100.0 200.0\n")
    defaults: dict[str, Any] = {"run": _runner({"--time-format": (0, "", "")}), "ib_root": tmp_path / "no-ib",
                                "cgroup_root": tmp_path / "cg", "proc": tmp_path / "proc"}
    return kind(_spec(tmp_path), "node1", lines.append, nodefacts.Probes(**{**defaults, **probes}))


def test_a_mount_that_hangs_is_reported_within_the_bound(tmp_path: Path) -> None:
    release = threading.Event()
    facts = _facts(tmp_path, [], stat=lambda p: release.wait(30), mount_timeout_s=0.2)
    t0 = time.monotonic()
    try:
        got = facts.collect()
    finally:
        release.set()
    assert time.monotonic() - t0 < nodefacts.SOURCE_TIMEOUT_S + 1.5
    assert f"{tmp_path} did not answer a stat within 0.2s" in _abnormal(got)
    stale = _facts(tmp_path, [], stat=lambda p: (_ for _ in ()).throw(OSError(116, "Stale file handle")))
    assert f"{tmp_path}: stat failed: [Errno 116] Stale file handle" in _abnormal(stale.collect())


def test_report_prints_abnormal_facts_once_and_says_where_it_could_not_look(
        tmp_path: Path, standin: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCH_NVML_MODULE", STANDIN)
    lines: list[str] = []
    dmesg = "2099-01-01T00:00:00,000000+00:00 NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n"
    facts = _facts(tmp_path, lines, run=_runner({"--time-format": (0, dmesg, "")}))
    facts.baseline()
    _set(standin, _gpus(8, ecc_volatile_uncorrected=1))
    facts.report("dump")
    facts.report("exit")
    assert lines.count("ORCH-NODE kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.") == 1
    assert lines.count("ORCH-NODE nvml: GPU 7: volatile uncorrectable ECC errors rose 0 -> 1 during the segment") == 1
    summary = [line for line in lines if line.startswith("ORCH-NODE summary at exit:")]
    assert summary == ["ORCH-NODE summary at exit: abnormal facts: 9; read kernel, nvml, mount; could not look: "
                       f"ib (skipped (no {tmp_path / 'no-ib'})); cgroup (not readable (FileNotFoundError: "
                       f"[Errno 2] No such file or directory: '{tmp_path / 'cg' / 'memory.events'}'))"]
    paths = SegmentPaths(tmp_path / "s")
    for reason in ("dump", "exit"):
        rec = read_record(paths.facts("node1", reason), NodeFactsRecord)
        assert rec is not None and rec.reason == reason and len(rec.facts) > 10


class FailingCollection(nodefacts.NodeFacts):
    """A collection that raises (a bug in a source's reading): report() must still be one line."""

    def collect(self) -> list[NodeFact]:
        raise ZeroDivisionError("division by zero")


def test_a_failed_collection_is_one_line(tmp_path: Path) -> None:
    lines: list[str] = []
    facts = _facts(tmp_path, lines, FailingCollection)
    facts.report("exit")
    assert lines == ["ORCH-NODE collection failed: ZeroDivisionError: division by zero"]


def test_the_agent_reports_what_changed_during_the_segment(
        tmp_path: Path, standin: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.agent.main import NodeAgent

    monkeypatch.delenv("ORCH_FAKE_NVML", raising=False)
    monkeypatch.setenv("ORCH_NVML_MODULE", STANDIN)
    _set(standin, _gpus(2))
    code = ("import json, os; f = os.environ['ORCH_NVML_STANDIN']; d = json.load(open(f)); "
            "d['*'][1]['ecc_volatile_uncorrected'] = 2; open(f + '.tmp', 'w').write(json.dumps(d)); "
            "os.replace(f + '.tmp', f); print('it 1', flush=True)")
    spec = _spec(tmp_path).model_copy(update={"command": (sys.executable, "-c", code), "gpus_per_node": 2})
    assert NodeAgent(spec, "node1", 0, 1, "7").run() == 0
    log = (tmp_path / "s" / "logs" / "node1.log").read_text()
    assert "agent: ORCH-NODE nvml: GPU 1: volatile uncorrectable ECC errors rose 0 -> 2 during the segment" in log
    assert log.index("ORCH-NODE summary at exit:") < log.index("ORCH-AGENT exit")
    rec = read_record(SegmentPaths(tmp_path / "s").facts("node1"), NodeFactsRecord)
    assert rec is not None and rec.node == "node1" and any(f.source == "nvml" for f in rec.facts)
    assert os.environ["ORCH_NVML_STANDIN"] == str(standin)
