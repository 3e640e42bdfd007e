"""Real Slurm: submission through submitit, one batched sacct (squeue as fallback) per poll.

Every Slurm command is an argv list run with a timeout and retried by tenacity (bounded exponential
backoff with jitter). A command that still fails makes the state *unknown* (SchedulerUnavailable),
never *failed*. Jobs are submitted with --no-requeue so that only the controller retries them."""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import tempfile
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import submitit
from tenacity import (
    RetryError,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    stop_after_delay,
)
from tenacity import wait_random_exponential as wait_rexp

from orchestrator.agent.allocation import run_allocation
from orchestrator.agent.main import run_node
from orchestrator.backends.base import BackendDefaults, BackendError, SchedulerUnavailable
from orchestrator.backends.slurm_commands import (
    SACCT_FIELDS,
    CommandFailed,
    Runner,
    drained_reasons,
    first_failure,
    found_jobs,
    parse_node_states,
    parse_sacct,
    parse_squeue,
    path_first,
    ping_window,
    plain_tmp,
    queue_position_of,
    run_command,
    transient,
    unreachable,
    usable,
    without_excluded,
)
from orchestrator.clock import Clock
from orchestrator.contract import SegmentPaths
from orchestrator.files import atomic_write
from orchestrator.model import JobRef, JobState, JobStatus, SegmentSpec
from orchestrator.settings import SlurmBackendCfg


