"""Embedded backend: a segment runs on N virtual nodes of this machine through submitit's local
executor.

Allocation follows Slurm: the lowest-numbered free nodes first, never an excluded one; a job that
cannot be placed stays PENDING. Each virtual node runs one agent; the agent tells the training
its node name (SLURMD_NODENAME, ORCH_NODE_NAME). The job registry is kept on disk so a restarted
controller re-attaches to jobs that are still running.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import signal
import time
from collections.abc import Callable
from dataclasses import asdict
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from loguru import logger
from submitit import LocalExecutor

from orchestrator.agent.main import run_node
from orchestrator.backends.base import BackendDefaults, BackendError, SchedulerUnavailable
from orchestrator.backends.local_jobs import LAST_ID, LocalJobRecord, masked, natural_key
from orchestrator.backends.procs import agents_under, alive, deaf_to_ctrl_c, ours, proc_stat
from orchestrator.clock import Clock
from orchestrator.files import atomic_write, private_dir, read_regular
from orchestrator.model import JobRef, JobState, JobStatus, SegmentSpec
from orchestrator.redact import masked_text


class LocalBackend(BackendDefaults):
    """Owns virtual nodes on this machine: one submitit LocalExecutor per node (`executor`), lowest
    free nodes first, --exclude honoured; its job table is a file (written by `write`) so a
    restarted controller re-attaches."""
    name = "local"

    def __init__(self, node_names: list[str], state_dir: Path, clock: Clock,
                 write: Callable[[Path, str], None] = atomic_write,
                 executor: type[LocalExecutor] = LocalExecutor):
        self.node_names = sorted(node_names, key=natural_key)
        self.state_dir = Path(state_dir)
        self.registry = self.state_dir / "jobs.json"
        self.clock, self.write, self.executor = clock, write, executor
        self._jobs: dict[str, dict[str, Any]] = {}
        self._records: dict[str, LocalJobRecord] = self._load()

    # ---- registry ---------------------------------------------------------------------------
    def _load(self) -> dict[str, LocalJobRecord]:
        """The job table; a garbled one is kept aside (jobs.json.garbled), never silently
        dropped."""
        try:
            raw = json.loads(read_regular(self.registry).decode("utf-8"))
            return {str(k): LocalJobRecord(**v) for k, v in raw.get("jobs", {}).items()}
        except FileNotFoundError:
            return {}
        # garbled, a FIFO or a directory
        except (OSError, ValueError, TypeError, AttributeError) as exc:
            aside = self.registry.with_name(self.registry.name + ".garbled")
            with contextlib.suppress(OSError):
                self.registry.replace(aside)
            logger.error("{} is not a valid job table ({}); kept as {}: its jobs are reported lost",
                         self.registry, exc, aside)
            return {}

    def _save(self, strict: bool = False) -> None:
        """Write the job table. A full or read-only disk: a submission waits (SchedulerUnavailable,
        retried like an unreachable scheduler); a start or an end already happened and stays in
        memory, written next time."""
        try:
            private_dir(self.state_dir)
            self.write(self.registry,
                       json.dumps({"jobs": {k: asdict(v) for k, v in self._records.items()}}))
        except OSError as exc:
            if strict:
                raise SchedulerUnavailable(f"local job table {self.registry} cannot be written: "
                                           f"{exc}") from None
            logger.warning("local job table {} cannot be written now ({}); kept in memory",
                           self.registry, exc)

    def _next_id(self, segment_dir: Path) -> str:
        """Never an id given before, even after the job table was lost: `last-id` keeps the highest
        one, and each segment's directory keeps its own (the table's directory may be lost with
        it)."""
        ids = [int(k) for k in self._records if k.isdigit()]
        for f in [self.state_dir / LAST_ID,
                  *(self.state_dir.parent / "segments").glob(f"*/{LAST_ID}")]:
            try:
                ids.append(int(read_regular(f, 32).decode().strip()))
            except (OSError, ValueError):
                continue
        new = str(max(ids, default=1000) + 1)
        for d in (self.state_dir, segment_dir):
            private_dir(d)
            self.write(d / LAST_ID, new)
        return new

    # ---- Backend protocol ------------------------------------------------------------------
    def nodes(self) -> list[str]:
        return list(self.node_names)

    def render(self, spec: SegmentSpec) -> str:
        lines = [
            f"# local backend: {len(self.node_names)} virtual nodes {','.join(self.node_names)}",
            f"job-name={spec.job_name}",
            f"nodes={spec.nodes} tasks-per-node={spec.tasks_per_node} "
            f"gpus-per-node={spec.gpus_per_node}", f"time={spec.time_limit_min} (minutes)",
            f"exclude={spec.exclude_hostlist or '(none)'}",
            "would run on: "
            f"{','.join(self._place(spec, busy=set())) or '(cannot be placed: too many excluded)'}",
            f"resume-from={spec.resume_from or '(none: start from scratch)'}",
            f"workdir={spec.workdir}",
            "command (argv): " + masked_text(json.dumps(list(spec.command))),
            "environment: " + json.dumps(masked(dict(spec.env))),
        ]
        return "\n".join(lines)

    def submit(self, spec: SegmentSpec) -> JobRef:
        if spec.spares:
            raise BackendError("resources.spare_nodes needs backend.kind: slurm (job steps inside "
                               "an allocation); set it to 0 for the local backend")
        unknown = [n for n in spec.exclude if n not in self.node_names]
        if unknown:
            raise BackendError(f"invalid node name(s) in exclude: {','.join(unknown)}")
        if spec.nodes > len(self.node_names) - len(spec.exclude):
            raise BackendError(
                f"job needs {spec.nodes} nodes but only {len(self.node_names) - len(spec.exclude)} "
                "are not excluded"
            )
        now = self.clock.now()
        try:
            job_id = self._next_id(Path(spec.segment_dir))
        except OSError as exc:
            raise SchedulerUnavailable(
                f"local job table {self.state_dir} cannot be written: {exc}") from None
        rec = LocalJobRecord(job_id, spec.job_name, now.isoformat(), spec.model_dump(mode="json"))
        self._records[rec.job_id] = rec
        try:
            self._save(strict=True)
        except SchedulerUnavailable:
            del self._records[rec.job_id]
            raise
        try:
            self._try_start(rec)
        except SchedulerUnavailable:
            del self._records[rec.job_id]
            with contextlib.suppress(SchedulerUnavailable):
                self._save(strict=True)
            raise
        return JobRef(job_id=rec.job_id, submitted_at=now, backend=self.name)

    def _busy(self) -> set[str]:
        return {n for r in self._records.values() if r.started_at and not r.end_state
                for n in r.nodes}

    def _place(self, spec: SegmentSpec, busy: set[str]) -> list[str]:
        free = [n for n in self.node_names if n not in spec.exclude and n not in busy]
        return free[: spec.nodes] if len(free) >= spec.nodes else []

    def _try_start(self, rec: LocalJobRecord) -> None:
        spec = SegmentSpec.model_validate(rec.spec)
        nodes = self._place(spec, self._busy())
        if not nodes:
            return
        jobs: dict[str, Any] = {}
        try:
            # the job outlives a Ctrl-C in the controller's terminal, as a Slurm job does
            with deaf_to_ctrl_c():
                for rank, node in enumerate(nodes):
                    ex = self.executor(folder=Path(spec.segment_dir) / "submitit" / node)
                    ex.update_parameters(timeout_min=spec.time_limit_min + 10, tasks_per_node=1)
                    jobs[node] = ex.submit(run_node, spec, node, rank, rec.job_id)
        # a full disk half way: no agent is left running unwatched, the job stays to start
        except OSError as exc:
            for job in jobs.values():
                with contextlib.suppress(OSError, ValueError):
                    os.kill(int(job.job_id), signal.SIGKILL)  # the agent had not started training
            raise SchedulerUnavailable(f"the job's agents cannot be started: {exc.strerror or exc} "
                                       f"({exc.filename or spec.segment_dir})") from None
        self._jobs[rec.job_id] = jobs
        rec.nodes = nodes
        rec.pids = [int(j.job_id) for j in jobs.values()]
        rec.pid_starts = [st[1] if (st := proc_stat(p)) else -1 for p in rec.pids]
        rec.started_at = self.clock.now().isoformat()
        self._save()

    def _node_result(self, rec: LocalJobRecord, node: str, pid: int) -> int | None:
        """None while running; 0 when the agent returned; 1 when it failed or vanished."""
        job = self._jobs.get(rec.job_id, {}).get(node)
        running = (job.state == "RUNNING" if job is not None
                   else alive(pid, self._start_of(rec, pid)))
        if running:
            return None
        folder = Path(rec.spec["segment_dir"]) / "submitit" / node
        try:
            outcome, _ = pickle.loads(read_regular(folder / f"{pid}_0_result.pkl", 1 << 26))
            return 0 if outcome == "success" else 1
        except (OSError, pickle.UnpicklingError, EOFError, ValueError):
            return 1

    def _status(self, rec: LocalJobRecord) -> JobStatus:
        if rec.end_state:
            return JobStatus(state=JobState(rec.end_state), nodes=tuple(rec.nodes),
                             exit_code=0 if rec.end_state == "COMPLETED" else 1)
        if not rec.started_at:
            # said by submit; a pending job waits for the disk
            with contextlib.suppress(SchedulerUnavailable):
                self._try_start(rec)
            if not rec.started_at:
                return JobStatus(state=JobState.PENDING, reason="Resources")
        codes = [self._node_result(rec, n, p) for n, p in zip(rec.nodes, rec.pids, strict=True)]
        started = datetime.fromisoformat(rec.started_at or rec.submitted_at)
        limit = timedelta(minutes=int(rec.spec["time_limit_min"]))
        if any(c is None for c in codes):
            if self.clock.now() - started > limit:
                self._kill(rec, "TIMEOUT")
                return self._status(rec)
            return JobStatus(state=JobState.RUNNING, nodes=tuple(rec.nodes), started_at=started)
        state = "COMPLETED" if all(c == 0 for c in codes) else "FAILED"
        self._finish(rec, state)
        return self._status(rec)

    def _finish(self, rec: LocalJobRecord, state: str) -> None:
        rec.end_state, rec.ended_at = state, self.clock.now().isoformat()
        self._save()

    @staticmethod
    def _start_of(rec: LocalJobRecord, pid: int) -> int | None:
        starts = dict(zip(rec.pids, rec.pid_starts, strict=False))
        return starts.get(pid)

    def _kill(self, rec: LocalJobRecord, state: str, grace_s: float = 60.0) -> None:
        """SIGTERM until the agents exit (they stop their ranks), SIGKILL after `grace_s`:
        submitit's job process drops a SIGTERM that comes before the agent's handler is in."""
        deadline = time.monotonic() + grace_s
        # gone, or the PID now belongs to an unrelated process: never signal it
        while live := [p for p in rec.pids if ours(p, self._start_of(rec, p))]:
            sig = signal.SIGTERM if time.monotonic() < deadline else signal.SIGKILL
            for pid in live:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, sig)
            if sig == signal.SIGKILL:
                break
            time.sleep(1.0)
        self._finish(rec, state)

    def poll(self, refs: list[JobRef]) -> dict[str, JobStatus]:
        out = {}
        for ref in refs:
            rec = self._records.get(ref.job_id)
            if rec is None:
                stopped = self._stop_orphans()
                out[ref.job_id] = JobStatus(state=JobState.FAILED,
                                            reason="not in the local job table (lost or "
                                            f"garbled jobs.json); {stopped} orphaned agent "
                                            "process(es) stopped")
            else:
                out[ref.job_id] = self._status(rec)
        return out

    def _stop_orphans(self, grace_s: float = 15.0) -> int:
        """Agent processes of this run that no record knows (their job table was lost): stopped
        (SIGTERM, then SIGKILL after `grace_s`) before a job it 'lost' is called ended, so they
        never run beside the next one nor write into its checkpoint directory. Returns how many
        there were."""
        known = {pid for r in self._records.values() for pid in r.pids}
        orphans = [pid for pid in agents_under(self.state_dir.parent / "segments")
                   if pid not in known]
        for sig in (signal.SIGTERM, signal.SIGKILL):
            # never a PID reused meanwhile
            left = set(agents_under(self.state_dir.parent / "segments"))
            for pid in (p for p in orphans if p in left):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, sig)
            deadline = time.monotonic() + grace_s
            while time.monotonic() < deadline and any(alive(p) for p in orphans):
                time.sleep(0.1)  # the agent stops its ranks on SIGTERM
        if orphans:
            logger.warning("stopped {} agent process(es) of jobs the local job table lost: {}",
                           len(orphans), ",".join(map(str, orphans)))
        return len(orphans)

    def cancel(self, ref: JobRef) -> None:
        rec = self._records.get(ref.job_id)
        if rec and not rec.end_state:
            self._kill(rec, "CANCELLED")

    def find_jobs(self, job_name: str) -> list[JobRef]:
        return [
            JobRef(job_id=r.job_id, submitted_at=datetime.fromisoformat(r.submitted_at),
                   backend=self.name) for r in self._records.values()
            if r.job_name == job_name and not r.end_state
        ]
