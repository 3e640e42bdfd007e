"""Where each training process spends its time, for the slow-node search: `py-spy record` of every
rank at once for a few seconds (non-blocking, idle samples included), each sample of the main
thread counted as waiting when its stack is inside a collective (DDP's backward included: the
gradient all-reduce runs there). In a lock-step job the slowest rank waits least: its peers wait for
it. Launchers (torchrun's agent) and workers (the DataLoader's) are no ranks and are left out."""

from __future__ import annotations

import re
import subprocess
import tempfile
import time
from pathlib import Path

from orchestrator.agent.dump import READ_TIMEOUT_S, descendants, pyspy_exe, read_stat
from orchestrator.contract import ProcessDump
from orchestrator.diagnose.rules import COLLECTIVE, IN_BACKWARD
from orchestrator.timeout import call_with_timeout

DURATION_S = 5
RATE_HZ = 50
GRACE_S = 10.0  # py-spy's own start and exit, beyond the duration
# no rank: a launcher (torchrun's agent, DeepSpeed's, Accelerate's), told by the outermost frames
# (a rank's main() wrapped in torch's @record, or calling accelerate every step, is still a rank;
# so is one started by torch.multiprocessing.spawn) ...
LAUNCHER = re.compile(r"\(torchrun:|torch/distributed/(?:run|launch)\.py|accelerate/commands/|"
                      r"deepspeed/launcher/")
ROOT_FRAMES = 4
# ... or a worker (the DataLoader's, compile workers), by any frame; any other process that neither
# waits in a collective nor runs torch's code nor has torch loaded is left out too (a much slowed
# rank may not wait in a collective in the whole profile: its peers wait for it)
WORKER = re.compile(r"torch/utils/data/_utils/worker|torch/_inductor/compile_worker|"
                    r"concurrent/futures/process\.py")
THREAD = re.compile(r"^thread \(\w+\): (?P<name>[^;]*);")
TORCH_FRAME = re.compile(r"\((?:[^()]*/)?torch/")
# a slowed rank can also miss torch's frames in every sample (its forward a few ms of a long step);
# then torch loaded in its memory tells it from a helper, unless it is a multiprocessing child (a
# rank's fork or spawn: it maps the rank's libraries too)
# a frame of a save or an eval (the function's name): a profile that caught one says nothing of the
# pace (rank 0 saving while the others wait in a barrier waits least, and is not slow)
PAUSE_FRAME = re.compile(r"(?:^|;)[^;(]*(?:save|checkpoint|serializ|eval|validation)[^;(]*\(",
                         re.IGNORECASE)
MP_CHILD = re.compile(r"multiprocessing/(?:spawn|popen_fork|forkserver)\.py|_bootstrap "
                      r"\((?:[^()]*/)?multiprocessing/process\.py")


def count(raw: str) -> tuple[int, int, bool]:
    """(samples, waiting samples, no rank: a launcher or a worker) from py-spy's raw (collapsed)
    output: a line a stack, `frame;frame;... N`, with `thread (TID): NAME;` first under --threads.
    Only the main thread counts when threads are named (a loader or logging thread's samples say
    nothing of the step)."""
    rows = main_rows(raw)
    samples = sum(n for _, n in rows)
    waiting = sum(n for s, n in rows if COLLECTIVE.search(s) or IN_BACKWARD.search(s))
    roots = [";".join(THREAD.sub("", s).split(";")[:ROOT_FRAMES]) for s, _ in rows]
    return samples, waiting, (any(LAUNCHER.search(r) for r in roots)
                              or any(WORKER.search(s) for s, _ in rows))


def main_rows(raw: str) -> list[tuple[str, int]]:
    """(stack, samples) of the main thread (of every thread when threads are not named)."""
    rows = []
    for line in raw.splitlines():
        stack, _, n = line.rpartition(" ")
        if stack and n.isdigit():
            rows.append((stack, int(n)))
    named = [(s, n) for s, n in rows if (m := THREAD.match(s)) and m["name"] == "MainThread"]
    return named or rows


def pausing(raw: str) -> int:
    """The main thread's samples in a save or an eval."""
    return sum(n for s, n in main_rows(raw) if PAUSE_FRAME.search(THREAD.sub("", s)))


def rank_counts(raw: str, torch_loaded: bool = False) -> tuple[int, int] | None:
    """(samples, waiting samples) of a rank's profile; None for a process that is no rank."""
    samples, waiting, other = count(raw)
    if not samples or other:
        return None
    if waiting or TORCH_FRAME.search(raw) or (torch_loaded and not MP_CHILD.search(raw)):
        return samples, waiting
    return None


def torch_mapped(pid: int) -> bool:
    """Whether libtorch is in the process's memory map (False: gone, or unreadable in time)."""
    done, hit = call_with_timeout(lambda: "libtorch" in Path(f"/proc/{pid}/maps").read_text(),
                                  READ_TIMEOUT_S)
    return bool(done and hit is True)


def left_out(raw: str, err: str) -> str:
    """Why a process's profile counts as no rank (said in the answer: a node whose answer holds no
    rank is named with these reasons, never silently)."""
    samples, waiting, other = count(raw)
    if not samples:
        tail = err.strip().splitlines()[-1:] if err.strip() else []
        return "py-spy recorded no sample" + (f" ({tail[0][:160]})" if tail else "")
    if other:
        return f"a launcher or a worker ({samples} samples)"
    return f"{samples} samples, none in a collective or in torch's code"


def profile_processes(pids: list[int], duration_s: int = DURATION_S
                      ) -> tuple[list[ProcessDump], list[str]]:
    """Every live process under `pids` sampled at once; those py-spy could read that are ranks (no
    launcher or worker, and some time in a collective or in torch's code), with their sample
    counts (none where py-spy is missing), and a line for each process left out, saying why."""
    exe = pyspy_exe()
    if not exe:
        return [], ["py-spy is not installed"]
    procs = [(p, st) for p in descendants(pids) if (st := read_stat(p)) and st[0] not in "ZX"]
    records, dropped = [], []
    with tempfile.TemporaryDirectory(prefix="orch-profile-") as tmp:
        running = []
        for pid, _ in procs:
            out, err = Path(tmp) / f"{pid}.txt", Path(tmp) / f"{pid}.err"
            argv = [exe, "record", "--pid", str(pid), "--duration", str(duration_s), "--rate",
                    str(RATE_HZ), "--format", "raw", "--nonblocking", "--idle", "--threads",
                    "--output", str(out)]
            with err.open("wb") as errf:
                running.append((pid, out, err, subprocess.Popen(  # noqa: S603
                    argv, stdout=subprocess.DEVNULL, stderr=errf)))
        deadline = time.monotonic() + duration_s + GRACE_S
        for (pid, out, err, proc), (_, st) in zip(running, procs, strict=True):
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                dropped.append(f"pid {pid}: py-spy did not finish in {duration_s + GRACE_S:.0f} s")
                continue
            raw = out.read_text(errors="replace") if out.is_file() else ""
            if (got := rank_counts(raw, torch_mapped(pid))) is None:
                dropped.append(f"pid {pid}: {left_out(raw, err.read_text(errors='replace'))}")
                continue
            records.append(ProcessDump(pid=pid, state=st[0], ppid=st[1], samples=got[0],
                                       waiting=got[1], pausing=pausing(raw)))
    return records, dropped