class SlurmBackend(BackendDefaults):
    """Owns talking to Slurm: submitit (--no-requeue), one sacct per poll (squeue as fallback),
    bounded retries, drain; a command that fails is 'unknown', never a job failure."""
    name = "slurm"
    costly_poll = True  # sacct: a query of slurmdbd, shared by the whole cluster

    def __init__(self, cfg: SlurmBackendCfg, clock: Clock, run_dir: Path,
                 runner: Runner = run_command, attempts: int = 4):
        self.cfg, self.clock, self.run_dir, self.runner = cfg, clock, Path(run_dir), runner
        self.attempts = attempts
        self._nodes: tuple[datetime, list[str]] | None = None
        self._window: float | None = None  # ping_window_s, once read

    # ---- commands --------------------------------------------------------------------------
    def _sleep(self, seconds: float) -> None:
        self.clock.sleep(seconds)

    def _run(self, argv: list[str], quick: bool = False) -> str:
        """Run a Slurm command with bounded exponential backoff and jitter; SchedulerUnavailable at
        the end. `quick` (a poll, which the loop repeats anyway): two attempts within seconds, so an
        outage is said at once, never minutes of retries inside one poll."""
        retry = Retrying(
            retry=retry_if_exception_type(CommandFailed),
            stop=(stop_after_attempt(2) | stop_after_delay(min(self.cfg.retry_max_s, 10.0)))
            if quick else
            (stop_after_attempt(self.attempts) | stop_after_delay(self.cfg.retry_max_s)),
            wait=wait_rexp(multiplier=1, max=2 if quick else 30),
            sleep=self._sleep,
            reraise=False,
            before_sleep=None if quick else first_failure(argv[0], self.cfg.retry_max_s),
        )
        try:
            for attempt in retry:
                with attempt:
                    return self.runner(argv, self.cfg.command_timeout_s)
        except RetryError as exc:
            raise SchedulerUnavailable(str(exc.last_attempt.exception())) from None
        raise SchedulerUnavailable(f"{argv[0]}: no attempt ran")

    # ---- Backend protocol ------------------------------------------------------------------
    def nodes(self) -> list[str] | None:
        now = self.clock.now()
        if self._nodes and now - self._nodes[0] < timedelta(minutes=5):
            return self._nodes[1]
        if not (text := self._sinfo("%N", quick=False)):
            return self._nodes[1] if self._nodes else None
        names = sorted({ln.strip() for ln in text.splitlines() if ln.strip()})
        self._nodes = (now, names)
        return names

    def _sinfo(self, fmt: str, quick: bool = True) -> str:
        """`sinfo -h -N -o FMT`; '' when it does not answer (the parsers read that: unknown)."""
        try:
            return self._run(["sinfo", "-h", "-N", "-o", fmt], quick)
        except SchedulerUnavailable:
            return ""

    def usable_nodes(self) -> list[str] | None:
        """Nodes that can run a job now (not down, drained, failing or not responding): spares are
        drawn from these, so a job never waits for a spare that is down. None: unknown."""
        rows = parse_node_states(self._sinfo("%N %t", quick=False))
        return None if rows is None else usable(rows)

    def unreachable(self, nodes: frozenset[str]) -> frozenset[str] | None:
        """Of `nodes`, those slurmctld cannot reach now (not responding or down); None: unknown."""
        rows = parse_node_states(self._sinfo("%N %t"))
        return None if rows is None else unreachable(rows, nodes)

    def drained_reasons(self, nodes: frozenset[str]) -> dict[str, str] | None:
        """Of `nodes`, those drained, draining or failing, with the reason; None: unknown."""
        return drained_reasons(self._sinfo("%N|%t|%E"), nodes)

    def ping_window_s(self) -> float:
        """From `scontrol show config`, read once: how long slurmctld may take to flag a node
        that stopped answering (0 while unknown)."""
        if self._window is None:
            try:
                self._window = ping_window(self._run(["scontrol", "show", "config"], quick=True))
            except SchedulerUnavailable:
                return 0.0
        return self._window

    def _params(self, spec: SegmentSpec) -> dict[str, Any]:
        extra: dict[str, Any] = {"no-requeue": True,
                                 **without_excluded(dict(spec.sbatch_extra), spec.exclude)}
        if spec.spares:
            # a failed node leaves the job; the supervisor restarts on a spare
            extra["no-kill"] = True
        if spec.account:
            extra["account"] = spec.account
        p: dict[str, Any] = {
            "job_name": spec.job_name, "nodes": spec.nodes + spec.spares, "ntasks_per_node": 1,
            "time": spec.time_limit_min,
            "comment": f"orchestrator:{spec.run_name}:seg{spec.index}",
            "additional_parameters": extra, "stderr_to_stdout": True, "signal_delay_s": 60,
        }
        if spec.gpus_per_node:
            p["gpus_per_node"] = spec.gpus_per_node
        if spec.cpus_per_task:
            p["cpus_per_task"] = spec.cpus_per_task
        if spec.partition:
            p["partition"] = spec.partition
        if spec.qos:
            p["qos"] = spec.qos
        if spec.exclude:
            p["exclude"] = spec.exclude_hostlist
        # the run's environment, for setup lines that read it (import-sbatch's run-once lines)
        if self.cfg.setup:
            p["setup"] = [f"ORCH_SETUP_ENV={shlex.quote(str(self.setup_env(spec)))}",
                          *self.cfg.setup]
        if spec.spares:
            # the allocation supervisor runs on the batch host and starts the steps
            p["use_srun"] = False
        elif self.cfg.srun_args:
            p["srun_args"] = list(self.cfg.srun_args)
        return p

    @staticmethod
    def setup_env(spec: SegmentSpec) -> Path:
        return Path(spec.segment_dir) / "setup.env"

    def _write_setup_env(self, spec: SegmentSpec) -> None:
        """The segment's environment (the config's env, ORCH_*) as `export NAME='value'` lines,
        private (it may hold tokens), for the batch script's setup lines: under sbatch they saw the
        same environment."""
        lines = [f"export {k}={shlex.quote(v)}\n" for k, v in spec.env
                 if re.fullmatch(r"[A-Za-z_]\w*", k)]
        self.setup_env(spec).parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.setup_env(spec), "".join(lines))

    def _submit(self, ex: submitit.SlurmExecutor, spec: SegmentSpec) -> submitit.Job[Any]:
        if spec.spares:
            return ex.submit(run_allocation, spec, tuple(self.cfg.srun_args))
        return ex.submit(run_node, spec)

    def folder(self, spec: SegmentSpec) -> Path:
        return SegmentPaths(Path(spec.segment_dir)).submitit

    def _executor(self, folder: Path, spec: SegmentSpec) -> submitit.SlurmExecutor:
        """The one place that configures submitit; used by submit() and by render()'s rehearsal."""
        # the agents' interpreter: a plain path (the settings allow no shell characters)
        ex = submitit.SlurmExecutor(folder=folder / "%j", max_num_timeout=0,
                                    python=self.cfg.python and shlex.quote(self.cfg.python))
        ex.update_parameters(**self._params(spec))
        return ex

    def render(self, spec: SegmentSpec) -> str:
        """The batch script submit() hands to sbatch for `spec`, byte for byte (for the dry run).

        submitit has no public call that only renders, so this rehearses submit() with submitit's
        public API: the same executor submits to a stand-in sbatch in a scratch folder, and the
        scratch folder is then put back to the segment's folder in each (shell-quoted) word that
        names it."""
        with tempfile.TemporaryDirectory(prefix="orch-render-", dir=plain_tmp()) as tmp:
            scratch = Path(tmp) / "submitit"
            bindir = Path(tmp) / "bin"
            bindir.mkdir()
            for tool, text in (("sbatch", 'echo "Submitted batch job 1"'), ("srun", "exit 1")):
                (bindir / tool).write_text(f"#!/bin/sh\n{text}\n")
                (bindir / tool).chmod(0o755)
            with path_first(bindir):
                job = self._submit(self._executor(scratch, spec), spec)
            script = Path(job.paths.submission_file).read_text()
        real = str(self.folder(spec).expanduser().absolute())
        return re.sub(re.escape(str(scratch)) + r"[^\s'\"]*",
                      lambda m: shlex.quote(real + m.group(0)[len(str(scratch)):]), script)

    def submit(self, spec: SegmentSpec) -> JobRef:
        known = self.nodes()
        if known is not None and self.cfg.validate_exclude:
            unknown = [n for n in spec.exclude if n not in known]
            if unknown:
                raise BackendError(f"exclude names nodes sinfo does not know: {','.join(unknown)}")
        if self.cfg.setup:
            try:
                self._write_setup_env(spec)
            except OSError as exc:
                raise SchedulerUnavailable(
                    f"the setup's environment cannot be written: {exc}") from None
        ex = self._executor(self.folder(spec), spec)
        submitted_at = self.clock.now()
        # submitit prints a failed sbatch's stderr itself: it is in the exception, said once by the
        # controller
        try:
            with contextlib.redirect_stderr(io.StringIO()):
                job = self._submit(ex, spec)
        except Exception as exc:  # noqa: BLE001 - submitit wraps sbatch failures in its own types
            text = str(exc)
            if transient(text):
                live = self.find_jobs(spec.job_name)
                if live:
                    return live[-1]  # sbatch went through although the answer was lost
                raise SchedulerUnavailable(text[:300]) from None
            raise BackendError(
                f"sbatch rejected segment {spec.index}: {text.strip()[-500:]}") from None
        return JobRef(job_id=str(job.job_id), submitted_at=submitted_at, backend=self.name)

    def poll(self, refs: list[JobRef]) -> dict[str, JobStatus]:
        if not refs:
            return {}
        ids = ",".join(r.job_id for r in refs)
        start = min(r.submitted_at for r in refs) - timedelta(days=1)
        try:
            text = self._run(["sacct", "-X", "-n", "-P", "-j", ids, "-S",
                              start.strftime("%Y-%m-%dT%H:%M:%S"), "-o", SACCT_FIELDS], quick=True)
            found = parse_sacct(text, refs)
        except SchedulerUnavailable:
            found = {}
        missing = [r for r in refs if r.job_id not in found
                   or found[r.job_id].state == JobState.UNKNOWN]
        if missing:  # accounting lags or is down: ask the controller directly
            try:
                sq = parse_squeue(self._run(["squeue", "-h", "-j",
                                             ",".join(r.job_id for r in missing),
                                             "-o", "%i|%T|%N|%r"], quick=True))
            except SchedulerUnavailable:
                if not found:
                    raise
                sq = {}
            found.update({k: v for k, v in sq.items() if k in {r.job_id for r in missing}})
        return {r.job_id: found.get(r.job_id, JobStatus(state=JobState.UNKNOWN)) for r in refs}

    def cancel(self, ref: JobRef) -> None:
        self._run(["scancel", ref.job_id])

    def drain(self, node: str, reason: str) -> None:
        """Take a node out of service (needs operator rights; only with
        policy.drain_blacklisted)."""
        clean = " ".join(reason.replace('"', "'").split())[:200]
        self._run(["scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={clean}"])

    def queue_position(self, ref: JobRef) -> str:
        """Where a pending job stands: its rank among pending jobs of its partition by priority, and
        Slurm's expected start. One squeue call; asked rarely (not every poll)."""
        try:
            text = self._run(["squeue", "-h", "-t", "PD", "--sort=-p", "-o", "%i|%P|%S"])
        except SchedulerUnavailable:
            return ""
        return queue_position_of(text, ref.job_id)

    def find_jobs(self, job_name: str) -> list[JobRef]:
        text = self._run(["squeue", "-h", "-n", job_name, "-o", "%i|%V|%T"])
        return found_jobs(text, self.clock.now(), self.name)
