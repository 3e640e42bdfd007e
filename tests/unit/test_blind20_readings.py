"""Readings taught by blind20's misses (issue 38), each through `diagnose_dir` on variants of the real text."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from orchestrator.progress import PROGRESS_REGEX, last_iteration
from tests.unit.test_blind14_readings import _diagnose, _said

ILLEGAL = "torch.AcceleratorError: CUDA error: an illegal memory access was encountered"


@pytest.mark.parametrize("mapline", ["ray node miles-b200-0{i} ip 10.44.1.1{i} GPUs 8",
                                     "node miles-b200-0{i} address: 10.44.1.1{i}",
                                     "miles-b200-0{i} (10.44.1.1{i}): raylet up"])
def test_rays_worker_prefix_names_the_node_by_its_address(tmp_path: Path, mapline: str) -> None:
    """Ray prints `(Actor pid=N, ip=X) ` before every worker line: the address maps to a host through the job's own
    lines, so one actor's crash after progress is that node's strike, never the job's stop."""
    lines = [mapline.format(i=i) for i in range(1, 5)]
    lines += [f"(MegatronTrainRayActor pid=77{i}, ip=10.44.1.1{i}) [2025-12-11 06:25:53] rollout {r}: train/loss 0.01"
              for r in (5, 10, 15) for i in range(1, 5)]
    lines += ["(MegatronTrainRayActor pid=8120, ip=10.44.1.13) Traceback (most recent call last):",
              f"(MegatronTrainRayActor pid=8120, ip=10.44.1.13) {ILLEGAL}",
              "(MegatronTrainRayActor pid=7731, ip=10.44.1.11) [rank0]:[E1211 13:22:42.12 ProcessGroupNCCL.cpp:632] "
              "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=88, OpType=ALLREDUCE, "
              "NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600013 milliseconds before timing out."]
    d = _diagnose(tmp_path, {"slurm-660915.out": lines})
    assert d["culprit_nodes"] == ["miles-b200-03"] and d["action"] == "resubmit", d["reason"]


@pytest.mark.parametrize(("line", "it"), [
    ("[06/02 02:44:37 main-logger]: Epoch: [12/50][250/1758] Data 0.001 (0.004) Batch 1.470 (1.490) Loss 1.71", 12),
    ("Epoch: [3/100][10/500] Loss 0.52 Lr 0.001", 3),
    ("rollout 120: train/loss -0.0117 train/kl 0.00085", 120)])
def test_pointcept_epochs_and_rl_rollouts_are_progress(line: str, it: int) -> None:
    assert last_iteration(re.compile(PROGRESS_REGEX), line) == it
    assert last_iteration(re.compile(PROGRESS_REGEX), "Epoch: [3/100] validation done") is None
    assert last_iteration(re.compile(PROGRESS_REGEX), "the rollout 3 workers started") is None


def test_a_launchers_exit_after_the_collective_timeouts_above_it_follows_them(tmp_path: Path) -> None:
    """In one job-wide file the ranks time out in a collective, then srun reports one node's task exited: that exit
    followed the timeouts (nobody stands out), it did not begin them. An exit before any timeout is a strike."""
    timeout = ("[rank{r}]:[E0215 09:44:15.07 ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog caught collective "
               "operation timeout: WorkNCCL(SeqNum=1, OpType=BROADCAST, NumelIn=2, NumelOut=2, Timeout(ms)=600000) "
               "ran for 600075 milliseconds before timing out.")
    hosts = ["p5en-st-5", "p5en-st-6"]
    maps = [f"{h}:2187{i}:22301 [0] NCCL INFO comm 0x55 rank {i} nRanks 2 nNodes 2 localRanks 1 localRank 0"
            for i, h in enumerate(hosts)]
    after = [*maps, *(f"{h}: " + timeout.format(r=i) for i, h in enumerate(hosts)),
             "srun: error: p5en-st-5: task 0: Exited with exit code 1"]
    d = _diagnose(tmp_path, {"slurm-6107.out": after})
    assert d["culprit_nodes"] == [] and d["cause"] == "nccl_timeout", d["reason"]
    before = [*maps, "srun: error: p5en-st-5: task 0: Exited with exit code 1",
              *(f"{h}: " + timeout.format(r=i) for i, h in enumerate(hosts) if i)]
    d2 = _diagnose(tmp_path / "b", {"slurm-6108.out": before})
    assert _said(d2)[1] == ["p5en-st-5"], d2["reason"]


@pytest.mark.parametrize("path", ["/tmp/run/checkpoint-2/global_step2/zero_pp_rank_0_mp_rank_00_model_states.pt",
                                  "/local_nvme/ckpt/iter_0002000/mp_rank_00/model_optim_rng.pt",
                                  "/scratch/local/out/step-500/__0_0.distcp"])
