"""What NVML says about this node's GPUs, for the node's own evidence (nodefacts.py): a reading at
the segment's start and one at its end (or at a stall dump), compared. The NVML module is pynvml
(nvidia-ml-py) unless ORCH_NVML_MODULE names another module or a .py file with the same API (the
tests' stand-in). Each finding is one line in the words NVIDIA's tools use."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from orchestrator.contract import NodeFact

SOURCE = "nvml"
BASELINE_FIELDS = ("ecc", "remapped", "retired_pending")
END_FIELDS = (*BASELINE_FIELDS, "procs", "util", "sm_clock")
FIELD_WORDS = {"ecc": "volatile ECC counters", "remapped": "remapped rows",
               "retired_pending": "retired pages",
               "procs": "compute processes", "util": "utilization", "sm_clock": "SM clock"}

# pid -> "job" (the training's), "other" (a process of this node that is not the job's) or
# "invisible"
Owner = Callable[[int], str]


@dataclass
class GpuReading:
    """One GPU as NVML saw it at one moment: reachable or not, its memory-error counters, who uses
    it."""
    index: int
    lost: str = ""  # why its handle could not be had, or why a call said the GPU is lost
    denied: str = ""  # NVML_ERROR_NO_PERMISSION: a GPU this job was not given
    ecc: int | None = None
    # (correctable rows, uncorrectable rows, pending, failure)
    remapped: tuple[int, ...] | None = None
    retired_pending: int | None = None
    procs: list[tuple[int, int | None]] = field(default_factory=list)  # (pid, used bytes)
    util: int | None = None
    sm_clock: int | None = None
    unsupported: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


@dataclass
class NvmlReading:
    """Every GPU of the node at one moment (nvmlDeviceGetCount and a GpuReading per index)."""
    count: int
    gpus: list[GpuReading]

    @property
    def visible(self) -> int:
        return sum(1 for g in self.gpus if not g.denied)


_MODULES: dict[str, ModuleType] = {}


def load_module(name: str) -> ModuleType:
    """The NVML module: an importable name (pynvml) or a path to a .py file with pynvml's API."""
    if name not in _MODULES:
        if name.endswith(".py") or "/" in name:
            spec = importlib.util.spec_from_file_location(f"orch_nvml_{len(_MODULES)}", name)
            if spec is None or spec.loader is None:
                raise ImportError(f"cannot load {name}")
            module = importlib.util.module_from_spec(spec)
            # as an import would: dataclasses look their module up there
            sys.modules[spec.name] = module
            spec.loader.exec_module(module)
        else:
            module = importlib.import_module(name)
        _MODULES[name] = module
    return _MODULES[name]


def _call(nv: Any, name: str, h: Any) -> Any:
    if name == "ecc":
        return int(nv.nvmlDeviceGetTotalEccErrors(h, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                                                  nv.NVML_VOLATILE_ECC))
    if name == "remapped":
        return tuple(int(x) for x in nv.nvmlDeviceGetRemappedRows(h))
    if name == "retired_pending":
        return int(nv.nvmlDeviceGetRetiredPagesPendingStatus(h))
    if name == "procs":
        return [(int(p.pid), p.usedGpuMemory) for p in nv.nvmlDeviceGetComputeRunningProcesses(h)]
    if name == "util":
        return int(nv.nvmlDeviceGetUtilizationRates(h).gpu)
    return int(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM))


def read_gpu(nv: Any, index: int, fields: tuple[str, ...]) -> GpuReading:
    """One GPU; NVMLError_NotSupported leaves that field out, NVMLError_GpuIsLost marks the GPU
    lost."""
    try:
        h = nv.nvmlDeviceGetHandleByIndex(index)
    except nv.NVMLError_NoPermission as exc:
        return GpuReading(index, denied=str(exc))
    except nv.NVMLError as exc:
        return GpuReading(index, lost=str(exc))
    g = GpuReading(index)
    for name in fields:
        try:
            setattr(g, name, _call(nv, name, h))
        except nv.NVMLError_NotSupported:
            g.unsupported.append(name)
        except nv.NVMLError_GpuIsLost as exc:
            g.lost = str(exc)
            break
        except nv.NVMLError as exc:
            g.errors.append(f"{FIELD_WORDS[name]}: {exc}")
    return g


def read(module: str, fields: tuple[str, ...]) -> NvmlReading | str:
    """A reading of every GPU, or why NVML could not be used ("no NVML (...)")."""
    try:
        nv: Any = load_module(module)
        nv.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - no library, no driver, no GPU: all mean "no NVML"
        return f"no NVML ({str(exc) or type(exc).__name__})"
    try:
        count = int(nv.nvmlDeviceGetCount())
        return NvmlReading(count, [read_gpu(nv, i, fields) for i in range(count)])
    finally:
        try:
            nv.nvmlShutdown()
        except Exception:  # noqa: BLE001, S110 - nothing to do about a failed shutdown
            pass


