"""A stand-in for pynvml (nvidia-ml-py) at the library boundary: the same function names, constants and
exception classes (values as in nvidia-ml-py's pynvml.py), returning what NVML's documentation says each call
returns and raising what it says on errors. The agent loads it with ORCH_NVML_MODULE=<path of this file>.

The devices come from the JSON file named by ORCH_NVML_STANDIN, read again at every call, so a test (or a
Slurm scenario on several nodes) can change counters while a segment runs:

    {"<node>" or "*": [{"ecc_volatile_uncorrected": 0, "remapped": [0, 0, 0, 0], "retired_pending": 0,
                        "lost": false, "procs": [{"pid": 1, "used": 123}], "util": 100, "sm_clock": 1410,
                        "no_permission": false, "not_supported": ["nvmlDeviceGetRemappedRows"],
                        "errors": {"nvmlDeviceGetTotalEccErrors": 15}}, ...]}

The node is ORCH_NVML_STANDIN_NODE, else SLURMD_NODENAME, else the short host name. No ORCH_NVML_STANDIN:
nvmlInit raises NVML_ERROR_LIBRARY_NOT_FOUND (no NVML here); no entry for the node: NVML_ERROR_DRIVER_NOT_LOADED.
"""

from __future__ import annotations

import json
import os
import socket
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_ALREADY_INITIALIZED = 5
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_ERROR_INSUFFICIENT_POWER = 8
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_IRQ_ISSUE = 11
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_CORRUPTED_INFOROM = 14
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_OPERATING_SYSTEM = 17
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_IN_USE = 19
NVML_ERROR_MEMORY = 20
NVML_ERROR_NO_DATA = 21
NVML_ERROR_UNKNOWN = 999

NVML_FEATURE_DISABLED = 0
NVML_FEATURE_ENABLED = 1
NVML_VOLATILE_ECC = 0
NVML_AGGREGATE_ECC = 1
NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_CLOCK_GRAPHICS = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_CLOCK_VIDEO = 3

_STRINGS = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized", NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported", NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
    NVML_ERROR_ALREADY_INITIALIZED: "Already Initialized", NVML_ERROR_NOT_FOUND: "Not Found",
    NVML_ERROR_INSUFFICIENT_SIZE: "Insufficient Size", NVML_ERROR_INSUFFICIENT_POWER: "Insufficient External Power",
    NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded", NVML_ERROR_TIMEOUT: "Timeout",
    NVML_ERROR_IRQ_ISSUE: "Interrupt Request Issue", NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found", NVML_ERROR_CORRUPTED_INFOROM: "Corrupted infoROM",
    NVML_ERROR_GPU_IS_LOST: "GPU is lost", NVML_ERROR_RESET_REQUIRED: "GPU requires restart",
    NVML_ERROR_OPERATING_SYSTEM: "The operating system has blocked the request.",
    NVML_ERROR_LIB_RM_VERSION_MISMATCH: "RM has detected an NVML/RM version mismatch.",
    NVML_ERROR_MEMORY: "Insufficient Memory", NVML_ERROR_UNKNOWN: "Unknown Error",
}


class NVMLError(Exception):
    """As pynvml's: NVMLError(code) is an instance of the code's subclass (NVMLError_GpuIsLost, ...)."""
    _valClassMapping: dict[int, type[NVMLError]] = {}
    value: int

    def __new__(cls, value: int) -> NVMLError:
        klass = NVMLError._valClassMapping.get(value, cls) if cls is NVMLError else cls
        obj = Exception.__new__(klass)
        obj.value = value
        return obj

    def __str__(self) -> str:
        return _STRINGS.get(self.value, f"NVML Error with code {self.value}")


