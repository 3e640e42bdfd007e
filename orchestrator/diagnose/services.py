"""Signatures of the services around the training: Slurm's task launch, Ray's reports of workers
and nodes that are gone, object stores, container runtimes; and the last resort, a Python
exception of any name. SERVICES go before the general table, LATE and PYTHON_EXCEPTION after it
(the first signature that matches a line names its cause: Ray's own reports that name the dead
node, in the general table, come before its reports that do not)."""

from __future__ import annotations

from orchestrator.diagnose.signature import Signature
from orchestrator.model import Cause as C

SERVICES: tuple[Signature, ...] = (
    Signature(
        "srun_launch_failed_on_node",
        r"srun: error: Task launch for StepId=\S+ failed on node (?P<node>[\w.-]+): (?:Job prolog "
        r"failed|Communication connection failure|Zero Bytes were transmitted or received|Socket "
        r"timed out|Unexpected missing socket error|Slurmd could not)",
        C.NODE_FAIL,
        blame=True,
        node_group="node",
        source="srun(1): 'Task launch for StepId=J.S failed on node N: Job prolog failed' (slurmd "
               "drains the node: 'Prolog error')",
    ),
    # The object store (S3, GCS, Azure Blob) throttled or failed the job's uploads: the shared
    # storage's passing fault, as an NFS server that does not answer.
    Signature(
        "object_store_throttled",
        r"\((?:SlowDown|ServiceUnavailable|RequestLimitExceeded|ThrottlingException|"
        r"TooManyRequestsException|InternalError)\) when calling the \w+ operation"
        r"|Please reduce your request rate|503 Slow Down|429 Too Many Requests.*storage\.googleapis"
        r"|rateLimitExceeded"
        r"|ServerBusy.*(?:blob|storage)|The server is busy", C.FILESYSTEM,
        source="botocore ClientError '(SlowDown) when calling the PutObject operation: Please "
               "reduce your request rate' (S3), GCS 429 rateLimitExceeded, Azure ServerBusy",
    ),
)

LATE: tuple[Signature, ...] = (
    # the same report without the dead node's address: a symptom on the reporter, never its fault
    # (the node that went silent is the one)
    Signature("ray_node_dead_unnamed",
              r"has been marked dead because the (?:detector|monitor) has missed|NodeDiedError"
              r"|node (?:\S+ )?(?:has )?died unexpectedly",
              C.NODE_FAIL, cascade=True,
              source="Ray: 'The node with client ID ... has been marked dead because the monitor "
                     "has missed too many heartbeats from it' (older Ray), NodeDiedError"),
    # Ray's wrappers of a worker that is gone: what ended it is elsewhere (a dead node, a kill, an
    # OOM); a RayTaskError(ValueError) carries the program's own error and is not one of them
    Signature("ray_worker_gone",
              r"ray\.exceptions\.(?:RayActorError|ActorDiedError|WorkerCrashedError|"
              r"ActorUnavailableError|OwnerDiedError)\b"
              r"|The actor died unexpectedly before finishing"
              r"|TrainingFailedError: The Ray Train run failed", C.UNKNOWN, cascade=True,
              source="ray.exceptions (RayActorError: 'The actor died unexpectedly before finishing "
                     "this task'), ray.train TrainingFailedError"),
    # The task's container could not start (the image, its name, a bind, a mount): the job's set-up
    # when every node says it, one node's when only it does (the symmetry rule decides).
    Signature("container_start_failed",
              r"pyxis: (?:failed to (?:import docker image|create container filesystem|start "
              r"container)|couldn't start container)|FATAL:\s+(?:container creation failed|could "
              r"not open image|Unable to handle \S+ uri|While (?:making image from|pulling))"
              r"|enroot(?:-\w+)?: \[ERROR\]|Error: (?:crun|runc|OCI runtime)[^\n]*(?:no such file|"
              r"not found|permission denied)", C.USER_BUG,
              source="pyxis (spank_pyxis: 'failed to import docker image', 'couldn't start "
                     "container'), Apptainer ('FATAL: container creation failed'), enroot, podman"),
)

PYTHON_EXCEPTION = Signature(
    "python_exception",
    # a module-qualified exception of any name (`huggingface_hub.errors.OfflineModeIsEnabled:`)
    # (Python prints a warning as `path:line: Category: text`, which this never matches)
    r"^(?:(?:[\w.]+\.)?(?:[A-Z]\w*)?(?:Error|Exception)(?::.*)?|"
    r"(?:[a-z_]\w*\.)+[A-Z][a-z]\w*: \S.*)$",
    C.USER_BUG,
    ignore_case=False,
)
