"""Whose fault a segment's root error is, by DECISIONS.md (docs/CAUSES.md): a node's, the job's, the
shared environment's or nobody's, and the rule that says so. Pure functions of the matches."""

from __future__ import annotations

import re

from orchestrator.diagnose.judge import held_by_the_job, local_disk, refine_oom
from orchestrator.diagnose.owner import foreign_hog
from orchestrator.diagnose.verdicts import Context
from orchestrator.evidence import Match, NodeEvidence
from orchestrator.model import Cause, Owner

# /dev/shm, NCCL's shm segments, PyTorch's shared-memory tensors ("unable to write to file
# </torch_...>")
SHM_FULL = re.compile(r"\s100%\s+/dev/shm\s*$")  # a `df` row of a full /dev/shm
SHM_USE = re.compile(r"\s(\d{1,3})%\s+/dev/shm\s*$")
SHM = re.compile(r"/dev/shm|\bshm\b|shared memory|</torch_\d+", re.IGNORECASE)
# The CUDA runtime's own error, not PyTorch's allocator ("CUDA out of memory. Tried to allocate"):
# at start-up, in a barrier or NCCL init, it means the GPU was unusable (BigScience tr1-13B,
# CONTEXT.md)
RUNTIME_OOM = re.compile(r"CUDA error: out of memory|cudaErrorMemoryAllocation|Cuda failure \d* "
                         r"?'out of memory'")
# A kernel's own crash on the device (PyTorch, NCCL's "Cuda failure", the driver API's names)
CUDA_CRASH = re.compile(r"illegal (?:memory access|instruction)|unspecified launch failure|"
                        r"cudaErrorIllegal(?:Address|Instruction)|cudaErrorLaunchFailure|"
                        r"CUDA_ERROR_ILLEGAL_(?:ADDRESS|INSTRUCTION)|CUDA_ERROR_LAUNCH_FAILED|"
                        r"Memory access fault by GPU")  # ROCm's (HSA) page fault
# a checkpoint the job was writing (`.../checkpoint-2/global_step2/...`, `iter_0001000`, `step-500`)
CKPT_WRITE = re.compile(r"/(?:checkpoint|ckpt|global_step|iter_|step[-_])[\w.-]*/", re.IGNORECASE)
# the runtime's own words for it (`unspecified launch failure`, `hipErrorLaunchFailure`)
LAUNCH_FAILURE = re.compile(r"launch[ _]?failure", re.IGNORECASE)
# Positive evidence that a rank waits in the program's own machinery (a queue, a lock, a data
# loader), not in an unknown frame: an unknown frame outside the collective is the node's (the
# stuck-rank rule)
PROGRAM_WAIT = re.compile(r"queue|_try_get_data|_get_data|dataloader|\block\b|acquire|Condition|"
                          r"Semaphore|\bwait \((?:\S*/)?threading|\bjoin \(|selectors|\bselect \(|"
                          r"\b_?poll \(|Barrier \((?:\S*/)?threading", re.IGNORECASE)
# DistributedDataParallel's ranks wait for the gradient all-reduce inside autograd's backward
IN_BACKWARD = re.compile(r"_engine_run_backward|\bbackward \(torch/autograd")
COLLECTIVE = re.compile(r"all_?reduce|barrier|broadcast|all_?gather|reduce_scatter|all_to_all|"
                        r"_?wait\b.*distributed|distributed_c10d|c10d|nccl|gloo|monitored_barrier|"
                        r"recv|send", re.IGNORECASE)
DEVICE_FRAME = re.compile(r"cuda|synchron|nccl|cudnn|cublas|driver|ioctl|\.so\b|<native>|write|"
                          r"flush|fsync|read\b|open\b|stat\b|os\.|io\.|(?:^|\W)(?:print|emit|log)"
                          r"\w*", re.IGNORECASE)

SYMMETRIC = frozenset({Cause.SEGFAULT, Cause.BUS_ERROR, Cause.HOST_OOM, Cause.USER_BUG,
                       Cause.NETWORK,
                       Cause.NCCL_TIMEOUT, Cause.HANG, Cause.FILESYSTEM, Cause.USER_OOM})
JOB_WHEN_SYMMETRIC = frozenset({Cause.SEGFAULT, Cause.BUS_ERROR, Cause.HOST_OOM, Cause.USER_BUG,
                                Cause.USER_OOM, Cause.FILESYSTEM})

Judged = tuple[Cause, list[str], Owner, str, str]
# generic failures a node's own hardware report explains (a crash next to an EDAC error, an I/O
# error on NVMe)
EXPLAINABLE = frozenset({Cause.USER_BUG, Cause.SEGFAULT, Cause.BUS_ERROR, Cause.FILESYSTEM,
                         Cause.HOST_OOM, Cause.UNKNOWN})