def _error_class(suffix: str) -> type[NVMLError]:
    """NVML_ERROR_GPU_IS_LOST -> NVMLError_GpuIsLost, constructed without arguments, as pynvml names them."""
    code = int(globals()[f"NVML_ERROR_{suffix}"])

    def new(cls: type[NVMLError], *args: Any) -> NVMLError:
        obj = Exception.__new__(cls)
        obj.value = code
        return obj

    name = "NVMLError_" + string.capwords(suffix, "_").replace("_", "")
    klass = cast(type[NVMLError], type(name, (NVMLError,), {"__new__": new}))
    NVMLError._valClassMapping[code] = klass
    return klass


NVMLError_Uninitialized = _error_class("UNINITIALIZED")
NVMLError_InvalidArgument = _error_class("INVALID_ARGUMENT")
NVMLError_NotSupported = _error_class("NOT_SUPPORTED")
NVMLError_NoPermission = _error_class("NO_PERMISSION")
NVMLError_AlreadyInitialized = _error_class("ALREADY_INITIALIZED")
NVMLError_NotFound = _error_class("NOT_FOUND")
NVMLError_DriverNotLoaded = _error_class("DRIVER_NOT_LOADED")
NVMLError_Timeout = _error_class("TIMEOUT")
NVMLError_LibraryNotFound = _error_class("LIBRARY_NOT_FOUND")
NVMLError_FunctionNotFound = _error_class("FUNCTION_NOT_FOUND")
NVMLError_CorruptedInforom = _error_class("CORRUPTED_INFOROM")
NVMLError_GpuIsLost = _error_class("GPU_IS_LOST")
NVMLError_ResetRequired = _error_class("RESET_REQUIRED")
NVMLError_OperatingSystem = _error_class("OPERATING_SYSTEM")
NVMLError_LibRmVersionMismatch = _error_class("LIB_RM_VERSION_MISMATCH")
NVMLError_InUse = _error_class("IN_USE")
NVMLError_Memory = _error_class("MEMORY")
NVMLError_NoData = _error_class("NO_DATA")
NVMLError_Unknown = _error_class("UNKNOWN")


@dataclass(frozen=True)
class _Handle:
    index: int


@dataclass
class _ProcessInfo:  # nvmlDeviceGetComputeRunningProcesses' entries (c_nvmlProcessInfo_t)
    pid: int
    usedGpuMemory: int | None  # noqa: N815 - pynvml's field name
    gpuInstanceId: int = 0xFFFFFFFF  # noqa: N815
    computeInstanceId: int = 0xFFFFFFFF  # noqa: N815


@dataclass
class _Utilization:  # c_nvmlUtilization_t
    gpu: int
    memory: int


_init_count = 0


def _devices() -> list[dict[str, Any]]:
    path = os.environ.get("ORCH_NVML_STANDIN")
    if not path:
        raise NVMLError(NVML_ERROR_LIBRARY_NOT_FOUND)
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        raise NVMLError(NVML_ERROR_UNKNOWN) from None
    node = (os.environ.get("ORCH_NVML_STANDIN_NODE") or os.environ.get("SLURMD_NODENAME")
            or socket.gethostname().split(".")[0])
    devices = data.get(node, data.get("*"))
    if devices is None:
        raise NVMLError(NVML_ERROR_DRIVER_NOT_LOADED)
    return list(devices)


def _device(handle: _Handle, function: str) -> dict[str, Any]:
    """The device's state for one call: GPU_IS_LOST, NOT_SUPPORTED or a configured error as NVML returns them."""
    if _init_count <= 0:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)
    devices = _devices()
    if not isinstance(handle, _Handle):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    if handle.index >= len(devices) or devices[handle.index].get("lost"):
        raise NVMLError(NVML_ERROR_GPU_IS_LOST)
    dev = devices[handle.index]
    if function in dev.get("not_supported", []):
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    if function in dev.get("errors", {}):
        raise NVMLError(int(dev["errors"][function]))
    return dev


def nvmlInit() -> None:  # noqa: N802 - pynvml's names
    global _init_count
    _devices()
    _init_count += 1


