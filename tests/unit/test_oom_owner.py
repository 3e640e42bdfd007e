"""Issue 38: a kernel OOM kill of another workload's process is context, not evidence. The kernel text here is
real: `tests/data/kernel/oom-kill-other-cgroup.dmesg` is this machine's dmesg after a process in a 32 MB memory
cgroup (`/orchhog`) outgrew it (cgroup v1, kernel 6.18)."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from orchestrator.agent import kernelfacts, nodefacts, oomowner
from orchestrator.diagnose.signatures import table_for
from orchestrator.model import SegmentSpec
from tests.conftest import REPO

DMESG = (REPO / "tests" / "data" / "kernel" / "oom-kill-other-cgroup.dmesg").read_text()
LINES = kernelfacts.kernel_lines(DMESG, None)
JOB = "/slurm/uid_1000/job_4242"


def test_the_victim_is_read_from_both_kill_lines() -> None:
    assert oomowner.victims(LINES) == [oomowner.Victim(26134, "python3", "/orchhog")]
    legacy = ["Out of memory: Killed process 811 (stress-ng) total-vm:9000kB, anon-rss:10kB, file-rss:0kB"]
    assert oomowner.victims(legacy) == [oomowner.Victim(811, "stress-ng", "")]


def test_a_kill_in_another_cgroup_is_foreign_and_one_in_the_job_cgroup_is_not() -> None:
    assert oomowner.foreign_kills(LINES, {100, 101}, JOB, None, False)
    inside = [ln.replace("/orchhog", JOB + "/step_0/task_1") for ln in LINES]
    assert not oomowner.foreign_kills(inside, {100, 101}, JOB, None, False)
    assert not oomowner.foreign_kills(LINES, {26134}, JOB, None, False)  # a rank, whatever its cgroup


def test_without_a_job_cgroup_a_kill_is_the_jobs_when_a_rank_was_killed_by_a_signal_the_agent_did_not_send() -> None:
    assert oomowner.foreign_kills(LINES, {100}, None, None, False)  # the ranks still run
    assert oomowner.foreign_kills(LINES, {100}, None, [0, 0], False)
    assert not oomowner.foreign_kills(LINES, {100}, None, [-9, 0], False)  # a rank SIGKILLed: it may be the job's
    assert not oomowner.foreign_kills(LINES, {100}, None, [137], False)  # under a shell or a container
    assert oomowner.foreign_kills(LINES, {100}, None, [-9], True)  # the agent's own kill after its grace
    assert not oomowner.foreign_kills(["python invoked oom-killer: gfp_mask=0xcc0"], {100}, None, None, False)


def _facts(tmp_path: Path, pids: list[int], codes: list[int | None]) -> nodefacts.NodeFacts:
    (tmp_path / "proc" / "self").mkdir(parents=True, exist_ok=True)
    (tmp_path / "proc" / "self" / "cgroup").write_text("0::/\n")

    def run(argv: list[str], **_kw: Any) -> subprocess.CompletedProcess[bytes]:
        return subprocess.CompletedProcess(argv, 0, DMESG.encode(), b"")

    class Rank:
        def __init__(self, pid: int, code: int | None) -> None:
            self.pid, self.returncode = pid, code

    spec = SegmentSpec(run_name="r", index=1, job_name="r.seg0001", nodes=1, tasks_per_node=1, time_limit_min=5,
                       command=("true",), workdir=str(tmp_path), run_dir=str(tmp_path),
                       segment_dir=str(tmp_path / "s"), gpus_per_node=0, progress_regex=r"it (\d+)")
    ranks: Any = [Rank(p, c) for p, c in zip(pids, codes, strict=True)]
    facts = nodefacts.NodeFacts(spec, "node1", lambda _t: None,
                                nodefacts.Probes(run=run, proc=tmp_path / "proc"), ranks=lambda: (ranks, False))
    facts.started_at = datetime(2000, 1, 1, tzinfo=UTC)
    return facts


def test_the_agent_prints_a_context_line_that_no_signature_reads_instead_of_the_kill(tmp_path: Path) -> None:
    got = _facts(tmp_path, [100, 101], [None, None])._kernel()
    printed = [f.text for f in got if f.severity in ("abnormal", "context")]
    assert printed == ["note: the kernel's memory killer ended pid 26134 (python3), not a process of this job: "
                       "context, not evidence"]
    assert any("Killed process 26134" in f.text and f.severity == "normal" for f in got)  # kept, as context
    line = f"ORCH-NODE kernel: {printed[0]}"
    assert not [s.name for s in table_for([]) if s.regex.search(line)]
    # a rank killed by a signal the agent did not send: the kill stays evidence
    killed = _facts(tmp_path, [100, 101], [-9, 0])._kernel()
    assert any("Killed process 26134" in f.text and f.severity == "abnormal" for f in killed)


def _job(tmp_path: Path, job_wide: bool, kernel: list[str]) -> dict[str, Any]:
    """Two hosts whose every rank raised the same KeyError before its first step; the second host's kernel log (the
    real lines of this machine's dmesg, `kernel_lines`) holds an OOM kill, its cgroup as given. One job-wide
    `slurm-4242.out` (pdsh-style host prefixes), or one file per host that names no job."""
    from orchestrator.offline.diagnosis import diagnose_dir

    tmp_path.mkdir(parents=True)
    bug = ("[rank{r}]: Traceback (most recent call last):\n[rank{r}]:   File \"train.py\", line 88, in collate\n"
           "[rank{r}]: KeyError: 'label_ids'\n")
    text = {host: "".join(bug.format(r=r) for r in range(4)) for host in ("cpu-gpu-31", "cpu-gpu-32")}
    text["cpu-gpu-32"] += "".join(f"Feb 12 09:00:00 cpu-gpu-32 kernel: {ln}\n" for ln in kernel)
    if job_wide:
        (tmp_path / "slurm-4242.out").write_text("".join(f"{h}: {ln}\n" for h, t in text.items()
                                                         for ln in t.splitlines()))
    else:
        for host, t in text.items():
            (tmp_path / f"{host}.log").write_text(t)
    return diagnose_dir(tmp_path)


def test_offline_an_oom_kill_in_another_jobs_cgroup_is_context_not_the_verdict(tmp_path: Path) -> None:
    """blind12 case-030: every rank's KeyError in the data collator, and in one node's kernel log the OOM kill of
    another job's process (its cgroup job_8830211): read as the job's host OOM. Its own cgroup's kill stays one."""
    other = [ln.replace("/orchhog", "/slurm/uid_40188/job_8830211") for ln in LINES]
    got = _job(tmp_path / "a", True, other)
    assert (got["cause"], got["action"]) == ("user_bug", "stop_and_alert"), got
    mine = [ln.replace("/orchhog", "/slurm/uid_1000/job_4242") for ln in LINES]
    assert _job(tmp_path / "b", True, mine)["cause"] == "host_oom"


