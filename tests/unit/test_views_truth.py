"""The views tell the truth at 3 a.m. (issue 37): the text status of a run stopped on a user bug shows
the error lines and what to change, each once."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from rich.console import Console
from typer.testing import CliRunner

from orchestrator.agent.nodefacts import summary as node_summary
from orchestrator.cli import app
from orchestrator.cli.inspect import status_view
from orchestrator.cli.run import _cancel_current
from orchestrator.cli.stopping import _by_user
from orchestrator.loop.controller import Controller
from orchestrator.model import Cause, RunStatus
from orchestrator.state import RunState, StateStore
from orchestrator.views.ettr import run_metrics
from orchestrator.views.metrics import registry
from orchestrator.views.status import summary_table
from tests.fakes import Fault
from tests.unit.test_controller_fake import make


def text_of(view: object, width: int = 100) -> str:
    console = Console(width=width, record=True)
    console.print(view, crop=False)
    return console.export_text()


def test_status_of_a_user_bug_stop_shows_the_error_line_and_the_advice_once(tmp_path: Path) -> None:
    ctl, _, clock = make(tmp_path, {"all": Fault("bug", at=25)})
    state = ctl.run()
    assert state.status == RunStatus.STOPPED
    flat = " ".join(text_of(status_view(state, clock.now()), width=400).split())
    # the rank, the node, the file and line, the error text
    assert "rank 0 on node1 (node1.log:27), also node2,node3: ValueError: could not broadcast" in flat
    assert flat.count("fix the code, data or config") == 1
    assert flat.count("it will happen again") == 1
    assert "│ what to change │ fix the code, data or config" in flat


def cancelled_and_resumed(tmp_path: Path) -> RunState:
    """A run whose controller stopped at 10 s of training, cancelled by `orchestrator cancel` (as ann),
    then resumed on purpose (`run --resume`: a cancelled run stays stopped without it) to its goal by a new
    controller."""
    ctl, cluster, clock = make(tmp_path)

    def stop_soon(now: datetime) -> None:
        if clock.slept >= 10:
            ctl.request_stop("test")

    clock.on_advance.append(stop_soon)
    state = ctl.run()
    clock.on_advance.remove(stop_soon)
    store = StateStore(ctl.s.run_dir)
    assert _cancel_current(state, cluster, store, clock, by="orchestrator cancel by ann")
    again = Controller(ctl.s, cluster, clock, store, python="python")
    again.resume = True
    return again.run()


def test_a_cancelled_segment_is_cancelled_by_whom_and_when_after_the_resume(tmp_path: Path) -> None:
    state = cancelled_and_resumed(tmp_path)
    assert state.status == RunStatus.DONE
    first = state.segments[0]
    assert first.cause == Cause.CANCELLED and first.cancelled_at is not None
    assert f"cancelled by orchestrator cancel by ann at {first.cancelled_at.isoformat()}" in first.reason
    lost = run_metrics(state, state.updated_at)["lost_s_by_cause"]
    assert "cancelled" in lost and "unknown" not in lost
    assert "│ time lost │ cancelled" in " ".join(text_of(summary_table(state, state.updated_at), 300).split())


def test_start_up_is_its_own_bucket_never_time_lost_to_success(tmp_path: Path) -> None:
    state = cancelled_and_resumed(tmp_path)
    lost = run_metrics(state, state.updated_at)["lost_s_by_cause"]
    assert "startup" in lost and "success" not in lost
    prom = generate_latest(registry(state, state.updated_at, None)).decode()
    assert 'orchestrator_lost_seconds{cause="startup",run="t"}' in prom
    assert 'cause="success"' not in prom


def test_orchestrator_cancel_names_the_user_running_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOGNAME", "ann")
    assert _by_user() == " by ann"


BLIND = Path(__file__).resolve().parents[1] / "data" / "blind"


def test_diagnose_reads_a_single_log_file_and_says_blame_in_words() -> None:
    one = BLIND / "node-failure-node023-slurm-out" / "logs" / "slurm-771234.out"
    res = CliRunner().invoke(app, ["diagnose", str(one)], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert "cause: node_fail  culprits: node023 (blamed: their fault, excluded or struck)" in res.output
    assert "True" not in res.output and "False" not in res.output


def test_diagnose_calls_a_kernel_line_a_kernel_line() -> None:
    res = CliRunner().invoke(app, ["diagnose", str(BLIND / "xid79-fell-off-bus-node017" / "logs")],
                             catch_exceptions=False)
    assert "summary: kernel log line on node017: [51841.112240] NVRM: Xid" in res.output
    assert "first-rank" not in res.output


def test_status_fits_columns_keeping_the_nodes_and_the_action_whole(tmp_path: Path) -> None:
    ctl, _, _ = make(tmp_path, {"all": Fault("bug", at=25)})
    ctl.run()
    env = {**os.environ, "COLUMNS": "100"}
    res = subprocess.run([sys.executable, "-m", "orchestrator", "status", str(ctl.s.run_dir)], env=env,
                         capture_output=True, text=True, timeout=60, cwd=Path(__file__).resolve().parents[2])
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert max(len(line) for line in lines) <= 100, res.stdout
    row = next(line for line in lines if line.startswith("│ 1 "))
    assert "node[1-3]" in row and "stop_and_alert" in row and "…" not in row
    interval = [line for line in lines if "checkpoint interval" in line]
    assert interval and "every 30 min (expected effective training time" in interval[0]
    # one line: the next row starts right after it
    assert "│ stopped by" in lines[lines.index(interval[0]) + 1]


def test_the_node_summary_cannot_be_read_as_an_exit_code() -> None:
    line = node_summary("exit", [])
    assert line.startswith("ORCH-NODE summary at exit: abnormal facts: 0;") and "exit: 0" not in line


def _stopped(tmp_path: Path, cause: Cause, reason: str, evidence: list[dict[str, object]]) -> RunState:
    from orchestrator.model import Action, Evidence
    from orchestrator.state import SegmentRecord

    t = datetime(2026, 1, 1, tzinfo=UTC)
    seg = SegmentRecord(index=2, job_name="t", job_id="12", submitted_at=t, action=Action.STOP_AND_ALERT,
                        cause=cause, reason=reason, evidence=[Evidence.model_validate(e) for e in evidence])
    return RunState(run="t", created_at=t, updated_at=t, segments=[seg], status=RunStatus.STOPPED,
                    stop_reason=reason)


def test_a_breaker_stop_with_no_error_line_shows_the_ranks_last_output(tmp_path: Path) -> None:
    """The re-probe (D3): a stop by "no progress across 3 segments" showed no error row, although every node
    log ended with the rank's error; the agent's own lines are not the ranks' output."""
    log = str(tmp_path / "segments/0002/logs/node1.log")
    lines = ["2026-12-05T14:35:14.831Z 0: ls: cannot access '/nonexistent-xyz': No such file or directory",
             "2026-12-05T14:35:14.869Z agent: ORCH-AGENT exit segment=2 codes=[2]"]
    state = _stopped(tmp_path, Cause.UNKNOWN, "no progress across 2 consecutive segments (stuck at iteration 0)",
                     [{"node": "node1", "file": log, "line": 4 + i, "text": t, "role": "context", "cause": "unknown",
                       "source": "log"} for i, t in enumerate(lines)])
    flat = " ".join(text_of(status_view(state, state.updated_at), width=400).split())
    assert "│ last output │ rank 0 on node1 (node1.log:4): ls: cannot access '/nonexistent-xyz'" in flat
    assert "ORCH-AGENT exit" not in flat


