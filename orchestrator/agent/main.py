"""The node agent: what submitit runs on every node of a segment. preflight -> the ranks -> their
output teed to <segment>/logs/<host>.log (0600), timestamped, rank-prefixed -> heartbeats with the
progress -> the node's evidence (nodefacts.py) -> exit record; dump requests (dump.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from orchestrator.agent import dump, idle, nodefacts, preflight, profile, rankstep, reaper, version
from orchestrator.agent.taskenv import flight_env, node_identity, srun_task_env, training_argv
from orchestrator.contract import (
    CANNOT_START_EXIT,
    DUMP_MARKER,
    PREFLIGHT_EXIT,
    PREFLIGHT_MARKER,
    CheckRecord,
    DumpRecord,
    ExitRecord,
    Heartbeat,
    SegmentPaths,
    exit_line,
    start_line,
    write_record,
)
from orchestrator.diagnose.linear import progress_pattern
from orchestrator.files import append_private, read_request
from orchestrator.flight import FLIGHT_DIR
from orchestrator.model import SegmentSpec
from orchestrator.progress import PROGRESS_REGEX, last_iteration
from orchestrator.saves import CheckpointTimer

TERM_GRACE_S = 10.0


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class NodeAgent:
    """One node's part of a segment: pre-flight, ranks, their output, heartbeats, dumps, exit."""
    def __init__(self, spec: SegmentSpec, node: str, node_rank: int, nnodes: int, job_id: str):
        self.spec, self.node, self.node_rank = spec, node, node_rank
        self.nnodes, self.job_id = nnodes, job_id
        self.paths = SegmentPaths(Path(spec.segment_dir))
        self.facts = nodefacts.NodeFacts(spec, node, lambda text: self.emit("agent", text),
                                         ranks=lambda: (self.procs, self._stopping.is_set()))
        self.progress = progress_pattern(spec.progress_regex, PROGRESS_REGEX)
        self.procs: list[subprocess.Popen[bytes]] = []
        self.iteration: int | None = None
        self.progress_time: str | None = None
        self.tail: list[str] = []
        self.saves = CheckpointTimer()
        self._lock = threading.Lock()
        self._log: IO[str] | None = None
        self._stopping = threading.Event()
        self._stopper: threading.Thread | None = None
        self._outputs_closed = threading.Event()
        self._open_streams = 0
        self._last_hb = 0.0

    # ---- output -------------------------------------------------------------------------------
    def emit(self, rank: int | str, text: str) -> None:
        line = f"{_now()} {rank}: {text}"
        with self._lock:
            assert self._log is not None
            self._log.write(line + "\n")
            self._log.flush()
            self.tail = (self.tail + [line])[-20:]
            self.saves.feed(text, time.monotonic())
        iteration = last_iteration(self.progress, text)
        if iteration is not None:
            self.iteration = iteration
            self.progress_time = _now()
            self.heartbeat(force=time.monotonic() - self._last_hb > 1.0)

    def heartbeat(self, force: bool = True) -> None:
        if not force:
            return
        self._last_hb = time.monotonic()
        write_record(self.paths.heartbeat(self.node), Heartbeat(
            node=self.node, job_id=self.job_id, iteration=self.iteration,
            progress_time=self.progress_time, alive_time=_now(), pids=[p.pid for p in self.procs]))

    def _pump(self, rank: int, stream: IO[bytes]) -> None:
        try:
            for raw in iter(stream.readline, b""):
                text = raw.replace(b"\x00", b"").decode("utf-8", errors="replace").rstrip("\r\n")
                self.emit(rank, text)
        finally:
            with self._lock:
                self._open_streams -= 1
                if self._open_streams == 0:
                    self._outputs_closed.set()

    # ---- lifecycle ----------------------------------------------------------------------------
    def _env(self, local_rank: int) -> dict[str, str]:
        s = self.spec
        world = self.nnodes * s.tasks_per_node
        rank = self.node_rank * s.tasks_per_node + local_rank
        env = dict(os.environ)
        env.update(dict(s.env))
        env.update({
            "ORCH_NODE_NAME": self.node, "SLURMD_NODENAME": self.node,
            "ORCH_NODE_RANK": str(self.node_rank),
            "ORCH_NNODES": str(self.nnodes), "ORCH_RANK": str(rank), "RANK": str(rank),
            "ORCH_LOCAL_RANK": str(local_rank), "LOCAL_RANK": str(local_rank),
            "ORCH_WORLD_SIZE": str(world), "WORLD_SIZE": str(world),
            "ORCH_SEGMENT_DIR": s.segment_dir, "ORCH_JOB_ID": self.job_id, "PYTHONUNBUFFERED": "1",
            "ORCH_AGENT_PID": str(os.getpid()),  # the tracer a rank may allow (orchestrator.flight)
        })
        env.update(srun_task_env(self.node_rank, local_rank, s.tasks_per_node, self.nnodes,
                                 os.environ))
        env.update(flight_env(s.segment_dir, self.node, env))
        nodelist = os.environ.get("SLURM_STEP_NODELIST") or os.environ.get("SLURM_JOB_NODELIST")
        if nodelist:
            import hostlist

            first = hostlist.expand_hostlist(nodelist)[0]
            env.setdefault("MASTER_ADDR", first)
            # where sbatch would have run the script's body (the step's first node)
            env["ORCH_BATCH_HOST"] = first
        return env

    def _launch(self) -> list[threading.Thread]:
        threads = []
        for local_rank in range(self.spec.tasks_per_node):
            rank = self.node_rank * self.spec.tasks_per_node + local_rank
            env = self._env(local_rank)
            proc = subprocess.Popen(  # noqa: S603 - argv list from config, never a shell
                training_argv(self.spec.command, env), cwd=self.spec.workdir, env=env,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, preexec_fn=reaper.rank_preexec,  # noqa: PLW1509
            )
            self.procs.append(proc)
            self._open_streams += 1
            assert proc.stdout is not None
            t = threading.Thread(target=self._pump, args=(rank, proc.stdout), daemon=True)
            t.start()
            threads.append(t)
        return threads

    def _on_signal(self, signum: int, _frame: Any) -> None:
        """Stop the training once (a repeated signal changes nothing). The line is written by the
        thread: the main thread may hold the log's lock right now."""
        if not self._stopping.is_set():
            self._stopping.set()
            self._stopper = threading.Thread(target=self._terminate,
                                             args=(signal.Signals(signum).name,), daemon=True)
            self._stopper.start()

    def _on_warning(self, signum: int, _frame: Any) -> None:
        """submitit's --signal=USR2@N: the job nears its time limit or is being preempted. The
        training keeps running (its own checkpointing decides what to save); the controller reads
        Slurm's end state."""
        self.emit("agent", f"ORCH-AGENT got signal {signal.Signals(signum).name}: time limit or "
                           "preemption near")

    def _terminate(self, signame: str = "") -> None:
        if signame:
            self.emit("agent", f"ORCH-AGENT got signal {signame}; stopping training")
        reaper.stop_ranks(self.procs, TERM_GRACE_S)

    def _watch(self) -> None:
        """Heartbeat every few seconds and answer dump requests until all ranks exit."""
        handled = {"dump": "", "profile": ""}
        while any(p.poll() is None for p in self.procs):
            self.heartbeat(force=time.monotonic() - self._last_hb > 5.0)
            for kind, path, answer in (("dump", self.paths.dump_request, self._dump),
                                       ("profile", self.paths.profile_request, self._profile)):
                request = read_request(path)
                if request and request != handled[kind]:
                    handled[kind] = request
                    threading.Thread(target=answer, args=(request,), daemon=True).start()
            if self._outputs_closed.is_set():  # every rank closed its output: the exit is near
                time.sleep(0.02)
            else:
                self._outputs_closed.wait(0.5)

    def _dump(self, request: str) -> None:
        # the facts beside the stacks: a slow fact source must not delay the stacks that name a hang
        threading.Thread(target=self.facts.report, args=("dump",), daemon=True).start()
        records = dump.dump_processes([p.pid for p in self.procs if p.poll() is None]
                                      + self._outside())
        write_record(self.paths.dump(self.node),
                     DumpRecord(node=self.node, time=_now(), request=request, processes=records))
        for r in records:
            self.emit("agent", f"{DUMP_MARKER} pid={r.pid} state={r.state} wchan={r.wchan} "
                               f"stack={r.stack_summary}")

    def _profile(self, request: str) -> None:
        """Where every rank spends its time for a few seconds (the controller saw a slowdown)."""
        live = [p.pid for p in self.procs if p.poll() is None]
        records, dropped = profile.profile_processes(live + self._outside())
        write_record(self.paths.profile(self.node), DumpRecord(
            node=self.node, time=_now(), request=request, processes=records, left_out=dropped))

    def run(self) -> int:
        self.paths.logs.mkdir(parents=True, exist_ok=True)
        self.paths.nodes.mkdir(parents=True, exist_ok=True)
        (self.paths.root / FLIGHT_DIR).mkdir(exist_ok=True)  # torch writes there, creates nothing
        self._log = append_private(self.paths.log(self.node))  # 0600
        self.emit("agent",
                  start_line(self.spec.index, self.job_id, self.node, self.node_rank,
                             self.spec.resume_from))
        self.heartbeat()
        # from the start: a cancel during the preflight or the baseline is not lost
        for sig in (s for s in (signal.SIGTERM, signal.SIGINT)
                    if signal.getsignal(s) != signal.SIG_IGN):
            # an ignored SIGINT stays so: the local backend's Ctrl-C guard
            signal.signal(sig, self._on_signal)
        results = preflight.run_all(self.spec, self.node)
        for r in results:
            self.emit("agent", f"{PREFLIGHT_MARKER} {r.name}: {r.verdict}: {r.detail}")
        failed = [r for r in results if not r.ok]
        if failed:
            self.emit("agent", f"{PREFLIGHT_MARKER} FAILED: {failed[0].detail}")
            self._exit_record(PREFLIGHT_EXIT, [], results)
            return PREFLIGHT_EXIT
        self.facts.baseline()
        if self._stopping.is_set():  # stopped before the training started: nothing to launch
            self._exit_record(128 + signal.SIGTERM, [], results)
            return 128 + signal.SIGTERM
        # Slurm's --signal=USR2@N reaches every process of the step; its default action would kill
        # the training. The ranks inherit "ignore" (a training script that handles USR2 installs its
        # own handler).
        signal.signal(signal.SIGUSR2, signal.SIG_IGN)
        try:
            threads = self._launch()
        except OSError as exc:
            self.emit("agent", f"ORCH-AGENT cannot start the training command: {exc}")
            self._exit_record(CANNOT_START_EXIT, [], results)
            return CANNOT_START_EXIT
        signal.signal(signal.SIGUSR2, self._on_warning)
        if self._stopping.is_set():  # a signal during the launch: the ranks it missed stop too
            self._terminate()
        self._watch()
        self._after_ranks()
        for t in threads:
            t.join(timeout=5)
        codes = [p.wait() for p in self.procs]
        code = next((c for c in codes if c != 0), 0)
        self.facts.report("exit")
        self.emit("agent", exit_line(self.spec.index, codes))
        self._exit_record(code, codes, results)
        return code

    def _after_ranks(self) -> None:
        """The stop's graces, then what the exited ranks left running (a container's)."""
        if self._stopper is not None:
            self._stopper.join(TERM_GRACE_S + reaper.CONTAINER_GRACE_S + reaper.MONITOR_GRACE_S + 5)
        if reaper.IS_SUBREAPER and (left := reaper.leftovers()):
            self.emit("agent", f"ORCH-AGENT stopping {len(left)} left running (a container's)")
            reaper.stop_each(left)
        if outside := self._outside():  # the launch's own step outlived its srun
            self.emit("agent", f"ORCH-AGENT stopping {len(outside)} ranks of the launch's own step")
            reaper.stop_each(outside)

    def _outside(self) -> list[int]:
        """The ranks of a pyxis launch's own step, looked for only when the command has one."""
        return rankstep.outside_ranks() if rankstep.uses_rank_step(self.spec.command) else []

    def _exit_record(self, code: int, codes: list[int], results: list[CheckRecord]) -> None:
        signals = [signal.Signals(-c).name for c in codes if c < 0
                   and -c in signal.Signals._value2member_map_]
        write_record(self.paths.exit(self.node), ExitRecord(
            node=self.node, job_id=self.job_id, exit_code=code, rank_exit_codes=codes,
            signals=signals, checkpoint_dirs=self.saves.dirs,
            iteration=self.iteration, time=_now(), last_lines=self.tail[-10:], preflight=results,
            stopped_by_signal=self._stopping.is_set(), checkpoint_write_s=self.saves.durations))
        if self._log:
            self._log.close()
            self._log = None


def run_node(spec: SegmentSpec, node_name: str | None = None, node_rank: int | None = None,
             job_id: str | None = None) -> int:
    """Entry point pickled by submitit. Raises SystemExit(code) on failure so Slurm records it."""
    # a rank killed before its container stops: its monitor comes to the agent, not to PID 1, in
    # reach of the dumps and the stop (the agent's own process only, never one running it in-line)
    reaper.become_subreaper()
    version.refuse_another_version(spec)
    node, rank, nnodes = node_identity(node_name, node_rank)
    if idle.idles(spec, rank):
        return idle.hold(spec, node)
    nnodes = 1 if spec.launch_nodes == "first" else spec.nodes if node_name else nnodes
    jid = (job_id or os.environ.get("SLURM_JOB_ID")
           or os.environ.get("SUBMITIT_LOCAL_JOB_ID", "local"))
    code = NodeAgent(spec, node, rank, nnodes, jid).run()
    if code != 0:
        sys.stdout.flush()
        raise SystemExit(code if 0 < code < 256 else 1)
    return code
