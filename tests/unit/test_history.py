"""A run's earlier allocations in the same logs (issue 38): a series of `slurm-<jobid>.out` files, or
allocations appended to one file. The last allocation is judged; the earlier ones are its history, lived
through the policy: the same node failing at different steps is the node's, the same failure at the same
step on other nodes is the job's, and an earlier allocation's different fault is not the verdict."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.offline.diagnosis import diagnose_dir

# two real shapes of a rank's crash in a job-wide slurm-%j.out (faulthandler's and srun's lines)
SEGV = ["Fatal Python error: Segmentation fault", "",
        "Current thread 0x00007f063d85a1c2 (most recent call first):",
        '  File "/opt/venv/lib/python3.10/site-packages/torch/autograd/graph.py", line 825 in _engine_run_backward',
        "", "srun: error: {host}: task 9: Segmentation fault (core dumped)"]
BUS = ["ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm).",
       "srun: error: {host}: task 3: Bus error"]


def allocation(job: int, hosts: list[str], start: int, stop: int, crash: list[str], bad: str) -> str:
    lines = [f"SLURM_JOB_ID={job} SLURM_JOB_NODELIST={','.join(hosts)}"]
    lines += [f"[2025-06-02 08:00:00] step {i}/20000 loss 2.5" for i in range(start, stop + 1, 50)]
    if stop % 50:
        lines.append(f"[2025-06-02 08:00:00] step {stop}/20000 loss 2.5")
    lines += [c.format(host=bad) for c in crash]
    lines.append(f"slurmstepd: error: *** STEP {job}.0 ON {hosts[0]} CANCELLED AT 2025-06-02T09:48:59 ***")
    lines += [f"srun: error: {h}: tasks 0-3: Terminated" for h in hosts if h != bad]
    return "\n".join(lines) + "\n"


def write(tmp_path: Path, files: dict[str, str]) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    return tmp_path


@pytest.mark.parametrize("crash, cause", [(SEGV, "segfault"), (BUS, "bus_error")])
def test_the_same_node_failing_at_different_steps_is_excluded(tmp_path: Path, crash: list[str],
                                                              cause: str) -> None:
    d = write(tmp_path, {
        "slurm-5520101.out": allocation(5520101, ["g1", "g2", "g3", "g4"], 50, 3310, crash, "g3"),
        "slurm-5520977.out": allocation(5520977, ["g5", "g3", "g6", "g7"], 3050, 8127, crash, "g3")})
    got = diagnose_dir(d)
    assert (got["cause"], got["culprit_nodes"], got["action"]) == (cause, ["g3"], "resubmit_exclude")
    # alone, the last allocation is one crash: a strike
    (d / "slurm-5520101.out").unlink()
    assert diagnose_dir(d)["action"] == "resubmit"


@pytest.mark.parametrize("crash", [SEGV, BUS])
def test_the_same_failure_at_the_same_step_on_other_nodes_is_the_jobs(tmp_path: Path, crash: list[str]) -> None:
    d = write(tmp_path, {
        "slurm-90311.out": allocation(90311, ["a1", "a2", "a3"], 11000, 12000, crash, "a2"),
        "slurm-90544.out": allocation(90544, ["b1", "b2", "b3"], 11000, 12000, crash, "b3")})
    got = diagnose_dir(d)
    assert (got["culprit_nodes"], got["action"], got["policy_rule"]) == ([], "stop_and_alert",
                                                                        "repeats_on_other_nodes")


def test_an_earlier_allocations_other_fault_is_not_the_verdict(tmp_path: Path) -> None:
    first = allocation(7720418, ["s1", "s2", "s3"], 9000, 9400, [], "s2").replace(
        "slurmstepd: error: *** STEP", "srun: error: Node failure on s2\nslurmstepd: error: *** STEP")
    d = write(tmp_path, {"slurm-7720418.out": first,
                         "slurm-7720561.out": allocation(7720561, ["s1", "s3", "s4"], 9000, 11800, SEGV, "s4")})
    got = diagnose_dir(d)
    assert (got["cause"], got["culprit_nodes"], got["action"]) == ("segfault", ["s4"], "resubmit")


def appended(marker: str, hosts: str, batch: str, tail_ts: str) -> list[str]:
    return [marker.format(hosts=hosts), "[2025-09-14 21:03:03] INFO trainer: loaded checkpoint step=40000",
            *[f"[2025-09-14 21:{10 + k}:03] INFO trainer: step={40000 + 100 * k} loss=2.3" for k in range(1, 11)],
            "[2025-09-14 21:44:08] INFO trainer: running eval at step=41000",
            f"slurmstepd: error: *** JOB 4881270 ON {batch} CANCELLED AT {tail_ts} DUE TO TIME LIMIT ***"]


@pytest.mark.parametrize("marker", ["==> job 4881270 (SLURM_RESTART_COUNT=0) nodes {hosts}",
                                    "SLURM_JOB_ID=4881270 SLURM_JOB_NODELIST={hosts}"])
def test_two_allocations_appended_to_one_file_hanging_at_the_same_step_stop(tmp_path: Path, marker: str) -> None:
    text = appended(marker, "hpc-g[011-014]", "hpc-g011", "2025-09-15T09:00:20")
    text += appended(marker.replace("=0", "=1"), "hpc-g[031-034]", "hpc-g031", "2025-09-15T21:13:05")
    d = write(tmp_path, {"slurm-4881270.out": "\n".join(text) + "\n"})
    got = diagnose_dir(d)
    assert (got["cause"], got["culprit_nodes"], got["action"]) == ("hang", [], "stop_and_alert")
    # the last allocation alone: a hang nobody stands out in, resubmitted
    (d / "slurm-4881270.out").write_text("\n".join(text[len(text) // 2:]) + "\n")
    assert diagnose_dir(d)["action"] == "resubmit"


# real shapes of one rank's device crash: PyTorch's RuntimeError, XLA's driver name
CUDA_CRASHES = ["[rank20]: RuntimeError: CUDA error: an illegal memory access was encountered",
                "jaxlib.xla_extension.XlaRuntimeError: INTERNAL: CUDA_ERROR_ILLEGAL_ADDRESS: an illegal "
                "memory access was encountered"]


def per_host(tmp_path: Path, crash: str, steps: int = 300) -> Path:
    for h in ("n1", "n2", "n3"):
        lines = [f"[2025-07-22 19:{k // 60:02d}:{k % 60:02d}] step {k * 100}/20000 loss 2.1"
                 for k in range(1, steps // 100 + 1)]
        if h == "n2":
            lines += ["Traceback (most recent call last):", '  File "train.py", line 88, in <module>', crash]
        else:
            lines.append("[rank4]:[E722 19:45:41.6 ProcessGroupNCCL.cpp:632] [Rank 4] Watchdog caught collective "
                         "operation timeout: WorkNCCL(SeqNum=455120, OpType=_ALLGATHER_BASE) ran for 600000 "
                         "milliseconds before timing out.")
        (tmp_path / f"{h}.log").write_text("\n".join(lines) + "\n")
    return tmp_path


@pytest.mark.parametrize("crash", CUDA_CRASHES)
def test_one_ranks_cuda_crash_after_progress_is_a_strike_on_its_node(tmp_path: Path, crash: str) -> None:
    got = diagnose_dir(per_host(tmp_path, crash))
    assert (got["culprit_nodes"], got["action"], got["rule"]) == (["n2"], "resubmit", "one_rank_cuda_crash")


def test_a_python_error_on_one_rank_is_still_the_jobs(tmp_path: Path) -> None:
    got = diagnose_dir(per_host(tmp_path, "[rank20]: KeyError: 'input_ids'"))
    assert (got["culprit_nodes"], got["action"]) == ([], "stop_and_alert")


@pytest.mark.parametrize("start", ["SLURM_JOB_ID=440575", "SLURM_RESTART_COUNT=1"])
def test_a_second_job_start_line_without_a_banner_begins_the_next_allocation(tmp_path: Path, start: str) -> None:
    crash = ["1: [rank11]: RuntimeError: CUDA error: an illegal memory access was encountered",
             "srun: error: {host}: task 1: Exited with exit code 1"]
    first = allocation(440575, ["x1", "x2", "x3"], 12000, 12850, crash, "x2").replace("SLURM_JOB_ID=440575", start)
    second = allocation(440575, ["y1", "y2", "y3"], 12000, 12850, crash, "y2").replace("SLURM_JOB_ID=440575", start)
    got = diagnose_dir(write(tmp_path, {"slurm-440575.out": first.replace("*** STEP", "STEP") + second}))
    assert (got["culprit_nodes"], got["action"]) == ([], "stop_and_alert")


ILLEGAL = ["[rank21]: RuntimeError: CUDA error: an illegal memory access was encountered",
           "srun: error: {host}: task 21: Aborted (core dumped)"]


def attempt(hosts: list[str], start: int, stop: int, crash: list[str], bad: str) -> str:
    """One attempt of a torchtitan job in a site's job-wide file: no job id line of its own; srun ends the step
    after the crash (`Job step aborted`) and the next attempt starts as torchtitan starts."""
    lines = [f"### job nodes={','.join(hosts)}",
             f" 0: [titan] 2026-02-27 13:00:40,021 - root - INFO - Training starts at step {start}."]
    lines += [f" 0: [titan] 2026-02-27 13:01:00,000 - root - INFO - step: {i}  loss:  2.51  memory: 61.2GiB"
              for i in range(start, stop + 1, 50)]
    lines += [c.format(host=bad) for c in crash]
    lines.append("srun: Job step aborted: Waiting up to 32 seconds for job step to finish.")
    lines += [f"srun: error: {h}: tasks 0-7: Killed" for h in hosts if h != bad]
    return "\n".join(lines) + "\n"


def test_attempts_appended_after_srun_aborted_the_step_are_the_runs_history(tmp_path: Path) -> None:
    """blind12 case-006 and case-002: attempts told apart only by srun's `Job step aborted` and the framework's start
    line were one allocation, so the same crash at the same step on other nodes was resubmitted with a strike, and
    the same node crashing at different steps was struck again instead of excluded."""
    a, b = ["a3m-0101", "a3m-0117"], ["a3m-0230", "a3m-0232"]
    same = write(tmp_path / "same", {"slurm-4410982.out": attempt(a, 12001, 12850, ILLEGAL, "a3m-0117")
                                     + attempt(b, 12001, 12850, ILLEGAL, "a3m-0232")})
    got = diagnose_dir(same)
    assert (got["action"], got["culprit_nodes"], got["policy_rule"]) == ("stop_and_alert", [],
                                                                          "repeats_on_other_nodes"), got
    hosts = ["lx-a11", "lx-a13"]
    node = write(tmp_path / "node", {"slurm-8812040.out": attempt(hosts, 1, 4127, BUS, "lx-a13")
                                     + attempt(hosts, 4001, 6012, BUS, "lx-a13")})
    got = diagnose_dir(node)
    assert (got["action"], got["culprit_nodes"]) == ("resubmit_exclude", ["lx-a13"]), got


def test_per_host_files_headed_by_their_job_are_grouped_by_job(tmp_path: Path) -> None:
    """blind12 case-005: per-host files whose site prolog heads each job's part (`==== job N ====`); hosts of only
    the first job, hosts of only the second, one host in both, failing on the same GPU at different steps. Read as
    one allocation, the illegal access was the job's bug and the run stopped; grouped by job it is the node's."""
    crash = ["[rank5]: RuntimeError: CUDA error: an illegal memory access was encountered"]

    def part(job: int, start: int, stop: int, bad: bool, rank0: bool = False) -> str:
        steps = [f"[rank0]: {{'step': {i}, 'loss': 2.2, 'lr': 1.2e-04}}" for i in range(start, stop + 1, 25)]
        return "\n".join([f"==== job {job} ====", *(steps if rank0 else []), *(crash if bad else [])]) + "\n"

    # rank 0 (the only one printing steps) on b01 in the first job, on b05 in the second
    files = {"h200-b01.log": part(9120555, 25, 7350, False, True), "h200-b02.log": part(9120555, 25, 7350, False),
             "h200-b03.log": part(9120555, 25, 7350, True) + part(9123017, 7025, 9825, True),
             "h200-b05.log": part(9123017, 7025, 9825, False, True), "h200-b06.log": part(9123017, 7025, 9825, False)}
    got = diagnose_dir(write(tmp_path, files))
    assert (got["action"], got["culprit_nodes"]) == ("resubmit_exclude", ["h200-b03"]), got