def nvmlInitWithFlags(flags: int) -> None:  # noqa: N802
    nvmlInit()


def nvmlShutdown() -> None:  # noqa: N802
    global _init_count
    if _init_count <= 0:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)
    _init_count -= 1


def nvmlErrorString(result: int) -> str:  # noqa: N802
    return _STRINGS.get(result, "Unknown Error")


def nvmlSystemGetDriverVersion() -> str:  # noqa: N802
    if _init_count <= 0:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)
    return "550.54.15"


def nvmlDeviceGetCount() -> int:  # noqa: N802
    if _init_count <= 0:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)
    return len(_devices())


def nvmlDeviceGetHandleByIndex(index: int) -> _Handle:  # noqa: N802
    """NVML: INVALID_ARGUMENT for an index out of range, NO_PERMISSION for a GPU the caller may not use,
    GPU_IS_LOST for a GPU that has fallen off the bus."""
    if _init_count <= 0:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)
    devices = _devices()
    if not 0 <= index < len(devices):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    if devices[index].get("no_permission"):
        raise NVMLError(NVML_ERROR_NO_PERMISSION)
    handle = _Handle(index)
    _device(handle, "nvmlDeviceGetHandleByIndex")
    return handle


def nvmlDeviceGetTotalEccErrors(handle: _Handle, errorType: int, counterType: int) -> int:  # noqa: N802, N803
    dev = _device(handle, "nvmlDeviceGetTotalEccErrors")
    if errorType not in (NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_MEMORY_ERROR_TYPE_UNCORRECTED) or counterType not in (
            NVML_VOLATILE_ECC, NVML_AGGREGATE_ECC):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    counter = "volatile" if counterType == NVML_VOLATILE_ECC else "aggregate"
    kind = "uncorrected" if errorType == NVML_MEMORY_ERROR_TYPE_UNCORRECTED else "corrected"
    return int(dev.get(f"ecc_{counter}_{kind}", 0))


def nvmlDeviceGetRetiredPagesPendingStatus(device: _Handle) -> int:  # noqa: N802
    """NVML_FEATURE_ENABLED (1) when pages are waiting to be retired at the next reattach, else DISABLED (0)."""
    return NVML_FEATURE_ENABLED if _device(device, "nvmlDeviceGetRetiredPagesPendingStatus").get(
        "retired_pending") else NVML_FEATURE_DISABLED


def nvmlDeviceGetRemappedRows(device: _Handle) -> tuple[int, int, int, int]:  # noqa: N802
    """(corrRows, uncRows, isPending, failureOccurred)."""
    rows = [int(x) for x in _device(device, "nvmlDeviceGetRemappedRows").get("remapped", [0, 0, 0, 0])]
    return rows[0], rows[1], rows[2], rows[3]


def nvmlDeviceGetComputeRunningProcesses(handle: _Handle) -> list[_ProcessInfo]:  # noqa: N802
    procs = _device(handle, "nvmlDeviceGetComputeRunningProcesses").get("procs", [])
    return [_ProcessInfo(pid=int(p["pid"]), usedGpuMemory=p.get("used")) for p in procs]


def nvmlDeviceGetUtilizationRates(handle: _Handle) -> _Utilization:  # noqa: N802
    dev = _device(handle, "nvmlDeviceGetUtilizationRates")
    return _Utilization(gpu=int(dev.get("util", 0)), memory=int(dev.get("mem_util", 0)))


def nvmlDeviceGetClockInfo(handle: _Handle, type: int) -> int:  # noqa: N802, A002 - pynvml's signature
    dev = _device(handle, "nvmlDeviceGetClockInfo")
    if type not in (NVML_CLOCK_GRAPHICS, NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_CLOCK_VIDEO):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return int(dev.get("sm_clock", 1410)) if type == NVML_CLOCK_SM else int(dev.get("clocks", {}).get(str(type), 0))
