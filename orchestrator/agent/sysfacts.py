"""What sysfs and /proc say about this node, for the node's own evidence (nodefacts.py): InfiniBand
port states and error counters, the job cgroup's memory events, and which processes are the job's.
Each reader takes its root directory, so the tests build a fake tree."""

from __future__ import annotations

from pathlib import Path

from orchestrator.contract import NodeFact

IB_COUNTERS = ("symbol_error", "link_downed", "link_error_recovery", "port_rcv_errors",
               "local_link_integrity_errors", "excessive_buffer_overrun_errors")
# memory.events (cgroup v2) and memory.oom_control (v1) keys: a rise of one of these is an OOM
OOM_KEYS = ("oom", "oom_kill", "oom_group_kill")

Port = tuple[str, str]  # (device, port number)
PortReading = dict[str, str | int]  # state, phys_state and the error counters


def _value(path: Path) -> str:
    """A sysfs value without its numeric prefix: '4: ACTIVE' -> 'ACTIVE'."""
    text = path.read_text().strip()
    return text.split(":", 1)[1].strip() if ":" in text else text


def read_ib(root: Path) -> dict[Port, PortReading]:
    """Every port under root (/sys/class/infiniband): state, phys_state and the counters it has."""
    ports: dict[Port, PortReading] = {}
    for dev in sorted(root.iterdir()):
        for port in sorted((dev / "ports").iterdir()) if (dev / "ports").is_dir() else []:
            reading: PortReading = {"state": _value(port / "state")}
            try:
                reading["phys_state"] = _value(port / "phys_state")
            except OSError:
                pass
            for name in IB_COUNTERS:
                try:
                    reading[name] = int((port / "counters" / name).read_text().split()[0])
                except (OSError, ValueError, IndexError):
                    continue
            ports[(dev.name, port.name)] = reading
    return ports


def _ib(text: str, severity: str = "abnormal") -> NodeFact:
    return NodeFact(source="ib", text=text, severity=severity)


def port_facts(name: str, end: PortReading, base: PortReading | None) -> list[NodeFact]:
    state, was = str(end["state"]), str(base["state"]) if base is not None else ""
    phys = (f", phys_state {end['phys_state']}" if "phys_state" in end
            and end["phys_state"] != "LinkUp" else "")
    out = []
    if state != "ACTIVE":
        if was == "ACTIVE":
            out.append(_ib(f"{name}: state {state} (was ACTIVE){phys}"))
        else:
            out.append(_ib(f"{name}: state {state}{phys} "
                           + (f"(was {was})" if was else "(no reading at the start)"), "normal"))
    for counter in IB_COUNTERS:
        if (base is not None and counter in end and counter in base
            and int(end[counter]) > int(base[counter])):
            out.append(_ib(f"{name}: {counter} +{int(end[counter]) - int(base[counter])} during "
                           "the segment"))
    return out


def compare_ib(end: dict[Port, PortReading],
               base: dict[Port, PortReading] | None) -> list[NodeFact]:
    out: list[NodeFact] = []
    for (dev, port), reading in sorted(end.items()):
        out += port_facts(f"{dev} port {port}", reading, base.get((dev, port)) if base is not None
                          else None)
    for dev, port in sorted(set(base or {}) - set(end)):
        out.append(_ib(f"{dev} port {port}: gone (was {(base or {})[(dev, port)]['state']})"))
    if not any(f.severity == "abnormal" for f in out):
        note = "" if base is not None else " (no reading at the segment start)"
        out.insert(0, _ib(f"{len(end)} port(s): none went down and no error counter rose during "
                          f"the segment{note}", "normal"))
    return out


def memory_cgroups(proc_self_cgroup: str, root: Path) -> list[Path]:
    """The memory-event files of the agent's cgroup and its parents up to the job's (Slurm's job_N),
    v1's memory controller first (a hybrid host runs memory on v1), else the v2 unified
    hierarchy."""
    v1 = v2 = None
    for line in proc_self_cgroup.splitlines():
        hier, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if "memory" in controllers.split(","):
            v1 = path
        elif hier == "0" and controllers == "":
            v2 = path
    if v1 is not None:
        base, name, path = root / "memory", "memory.oom_control", v1
    elif v2 is not None:
        base, name, path = root, "memory.events", v2
    else:
        return []
    parts = [p for p in path.split("/") if p]
    jobs = [i for i, p in enumerate(parts) if p.startswith("job_")]
    top = jobs[-1] if jobs else len(parts) - 1
    return [base.joinpath(*parts[:n], name) for n in (range(len(parts), top, -1) if parts else [0])]