def judge_root(cause: Cause, best: Match, culprits: list[str], symmetric: bool,
               hw: dict[str, Cause],
                nodes: list[NodeEvidence], ctx: Context, same_text: bool = False) -> Judged:
    """Whose fault the root is, by DECISIONS.md: (cause, culprits, owner, rule, note). `same_text`:
    every culprit printed the same line (digits aside)."""
    # only the failing host's own report explains its failure
    explained = [h for h in culprits if h in hw]
    if cause in (Cause.USER_OOM, Cause.GPU_OOM_STARTUP):
        return judge_oom(cause, best, culprits, symmetric, nodes, ctx)
    if cause in (Cause.GPU_ECC, Cause.GPU_LOST, Cause.NODE_FAIL):
        return judge_hardware(cause, best, culprits, symmetric, hw, nodes, ctx, same_text)
    if explained and not symmetric and cause in EXPLAINABLE:
        hw_cause = hw[explained[0]]
        new = hw_cause if hw_cause != Cause.UNKNOWN else (
            cause if cause in (Cause.SEGFAULT, Cause.BUS_ERROR) else Cause.NODE_FAIL)
        return new, explained, Owner.NODE, "node_reports_hardware", (
            f"{cause.value} on {','.join(explained)}, whose own hardware report explains it")
    if cause == Cause.FILESYSTEM:
        return judge_fs(best, culprits, symmetric, nodes)
    if symmetric and cause in JOB_WHEN_SYMMETRIC:
        return (cause, [], Owner.JOB, "same_on_every_node",
                f"the same {cause.value} on every node: the job's, not a node's")
    if symmetric and cause in SYMMETRIC:
        # every watchdog fired: a collective timeout
        cause = Cause.NCCL_TIMEOUT if cause == Cause.HANG else cause
        return (cause, [], Owner.NOBODY, "same_on_every_node",
                f"the same {cause.value} on every node: nobody stands out")
    if cause == Cause.BUS_ERROR and SHM.search(best.text) and sum(
            bool(SHM_FULL.search(t)) for n in nodes for _, t in n.tail) > 1:  # shm full on 2+ hosts
        return (cause, [], Owner.JOB, "shared_memory_exhausted", "a DataLoader worker's bus error "
                "in shared memory (/dev/shm too small for its workers): it will happen again")
    if (weak := weak_node_error(cause, best, culprits, nodes, ctx)) is not None:
        return weak
    if cause == Cause.HOST_OOM and culprits and (hog := foreign_hog(culprits, nodes)):
        return cause, culprits, Owner.NODE, "another_process_held_the_memory", (
            f"the kernel killed the job's rank on {','.join(culprits)} while another process there "
            f"held the memory ({hog}): the node's, not the job's")
    if cause in (Cause.USER_BUG, Cause.HOST_OOM):
        rule = "program_error" if cause == Cause.USER_BUG else "job_memory"
        return cause, [], Owner.JOB, rule, ""
    if cause == Cause.NETWORK:
        return cause, culprits, Owner.NODE, "hca_error", ""
    if cause == Cause.HANG:
        return cause, culprits, Owner.NODE, "stuck_process", ""
    return cause, culprits, Owner.NODE_SUSPECT, "one_off_crash", ""


def judge_hardware(cause: Cause, best: Match, culprits: list[str], symmetric: bool,
                   hw: dict[str, Cause], nodes: list[NodeEvidence], ctx: Context,
                   same_text: bool) -> Judged:
    """A GPU, ECC or node failure: the node's, unless every node printed it (the job's own output)
    or it is one rank's launch failure that nothing else explains (a strike)."""
    explained = [h for h in culprits if h in hw]
    if symmetric and best.signature == "gpu_unavailable":
        return Cause.USER_BUG, [], Owner.JOB, "same_on_every_node", (
            "no GPU usable on any node: the job's device settings, not a node")
    if symmetric and same_text and cause != Cause.NODE_FAIL and not explained:
        return cause, [], Owner.JOB, "same_on_every_node", (
            f"the same {cause.value} line on every node at once, and no node's own hardware "
            "report: hardware fails one node at a time, so the line is the job's own output "
            "(or the fleet's): check what the training prints")
    if cause == Cause.GPU_LOST and not explained and lone_launch_failure(best, culprits, nodes,
                                                                         ctx):
        return Cause.USER_BUG, culprits, Owner.NODE_SUSPECT, "one_rank_cuda_crash", (
            f"one rank's CUDA launch failure on {culprits[0]} after progress, no hardware "
            f"message: a strike: {best.text[:120]}")
    if cause == Cause.GPU_LOST and any(hw.get(h) == Cause.GPU_ECC for h in culprits):
        # a generic launch failure on a GPU whose own counters show uncorrectable ECC
        cause = Cause.GPU_ECC
    return (cause, culprits, Owner.NODE, "node_hardware" if cause != Cause.NODE_FAIL
            else "node_failed", "")


def weak_node_error(cause: Cause, best: Match, culprits: list[str], nodes: list[NodeEvidence],
                    ctx: Context) -> Judged | None:
    """What looks like the job's but is one node's, not the job's, and weak: a strike."""
    if cause == Cause.USER_BUG and one_rank_cuda_crash(best, culprits, nodes, ctx):
        return cause, culprits, Owner.NODE_SUSPECT, "one_rank_cuda_crash", f"one rank's CUDA \
crash on {culprits[0]} after progress, no hardware message: a strike: {best.text[:120]}"
    if best.signature == "container_start_failed" and culprits:  # the same image elsewhere started
        return Cause.NODE_FAIL, culprits, Owner.NODE_SUSPECT, "container_failed_on_some_nodes", (
            f"the container could not start on {','.join(culprits)} only: a strike: "
            f"{best.text[:120]}")
    return None