def test_offline_without_the_jobs_id_a_kill_of_a_process_none_of_the_jobs_is_context(tmp_path: Path) -> None:
    """Per-host logs name no job: a victim that is none of a training job's processes (java here, python3 in the
    real dmesg) while no rank on that node was killed is another workload's."""
    java = [ln.replace("python3", "java") for ln in LINES]
    assert _job(tmp_path / "a", False, java)["cause"] == "user_bug"
    assert _job(tmp_path / "b", False, LINES)["cause"] == "host_oom"


def test_offline_an_xid_of_another_programs_gpu_is_context(tmp_path: Path) -> None:
    """blind13 case-044: Lightning reached max_steps and saved; the epilog of one node shows Xid 79 for a GPU that
    another program (vllm-serve) used: read as this job's lost GPU, a healthy node excluded after a finished run.
    The same Xid naming the job's own python beside its ranks' crash is still the node's."""
    from orchestrator.offline.diagnosis import diagnose_dir

    done = ("Epoch 9:  100%|##########| 4120/4120 [34:20<00:00, 1.93it/s, v_num=17, train_loss=0.503]\n"
            "`Trainer.fit` stopped: `max_steps=200000` reached.\n")
    xid = ("[Mon Aug 17 22:41:07 2026] NVRM: Xid (PCI:0000:c1:00): 79, pid=88214, name={name}, GPU has fallen off "
           "the bus.")
    (tmp_path / "vx-a201.log").write_text(done)
    (tmp_path / "vx-a202.log").write_text(xid.format(name="vllm-serve") + "\n")
    assert (diagnose_dir(tmp_path)["action"], diagnose_dir(tmp_path)["culprit_nodes"]) == ("done", [])
    crash = tmp_path / "crash"
    crash.mkdir()
    (crash / "vx-a201.log").write_text("step 100 | loss 1.2\nRuntimeError: NCCL communicator was aborted\n")
    (crash / "vx-a202.log").write_text("step 100 | loss 1.2\n" + xid.format(name="python") + "\n"
                                       "srun: error: vx-a202: task 1: Exited with exit code 1\n")
    got = diagnose_dir(crash)
    assert (got["cause"], got["culprit_nodes"]) == ("gpu_lost", ["vx-a202"]), got
