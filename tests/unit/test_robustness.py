"""A hung log read, shell metacharacters on their way to sbatch, stop and reload requests."""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
from datetime import datetime
from pathlib import Path

from orchestrator.backends.slurm import SlurmBackend
from orchestrator.blacklist import ExcludePlan
from orchestrator.clock import FakeClock
from orchestrator.diagnose.signatures import build_table
from orchestrator.loop.controller import Controller
from orchestrator.model import RunStatus
from orchestrator.plan import plan
from orchestrator.requests import STOP_REQUEST, BlacklistAdd, BlacklistRemove, write_request
from orchestrator.settings import SlurmBackendCfg, load_settings, parse_overrides
from orchestrator.state import RunState, StateStore
from orchestrator.watch.segment import SegmentWatch
from tests.conftest import base_config, write_config
from tests.fakes import FakeCluster


def test_fifo_log_never_hangs_the_loop(tmp_path: Path) -> None:
    logs = tmp_path / "seg" / "logs"
    logs.mkdir(parents=True)
    (logs / "node1.log").write_text("0:  iteration 5/ 9 |\n")
    os.mkfifo(logs / "node2.log")  # a read of it blocks, like a file on a frozen filesystem
    w = SegmentWatch(tmp_path / "seg", build_table(), re.compile(r"iteration\s+(\d+)/"), read_timeout_s=0.3)
    w.slurm_nodes = ["node1", "node2"]  # the job's nodes, as the scheduler lists them
    clock = FakeClock()
    for round_ in range(3):
        t = threading.Thread(target=w.poll, args=(clock.now(),), daemon=True)
        t.start()
        t.join(timeout=20)
        assert not t.is_alive(), f"poll {round_} hung on the FIFO"
        with (logs / "node1.log").open("a") as fh:
            fh.write(f"0:  iteration {6 + round_}/ 9 |\n")
    assert w.nodes["node1"].last_iteration == 7  # the healthy node kept being read
    assert any("node2" in s and "did not return" in s for s in w.fs_stalls)
    assert len([s for s in w.fs_stalls if "node2" in s]) == 1  # one stuck reader, not one per poll
    try:  # unblock the reader so its thread ends (it may close before we write: that is fine)
        with open(logs / "node2.log", "w") as fh:
            fh.write("x\n")
    except BrokenPipeError:
        pass
    w.close()


def test_shell_metacharacters_reach_sbatch_as_literal_text(tmp_path: Path, fake_slurm_bin: Path) -> None:
    mark = tmp_path / "PWNED"
    evil = f"r; $(touch {mark}) `touch {mark}` -x"
    cfg = base_config(tmp_path, run_dir=str(tmp_path / evil), name="ok-name",
                      command=["python", f"--data=; $(touch {mark})", "-rf", "{checkpoint}"],
                      checkpoint={"dir": str(tmp_path / evil / "ck"), "preset": "megatron"},
                      resources={"nodes": 2, "partition": "gpu",
                                 "sbatch_extra": {"constraint": f"a100&$(touch {mark})"}},
                      backend={"kind": "slurm"})
    s = load_settings(write_config(tmp_path, cfg))
    clock = FakeClock()
    state = RunState(run=s.name, created_at=clock.now(), updated_at=clock.now())
    spec = plan(s, state, None, ExcludePlan(nodes=("node3",)), "python")
    backend = SlurmBackend(SlurmBackendCfg(), clock, s.run_dir, runner=lambda argv, t: "node1\nnode3\n")
    ref = backend.submit(spec)
    assert ref.job_id == "4242"
    script = (fake_slurm_bin / "script.sh").read_text()
    assert subprocess.run(["bash", "-n", fake_slurm_bin / "script.sh"]).returncode == 0
    assert "#SBATCH --exclude=node3" in script and "#SBATCH --no-requeue" in script
    # run the generated batch script: bash evaluates its lines, srun records the argv it got
    env = dict(os.environ, SLURM_JOB_ID="4242")
    subprocess.run(["bash", fake_slurm_bin / "script.sh"], check=True, env=env, cwd=tmp_path)
    argv = json.loads((fake_slurm_bin / "srun.json").read_text())
    assert any(str(s.run_dir) in a for a in argv)  # the path arrived whole, quotes and all
    assert not mark.exists()  # nothing was ever interpreted by a shell
    assert spec.command[1] == f"--data=; $(touch {mark})" and spec.command[2] == "-rf"


def make_ctl(tmp_path: Path) -> tuple[Controller, FakeCluster, FakeClock]:
    p = write_config(tmp_path, base_config(tmp_path))
    s = load_settings(p)
    clock = FakeClock()
    cluster = FakeCluster(clock, ["node1", "node2", "node3", "node4"], 50, tmp_path / "ckpt")
    ctl = Controller(s, cluster, clock, StateStore(s.run_dir), python="python")
    ctl.reloader = lambda: load_settings(p, parse_overrides(["policy.max_segments=7"]))
    return ctl, cluster, clock


def test_stop_request_leaves_the_job_running(tmp_path: Path) -> None:
    ctl, cluster, clock = make_ctl(tmp_path)
    (ctl.s.run_dir).mkdir(parents=True, exist_ok=True)
    (ctl.s.run_dir / STOP_REQUEST).write_text("stop\n")  # stale: left by an earlier controller, ignored
    # `orchestrator stop` while the loop runs: the request appears after a few seconds of (fake) time

    def request_stop(now: datetime) -> None:
        if clock.slept >= 5:
            (ctl.s.run_dir / STOP_REQUEST).write_text("stop\n")

    clock.on_advance.append(request_stop)
    state = ctl.run()
    assert cluster.submitted  # the stale request did not stop it before it started
    assert state.status == RunStatus.RUNNING and ctl.stop_requested == "orchestrator stop"
    assert not list(cluster.jobs.values())[0].state.terminal


def test_queued_blacklist_edits_and_reload(tmp_path: Path) -> None:
    ctl, cluster, clock = make_ctl(tmp_path)
    state = ctl.load_or_init()
    write_request(ctl.s.run_dir, BlacklistAdd(nodes=("node1", "node2"), reason="Xid 79 seen by admins"))
    write_request(ctl.s.run_dir, BlacklistRemove(nodes=("node2",)))
    ctl.request_reload()
    state = ctl.apply_requests(state)
    assert [e.node for e in state.blacklist.entries] == ["node1"] and state.blacklist.entries[0].source == "manual"
    assert ctl.s.policy.max_segments == 7
    state = ctl.step(state)
    assert cluster.submitted[0].exclude == ("node1",)
    persisted = StateStore(ctl.s.run_dir).load()
    assert persisted is not None and persisted.blacklist.entries[0].node == "node1"


def test_dry_run_does_not_print_secrets(tmp_path: Path) -> None:
    """The real dry run (what a user runs), not only the masking helper: secret values never appear."""
    from typer.testing import CliRunner

    from orchestrator.cli import app

    env = {"WANDB_API_KEY": "abc123secret", "HF_TOKEN": "hf_xsecret", "OMP_NUM_THREADS": "1",
           "DB_PASSWORD": "pw-secret"}
    cfg = write_config(tmp_path, base_config(tmp_path, env=env))
    res = CliRunner().invoke(app, ["run", str(cfg), "--dry-run"])
    assert res.exit_code == 0, res.output
    assert "WANDB_API_KEY" in res.output and "OMP_NUM_THREADS" in res.output  # the environment is shown
    assert not any(v in res.output for v in ("abc123secret", "hf_xsecret", "pw-secret")), res.output