def one_rank_cuda_crash(best: Match, culprits: list[str], nodes: list[NodeEvidence],
                        ctx: Context) -> bool:
    """A CUDA illegal memory access or launch failure on one node's rank after progress: one crash
    that nothing explains is weak evidence against the node, not yet the job's (DECISIONS.md)."""
    progressed = max((n.last_iteration or 0 for n in nodes), default=0) > ctx.start_iteration
    return len(culprits) == 1 and progressed and bool(CUDA_CRASH.search(best.text))


def lone_launch_failure(best: Match, culprits: list[str], nodes: list[NodeEvidence],
                        ctx: Context) -> bool:
    """CUDA's `unspecified launch failure` from one rank only, after progress: a kernel's own
    crash, like an illegal access (several ranks of the node at once: the node)."""
    if not one_rank_cuda_crash(best, culprits, nodes, ctx) or not LAUNCH_FAILURE.search(best.text):
        return False
    ranks = {m.rank for n in nodes for m in n.matches if LAUNCH_FAILURE.search(m.text)}
    hardware = any(m.cause in (Cause.GPU_LOST, Cause.GPU_ECC) and not LAUNCH_FAILURE.search(m.text)
                   for n in nodes for m in n.matches)  # a driver's, a kernel log's report
    return len(ranks) == 1 and not hardware


def judge_oom(cause: Cause, best: Match, culprits: list[str], symmetric: bool,
              nodes: list[NodeEvidence], ctx: Context) -> Judged:
    # a training-loop frame raised it
    underway = any(m.kind == "phase" for n in nodes for m in n.matches)
    at_start = max((n.last_iteration or 0 for n in nodes),
                   default=0) <= ctx.start_iteration and not underway
    if best.signature == "gpu_mem_held" and held_by_the_job(best.text, nodes):
        return Cause.USER_OOM, [], Owner.JOB, "job_cuda_oom", (
            "the one process the OOM message lists is the rank itself: the job's own allocations "
            "filled the GPU")
    if best.signature == "gpu_mem_held" and not symmetric and at_start:
        return Cause.GPU_OOM_STARTUP, culprits, Owner.NODE, "gpu_memory_held", (
            "GPU memory held by another process on " + ",".join(culprits))
    if culprits and not symmetric and at_start and RUNTIME_OOM.search(best.text):
        return Cause.GPU_OOM_STARTUP, culprits, Owner.NODE, "poisoned_gpu", (
            "the CUDA runtime itself ran out of memory at start-up (nothing allocated yet) on "
            + ",".join(culprits))
    if not culprits and not symmetric and at_start:
        return Cause.GPU_OOM_STARTUP, [], Owner.NOBODY, "oom_at_start_unplaced", (
            "CUDA OOM at start-up on ranks no line ties to a host: resubmit (a repeat stops by the "
            "breakers)")
    refined, poisoned, note = refine_oom(nodes, culprits, ctx.recent_hardware, ctx.start_iteration,
                                         underway)
    if poisoned and not symmetric:
        return refined, culprits, Owner.NODE, "poisoned_gpu", note
    return Cause.USER_OOM, [], Owner.JOB, "job_cuda_oom", note


def judge_fs(best: Match, culprits: list[str], symmetric: bool,
             nodes: list[NodeEvidence]) -> Judged:
    if best.signature in ("no_space", "df_full"):
        if SHM.search(best.text):
            return Cause.USER_BUG, [], Owner.JOB, "shared_memory_exhausted", (
                "shared memory (/dev/shm) is full: fewer DataLoader workers or a larger shm size")
        # the culprit's own `df` row (or error) names a node-local filesystem
        local = local_disk(best.text) or any(
            m.signature == "df_full" and m.host in culprits and local_disk(m.text)
            for n in nodes for m in n.matches)
        # /dev/shm full on the culprits only (their `df` rows beside the others'): left over there
        shm = {n.node: int(u.group(1)) for n in nodes for _, t in n.tail
               if (u := SHM_USE.search(t))}
        local = local or bool(culprits) and all(shm.get(c) == 100 for c in culprits) and any(
            v < 100 for v in shm.values())
        # the job's own checkpoint filled it: it would fill the same disk on any node
        own = bool(CKPT_WRITE.search(best.text))
        if not symmetric and culprits and local and not own:
            return Cause.FILESYSTEM, culprits, Owner.NODE, "local_disk_full", (
                f"a node-local disk is full on {','.join(culprits)} only")
        return Cause.FILESYSTEM, [], Owner.JOB, "disk_full", (
            f"no space or quota left where the job writes ({best.text[:120]})")
    return Cause.FILESYSTEM, [], Owner.SHARED, "filesystem_outage", ""
