"""The allocation supervisor: what submitit runs on the batch host of a segment that holds spare
nodes.

The job allocates `nodes + spares` with --no-kill. The supervisor starts the training as a job step
on exactly the nodes the segment needs (`srun --overlap`, one agent per node), records every step
(its nodes, its end, its exit code, the nodes the allocation lost meanwhile) and waits. When the
controller asks for the next segment (a `StepRequest`: a failed node dropped, a spare promoted,
resume from the newest checkpoint), it stops the step that still runs and starts the new one in the
same job: no queue wait.

`--overlap` is needed: after a node failure Slurm keeps the killed step (and its CPUs) listed while
the node is down, and a new step without it waits. Every srun is an argv list; nothing reaches a
shell.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import hostlist

from orchestrator.contract import (
    STEP_SIGNAL_NOTE,
    AllocationPaths,
    SegmentPaths,
    StepEnd,
    StepRecord,
    StepRequest,
    read_record,
    write_private,
    write_record,
)
from orchestrator.model import SegmentSpec

POLL_S = 0.25  # a stat and a small JSON read: the request is seen within a quarter second
# a step asked to stop gets SIGTERM (srun forwards it to the agents), then SIGKILL
STOP_GRACE_S = 15.0
REQUEST_WAIT_S = 300.0  # after a failed step: how long to wait for the controller's decision
QUERY_TIMEOUT_S = 20.0


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def step_argv(spec: SegmentSpec, nodes: list[str], spec_file: Path, srun_args: tuple[str, ...],
              python: str = sys.executable) -> list[str]:
    """The srun that starts one agent on each of `nodes` inside the running job."""
    argv = ["srun", "--overlap", f"--nodes={len(nodes)}", f"--ntasks={len(nodes)}",
            "--ntasks-per-node=1",
            f"--nodelist={','.join(nodes)}", f"--job-name={spec.job_name}", "--unbuffered"]
    if spec.cpus_per_task:
        argv.append(f"--cpus-per-task={spec.cpus_per_task}")
    if spec.gpus_per_node:
        argv.append(f"--gpus-per-node={spec.gpus_per_node}")
    return [*argv, *srun_args, python, "-m", "orchestrator.agent.allocation", "step",
            str(spec_file)]


def _query(argv: list[str]) -> str | None:
    try:
        res = subprocess.run(argv, capture_output=True, text=True, timeout=QUERY_TIMEOUT_S,
                             check=False)  # noqa: S603
    except (OSError, subprocess.TimeoutExpired):
        return None
    return res.stdout if res.returncode == 0 else None


def job_nodes(job_id: str, query: Callable[[list[str]], str | None] = _query) -> list[str] | None:
    """The nodes the job holds now (a failed node is removed from a --no-kill job), or None if
    unknown."""
    out = query(["squeue", "-h", "-j", job_id, "-o", "%N"])
    if out is None or not out.strip():
        return None
    return list(hostlist.expand_hostlist(out.strip().splitlines()[0]))


def down_nodes(nodes: list[str], query: Callable[[list[str]], str | None] = _query) -> list[str]:
    """Those of `nodes` Slurm sees as down, failing or not responding."""
    out = query(["sinfo", "-h", "-N", "-n", ",".join(nodes), "-o", "%N %t"])
    down = set()
    for line in (out or "").splitlines():
        parts = line.split()
        # not `idle*`/`mix*` (not responding for a moment): only what Slurm has declared down or
        # failing
        if len(parts) == 2 and parts[1].startswith(("down", "fail")):
            down.add(parts[0])
    return sorted(down)


@dataclass(frozen=True)
class Host:
    """What the supervisor takes from the batch host: processes, Slurm's answers, the controller's
    request file, time and its pace (a test passes its own: no monkeypatching)."""
    popen: Callable[..., Any] = subprocess.Popen
    query: Callable[[list[str]], str | None] = _query
    read: Callable[[Path, type[StepRequest]], StepRequest | None] = read_record
    sleep: Callable[[float], None] = time.sleep
    monotonic: Callable[[], float] = time.monotonic
    poll_s: float = POLL_S
    stop_grace_s: float = STOP_GRACE_S
    request_wait_s: float = REQUEST_WAIT_S


class AllocationSupervisor:
    """Owns the job steps of one allocation: starts each segment's step on the nodes asked for,
    stops it when the controller asks for the next one, and writes a StepRecord for each step."""

    def __init__(self, spec: SegmentSpec, srun_args: tuple[str, ...] = (), job_id: str = "",
                 allocation: list[str] | None = None, host: Host | None = None):
        self.host = host or Host()
        self.first, self.srun_args, self.popen = spec, srun_args, self.host.popen
        self.job_id = job_id or os.environ.get("SLURM_JOB_ID", "")
        nodelist = os.environ.get("SLURM_JOB_NODELIST", "")
        self.allocation = allocation or (list(hostlist.expand_hostlist(nodelist)) if nodelist
                                         else [])
        self.paths = AllocationPaths(Path(spec.allocation_dir
                                          or SegmentPaths(Path(spec.segment_dir)).allocation))
        self.proc: Any = None
        self.stopping = False
        # (inode, mtime, size), the request
        self._seen: tuple[tuple[int, int, int], StepRequest] | None = None

    def log(self, text: str) -> None:
        print(f"{_now()} ORCH-ALLOCATION {text}", flush=True)

    def record(self, rec: StepRecord) -> None:
        write_record(self.paths.step(rec.segment), rec)

    def start(self, spec: SegmentSpec, nodes: list[str]) -> StepRecord:
        spec_file = SegmentPaths(Path(spec.segment_dir)).spec
        spec_file.parent.mkdir(parents=True, exist_ok=True)
        # this job's spec, never one left by an earlier job
        write_private(spec_file, spec.model_dump_json())
        argv = step_argv(spec, nodes, spec_file, self.srun_args)
        self.log(f"segment {spec.index}: step on {','.join(nodes)}")
        self.proc = self.popen(argv, stdin=subprocess.DEVNULL)
        rec = StepRecord(segment=spec.index, job_id=self.job_id, nodes=nodes,
                         allocation=self.allocation, started=_now())
        self.record(rec)
        return rec

    def stop(self) -> None:
        """Stop the running step: SIGTERM to srun (forwarded to the agents), SIGKILL after a grace.
        A step on a frozen or failed node may linger; the next step overlaps it on other nodes."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        deadline = self.host.monotonic() + self.host.stop_grace_s
        while self.proc.poll() is None and self.host.monotonic() < deadline:
            self.host.sleep(0.05)
        if self.proc.poll() is None:
            self.proc.kill()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.log("srun did not exit after SIGKILL; the next step overlaps it")

    def pending(self, after: int) -> StepRequest | None:
        """The controller's request for a segment after `after`. Polled 4 times a second: a stat,
        and a read only when the file changed (it is replaced atomically: a new inode)."""
        try:
            st = self.paths.request.stat()
        except OSError:
            return None
        key = (st.st_ino, st.st_mtime_ns, st.st_size)
        if self._seen is None or self._seen[0] != key:
            req = self.host.read(self.paths.request, StepRequest)
            # unreadable now: read again next time
            self._seen = (key, req) if req is not None else None
        else:
            req = self._seen[1]
        return req if req is not None and req.segment > after else None

    def run_step(self, rec: StepRecord) -> tuple[int | None, StepRequest | None]:
        """Wait for the step to end or for the controller's next request; (exit code, request)."""
        while True:
            code = self.proc.poll()
            if code is not None:
                lost = self.lost(rec.nodes)
                self.record(rec.model_copy(update={"ended": _now(), "exit_code": code,
                                                   "lost_nodes": lost, "end": StepEnd.EXITED}))
                self.log(f"segment {rec.segment}: step ended code={code} "
                         f"lost={','.join(lost) or '-'}")
                return code, None
            req = self.pending(rec.segment)
            if req is not None or self.stopping:
                self.stop()
                note = (f"stopped: the controller started segment {req.segment}" if req
                        else STEP_SIGNAL_NOTE)
                end = StepEnd.SUPERSEDED if req else StepEnd.SIGNALLED
                self.record(rec.model_copy(update={"ended": _now(), "exit_code": self.proc.poll(),
                                                   "note": note, "end": end}))
                return None, req
            self.host.sleep(self.host.poll_s)

    def lost(self, nodes: list[str]) -> list[str]:
        held = job_nodes(self.job_id, self.host.query) if self.job_id else None
        gone = {n for n in nodes if held is not None and n not in held}
        return sorted(gone | set(down_nodes(nodes, self.host.query)))

    def wait_request(self, after: int) -> StepRequest | None:
        deadline = self.host.monotonic() + max(self.host.request_wait_s, self.first.request_wait_s)
        while self.host.monotonic() < deadline and not self.stopping:
            req = self.pending(after)
            if req is not None:
                return req
            self.host.sleep(self.host.poll_s)
        return None

    def next_step(self, req: StepRequest, held: list[str]) -> tuple[SegmentSpec, list[str]] | str:
        """The request's spec and nodes, or why it cannot run here."""
        try:
            spec = SegmentSpec.model_validate_json(Path(req.spec_file).read_text())
        except (OSError, ValueError) as exc:
            return f"request for segment {req.segment}: unreadable spec {req.spec_file}: {exc}"
        bad = [n for n in req.nodes if n not in held]
        if bad or len(req.nodes) != spec.nodes or spec.index != req.segment:
            return (f"request for segment {req.segment}: nodes {','.join(bad or req.nodes)} do not "
                    "fit the allocation")
        return spec, list(req.nodes)

    def _on_signal(self, signum: int, _frame: Any) -> None:
        self.stopping = True

    def run(self) -> int:
        self.paths.root.mkdir(parents=True, exist_ok=True)
        signal.signal(signal.SIGTERM, self._on_signal)
        # the steps' agents handle the time-limit warning
        signal.signal(signal.SIGUSR2, signal.SIG_IGN)
        spec, nodes = self.first, self.allocation[: self.first.nodes]
        while True:
            code, req = self.run_step(self.start(spec, nodes))
            if code == 0 or self.stopping:
                return code or 0
            req = req or self.wait_request(spec.index)
            if req is None:
                self.log(f"no request from the controller after segment {spec.index}; ending the "
                         "job")
                return code if code and 0 < code < 256 else 1
            held = job_nodes(self.job_id, self.host.query) or self.allocation
            nxt = self.next_step(req, held)
            if isinstance(nxt, str):
                self.log(nxt)
                self.record(StepRecord(segment=req.segment, job_id=self.job_id,
                                       nodes=list(req.nodes), started=_now(),
                                       allocation=self.allocation, ended=_now(),
                                       note=f"refused: {nxt}", end=StepEnd.REFUSED))
                return 1
            spec, nodes = nxt


def run_allocation(spec: SegmentSpec, srun_args: tuple[str, ...] = ()) -> int:
    """Entry point pickled by submitit (without its own srun): runs on the batch host."""
    code = AllocationSupervisor(spec, srun_args).run()
    if code != 0:
        sys.stdout.flush()
        raise SystemExit(code if 0 < code < 256 else 1)
    return code


def main(argv: list[str]) -> int:
    """`python -m orchestrator.agent.allocation step SPEC_FILE`: one node's agent in a step."""
    from orchestrator.agent.main import run_node

    if len(argv) != 2 or argv[0] != "step":
        print("usage: python -m orchestrator.agent.allocation step SPEC_FILE", file=sys.stderr)
        return 2
    spec = SegmentSpec.model_validate_json(Path(argv[1]).read_text())
    try:
        return run_node(spec)
    except SystemExit as exc:
        return int(exc.code or 0) if not isinstance(exc.code, str) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
