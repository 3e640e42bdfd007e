"""Signatures are data: an ordered table of (pattern -> cause, blame, cascade).

The first matching signature names a line's cause. `blame` says the line implicates the node it
was printed on (or, with `node_group`, the node named inside the line). `cascade` marks errors that
healthy peers print when someone else failed first: evidence, never the root cause when a
non-cascade error exists. Users' own signatures (config) are tried first."""

from __future__ import annotations

from collections.abc import Sequence

from orchestrator.diagnose.events import EVENTS
from orchestrator.diagnose.platforms import PLATFORMS
from orchestrator.diagnose.services import LATE, PYTHON_EXCEPTION, SERVICES
from orchestrator.diagnose.signature import Signature
from orchestrator.model import Cause
from orchestrator.patterns import catastrophic, python_unbounded
from orchestrator.settings import UserSignature

__all__ = ["BUILTIN", "Signature", "build_table", "table_for"]




C = Cause

# Order matters: specific hardware text first, generic Python exceptions last.
BUILTIN: tuple[Signature, ...] = EVENTS + PLATFORMS + SERVICES + (
    Signature("orch_fs_probe", r"ORCH-FS-PROBE FAILED", C.FILESYSTEM,
              source="the agent's filesystem probe"),
    Signature(
        "cuda_ecc",
        r"uncorrectable ECC error|cudaErrorECCUncorrectable|CUDA_ERROR_ECC_UNCORRECTABLE"
        r"|ECC uncorrectable|double bit ECC error|DBE \(double bit error\)|uncorrectable "
        r"(?:DRAM|memory|SRAM) error|row.?remap(?:ping)? failure", C.GPU_ECC, blame=True,
        source="CUDA runtime error strings; BigScience tr1-13B log (CONTEXT.md)",
    ),
    Signature(
        "xid_ecc",
        r"NVRM: Xid \([^)]*\): (?:48|92|94|95)\b",
        C.GPU_ECC,
        blame=True,
        source="NVIDIA Xid catalog: 48 DBE, 63/64 row remap, 94/95 contained/uncontained ECC",
    ),
    Signature(
        "gpu_lost",
        r"fallen off the bus|NVRM: Xid \([^)]*\): (?:79|74|119|120|61|62)\b|GPU is "
        r"lost|cudaErrorDevicesUnavailable|CUDA error: unspecified launch "
        r"failure|NVLink.*(?:fatal|error)|RmInitAdapter failed|Unable to determine the device "
        r"handle for GPU|GPU requires reset|cudaErrorLaunchFailure", C.GPU_LOST, blame=True,
        source="NVIDIA Xid 79/74/119; nvidia-smi 'Unable to determine the device handle'",
    ),
    Signature(
        "gpu_unavailable",
        r"all CUDA-capable devices are busy or unavailable|CUDA-capable device\(s\) is/are busy or "
        r"unavailable|invalid device ordinal|cudaErrorInvalidDevice|no CUDA-capable device is "
        r"detected|synStatus=\d+ \[[^\]]*\] Device acquire failed", C.GPU_LOST, blame=True,
        source="CUDA runtime: a GPU held by another process or missing on this node",
    ),
    Signature("nvml_mismatch",
              r"Failed to initialize NVML: (?:Driver/library version mismatch|Unknown Error)"
              r"|NVML library version mismatch|Driver/library version mismatch|No devices were "
              r"found|nvml: \d+ GPUs? visible, \d+ expected",
              C.GPU_LOST, blame=True, source="nvidia-smi / NVML on a node whose driver and library "
                                             "differ"),
    Signature("gpu_mem_held",
              r"Process \d+ has [\d.]+ [GMK]iB memory in use|held by pid \d+ that is not the job's",
              C.GPU_OOM_STARTUP, blame=True, source="PyTorch OOM message lists other processes on "
              "the GPU; the agent's NVML reading"),
    Signature(
        "cuda_oom",
        r"CUDA out of memory|CUDA error: out of memory|OutOfMemoryError: "
        r"(?:CUDA|HIP|XPU)|cudaErrorMemoryAllocation|CUBLAS_STATUS_ALLOC_FAILED|Cuda failure \d* "
        r"?'out of memory'|HIP out of memory|hipErrorOutOfMemory", C.USER_OOM,
        source="PyTorch caching allocator (CUDA, ROCm's HIP, Intel's XPU); BigScience second crash "
               "in barrier()",
    ),
    Signature(
        "node_failure_named",
        r"srun: error: Node failure on (?P<node>[\w.-]+)",
        C.NODE_FAIL,
        blame=True,
        node_group="node",
        source="srun(1) messages",
    ),
    Signature(
        "srun_task_oom",
        r"srun: error: (?P<node>[\w.-]+): tasks? [\d,-]+: Out Of Memory",
        C.HOST_OOM,
        blame=True,
        node_group="node",
        source="srun(1): 'srun: error: NODE: task N: Out Of Memory' (nextflow-io/nextflow#5932)",
    ),
    Signature(
        "srun_task_bus",
        r"srun: error: (?P<node>[\w.-]+): tasks? [\d,-]+: Bus error",
        C.BUS_ERROR,
        blame=True,
        node_group="node",
        source="srun(1): 'srun: error: NODE: task N: Bus error' (hafs-community/HAFS#101)",
    ),
    Signature(
        "srun_task_segv",
        r"srun: error: (?P<node>[\w.-]+): tasks? [\d,-]+: Segmentation fault",
        C.SEGFAULT,
        blame=True,
        node_group="node",
        source="srun(1) task exit report",
    ),
    Signature("slurm_mem_limit",
              r"exceeded (?:job |step )?memory limit \(\d+ > \d+\),? being killed|Exceeded job "
              r"memory limit$|srun: Exceeded (?:job|step) memory limit",
              C.HOST_OOM, source="slurmstepd: 'Job N exceeded memory limit (X > Y), being killed' "
                                 "(bcbio#2393)"),
    Signature("unkillable",
              r"(?:STEPD TERMINATED ON |node\(s\)=)(?P<node>[\w.-]+)(?: AT \S+ DUE TO JOB NOT "
              r"ENDING WITH SIGNALS|: Kill task failed)|Kill task failed|UnkillableStep|DUE TO JOB "
              r"NOT ENDING WITH SIGNALS", C.NODE_FAIL, blame=True, node_group="node",
              source="slurmstepd/slurmctld: processes that did not end with signals "
                     "(UnkillableStepTimeout)"),
    Signature("ray_node_died_ip",
              r"(?:node it was running on is dead or unavailable\.\s*|^)Node IP: "
              r"(?P<node>\d+\.\d+\.\d+\.\d+), node ID: [0-9a-f]{16,}",
              C.NODE_FAIL, blame=True, node_group="node",
              source="Ray core worker: 'Task failed because the node it was running on is dead or "
              "unavailable. Node IP: X, node ID: Y' (normal_task_submitter.cc; one line or two)"),
    Signature("ray_node_dead",
              r"The node with node id: \w+ and (?:ip|address): (?P<node>[\w.-]+)(?: and node name: "
              r"\S+)? has been marked dead",
              C.NODE_FAIL, blame=True, node_group="node",
              source="Ray GCS: 'The node with node id ... has been marked dead because the "
              "detector has missed too many heartbeats' (ray-project/ray#15128)"),
    Signature("job_node_fail", r"\*\*\* (?:JOB|STEP) [\d.]+ ON \S+ CANCELLED AT \S+ DUE TO NODE "
                               r"FAILURE", C.NODE_FAIL,
              cascade=True, source="slurmstepd job cancel banner"),
    Signature("job_timelimit", r"\*\*\* (?:JOB|STEP) [\d.]+ ON \S+ CANCELLED AT \S+ DUE TO TIME "
                               r"LIMIT", C.TIMELIMIT, cascade=True),
    Signature("job_preempted", r"\*\*\* (?:JOB|STEP) [\d.]+ ON \S+ CANCELLED AT \S+ DUE TO "
                               r"PREEMPTION", C.PREEMPTED, cascade=True),
    Signature("job_requeue",
              r"DUE TO JOB REQUEUE|[Rr]equeu(?:e|ing) job \d+|SLURM auto-requeueing|auto-requeue"
              r"|job (?:was |has been )?(?:preempted|requeued)|Requeued job"
              r"|submitit WARNING .*(?:[Pp]reempt|[Rr]equeu)|bypassing sigterm"
              r"|handle_sigusr1|received SIGUSR1|\bRequeue=1 Restarts=[1-9]",
              C.PREEMPTED, cascade=True, source="Slurm requeue banner; Lightning SLURMEnvironment; "
                                                "submitit; `scontrol show job` of a requeued job"),
    Signature("orch_preflight", r"ORCH-PREFLIGHT FAILED", C.NODE_FAIL, blame=True,
              source="the agent's preflight (specific GPU causes match earlier signatures)"),
    Signature(
        "host_oom",
        r"oom[_-]kill event|Out of memory: Killed process|oom-kill:|Killed process \d+ .*total-vm"
        r"|^oom_kill [1-9]\d*$|oom_kill \d+ -> [1-9]"
        r"|Some of your processes may have been killed by the cgroup out-of-memory handler",
        C.HOST_OOM,
        blame=True,
        source="slurmstepd cgroup OOM message; kernel OOM killer",
    ),
    Signature("nccl_ibv_failed", r"NCCL WARN .*\bibv_\w+ failed with error",
              C.NETWORK, blame=True, source="NCCL ibvwrap: 'Call to ibv_poll_cq failed with error "
              "Input/output error' (this host's verbs call failed: its HCA, not a filesystem)"),
    Signature(
        "filesystem",
        r"Stale file handle|Transport endpoint is not connected|Input/output error|Read-only file "
        r"system|LustreError|lustre.*(?:evicted|timeout)|GPFS.*(?:error|unmounted)|ORCH-FS-PROBE "
        r"FAILED|Cannot send after transport endpoint shutdown|Errno 108\b|nfs: server \S+ not "
        r"responding|did not answer a stat within", C.FILESYSTEM,
        source="errno strings ESTALE/ENOTCONN/EIO/EROFS",
    ),
    Signature(
        "watchdog_stuck",
        r"Heartbeat monitor timed out|watchdog thread (?:got|is|was) stuck|watchdog got stuck",
        C.HANG,
        blame=True,
        source="torch ProcessGroupNCCL heartbeat monitor: the rank's watchdog thread is stuck (in "
               "a CUDA call)",
    ),
    Signature(
        "hung_task",
        r"INFO: task \S+ blocked for more than \d+ seconds|blocked for more than \d+ seconds"
        r"|^\s*(?:\S+\s+)?\d+\s+D[lsNL+<]*\s+\S+.*\bpython|uninterruptible sleep"
        # `ps aux`: USER PID %CPU %MEM VSZ RSS TTY STAT ...
        r"|^\s*\S+\s+\d+\s+[\d.]+\s+[\d.]+\s+\d+\s+\d+\s+\S+\s+D[lsNL+<]*\s.*\bpython"
        # not a summary saying none is (`no process in state D`)
        r"|(?<!no process in )(?<!no processes in )(?<!none in )(?<!not in )state D\b",
        C.HANG,
        blame=True,
        source="kernel hung_task detector; ps STAT D (Hugging Face 64-GPU hang, CONTEXT.md)",
    ),
    Signature("cannot_start",
              r"ORCH-AGENT cannot start the training command|: command not found$|can't open file "
              r".*No such file|exec format error|^bash: \S+: (?:No such file or "
              r"directory|Permission denied)$|enroot-switchroot: failed to execute: \S+: No such "
              r"file", C.USER_BUG,
              source="the agent; bash and python when the program or script does not exist; enroot "
                     "when the image has no such program (NVIDIA/pyxis#61, NVIDIA/enroot#177)"),
    # the errno names in capitals only: a path such as /scratch/enospc-test is no full disk
    Signature("no_space", r"No space left on device|Disk quota exceeded|(?-i:\bENOSPC\b|\bEDQUOT\b)"
              r"|No usable temporary directory found", C.FILESYSTEM,
              source="errno ENOSPC/EDQUOT: a full /dev/shm, shared filesystem or quota is the "
              "job's; a node-local disk full on one node is the node's (classify tells them "
              "apart)"),
    # a kernel's own crash (the watchdog re-raises it: `... exception: CUDA error: an illegal
    # memory access ...`): the job's on every node, one rank's a strike (one_rank_cuda_crash)
    Signature("cuda_illegal_access", r"(?:CUDA error|CUDA_ERROR_ILLEGAL_(?:ADDRESS|INSTRUCTION)):"
              r" an illegal (?:memory access|instruction) was encountered|CUDA error: misaligned "
              r"address|cudaErrorIllegal(?:Address|Instruction)|Memory access fault by GPU "
              r"node-\d+ \(Agent handle: \S+\) on address",
              C.USER_BUG, blame=True, source="CUDA runtime error strings (cudaGetErrorString) as "
                                             "torch raises them; ROCm's HSA runtime page fault"),
    Signature("segfault", r"Segmentation fault|\bSIGSEGV\b|signal 11\b|Signals\.SIGSEGV|"
              r"return code = -11\b|exitcode\s*:\s*-11\b", C.SEGFAULT, blame=True),
    Signature("bus_error", r"Bus error|\bSIGBUS\b|signal 7\b|Signals\.SIGBUS|return code = "
                           r"-7\b|exitcode\s*:\s*-7\b", C.BUS_ERROR, blame=True),
    Signature(
        "nccl_timeout",
        r"Watchdog caught collective operation timeout|collective operation "
        r"timeout|NCCL.*[Tt]imeout|ProcessGroupNCCL.*timed? ?out|Timed out waiting for .* from "
        r"rank|socket timeout|DistBackendError", C.NCCL_TIMEOUT, cascade=True,
        source="torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp watchdog",
    ),
    Signature(
        "nccl_connect_peer",
        r"Connect to (?P<peer>\d+\.\d+\.\d+\.\d+)<\d+> (?:failed|returned \d+\()",
        C.NETWORK,
        cascade=True,
        peer_group="peer",
        source="NCCL socket.h 'Connect to IP<port> failed : Connection refused' (the peer is not "
               "listening), socket.cc 'socketPollConnect: Connect to IP<port> returned 113(No "
               "route to host)'",
    ),
    Signature(
        "nccl_ib_peer",
        r"NET/IB\w* ?: Got completion (?:from peer (?P<peer>\d+\.\d+\.\d+\.\d+)<\d+> )?with "
        r"(?:status|error)", C.NETWORK, cascade=True, peer_group="peer",
        source="NCCL ib_plugin 'Got completion from peer IP<port> with status=12 ...' "
               "(NVIDIA/nccl#1405)",
    ),
    Signature(
        "network",
        r"NET/IB ?: .*(?:error|failed)|IBV_WC_\w+|ibv_\w+ failed|Connection reset by "
        r"peer|Connection refused|Connection closed by (?:remote )?peer"
        r"|ncclRemoteError|ncclSystemError|NCCL WARN .*socket|Broken pipe|No route to host"
        r"|NCCL error in: .*(?:unhandled system error|remote process exited|network error)",
        C.NETWORK,
        cascade=True,
        source="NCCL net plugin warnings; errno ECONNRESET/EPIPE",
    ),
    Signature("rank_exit", r"failed \(exitcode: [1-9]\d*\) local_rank: \d+", C.UNKNOWN, blame=True,
              kind="crash",
              source="torchrun 'failed (exitcode: 1) local_rank: N (pid: P) of binary'"),
    Signature("task_exit", r"srun: error: (?P<node>[\w.-]+): tasks? [\d,-]+: Exited with exit code "
              r"[1-9]", C.UNKNOWN, blame=True, kind="crash", node_group="node",
              source="srun(1): 'srun: error: NODE: task N: Exited with exit code 1'"),
    Signature("elastic_child", r"ChildFailedError|torch\.distributed\.elastic\.multiprocessing\.err"
                               r"ors", C.UNKNOWN, cascade=True),
    Signature(
        "dist_cascade",
        r"DistStoreError|DistNetworkError|RendezvousTimeoutError|RendezvousClosedError|TCPStore|"
        r"Failed to recv|recvValue|NCCL communicator was aborted|ncclCommAbort|Some NCCL "
        r"operations have failed or timed out|ProcessGroupNCCL.*(?:abort|Timeout at NCCL "
        r"work)|NCCL error.*remote process exited|exitcode\s*: -6\b|Signal 6 \(SIGABRT\)"
        r"|NCCL operation \w+\(\) failed: (?:remote process exited|unhandled system error)",
        C.NCCL_TIMEOUT,
        cascade=True,
        source="torch.distributed store/rendezvous/elastic errors printed after a peer failed",
    ),
    Signature("sigkill",
              r"srun: error: (?P<node>[\w.-]+): tasks? [\d,-]+: "
              r"Killed$|exitcode\s*:\s*-9\b|Signals\.SIGKILL|died with <Signals\.SIGKILL|killed by "
              r"signal 9\b|tasks? [\d,-]+: Killed$|^Killed$|signal: killed$|return code = -9\b",
              C.HOST_OOM, blame=True, kind="killed", node_group="node",
              source="torchrun 'exitcode: -9', bash 'Killed', srun 'task N: Killed': SIGKILL with "
                     "no error of its own"),
    # Where a traceback was raised: the training loop was running (an OOM there is not a start-up
    # fault).
    Signature("training_underway",
              r"in (?:training_step|train_step|_inner_training_loop|evaluation_loop|evaluate|"
              r"_maybe_log_save_evaluate|gather_for_metrics|optimizer_step|_exec_backward_pass|"
              r"train_batch|validation_step)\b|^\s*(?:training_step|train_step|evaluate|"
              r"evaluation_loop|validation_step) \(",
              C.UNKNOWN, kind="phase", source="PyTorch/HF/Lightning/DeepSpeed training-loop frames "
                                              "in tracebacks"),
    Signature("nan", r"loss is nan|nan loss|Detected (?:inf|nan)|FloatingPointError|found "
              r"NaN|non-finite loss|loss scale already at minimum", C.USER_BUG),

) + LATE + (PYTHON_EXCEPTION,)


def build_table(user: list[Signature] | tuple[Signature, ...] = ()) -> tuple[Signature, ...]:
    return tuple(user) + BUILTIN


def table_for(user: Sequence[UserSignature]) -> tuple[Signature, ...]:
    """The table for a run: the config's own signatures first, then the built-in ones. A user
    pattern that can backtrack catastrophically, or that would run on Python's engine with more than
    one unbounded repeat (settings refuse both; a config built without validation may hold one), is
    left out."""
    safe = [s for s in user if not (catastrophic(s.pattern) or python_unbounded(s.pattern))]
    return build_table([Signature(s.name, s.pattern, s.cause, s.blame, s.cascade, source="config",
                                  linear=True) for s in safe])
