"""The node's own evidence: at a segment's end and at every stall dump the agent collects what the
node itself knows, each source through a timeout and all of them at once (about 3 s in all, never a
hang on a dead mount or a stuck GPU), and says where it could not look:

* kernel: `dmesg` lines since the agent started, of the families that tell a node failed (Xid,
  EDAC/MCE,
  the OOM killer, disk I/O, Lustre/NFS, mlx5/InfiniBand links), the last 200;
* nvml: ECC counters, row remapping, page retirement against the reading at the start, lost GPUs,
  GPUs
  missing, GPU memory held by processes that are not the job's (nvmlfacts.py);
* ib: port states and error counters against the start; cgroup: the job cgroup's OOM events
  (sysfacts.py);
* mount: whether the run and checkpoint directories answer a stat.

Abnormal facts go into the node's log as `ORCH-NODE <source>: <text>` lines (read by the same
signature table as the training's output), all of them into <node>.facts.json, with one `ORCH-NODE
summary:` line."""

from __future__ import annotations

import functools
import os
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from orchestrator.agent import kernelfacts, nvmlfacts, oomowner, sysfacts
from orchestrator.contract import NODE_MARKER, NodeFact, NodeFactsRecord, SegmentPaths, write_record
from orchestrator.model import SegmentSpec
from orchestrator.timeout import call_with_timeout

# the ranks (their Popen objects) and whether the agent itself stopped them
Ranks = Callable[[], tuple[list[subprocess.Popen[bytes]], bool]]
SOURCE_TIMEOUT_S = 3.0
MOUNT_TIMEOUT_S = 2.0

@dataclass(frozen=True)
class Job:
    """One source's reading, run in its own thread through call_with_timeout."""
    source: str
    fn: Callable[[], list[NodeFact]]
    budget_s: float
    on_timeout: NodeFact