def _abnormal(text: str) -> NodeFact:
    return NodeFact(source=SOURCE, text=text, severity="abnormal")


def _normal(text: str) -> NodeFact:
    return NodeFact(source=SOURCE, text=text, severity="normal")


def memory_facts(g: GpuReading, base: GpuReading | None) -> list[NodeFact]:
    """ECC counters, row remapping and page retirement of one GPU against its reading at the
    start."""
    out: list[NodeFact] = []
    before = base.ecc if base is not None else None
    if g.ecc is not None and before is not None and g.ecc > before:
        out.append(_abnormal(f"GPU {g.index}: volatile uncorrectable ECC errors rose {before} -> "
                             f"{g.ecc} during the segment"))
    elif g.ecc and before is None:
        out.append(_abnormal(f"GPU {g.index}: {g.ecc} volatile uncorrectable ECC errors"))
    if g.remapped is not None and len(g.remapped) == 4:
        unc_before = base.remapped[1] if base is not None and base.remapped else None
        if unc_before is not None and g.remapped[1] > unc_before:
            out.append(_abnormal(f"GPU {g.index}: uncorrectable remapped rows rose {unc_before} -> "
                                 f"{g.remapped[1]} during the segment"))
        if g.remapped[3]:
            out.append(_abnormal(f"GPU {g.index}: row remap failure"))
        if g.remapped[2]:
            out.append(_abnormal(f"GPU {g.index}: row remapping pending (takes effect at the next "
                                 "GPU reset)"))
    if g.retired_pending:
        out.append(_abnormal(f"GPU {g.index}: pages pending retirement"))
    return out


def process_facts(g: GpuReading, owner: Owner) -> list[NodeFact]:
    out = []
    for pid, used in g.procs:
        whose = owner(pid)
        amount = f"{used / 2**30:.1f} GiB" if used is not None else "memory"
        if whose == "other":
            out.append(_abnormal(
                f"GPU {g.index}: {amount} held by pid {pid} that is not the job's"))
        elif whose == "invisible":
            out.append(_normal(f"GPU {g.index}: {amount} held by pid {pid}, not visible here "
                               "(another PID namespace?)"))
    return out


def count_facts(end: NvmlReading, base: NvmlReading | None, expected: int) -> list[NodeFact]:
    want = expected if expected > 0 else (base.visible if base is not None else 0)
    if want and end.visible < want:
        return [_abnormal(f"{end.visible} GPU{'' if end.visible == 1 else 's'} visible, {want} "
                          "expected")]
    return []


def compare(end: NvmlReading, base: NvmlReading | None, expected: int,
            owner: Owner) -> list[NodeFact]:
    """The findings of the end reading against the start: abnormal lines, then normal ones."""
    found = count_facts(end, base, expected)
    notes: list[NodeFact] = []
    before = {g.index: g for g in base.gpus} if base is not None else {}
    for g in end.gpus:
        if g.lost:
            found.append(_abnormal(f"GPU {g.index}: Unable to determine the device handle for GPU "
                                   f"({g.lost})"))
            continue
        if g.denied:
            notes.append(_normal(f"GPU {g.index}: not accessible ({g.denied}): not given to this "
                                 "job"))
            continue
        found += memory_facts(g, before.get(g.index))
        for fact in process_facts(g, owner):
            (found if fact.severity == "abnormal" else notes).append(fact)
        if g.unsupported:
            notes.append(_normal(f"GPU {g.index}: not supported: "
                                 f"{', '.join(FIELD_WORDS[f] for f in g.unsupported)}"))
        notes += [NodeFact(source=SOURCE, text=f"GPU {g.index}: {e}", severity="unavailable")
                  for e in g.errors]
    if not found:
        notes.insert(0, _normal(f"{end.visible} GPUs, no ECC errors during the segment"
                                + ("" if base is not None
                                   else " (no reading at the segment start)")))
    return found + notes + usage_facts(end)


def usage_facts(end: NvmlReading) -> list[NodeFact]:
    gpus = [g for g in end.gpus if not g.lost and not g.denied]
    util = " ".join("-" if g.util is None else str(g.util) for g in gpus)
    clock = " ".join("-" if g.sm_clock is None else str(g.sm_clock) for g in gpus)
    return [_normal(f"utilization by GPU (%): {util}; SM clock (MHz): {clock}")] if gpus else []
