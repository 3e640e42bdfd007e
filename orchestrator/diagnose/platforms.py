"""Signatures of newer hardware and software stacks: NVLink/NVSwitch fabrics, AMD GPUs, AWS EFA,
UCX, Horovod, JAX's coordination service, TensorFlow, Lustre's metadata servers and `df`. They come
right after the events in the table (diagnose/signatures.py), before the generic transport and
Python-exception patterns that would otherwise read their lines."""

from __future__ import annotations

from orchestrator.diagnose.signature import Signature
from orchestrator.model import Cause as C

PLATFORMS: tuple[Signature, ...] = (
    # NVLink 5 / NVSwitch: Xid 144-150 are NVLink errors; the driver says Fatal or NonFatal. The
    # kernel's report about the node: it makes the node's failure (or its peers' timeouts) its own.
    Signature("nvlink_fatal",
              r"NVRM: Xid \([^)]*\): 1(?:4[4-9]|50), \w+\s+Fatal\b", C.GPU_LOST,
              blame=True, kind="hw",
              source="NVIDIA Xid catalog 144-150; 'Xid 149, NETIR_LINK_EVT  Fatal   XC0 i0 Link "
                     "01' (leptonai/gpud#1160, NVIDIA/open-gpu-kernel-modules#1150)"),
    # The NVSwitch driver's own fatal errors (SXid): an NVLink fabric fault on this node.
    Signature("nvswitch_fatal",
              r"nvidia-nvswitch\d*: SXid \([^)]*\): \d+, (?:Fatal|Non-fatal.*Link \d+ (?:down|"
              r"LTSSM))", C.GPU_LOST, blame=True, kind="hw",
              source="nvswitch driver: 'nvidia-nvswitch2: SXid (PCI:...): 20034, Fatal, Link 14 "
                     "LTSSM Fault Up' (NVIDIA/open-gpu-kernel-modules, src/common/nvswitch)"),
    # CUDA cannot start work until the node's fabric manager has set the NVSwitches up (error 802).
    Signature("fabric_not_ready",
              r"system not yet initialized|cudaErrorSystemNotReady|CUDA_ERROR_SYSTEM_NOT_READY"
              r"|nvidia-fabricmanager(?:\.service)?: .*(?:FAILURE|Failed with result)"
              r"|Failed to bind NVLink SHARP \(NVLS\) Multicast|Fabric State: In Progress"
              r"|nv-fabricmanager\[\d+\]: .*\bfailed with error"
              r"|nvls\.cc:\d+ NCCL WARN Cuda failure (?:1|401)\b", C.GPU_LOST, blame=True,
              source="CUDA error 802 (pytorch/pytorch#35710, aws-samples DLAMI#33); systemd on "
                     "nvidia-fabricmanager (NVIDIA/gpu-operator#356); NCCL NVLS bind "
                     "(pytorch/pytorch#177472, NVIDIA/nccl#1788)"),
    # amdgpu's RAS: uncorrectable errors counted in the memory controller (umc) block are ECC
    Signature("amdgpu_umc_ue", r"amdgpu: \d+ uncorrectable hardware errors? detected in umc block",
              C.GPU_ECC, blame=True, source="amdgpu_ras.c '%ld uncorrectable hardware errors "
                                           "detected in %s block' (umc: the memory controller)"),
    Signature("amdgpu_reset",
              r"amdgpu_job_timedout.*\bring \S+ timeout|\*ERROR\* ring \S+ timeout, signaled"
              r"|amdgpu: GPU reset begin|VRAM is lost due to GPU reset|amdgpu: GPU reset\(\d+\) "
              r"failed", C.GPU_LOST, blame=True,
              source="amdgpu driver ring timeout and reset (rocm-arch/rocm-arch#829, "
                     "ROCm/ROCR-Runtime#180)"),
    Signature("launch_failure",
              r"HIP error: unspecified launch failure|hipErrorLaunchFailure"
              r"|Cuda failure \d* ?'unspecified launch failure'", C.GPU_LOST, blame=True,
              source="HIP's and NCCL's wording of CUDA's 'unspecified launch failure'"),
    # TensorFlow / XLA out of device memory: the job's own allocations, like a CUDA OOM.
    Signature("tf_oom",
              r"ResourceExhaustedError\b.*OOM when allocating tensor|OOM when allocating tensor "
              r"with shape|RESOURCE_EXHAUSTED: Out of memory while trying to allocate", C.USER_OOM,
              source="TensorFlow ResourceExhaustedError (horovod/horovod#534); XLA allocator"),
    Signature("framework_shutdown",
              r"Horovod has been shut down|HorovodShutdownError"
              r"|has been set to ERROR in coordination service|Polled an error from coordination "
              r"service|JAX distributed service detected fatal errors|Coordination agent is set to "
              r"ERROR"
              r"|DEADLINE_EXCEEDED: Barrier timed out",
              C.NCCL_TIMEOUT, cascade=True,
              source="Horovod after another rank's exception (horovod/horovod#534); XLA "
                     "coordination service heartbeat timeout (jax-ml/jax#23599); its barrier "
                     "timeout, naming the tasks that never arrived"),
    # AWS EFA: the reporter names the peer's instance id; hosts announce their own.
    Signature("efa_peer",
              r"My host id: \S+ .*Peer host id: (?P<peer>i-[0-9a-f]{8,17})\b", C.NETWORK,
              cascade=True, peer_group="peer",
              source="libfabric efa_rdm_txe_handle_error 'Invalid address ... Peer host id: i-...'"
                     " (aws/aws-ofi-nccl#346)"),
    # The EFA provider or the OFI plugin cannot start on this host (no completion queue, no
    # endpoint): NCCL then finds no AWS Libfabric network there, and its peers wait in the first
    # collective. Every node alike is the image's or the settings' (same_on_every_node).
    Signature("efa_init_failed",
              r"efa\w*:cq:\S+ Unable to create extended CQ|NET/OFI Couldn't open CQ"
              r"|NET/OFI aws-ofi-nccl initialization failed|NET/OFI Initializing plugin failed"
              r"|network AWS Libfabric not found", C.NETWORK, blame=True,
              source="libfabric efa_cq_ibv_cq_ex_open_with_ibv_create_cq_ex, aws-ofi-nccl "
                     "nccl_net_ofi_create_plugin (aws/aws-ofi-nccl#715, aws/aws-ofi-nccl#889)"),
    Signature("efa_error",
              r"efa_rdm_\w+_handle_error\(\)|NET/OFI Request completed with error", C.NETWORK,
              cascade=True, source="libfabric EFA provider; aws-ofi-nccl (aws/aws-ofi-nccl#161)"),
    # UCX: the failed work request names the remote port's LID (IB) or address (RoCE).
    Signature("ucx_peer_lid",
              r"\[rqpn 0x[0-9a-f]+ (?:dlid=|rlid )(?P<lid>\d+)\b", C.NETWORK, cascade=True,
              peer_group="lid", source="UCX ib_mlx5_log 'RC QP ... [rqpn 0xa90 dlid=5 ...]' "
                                       "(openucx/ucx#10755, openucx/ucx#6871)"),
    Signature("ucx_peer_ip",
              r"\[rqpn 0x[0-9a-f]+ .*dgid ::ffff:(?P<peer>\d+\.\d+\.\d+\.\d+)", C.NETWORK,
              cascade=True, peer_group="peer", source="UCX on RoCE (openucx/ucx#6871)"),
    # UCX's UD transport gave up on a peer that stopped answering (its host:pid, when UCX has the
    # debug data)
    Signature("ucx_ud_timeout",
              r"UD endpoint 0x[0-9a-f]+ to (?:(?P<peer>[A-Za-z][\w.-]*):\d+|<[^>]*>): unhandled "
              r"timeout error", C.NETWORK, cascade=True, peer_group="peer",
              source="UCX uct/ib/ud/base/ud_ep.c 'Fatal: UD endpoint 0x973660 to cn0419:70564: "
                     "unhandled timeout error' ('to <no debug data>' without its debug data)"),
    # MPICH / Intel MPI's hydra names the rank that ended the job badly and its host
    Signature("hydra_bad_rank", r"^=\s+RANK \d+ PID \d+ RUNNING AT (?P<node>[A-Za-z][\w.-]*)\s*$",
              C.UNKNOWN, blame=True, kind="crash", node_group="node",
              source="MPICH hydra 'BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES / RANK 10 "
                     "PID 9358 RUNNING AT HOST / KILLED BY SIGNAL: 6'"),
    # UCX's UD transport: this rank's endpoint saw no answer in time (no peer named)
    Signature("ucx_ud_iface_timeout", r"ud_iface\.c:\d+ +(?:UCX )?Fatal: transport error: "
              r"Endpoint timeout", C.NETWORK, cascade=True,
              source="UCX uct/ib/ud/base/ud_iface.c 'UCX Fatal: transport error: Endpoint timeout' "
                     "(openucx/ucx#3087, #2501)"),
    # Open MPI's openib BTL names both ends of the failed queue pair (the reporter is the line's
    # host, origin.HOST_IN_LINE)
    Signature("openib_peer",
              r"handle_wc\] from [\w.-]+ to: (?P<peer>[A-Za-z][\w.-]*) error polling \w+ CQ with "
              r"status", C.NETWORK, cascade=True, peer_group="peer",
              source="Open MPI btl_openib_component.c handle_wc ('from HOST to: PEER error polling "
                     "LP CQ with status RETRY EXCEEDED ERROR status number 12')"),
    # Gloo's TCP pair names the peer's address (the reporter is the line's host)
    Signature("gloo_peer",
              r"pair\.cc:\d+\] (?:Connection closed by peer|Read error|Write error|Connection "
              r"reset by peer) \[(?P<peer>\d+\.\d+\.\d+\.\d+)\]", C.NETWORK, cascade=True,
              peer_group="peer", source="gloo/transport/tcp/pair.cc ('Connection closed by peer "
                                        "[IP]:port', 'Read error [IP]:port: Connection reset by "
                                        "peer')"),
    # NCCL refusing what the job asked of it: a topology file of another machine (NCCL_TOPO_FILE),
    # two ranks on one GPU, a call it does not allow: the job's configuration, on every node alike
    Signature("nccl_misuse",
              r"(?:NCCL WARN |^)Attribute \w+ of node \w+ not found|Duplicate GPU detected ?: rank "
              r"\d+ and rank \d+ both on|ncclInvalidUsage: This usually reflects invalid usage",
              C.USER_BUG, source="NCCL graph/xml.h 'Attribute arch of node cpu not found' (a "
                                 "topology XML of another instance type), init.cc 'Duplicate GPU "
                                 "detected', ncclInvalidUsage's own interpretation"),
    # Cray MPICH over libfabric (Slingshot CXI): a completion-queue error of this rank's own
    # endpoint (its errno text, `Input/output error`, is the provider's, not a filesystem's)
    Signature("ofi_cq_error",
              r"\bOFI [Pp]oll [Ff]ailed\b|\blibfabric:\d+:\d+::\w+:\w+:\w+\(\):\d+<(?:warn|error)>"
              r"|Unable to write to EQ: Missing or unavailable event queue",
              C.NETWORK, cascade=True,
              source="Cray MPICH ofi_events.c 'MPIDI_OFI_handle_cq_error(1075): OFI poll failed "
                     "(... Input/output error - PTLTE_NOT_FOUND)', '(default nic=...)'; OLCF "
                     "Frontier known issue OLCFDEV-1597 'OFI Poll Failed UNDELIVERABLE'; EFA rxr "
                     "'Unable to write to EQ' (aws-ofi-nccl#141)"),
    # MPICH's (and Intel MPI's) error stack names the peer rank the failed send or receive was
    # with; the job's rank map says its host (nodes.node_evidence)
    Signature("mpich_peer_rank",
              r"\(\d+\)\.*: Communication error with rank (?P<peer_rank>\d+)\b", C.NETWORK,
              cascade=True, peer_group="peer_rank",
              source="MPICH ch3 error stack ('MPID_nem_tcp_connpoll(1826): Communication error "
                     "with rank 9: Connection reset by peer', 'MPIDI_CH3_iSendv(34)...: ...')"),
    # Open MPI's launcher lost a node's daemon: that node went away (the message names it)
    Signature("orte_lost_daemon",
              r"(?:^\s*Remote daemon: \[\[\d+,\d+\],\d+\] on node |^\s*hostname:  )"
              r"(?P<node>[A-Za-z][\w.-]*\d[\w.-]*)\s*$", C.NODE_FAIL, blame=True,
              node_group="node",
              source="Open MPI (ORTE) 'ORTE has lost communication with a remote daemon ... "
                     "Remote daemon: [[j,0],n] on node X' / 'with its daemon located on node: "
                     "hostname: X'"),
    # Horovod's stall inspector: some ranks wait on tensors others never submitted (the peers' side
    # of a stall; its time is a sign of life after the last progress)
    Signature("horovod_stall", r"stall_inspector\.cc:\d+\] One or more tensors were submitted",
              C.NCCL_TIMEOUT, cascade=True, source="horovod/common/stall_inspector.cc"),
    # Horovod's stall inspector lists, under `Missing ranks:`, each rank that never submitted the
    # tensors the others wait on (`21: [allreduce.fc.bias, ...]`): behind, no failure by itself
    Signature("horovod_missing_rank", r"^\[(?:horovod_)?(?:allreduce|allgather|broadcast|alltoall|"
              r"reducescatter)[._][^\]]*\]?\s*$", C.HANG, blame=True, kind="behind",
              source="horovod/common/stall_inspector.cc 'Missing ranks:' list"),
    # other accelerators' own device failures: a TPU chip's fatal interrupt, Intel Level Zero's lost
    # device (the driver's word, not the program's)
    Signature("accel_lost",
              r"!!!! FATAL ERROR !!!! for \[/dev/accel\d+|Received Error Interrupt! fatal: true|"
              r"Accelerator device halted prematurely|UR_RESULT_ERROR_DEVICE_LOST|"
              r"ZE_RESULT_ERROR_DEVICE_LOST|level_zero backend failed with error: 20\b",
              C.GPU_LOST, blame=True,
              source="libtpu driver ('!!!! FATAL ERROR !!!! for [/dev/accel0 ...]', XLA "
                     "'Accelerator device halted prematurely'); Intel Level Zero / UR DEVICE_LOST"),
    # PyTorch's flight-recorder analysis (`python -m torch.distributed.flight_recorder.fr_trace`)
    # names the one rank that never joined the collective the others wait in (no failure by itself:
    # the stacks say whether that rank is stuck or the program's own wait; endings._outside)
    Signature("fr_missing_rank", r"^\s*missing ranks: \{(?P<rank>\d+)\}\s*$", C.HANG, blame=True,
              kind="behind", source="torch/distributed/flight_recorder fr_trace: 'Not all ranks "
                                    "joining collective N at entry M' ... 'missing ranks: {13}'"),
    # NCCL's RAS client lists the ranks whose operation count differs from their communicator's
    # (a MISMATCH): each with the address of its node
    Signature("ras_rank_behind",
              r"^\s*Rank \d+ (?:has launched up to operation \d+ )?-- GPU \d+ managed by process "
              r"\d+ on node (?P<peer>\d+\.\d+\.\d+\.\d+)\b", C.HANG, blame=True, kind="behind",
              peer_group="peer", source="NCCL RAS (ncclras) 'Communicator ranks have different "
                                        "AllReduce operation counts' report"),
    Signature("ucx_ib_error",
              r"ib_mlx5_log\.c:\d+\s+(?:FATAL: Error on (?:\S+ )?QP \w+ [\w\[\]]*: )?(?:Remote "
              r"(?:operation|access|invalid request) error|Transport retry count exceeded|RNR "
              r"retry count exceeded|Local \w+ error)\b",
              C.NETWORK, cascade=True, source="UCX ib_mlx5_log completion errors"),
    # pdsh (DeepSpeed's multi-node launcher) reports each host's ssh; 255 is ssh's own error (the
    # host could not be reached, or refused the key), where a rank's failure exits 1. A report
    # about the host, not a failure by itself: it names the node only where its peers timed out.
    Signature("pdsh_ssh_lost",
              r"pdsh@[\w.-]+: (?P<node>[\w.-]+): ssh exited with exit code 255\b", C.NODE_FAIL,
              blame=True, node_group="node", kind="hw",
              source="pdsh(1) 'pdsh@uan: cxi-nid0: ssh exited with exit code 255' (HPE Slingshot "
                     "cxibwcheck docs); ssh(1) exits 255 on its own error"),
    # argparse refuses the command line (it exits 2 on every rank before anything starts).
    Signature("argparse_error",
              r"[\w.-]+: error: (?:unrecognized arguments: |the following arguments are required: "
              r"|argument -{1,2}[\w-]+(?:/-{1,2}[\w-]+)?: "
              r"(?:invalid|expected|ambiguous|not allowed))",
              C.USER_BUG, source="Python argparse error() (docs.python.org argparse; "
                                 "NVIDIA/Megatron-LM#577)"),
    # Hydra/OmegaConf refuse the command line's overrides before the program starts: the job's own
    # configuration (a key that is not in the config), the same on every rank.
    Signature("config_override",
              r"^Could not (?:override '[^']+'\.|append to config\.)|^Error merging override "
              r"|^Key '[^']+' (?:is )?not in (?:struct|'\w+')$|Set the environment variable "
              r"HYDRA_FULL_ERROR=1 for a complete stack trace", C.USER_BUG,
              source="Hydra override errors (facebookresearch/hydra#1912, #947, #1515; "
                     "hydra.cc override grammar)"),
    # Ray's memory monitor kills workers when the host's memory passes its threshold: the job's
    # host memory use, like the kernel's OOM killer (before Python's reading of OutOfMemoryError).
    Signature("ray_oom",
              r"\d+ Workers \(tasks / actors\) killed due to memory pressure \(OOM\)"
              r"|Task was killed due to the node running low on memory"
              r"|System memory low at node with IP \S+ Used memory", C.HOST_OOM, blame=True,
              source="Ray raylet memory monitor node_manager.cc (ray-project/ray#29800, #27716, "
                     "hiyouga/EasyR1#185); docs.ray.io ray-oom-prevention"),
    # Lustre client: the metadata (or object) server is lost; the job waits for recovery.
    Signature("lustre_lost",
              r"Connection to \S+-(?:MDT|OST)[0-9a-f]{4} \(at \S+\) was lost"
              r"|ptlrpc_expire_one_request\(\)\) @@@ Request sent has timed out", C.FILESYSTEM,
              source="Lustre client (jade-hpc-gpu#14; wiki.lustre.org monitoring guide)"),
    # `df` printed by a prologue or epilogue: a filesystem with nothing available (not a snap's
    # read-only loop mount; not /dev/shm, whose SIGBUS or ENOSPC says more).
    Signature("df_full",
              r"^(?:[^/\s]\S*|/dev/(?:[^l\s]|l[^o\s])\S*)(?:\s+\d[\d.]*[KMGTPE]?){2}\s+0[KMGTPE]?"
              r"\s+100% /(?:$|[^sd\s]|s[^n\s]|d[^e\s])",
              C.FILESYSTEM, source="df(1) 'Size Used Avail Use% Mounted on' rows"),
)