def read_events(files: list[Path]) -> dict[str, dict[str, int]]:
    """{label: {key: count}}, label as the fact names it: the file, or parent-dir/file for a
    parent's."""
    out: dict[str, dict[str, int]] = {}
    for i, f in enumerate(files):
        try:
            pairs = [line.split() for line in f.read_text().splitlines()]
        except OSError:
            if i == 0:
                raise
            continue  # a parent without the file (the v2 root has no memory.events)
        label = f.name if i == 0 else f"{f.parent.name}/{f.name}"
        out[label] = {p[0]: int(p[1]) for p in pairs if len(p) == 2 and p[1].isdigit()}
    return out


def compare_cgroup(end: dict[str, dict[str, int]],
                   base: dict[str, dict[str, int]] | None) -> list[NodeFact]:
    out = []
    for label, counts in end.items():
        before = (base or {}).get(label, {})
        for key in OOM_KEYS:
            if key in counts and key in before and counts[key] > before[key]:
                out.append(NodeFact(source="cgroup", severity="abnormal",
                                    text=f"{key} {before[key]} -> {counts[key]} during the segment "
                                         f"({label})"))
        if counts.get("under_oom"):
            out.append(NodeFact(source="cgroup", text=f"under_oom 1 ({label})",
                                severity="abnormal"))
    if not out:
        first = next(iter(end.items()), ("", {}))
        shown = ", ".join(f"{k} {v}" for k, v in first[1].items() if k in (*OOM_KEYS, "max"))
        note = "" if base is not None else "; no reading at the segment start"
        out.append(NodeFact(source="cgroup", text=f"no OOM event during the segment ({first[0]}: "
                                                  f"{shown}{note})"))
    return out


def process_parents(proc: Path) -> dict[int, int]:
    """pid -> ppid for every process in proc (/proc/PID/stat only: never cmdline, which can
    hang)."""
    parents = {}
    for d in proc.iterdir():
        if d.name.isdigit():
            try:
                raw = (d / "stat").read_text()
            except OSError:
                continue
            rest = raw[raw.rfind(")") + 2 :].split()
            if len(rest) > 1:
                parents[int(d.name)] = int(rest[1])
    return parents


def descendants(root_pid: int, parents: dict[int, int]) -> set[int]:
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    tree, todo = {root_pid}, [root_pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in tree:
                tree.add(child)
                todo.append(child)
    return tree


def job_cgroup(proc_cgroup: str) -> str | None:
    """The Slurm job cgroup (.../job_N) a /proc/PID/cgroup text names, or None outside a Slurm
    job."""
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)[-1].split("/")
        jobs = [i for i, p in enumerate(parts) if p.startswith("job_")]
        if jobs:
            return "/".join(parts[: jobs[-1] + 1])
    return None


class ProcessOwner:
    """Whose a GPU process is: the agent's process tree or the same Slurm job cgroup is the
    job's."""

    def __init__(self, root_pid: int, proc: Path = Path("/proc")):
        self.root_pid, self.proc = root_pid, proc
        # read at the first question: most GPUs hold no foreign process
        self.tree: set[int] | None = None
        self.job: str | None = None

    def _cgroup(self, pid: int) -> str | None:
        try:
            return job_cgroup((self.proc / str(pid) / "cgroup").read_text())
        except OSError:
            return None

    def __call__(self, pid: int) -> str:
        if self.tree is None:
            self.tree = descendants(self.root_pid, process_parents(self.proc))
            self.job = self._cgroup(self.root_pid)
        if pid in self.tree:
            return "job"
        if not (self.proc / str(pid)).exists():
            return "invisible"
        return "job" if self.job is not None and self._cgroup(pid) == self.job else "other"