def test_a_node_local_disk_filled_by_the_jobs_own_checkpoint_is_the_jobs(tmp_path: Path, path: str) -> None:
    """`No space left on device` writing the job's own checkpoint into a node-local directory: the checkpoint would
    fill that disk on any node (fix what and where it saves), not a node to exclude. Full with something else: the
    node's."""
    timeout = ("[E1203 10:13:00.5 ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog caught collective operation "
               "timeout: WorkNCCL(SeqNum=9, OpType=ALLGATHER, NumelIn=2, NumelOut=2, Timeout(ms)=600000) ran for "
               "600078 milliseconds before timing out.")
    files = {"a100-n0.log": [f"OSError: [Errno 28] No space left on device: '{path}'"],
             "a100-n1.log": [timeout.format(r=8)], "a100-n2.log": [timeout.format(r=16)]}
    d = _diagnose(tmp_path, files)
    assert _said(d) == ("filesystem", [], "stop_and_alert"), d["reason"]
    files["a100-n0.log"] = ["OSError: [Errno 28] No space left on device: '/tmp/torchinductor_root/triton/0/x.so'"]
    d2 = _diagnose(tmp_path / "other", files)
    assert _said(d2) == ("filesystem", ["a100-n0"], "resubmit_exclude"), d2["reason"]


@pytest.mark.parametrize("pg", ["[PG 0 (default_pg) Rank 12]", "[PG ID 0 PG GUID 0(default_pg) Rank 12]",
                                "[Rank 12]"])
def test_the_default_groups_rank_in_the_line_names_the_host_over_torchruns_local_tag(tmp_path: Path, pg: str) -> None:
    """torchrun --tee prefixes `[default0]:` (the local rank); the line's own `[PG 0 ... Rank 12]` is the global rank,
    which the job's own init lines (`| distributed init (rank 12): env://, gpu 0, host nid006513`) put on a host."""
    init = [f"[default{r % 4}]:| distributed init (rank {r}): env://, gpu {r % 4}, host nid00{6437 + 76 * (r // 12)}"
            for r in (0, 1, 2, 3, 12, 13, 14, 15)]
    err = f"[default0]:[rank12]:[E817 17:40:34.2 ProcessGroupNCCL.cpp:1515] {pg} Process group watchdog thread " \
          "terminated with exception: CUDA error: uncorrectable ECC error encountered"
    what = f"[default0]:  what():  {pg} Process group watchdog thread terminated with exception: CUDA error: " \
           "uncorrectable ECC error encountered"
    d = _diagnose(tmp_path, {"slurm-2411870.out": [*init, err, what]})
    assert _said(d) == ("gpu_ecc", ["nid006513"], "resubmit_exclude"), d["reason"]


def test_another_process_groups_rank_is_not_a_global_rank() -> None:
    from orchestrator.diagnose.lines import line_rank
    text = "[PG ID 2 PG GUID 7 Rank 4] Process group watchdog thread terminated with exception"
    assert line_rank({}, 20, None, "", text) == 20
    assert line_rank({}, 0, None, "", text.replace("PG ID 2 PG GUID 7 ", "PG 0 (default_pg) ")) == 4


WORK = ("[E ProcessGroupNCCL.cpp:563] [Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={s}, "
        "OpType={op}, NumelIn={n}, NumelOut={n}, Timeout(ms)=600000) ran for 600057 milliseconds before timing out.")


@pytest.mark.parametrize(("a", "b"), [(("ALLREDUCE", 4311252), ("ALLREDUCE", 1)),
                                      (("ALLREDUCE", 1), ("BROADCAST", 1))])
def test_ranks_timing_out_in_different_collectives_at_one_sequence_number_are_the_programs_deadlock(
        tmp_path: Path, a: tuple[str, int], b: tuple[str, int]) -> None:
    """Half the ranks validate (a 1-element ALLREDUCE) while the others still train (a gradient ALLREDUCE), all at
    SeqNum 3437: they called different collectives, a deadlock in the program's own loop (stop), no node's fault.
    The same collective everywhere stays a timeout where nobody stands out."""
    files = {f"asr-g0{h}.log": [WORK.format(r=r, s=3437, op=(a if r % 2 else b)[0], n=(a if r % 2 else b)[1])
                                for r in range(4 * (h - 1), 4 * h)] for h in (1, 2)}
    d = _diagnose(tmp_path, files)
    assert _said(d) == ("hang", [], "stop_and_alert") and d["rule"] == "collectives_differ", d["reason"]
    same = {f"asr-g0{h}.log": [WORK.format(r=r, s=3437, op="ALLREDUCE", n=4311252) for r in range(4 * (h - 1), 4 * h)]
            for h in (1, 2)}
    d2 = _diagnose(tmp_path / "same", same)
    assert d2["rule"] != "collectives_differ" and d2["action"] == "resubmit", d2["reason"]