def test_a_disk_full_stop_says_its_error_and_its_advice_once(tmp_path: Path) -> None:
    """The re-probe (D2): the `stopped by` row held the advice and the errno line, and the error and what to
    change rows repeated them. The reason is the one the diagnosis and the policy give for these logs."""
    from orchestrator.offline.diagnosis import diagnose_dir

    err = "OSError: [Errno 28] No space left on device: '/ckpt/iter_0000130'"
    (tmp_path / "logs").mkdir()
    for n in ("node1", "node2"):
        (tmp_path / "logs" / f"{n}.log").write_text(f"iteration 1/ 100 | lm loss 1.0\n{err}\n")
    got = diagnose_dir(tmp_path / "logs")
    assert got["cause"] == "filesystem" and got["action"] == "stop_and_alert", got
    state = _stopped(tmp_path, Cause.FILESYSTEM, got["reason"],
                     [{**e, "cause": "filesystem", "role": e["role"]} for e in got["evidence"]])
    flat = " ".join(text_of(status_view(state, state.updated_at), width=400).split())
    assert "│ error │" in flat and "Errno 28" in flat
    assert flat.count("Errno 28") == 1 and flat.count("free space or raise the quota") == 1, flat


@pytest.mark.parametrize("suffix", [".gz", ".xz", ".bz2"])
def test_diagnose_reads_a_compressed_log_as_its_text(tmp_path: Path, suffix: str) -> None:
    """The re-probe (D13): `diagnose slurm-771234.out.gz` gave a confident `unknown` from the compressed bytes."""
    import bz2
    import gzip
    import lzma

    one = BLIND / "node-failure-node023-slurm-out" / "logs" / "slurm-771234.out"
    packed = tmp_path / f"{one.name}{suffix}"
    compress: dict[str, Callable[[bytes], bytes]] = {".gz": gzip.compress, ".xz": lzma.compress, ".bz2": bz2.compress}
    packed.write_bytes(compress[suffix](one.read_bytes()))
    res = CliRunner().invoke(app, ["diagnose", str(packed)], catch_exceptions=False)
    assert res.exit_code == 0 and "cause: node_fail  culprits: node023" in res.output, res.output
    assert f"read {packed.name} decompressed" in res.output
    (tmp_path / "bad.gz").write_bytes(b"not gzip at all")
    bad = CliRunner().invoke(app, ["diagnose", str(tmp_path / "bad.gz")])
    assert bad.exit_code == 1 and "bad.gz: cannot be decompressed" in bad.output and "cause:" not in bad.output


