"""Event signatures: lines that are not a failure by themselves. Informational notices (dropped),
the node's own hardware reports (they make a crash on that node the node's), the training's own end,
a framework stopping ahead of the wall time, a cloud's preemption notice. They come first in the
table: a line that is one of these is never read as an error."""

from __future__ import annotations

from orchestrator.diagnose.signature import Signature
from orchestrator.model import Cause as C

EVENTS: tuple[Signature, ...] = (
    # Informational events: printed on healthy nodes, never a failure by themselves.
    Signature("info_xid_remap", r"NVRM: Xid \([^)]*\): 63\b|row remapping (?:event|pending)"
              r"|NVRM: Xid \([^)]*\): (?:13|31|43)\b", C.UNKNOWN, kind="info",
              source="NVIDIA Xid catalog: 63 is a row-remapping/page-retirement notice; 13/31/43 "
              "follow the application's own error (judge the program's exception)"),
    # The node's own hardware reports: not a failure by themselves, but they make a crash on that
    # node the node's.
    Signature("node_hw_gpu", r"NVRM: Xid \([^)]*\): 64\b|row remap(?:ping)? failure|pages? pending "
              r"retirement|(?:SRAM|DRAM|Double Bit ECC|Device Memory|Register File)(?: "
              r"Uncorrectable)?\s*: *[1-9]|Remapping Failure Occurred\s*: Yes|Pending Page "
              r"Blacklist\s*: Yes|uncorrectable ECC errors rose", C.GPU_ECC, blame=True, kind="hw",
              source="NVIDIA Xid catalog: 64 row-remap failure; nvidia-smi -q 'Pending Page "
                     "Blacklist'"),
    # Intel Gaudi's driver could not bring an accelerator up
    Signature("node_hw_habana", r"habanalabs \S+: (?:Failed to initialize hl\d+\. Device is NOT "
              r"usable|failed to initialize the H/W\b)", C.GPU_LOST, blame=True, kind="hw",
              source="habanalabs kernel driver (dmesg): 'Failed to initialize hl5. Device is NOT "
                     "usable !'"),
    # Intel's xe driver reset an engine that stopped (a timed-out job, a device coredump)
    Signature("node_hw_xe", r"\bxe \S+: \[drm\] (?:\w+: )?(?:Engine reset|Timedout job|Xe device "
              r"coredump)", C.GPU_LOST, blame=True, kind="hw",
              source="Linux xe DRM driver (dmesg): 'GT1: Engine reset', 'Timedout job', 'Xe device "
                     "coredump has been created'"),
    # nvidia-smi shows ERR! in the fields of a GPU the driver lost
    Signature("node_hw_gpu_err", r"^\|.*\bERR!", C.GPU_LOST, blame=True, kind="hw",
              source="nvidia-smi's table: ERR! in a GPU's fields once it fell into an error state"),
    Signature("node_hw_ib", r"ib: \S+ port \d+: state (?:DOWN|INIT|ARMED)\b.*was ACTIVE|ib: \S+ "
              r"port \d+: (?:link_downed|symbol_error|link_error_recovery|port_rcv_errors|"
              r"local_link_integrity_errors) \+\d+|^\s*Physical state: (?:Polling|Disabled|"
              r"LinkErrorRecovery)\b", C.NETWORK, blame=True, kind="hw",
              source="the agent's reading of /sys/class/infiniband/*/ports/*/{state,counters}; "
                     "ibstat's 'Physical state: Polling' (no link) in a node's epilog"),
    Signature("node_hw_memory",
              r"EDAC (?:MC\d+|\w+): .*(?:\bUE\b|[Uu]ncorrected)|mce: \[Hardware Error\]|Machine "
              r"check events logged|Uncorrected (?:hardware )?memory error|Memory failure: "
              r".*(?:recover|hardware)|HANDLING MCE MEMORY ERROR|\[Hardware Error\]: "
              r".*(?:[Uu]ncorrect|fatal)", C.UNKNOWN, blame=True, kind="hw",
              source="Linux EDAC/MCE drivers (kernel log): uncorrected host memory errors"),
    Signature("node_hw_disk",
              r"critical medium error|\bMedium Error\b|blk_update_request: (?:critical "
              r")?(?:medium|I/O) error|nvme\d+(?:n\d+)?: .*(?:I/O error|timeout, "
              r"aborting|controller is down|Removing after probe failure)|Buffer I/O error on "
              r"dev|I/O error, dev (?:nvme|sd)\w*", C.FILESYSTEM, blame=True, kind="hw",
              source="Linux block layer and nvme driver (kernel log): medium and I/O errors of a "
                     "local disk"),
    Signature("ib_port_error", r"Got async event ?: (?:port error|local catastrophic error|device "
              r"fatal)|IBV_EVENT_PORT_ERR|IBV_EVENT_DEVICE_FATAL|IBV_EVENT_QP_FATAL|catastrophic "
              r"error|health compromised|mlx5_core \S+: .*(?:internal error|fatal|firmware is not "
              r"responsive)",
              C.NETWORK, blame=True, source="NCCL net_ib async event thread: this host's HCA or "
                                            "link failed"),
    Signature("info_ib_async", r"Got async event|GID table change|client "
              r"re-?registration|IBV_EVENT_GID_CHANGE|IBV_EVENT_CLIENT_REREGISTER|"
              r"IBV_EVENT_PORT_ACTIVE", C.UNKNOWN, kind="info",
              source="NCCL net_ib async event thread (ibv_get_async_event)"),
    Signature("info_pg_not_destroyed", r"process group has NOT been "
                                       r"destroyed|destroy_process_group\(\) was not called",
              C.UNKNOWN, kind="info", source="torch ProcessGroupNCCL destructor warning"),
    # Python's own shutdown: an error raised while the interpreter exits (a DataLoader's __del__,
    # an executor, an import after the end) says nothing about the training
    Signature("info_interpreter_shutdown", r"(?:at|after) interpreter shutdown\b|Python is likely "
              r"shutting down", C.UNKNOWN, kind="info",
              source="CPython 'RuntimeError: can't create new thread at interpreter shutdown', "
                     "'cannot schedule new futures after interpreter shutdown'"),
    # The process was told to stop (Slurm cancelled the step, torchrun relayed SIGTERM): not a
    # complaint.
    Signature("info_killed",
              r"SignalException: Process \d+ got signal: (?:15|2|1)\b"
              r"|Received Signals\.SIG(?:TERM|INT|HUP) death signal|exitcode\s*: -15\b"
              r"|Signal 15 \(SIGTERM\) received|(?:^|: )Terminated$|(?:^|: )KeyboardInterrupt\s*$",
              C.UNKNOWN, kind="info", source="torch.distributed.elastic SignalException; Slurm "
                                             "step cancel"),
    # The training reached its end: a crash or hang after this is teardown, the run succeeded.
    Signature("train_done",
              # (not Ray Train's per-report `Training finished iteration 3 at ...`)
              r"Training completed|Training complete\b|training (?:is "
              r")?(?:finished|done)\b(?! iteration \d)|finished training|Training run \S+ "
              r"finished|\btrain_runtime\b|Trainer\.fit` stopped: `max_(?:epochs|steps)=\d+` "
              r"reached|Saving (?:the )?final (?:model|checkpoint)|saved final "
              r"(?:model|checkpoint)|Model weights saved in \S*final|Exiting after successful "
              r"completion|\[after training is done\]|Done training\b"
              r"|End time of running main|\blast_model_checkpoint: \S|training loop finished\b"
              r"|validation results at the end of training"
              # detectron2 (fvcore's final save, its hooks' totals), fairseq
              r"|Saving checkpoint to \S*model_final\.pth|Overall training speed: \d+ iterations in"
              r"|\bdone training in [\d.]+ seconds|^\d+ epochs completed in [\d.]+ hours\.?$",
              C.SUCCESS, kind="done",
              source="torchtitan, HF Trainer, Lightning, Megatron, submitit, ms-swift, detectron2, "
                     "fairseq, Ultralytics YOLO end-of-training lines"),
    # The framework stopped itself ahead of the wall time: not a failure, not the end of the
    # training.
    Signature("framework_time_stop",
              r"exiting program (?:after (?:[\d.]+ minutes|receiving SIG(?:TERM|USR\d))|at "
              r"iteration \d+\])"
              r"|Time limit reached\. Elapsed time is"
              r"|Time limit of \S+ reached\.? Stopping training"
              r"|Signaling Trainer to stop|exit(?:ing)? (?:early )?(?:due to|because of) (?:the "
              r")?(?:time|wall ?clock|walltime) limit|Job has timed out\. Ran \d+ minutes out of "
              r"requested|Stopping training due to cumulative_training_time: [\d.]+ > "
              r"stop_time_hours", C.TIMELIMIT, kind="stop",
              source="Megatron --exit-duration-in-mins and --exit-signal-handler; Lightning "
                     "Timer callback; submitit's timeout handling; fairseq --stop-time-hours"),
    # A row of the kernel OOM report's task table holding 4 GiB or more (pid uid tgid total_vm rss
    # ... name): who held the memory (owner.foreign_hog)
    Signature("oom_task_row", r"\[\s*\d+\]\s+\d+\s+\d+\s+\d+\s+(?P<rss>\d{7,})(?:\s+-?\d+){2,4}\s+"
              r"(?P<pname>[^\s\[\]]+)\s*$", C.HOST_OOM, kind="oomrow",
              source="the kernel's dump_tasks() in an OOM report"),
    # Another recovery owner inside the job (NVRx ft_launcher) decided the job must not be
    # restarted: its exit code (93 by default) and this line; the run stops (diagnose/supervisor.py)
    Signature("supervisor_no_restart",
              r"NVRx decided the job must not be restarted|detected no progress across restarts\. "
              r"No more restarts will be attempted", C.USER_BUG, kind="no_restart",
              source="nvidia-resiliency-ext ft_launcher: NoRestartRequested (attribution_stop, "
                     "no_progress), DEFAULT_NO_RESTART_EXIT_CODE 93; its progress tracker"),
    Signature("spot_termination",
              r"[Ss]pot (?:[Ii]nstance )?(?:[Ii]nterruption|[Tt]ermination)(?: [Nn]otice| "
              r"[Ww]arning)?|instance-action.*(?:terminate|stop)|[Pp]reemption notice|[Ii]nstance "
              r"(?:was|is being) preempted|received (?:a )?preemption "
              r"(?:signal|notice)|spot/instance-action -> 200|\{\s*\"action\": "
              r"\"(?:terminate|stop|hibernate)\", \"time\"|\"EventType\": ?\"Preempt\""
              # GCE: the metadata server's instance/preempted key turning TRUE; its operation type
              r"|instance/preempted\b.{0,20}\bTRUE\b|compute\.instances\.preempted",
              C.PREEMPTED, cascade=True,
              source="AWS spot interruption notice, GCE preemption (metadata instance/preempted, "
                     "the operation), Azure Scheduled Events"),
)
