"""Node health checks before training starts: GPUs through NVML, a filesystem probe, user checks.

Each check returns a CheckRecord; any failure makes the agent exit with PREFLIGHT_EXIT and a reason
the diagnosis engine recognises (the GPU reasons carry the same words CUDA uses).
"""

from __future__ import annotations

import importlib
import json
import os
import re
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any

from orchestrator.contract import CheckRecord, SegmentPaths
from orchestrator.model import SegmentSpec
from orchestrator.timeout import call_with_timeout


def _bad(name: str, detail: str) -> CheckRecord:
    return CheckRecord(name=name, ok=False, detail=detail)


class FakeNvml:
    """Reads GPU health from a JSON file (ORCH_FAKE_NVML): {"nodeX": [{"ecc_uncorrected": 2},
    ...]}."""

    def __init__(self, path: str, node: str):
        data = json.loads(Path(path).read_text())
        self.gpus: list[dict[str, int]] = data.get(node, data.get("*", []))


def check_gpus(node: str, env: dict[str, str] | None = None, nvml: str = "pynvml") -> CheckRecord:
    """`nvml`: the module imported for NVML (a test names one that is not there, as on a node
    without it)."""
    fake = (env or {}).get("ORCH_FAKE_NVML") or os.environ.get("ORCH_FAKE_NVML")
    if fake:
        gpus = FakeNvml(fake, node).gpus
    else:
        try:
            pynvml = importlib.import_module(nvml)
            pynvml.nvmlInit()
        except Exception:  # noqa: BLE001 - no driver, no library, no GPU: all mean "no NVML"
            return CheckRecord(name="gpu", ok=True, detail="skipped: no NVML")
        gpus = _read_nvml(pynvml)
    for i, g in enumerate(gpus):
        if g.get("lost"):
            return _bad("gpu", f"GPU {i}: Unable to determine the device handle for GPU (lost)")
        if g.get("ecc_uncorrected", 0) > 0:
            return _bad("gpu", f"GPU {i}: {g['ecc_uncorrected']} volatile uncorrectable ECC "
                               "error(s)")
        if g.get("pending_retired", 0) or g.get("pending_remap", 0):
            return _bad("gpu", f"GPU {i}: uncorrectable memory error pending page retirement/row "
                               "remap")
    return CheckRecord(name="gpu", ok=True, detail=f"{len(gpus)} GPU(s) healthy")


def _read_nvml(nv: Any) -> list[dict[str, int]]:
    out = []
    for i in range(nv.nvmlDeviceGetCount()):
        try:
            h = nv.nvmlDeviceGetHandleByIndex(i)
        except Exception:  # noqa: BLE001
            out.append({"lost": 1})
            continue
        g: dict[str, int] = {}
        for key, call in (
            ("ecc_uncorrected", lambda h=h: nv.nvmlDeviceGetTotalEccErrors(
                h, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC)),
            ("pending_retired", lambda h=h: int(nv.nvmlDeviceGetRetiredPagesPendingStatus(h))),
            ("pending_remap", lambda h=h: int(nv.nvmlDeviceGetRemappedRows(h)[2])),
        ):
            try:
                g[key] = int(call())
            except Exception:  # noqa: BLE001 - not supported on this GPU
                pass
        out.append(g)
    return out


def probe_dir(path: Path, timeout: float) -> CheckRecord:
    def io() -> None:
        path.mkdir(parents=True, exist_ok=True)
        f = path / f".orch-probe-{uuid.uuid4().hex}"
        f.write_bytes(b"probe")
        if f.read_bytes() != b"probe":
            raise OSError("read back different bytes")
        f.unlink()

    done, value = call_with_timeout(io, timeout)
    if not done:
        return _bad("fs", f"ORCH-FS-PROBE FAILED: {path} did not answer within {timeout:.0f}s")
    if isinstance(value, BaseException):
        return _bad("fs", f"ORCH-FS-PROBE FAILED: {path}: {value}")
    return CheckRecord(name="fs", ok=True, detail=f"{path} writable")


def run_command(argv: tuple[str, ...], timeout: float) -> CheckRecord:
    name = f"check {' '.join(argv)[:80]}"
    try:
        res = subprocess.run(list(argv), capture_output=True, timeout=timeout,
                             check=False)  # noqa: S603
    except subprocess.TimeoutExpired:
        return _bad(name, f"{name} timed out after {timeout:.0f}s")
    except OSError as exc:
        return _bad(name, f"{name} could not start: {exc}")
    if res.returncode != 0:
        out = (res.stdout + res.stderr).decode(errors="replace").strip().splitlines()[-1:] or [""]
        return _bad(name, f"{name} exited {res.returncode}: {out[0][:200]}")
    return CheckRecord(name=name, ok=True, detail="ok")


NHC_FAILED = re.compile(r"Health check failed:\s*(.*)")


def check_nhc(log: Path, timeout: float, nhc: str | None = None) -> CheckRecord | None:
    """LBNL Node Health Check, the site's own checks, where installed (None where not).
    MARK_OFFLINE=0: the orchestrator reports and excludes, NHC does not drain the node itself. Only
    NHC's own verdict ("Health check failed: ...") fails the node; NHC that cannot run (no
    permission, no config, our timeout) is unknown."""
    nhc = nhc or shutil.which("nhc", path=f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin")
    if nhc is None:
        return None
    argv = [nhc, "MARK_OFFLINE=0", f"TIMEOUT={max(1, int(timeout) - 2)}", f"LOGFILE={log}"]
    try:
        res = subprocess.run(argv, capture_output=True, timeout=timeout, check=False)  # noqa: S603
    except subprocess.TimeoutExpired:
        return CheckRecord(name="nhc", ok=True, unknown=True,
                           detail=f"nhc did not finish within {timeout:.0f}s")
    except OSError as exc:
        return CheckRecord(name="nhc", ok=True, unknown=True, detail=f"nhc could not start: {exc}")
    out = (res.stdout + res.stderr).decode(errors="replace")
    if res.returncode == 0:
        return CheckRecord(name="nhc", ok=True, detail="node health check passed")
    if m := NHC_FAILED.search(out):
        return _bad("nhc", f"ORCH-NHC FAILED: {m.group(1).strip()[:300]}")
    last = (out.strip().splitlines() or [""])[-1]
    return CheckRecord(name="nhc", ok=True, unknown=True,
                       detail=f"nhc exited {res.returncode}: {last[:200]}")


def run_all(spec: SegmentSpec, node: str) -> list[CheckRecord]:
    records = SegmentPaths(Path(spec.segment_dir)).nodes
    results = [check_gpus(node, dict(spec.env)), probe_dir(records, spec.preflight_timeout_s)]
    if (spec.preflight_nhc == "auto"
        and (nhc := check_nhc(records / f"nhc-{node}.log", spec.preflight_timeout_s))):
        results.append(nhc)
    results += [run_command(c, spec.preflight_timeout_s) for c in spec.preflight_commands]
    return results