def test_an_epilogs_times_after_the_time_limit_banner_are_no_sign_of_life(tmp_path: Path) -> None:
    """Progress bars without a time of their own up to the banner, then the site's epilog (`Start : 06:00:37`): the
    time limit ended a working run, not a hang that began at the job's start."""
    bars = [f"Epoch {e}: 100%|##########| 1460/1460 [14:36<00:00,  1.67it/s, v_num=d6aa]" for e in range(41, 90)]
    saves = [f"[2025-09-23 {6 + (e - 41) // 4:02d}:{(e % 4) * 14:02d}:31,947][anemoi.training][INFO] - Saving "
             f"checkpoint last.ckpt (epoch={e}, step={e * 1460})" for e in range(41, 90)]
    lines = [x for pair in zip(bars, saves, strict=True) for x in pair]
    lines += ["Epoch 90:  23%|##        | 337/1460 [03:22<11:14,  1.67it/s, v_num=d6aa]",
              "slurmstepd: error: *** JOB 48120511 ON ac6-301 CANCELLED AT 2025-09-23T18:00:41 DUE TO TIME LIMIT ***",
              "[ECMWF-INFO -ecepilog] - Start                     : 2025-09-23T06:00:37",
              "[ECMWF-INFO -ecepilog] - State                     : TIMEOUT"]
    d = _diagnose(tmp_path, {"slurm-48120511.out": lines})
    assert _said(d) == ("timelimit", [], "resubmit"), d["reason"]


@pytest.mark.parametrize("end", ["Reached steps=10; training loop finished.", "training loop finished after 500 steps"])
def test_a_training_loop_finished_line_is_the_end(tmp_path: Path, end: str) -> None:
    teardown = ("E0616 13:44:08.82 63 coordination_service_agent.cc:462] Failed to disconnect from coordination "
                "service with status: DEADLINE_EXCEEDED: Barrier timed out.")
    d = _diagnose(tmp_path, {"slurm-16784.out": [f"0: I0616 13:43:59.20 1 train.py:1190] {end}", f"0: {teardown}",
                                                 f"7: {teardown}"]})
    assert _said(d) == ("success", [], "done"), d["reason"]


ROW = "{pid:>7}]  {uid:>4} {pid:>6} {vm:>10} {rss:>10} 1536581632 0 0 {n}"


def _oom_node(hog: str, hog_rss: int, row: str = ROW) -> list[str]:
    table = [("4025", "999", 196610048, hog_rss, hog), ("55120", "1042", 24118301, 5763211, "python3"),
             ("55125", "1042", 24402117, 5801944, "python3")]
    return ["[Wed Feb 14 18:37:19 2024] telegraf invoked oom-killer: gfp_mask=0x140cca, order=0",
            "[Wed Feb 14 18:37:19 2024] [ pid ]   uid  tgid total_vm      rss pgtables_bytes swapents score_adj name",
            *("[Wed Feb 14 18:37:19 2024] [" + row.format(pid=p, uid=u, vm=v, rss=r, n=n) for p, u, v, r, n in table),
            "[Wed Feb 14 18:37:19 2024] oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0-1,"
            "global_oom,task_memcg=/system.slice/slurmstepd.scope/job_6671020,task=python3,pid=55125,uid=1042",
            "[Wed Feb 14 18:37:19 2024] Out of memory: Killed process 55125 (python3) total-vm:97608468kB, "
            "anon-rss:23207776kB, file-rss:0kB, shmem-rss:0kB, UID:1042 pgtables:51080kB oom_score_adj:0"]


@pytest.mark.parametrize("row", [ROW, "{pid:>7}]  {uid:>4} {pid:>6} {vm:>10} {rss:>10} 1536 12 0 0 {n}"])
def test_a_daemon_holding_the_memory_when_the_kernel_killed_the_jobs_rank_is_the_nodes(tmp_path: Path,
                                                                                     row: str) -> None:
    """The OOM report's task table: telegraf held ~730 GiB, the job's ranks ~22 GiB each; the kernel killed one of the
    job's ranks, but the node ran out of memory through another process: exclude the node, do not stop the run. A
    table whose biggest process is the job's stays the job's memory."""
    timeout = ("[E214 18:47:21.9 ProcessGroupNCCL.cpp:607] [Rank {r}] Watchdog caught collective operation timeout: "
               "WorkNCCL(SeqNum=91214, OpType=ALLREDUCE, NumelIn=9, NumelOut=9, Timeout(ms)=600000) ran for 600071 "
               "milliseconds before timing out.")
    files = {"dgx-b2-17.dmesg": _oom_node("telegraf", 191102976, row), "dgx-b2-15.out": [timeout.format(r=2)],
             "dgx-b2-16.out": [timeout.format(r=10)], "dgx-b2-17.out": ["Killed"]}
    d = _diagnose(tmp_path, files)
    assert _said(d) == ("host_oom", ["dgx-b2-17"], "resubmit_exclude"), d["reason"]
    files["dgx-b2-17.dmesg"] = _oom_node("python3", 191102976, row)
    d2 = _diagnose(tmp_path / "job", files)
    assert d2["action"] == "stop_and_alert" and d2["culprit_nodes"] == [], d2["reason"]