def run_jobs(jobs: list[Job]) -> list[NodeFact]:
    """All jobs at once; a job that does not answer within its budget gives its on_timeout fact."""
    results: dict[int, tuple[bool, Any]] = {}

    def one(i: int, job: Job) -> None:
        results[i] = call_with_timeout(job.fn, job.budget_s)

    threads = [threading.Thread(target=one, args=(i, j), daemon=True) for i, j in enumerate(jobs)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + max((j.budget_s for j in jobs), default=0.0) + 1.0
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    facts: list[NodeFact] = []
    for i, job in enumerate(jobs):
        done, value = results.get(i, (False, None))
        if not done:
            facts.append(job.on_timeout)
        elif isinstance(value, BaseException):
            facts.append(_unavailable(job.source,
                                      f"not readable ({type(value).__name__}: {value})"))
        else:
            facts.extend(value)
    return facts


def _unavailable(source: str, text: str) -> NodeFact:
    return NodeFact(source=source, text=text, severity="unavailable")


def stat_fact(path: str, stat: Callable[[str], Any]) -> list[NodeFact]:
    t0 = time.monotonic()
    try:
        stat(path)
    except OSError as exc:
        return [NodeFact(source="mount", text=f"{path}: stat failed: {exc}", severity="abnormal")]
    return [NodeFact(source="mount", text=f"{path} answered a stat in "
                                          f"{1000 * (time.monotonic() - t0):.0f} ms")]


def summary(reason: str, facts: list[NodeFact]) -> str:
    """`ORCH-NODE summary at exit:` the sources read and those the agent could not look at, and
    why."""
    sources = list(dict.fromkeys(f.source for f in facts))
    read = [s for s in sources if any(f.source == s and f.severity != "unavailable" for f in facts)]
    missing = [f"{f.source} ({f.text})" for f in facts if f.severity == "unavailable"
               and f.source not in read]
    abnormal = sum(1 for f in facts if f.severity == "abnormal")
    # 'summary at exit: abnormal facts: 0', never 'exit: 0 abnormal' (read as an exit code)
    return (f"{NODE_MARKER} summary at {reason}: abnormal facts: {abnormal}; read "
            f"{', '.join(read) or 'nothing'}; could not look: {'; '.join(missing) or 'none'}")


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _uptime(proc: Path) -> float | None:
    try:
        return float((proc / "uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


@dataclass
class Probes:
    """Where the agent looks; the tests point these at fake trees, a fake dmesg and a blocking
    stat."""
    run: kernelfacts.Runner = subprocess.run
    ib_root: Path = Path("/sys/class/infiniband")
    cgroup_root: Path = Path("/sys/fs/cgroup")
    proc: Path = Path("/proc")
    stat: Callable[[str], Any] = os.stat
    # whose a GPU process is; default: the agent's tree and job cgroup
    owner: nvmlfacts.Owner | None = None
    mount_timeout_s: float = MOUNT_TIMEOUT_S


class NodeFacts:
    """One node's evidence for one segment: readings at the start (baseline), then a report at a
    stall dump and at the end. report() never raises: a failed collection is one line in the log."""

    def __init__(self, spec: SegmentSpec, node: str, emit: Callable[[str], None],
                 probes: Probes | None = None, ranks: Ranks | None = None):
        self.spec, self.node, self.emit, self.probes = spec, node, emit, probes or Probes()
        # the ranks and whether the agent stopped them: whose an OOM kill was (oomowner)
        self.ranks, self.tree = ranks, oomowner.JobTree(os.getpid(), self.probes.proc)
        self.paths = SegmentPaths(Path(spec.segment_dir))
        self.env = {**os.environ, **dict(spec.env)}
        self.started_at, self.started_uptime = datetime.now(UTC), _uptime(self.probes.proc)
        self.base_nvml: nvmlfacts.NvmlReading | None = None
        self.base_ib: dict[sysfacts.Port, sysfacts.PortReading] | None = None
        self.base_cgroup: dict[str, dict[str, int]] | None = None
        self._emitted: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    @property
    def nvml_module(self) -> str:
        return self.env.get("ORCH_NVML_MODULE") or "pynvml"

    def baseline(self) -> None:
        """The readings the end is compared with (NVML, InfiniBand counters, cgroup events), all at
        once."""
        try:
            self.tree.start()
            # a stand-in reads its device state from the process environment
            if self.nvml_module != "pynvml":
                if "ORCH_NVML_STANDIN" in self.env:
                    os.environ.setdefault("ORCH_NVML_STANDIN", self.env["ORCH_NVML_STANDIN"])
                os.environ.setdefault("ORCH_NVML_STANDIN_NODE", self.node)
            late = _unavailable("baseline", f"did not answer within {SOURCE_TIMEOUT_S:g}s")
            run_jobs([Job("nvml", self._base_nvml, SOURCE_TIMEOUT_S, late),
                      Job("ib", self._base_ib, SOURCE_TIMEOUT_S, late),
                      Job("cgroup", self._base_cgroup, SOURCE_TIMEOUT_S, late)])
        except Exception as exc:  # noqa: BLE001 - the node's evidence never stops the training
            self._say(f"{NODE_MARKER} baseline failed: {type(exc).__name__}: {exc}")

    def _base_nvml(self) -> list[NodeFact]:
        reading = nvmlfacts.read(self.nvml_module, nvmlfacts.BASELINE_FIELDS)
        self.base_nvml = reading if isinstance(reading, nvmlfacts.NvmlReading) else None
        return []

    def _base_ib(self) -> list[NodeFact]:
        self.base_ib = (sysfacts.read_ib(self.probes.ib_root) if self.probes.ib_root.is_dir()
                        else None)
        return []

    def _base_cgroup(self) -> list[NodeFact]:
        files = sysfacts.memory_cgroups((self.probes.proc / "self" / "cgroup").read_text(),
                                        self.probes.cgroup_root)
        self.base_cgroup = sysfacts.read_events(files) if files else None
        return []

    def collect(self) -> list[NodeFact]:
        """Every source at once, each within its budget: about SOURCE_TIMEOUT_S in all."""
        late = {s: _unavailable(s, f"not readable (did not answer within {SOURCE_TIMEOUT_S:g}s)")
                for s in ("kernel", "ib", "cgroup")}
        jobs = [Job("kernel", self._kernel, SOURCE_TIMEOUT_S, late["kernel"]),
                Job("nvml", self._nvml, SOURCE_TIMEOUT_S, NodeFact(
                    source="nvml", severity="abnormal", text="NVML did not answer within "
                                                             f"{SOURCE_TIMEOUT_S:g}s")),
                Job("ib", self._ib, SOURCE_TIMEOUT_S, late["ib"]),
                Job("cgroup", self._cgroup, SOURCE_TIMEOUT_S, late["cgroup"])]
        t = self.probes.mount_timeout_s
        for path in self.mount_paths():
            jobs.append(Job("mount", functools.partial(stat_fact, path, self.probes.stat), t,
                            NodeFact(
                source="mount", severity="abnormal", text=f"{path} did not answer a stat within "
                                                          f"{t:g}s")))
        return run_jobs(jobs)

    def mount_paths(self) -> list[str]:
        """The run directory and the checkpoint directory (else the segment's)."""
        spec_env = dict(self.spec.env)
        ckpt = spec_env.get("ORCH_CHECKPOINT_DIR") or spec_env.get("ORCH_RESUME_ROOT") or (
            str(Path(self.spec.resume_from).parent) if self.spec.resume_from
            else self.spec.segment_dir)
        return list(dict.fromkeys(p for p in (self.spec.run_dir, ckpt) if p))

    def _kernel(self) -> list[NodeFact]:
        text, why = kernelfacts.read_dmesg(self.probes.run)
        if text is None:
            return [_unavailable("kernel", f"not readable ({why})")]
        iso = kernelfacts.ISO_TS.match(text.split("\n", 1)[0]) is not None
        lines = kernelfacts.kernel_lines(text, self.started_at if iso else self.started_uptime)
        if foreign := self._foreign_kills(lines):
            return [NodeFact(source="kernel", text=line, severity="normal"
                             if oomowner.OOM_FAMILY.search(line) else "abnormal") for line in lines
                    ] + [NodeFact(source="kernel", text=oomowner.context_line(foreign),
                                  severity="context")]
        return [NodeFact(source="kernel", text=line, severity="abnormal") for line in lines] or [
            NodeFact(source="kernel", text="no relevant kernel messages since the segment started")]

    def _foreign_kills(self, lines: list[str]) -> list[oomowner.Victim]:
        """The OOM kills of the kernel lines, when every victim is another workload's."""
        if not any(oomowner.OOM_FAMILY.search(line) for line in lines):
            return []
        procs, stopped = self.ranks() if self.ranks else ([], False)
        codes = [p.returncode for p in procs]
        self.tree.sample()
        try:
            cgroup = sysfacts.job_cgroup((self.probes.proc / "self" / "cgroup").read_text())
        except OSError:
            cgroup = None
        return oomowner.foreign_kills(
            lines, {p.pid for p in procs} | self.tree.seen, cgroup,
            None if not codes or None in codes else [c for c in codes if c is not None], stopped)

    def _nvml(self) -> list[NodeFact]:
        reading = nvmlfacts.read(self.nvml_module, nvmlfacts.END_FIELDS)
        if isinstance(reading, str):
            return [_unavailable("nvml", f"skipped: {reading}")]
        owner = self.probes.owner or sysfacts.ProcessOwner(os.getpid(), self.probes.proc)
        return nvmlfacts.compare(reading, self.base_nvml, self.spec.gpus_per_node, owner)

    def _ib(self) -> list[NodeFact]:
        if not self.probes.ib_root.is_dir():
            return [_unavailable("ib", f"skipped (no {self.probes.ib_root})")]
        return sysfacts.compare_ib(sysfacts.read_ib(self.probes.ib_root), self.base_ib)

    def _cgroup(self) -> list[NodeFact]:
        files = sysfacts.memory_cgroups((self.probes.proc / "self" / "cgroup").read_text(),
                                        self.probes.cgroup_root)
        if not files:
            return [_unavailable("cgroup", "skipped (no memory controller in /proc/self/cgroup)")]
        return sysfacts.compare_cgroup(sysfacts.read_events(files), self.base_cgroup)

    def report(self, reason: str) -> None:
        """Collect; print the abnormal facts not printed before and the summary; write the
        record."""
        try:
            if reason == "exit":
                self.tree.stop()
            facts = self.collect()
            with self._lock:
                new = [f for f in facts if f.severity in ("abnormal", "context")
                       and (f.source, f.text) not in self._emitted]
                self._emitted.update((f.source, f.text) for f in new)
            for f in new:
                self.emit(f"{NODE_MARKER} {f.source}: {f.text}")
            self.emit(summary(reason, facts))
            write_record(self.paths.facts(self.node, reason),
                         NodeFactsRecord(node=self.node, time=_now(), reason=reason, facts=facts))
        # the node's evidence never changes how the agent ends
        except Exception as exc:  # noqa: BLE001
            self._say(f"{NODE_MARKER} collection failed: {type(exc).__name__}: {exc}")

    def _say(self, text: str) -> None:
        try:
            self.emit(text)
        except Exception:  # noqa: BLE001, S110 - the log itself is gone: nothing left to tell
            pass