def test_a_job_wide_files_name_is_never_taken_for_a_host(tmp_path: Path) -> None:
    """The re-probe (D14): in slurm-77.out, a kernel line whose host the engine cannot read was said to be "on
    slurm-77", the file's stem."""
    log = tmp_path / "slurm-77.out"
    log.write_text("gpu-a: step 10\ngpu-b: [Thu Jan  1 00:00:00 2026] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU "
                   "has fallen off the bus.\n")
    res = CliRunner().invoke(app, ["diagnose", str(log)], catch_exceptions=False)
    assert res.exit_code == 0 and "on slurm-77" not in res.output and "] slurm-77 " not in res.output, res.output
    assert "kernel log line on a host slurm-77.out does not name" in res.output


@pytest.mark.parametrize("columns", [60, 40])
def test_a_narrow_terminal_wraps_every_value_and_cuts_none(tmp_path: Path, columns: int) -> None:
    """The re-probe (D7): at 60 and 40 columns the headers and cells were cut (`culp…`, `node[1…`, `user_…`) and
    two columns squeezed to width 0; below what the columns need, the segments are lines of whole values."""
    ctl, _, _ = make(tmp_path, {"all": Fault("bug", at=25)})
    ctl.run()
    env = {**os.environ, "COLUMNS": str(columns)}
    res = subprocess.run([sys.executable, "-m", "orchestrator", "status", str(ctl.s.run_dir)], env=env,
                         capture_output=True, text=True, timeout=60, cwd=Path(__file__).resolve().parents[2])
    assert res.returncode == 0, res.stderr
    assert "…" not in res.stdout and "┳┳" not in res.stdout, res.stdout
    assert max(len(line) for line in res.stdout.splitlines()) <= columns
    flat = " ".join(res.stdout.replace("│", " ").split())
    assert "nodes node[1-3]" in flat and "action stop_and_alert" in flat and "cause user_bug" in flat, flat


def test_diagnose_knows_a_compressed_log_by_its_bytes_and_says_what_it_cannot_read(tmp_path: Path) -> None:
    """The fifth re-probe (X3): a gzip under another name (`renamed.log`) and a zstd log gave a confident `unknown`
    read from the compressed bytes. The gzip is read as its text; the zstd is one error line saying what to do."""
    import gzip

    one = BLIND / "node-failure-node023-slurm-out" / "logs" / "slurm-771234.out"
    renamed = tmp_path / "renamed.log"
    renamed.write_bytes(gzip.compress(one.read_bytes()))
    res = CliRunner().invoke(app, ["diagnose", str(renamed)], catch_exceptions=False)
    assert res.exit_code == 0 and "cause: node_fail  culprits: node023" in res.output, res.output
    zst = tmp_path / "slurm-771234.out.zst"
    zst.write_bytes(b"(\xb5/\xfd" + b"\x00" * 64)
    res = CliRunner().invoke(app, ["diagnose", str(zst)], catch_exceptions=False)
    assert res.exit_code != 0 and "zst-compressed: decompress it first (zstd -d slurm-771234.out.zst)" in res.output
    assert "cause:" not in res.output


def test_diagnose_json_never_gives_a_job_wide_files_name_as_a_node(tmp_path: Path) -> None:
    """The fifth re-probe (X4): the text said no node, `--json` still gave `"node": "slurm-77"` for the line."""
    import json

    log = tmp_path / "slurm-77.out"
    log.write_text("gpu-b: [Thu Jan  1 00:00:00 2026] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off "
                   "the bus.\n")
    got = json.loads(CliRunner().invoke(app, ["diagnose", str(log), "--json"], catch_exceptions=False).output)
    assert got["evidence"] and all(e["node"] != "slurm-77" for e in got["evidence"]), got["evidence"]
