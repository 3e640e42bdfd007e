"""Readings taught by blind8 (issue 38): each on at least two real variants of the text (sources in
the signature tables and tests/data/blind8/SOURCES.md)."""

from __future__ import annotations

import pytest

from orchestrator.diagnose.classify import Context, classify
from orchestrator.evidence import NodeEvidence
from orchestrator.model import Cause, JobState, JobStatus, Owner
from tests.unit.test_platforms import FAILED, TIMEOUT, action, node, progress

CANCELLED = JobStatus(state=JobState.CANCELLED)
# aws/aws-ofi-nccl#715 (SageMaker, libfabric CQ) and #889 (endpoint creation, newer plugin)
EFA_INIT = [
    ["libfabric:17778:1732779731::efa:cq:efa_cq_ibv_cq_ex_open_with_ibv_create_cq_ex():92<warn> "
     "Unable to create extended CQ: Cannot allocate memory",
     "algo-1:17778:17848 [5] nccl_ofi_ofiutils_init_connection:274 NCCL WARN NET/OFI Couldn't open "
     "CQ. RC: -22, ERROR: Invalid argument",
     "algo-1:17778:17848 [5] nccl_net_ofi_create_plugin:259 NCCL WARN NET/OFI aws-ofi-nccl "
     "initialization failed",
     "algo-1:17778:17848 [5] NCCL INFO net.cc:56 -> 2"],
    ["ip-10-36-29-253:86:2554 [0] nccl_net_ofi_domain_get_ep:969 NCCL WARN NET/OFI Creating new "
     "endpoint for domain 0x7f899ba992c0 failed: Invalid argument",
     "ip-10-36-29-253:86:2554 [0] nccl_net_ofi_create_plugin:335 NCCL WARN NET/OFI aws-ofi-nccl "
     "initialization failed",
     "ip-10-36-29-253:86:2554 [0] nccl_net_ofi_init:155 NCCL WARN NET/OFI Initializing plugin "
     "failed",
     "ip-10-36-29-253:86:2554 [0] init.cc:190 NCCL WARN Error: network AWS Libfabric not found.",
     "ip-10-36-29-253:86:2554 [0] NCCL INFO net.cc:56 -> 2"],
]


@pytest.mark.parametrize("lines", EFA_INIT)
def test_efa_init_failure_on_one_node_is_that_nodes_network(lines: list[str]) -> None:
    """The OFI plugin cannot start on one host while its peers time out: that host's EFA device, never
    the job's exception (the NCCL 'Error: network ... not found' line reads like a Python error)."""
    host = lines[-1].split(":")[0]
    v = classify(FAILED, [node(host, lines), node("b", [TIMEOUT]), node("c", [TIMEOUT])], Context())
    assert (v.cause, v.culprit_nodes, action(v)) == (Cause.NETWORK, (host,), "resubmit_exclude")


def test_efa_init_failure_everywhere_is_nobodys_node() -> None:
    lines = [x.replace("ip-10-36-29-253:", "") for x in EFA_INIT[1]]
    v = classify(FAILED, [node(h, lines) for h in ("a", "b")], Context())
    assert v.cause == Cause.NETWORK and v.culprit_nodes == () and v.owner != Owner.JOB


# The ranks took different paths through the program: one waits in a barrier (an eval run on rank 0
# only) or an extra all_reduce (Lightning's log_dict with different keys per rank,
# Lightning-AI/pytorch-lightning#19106) while the others wait in the next step's collective.
@pytest.mark.parametrize(("common", "odd"), [
    ("all_reduce (torch/distributed/distributed_c10d.py)", "barrier (torch/distributed/distributed_c10d.py)"),
    ("broadcast (torch/distributed/distributed_c10d.py)", "all_reduce (torch/distributed/distributed_c10d.py)"),
    ("all_reduce (deepspeed/comm/torch.py)", "barrier (deepspeed/comm/torch.py)"),
])
def test_a_rank_waiting_in_another_collective_is_the_programs_deadlock(common: str, odd: str) -> None:
    nodes = [NodeEvidence(node=f"n{i}", top_frames=(common,) * 4) for i in range(1, 4)]
    nodes.append(NodeEvidence(node="n4", top_frames=(odd,) + (common,) * 3))
    v = classify(CANCELLED, nodes, Context(stalled=True))
    assert (v.cause, v.culprit_nodes, v.rule) == (Cause.HANG, (), "collectives_differ")
    assert action(v) == "stop_and_alert"


def test_a_rank_in_a_device_call_outside_the_collective_is_still_the_nodes() -> None:
    common = "all_reduce (torch/distributed/distributed_c10d.py)"
    nodes = [NodeEvidence(node=f"n{i}", top_frames=(common,) * 4) for i in range(1, 4)]
    nodes.append(NodeEvidence(node="n4", top_frames=("synchronize (torch/cuda/__init__.py)",) + (common,) * 3))
    v = classify(CANCELLED, nodes, Context(stalled=True))
    assert (v.culprit_nodes, v.rule, action(v)) == (("n4",), "outside_collective", "resubmit_exclude")


# The image has no such program: enroot cannot switch into it (NVIDIA/pyxis#61 with bash,
# NVIDIA/enroot#177 and #217 with sh), on every node alike.
@pytest.mark.parametrize("shell", ["/bin/bash", "/bin/sh"])
def test_a_container_without_the_program_is_the_jobs(shell: str) -> None:
    lines = ["slurmstepd: error: pyxis: container start failed with error code: 1",
             f"slurmstepd: error: pyxis:     enroot-switchroot: failed to execute: {shell}: No such file or "
             "directory", "slurmstepd: error: pyxis: couldn't start container",
             "slurmstepd: error: spank: required plugin spank_pyxis.so: task_init() failed with rc=-1"]
    nodes = [node(h, [*lines, f"srun: error: {h}: task {i}: Exited with exit code 1"])
             for i, h in enumerate(("hpc-pg0-1", "hpc-pg0-2"))]
    v = classify(FAILED, nodes, Context())
    assert (v.cause, v.culprit_nodes, action(v)) == (Cause.USER_BUG, (), "stop_and_alert")


# Hydra refuses an override on the command line (facebookresearch/hydra#1912, #947, #1515)
HYDRA = [
    ["Could not override 'perferences.trait'.", "To append to your config use +perferences.trait=i_like_stars",
     "Key 'perferences' is not in struct", "    full_key: perferences", "    object_type=dict"],
    ["Could not override 'polynomial'. No match in config.", "To append to your config use +polynomial={x:1}",
     "Key 'x' is not in struct", "\tfull_key: polynomial.x", "\treference_type=Any", "\tobject_type=dict", "",
     "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace."],
    ["Error merging override +a.j=2", "Key 'j' not in 'A'", "\tfull_key: a.j", "\treference_type=A",
     "\tobject_type=A", "", "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace."],
]


@pytest.mark.parametrize("lines", HYDRA)
def test_a_refused_config_override_is_the_jobs(lines: list[str]) -> None:
    nodes = [node(h, [*lines, f"srun: error: {h}: tasks 0-7: Exited with exit code 1"]) for h in ("a", "b")]
    v = classify(FAILED, nodes, Context())
    assert (v.cause, v.culprit_nodes, action(v)) == (Cause.USER_BUG, (), "stop_and_alert")


# Ray's memory monitor (raylet node_manager.cc, several releases; the older per-kill wording of
# ray-project/ray#27716; the driver's OutOfMemoryError)
RAY_OOM = [
    "(raylet) [2024-08-25 19:21:02,241 E 1111013 1111013] (raylet) node_manager.cc:3064: 12 Workers (tasks / "
    "actors) killed due to memory pressure (OOM), 0 Workers crashed due to other reasons at node (ID: b8aad7ac5, "
    "IP: 172.31.105.218) over the last time period.",
    "(raylet) [2022-08-29 15:18:33,592 E 30307 30344] (raylet) node_manager.cc:2963: System memory low at node "
    "with IP 172.17.0.2. Used memory (23.63GB) / total capacity (33.28GB) (0.709971) exceeds threshold 0.7, "
    "killing latest task with name the_real_oom_actor:Leaker.__init__",
    "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.",
]


@pytest.mark.parametrize("line", RAY_OOM)
def test_ray_memory_monitor_kills_are_the_jobs_host_memory(line: str) -> None:
    lines = [line, "Traceback (most recent call last):",
             "ray.train.base_trainer.TrainingFailedError: The Ray Train run failed."]
    v = classify(FAILED, [node("head", lines), node("w1", [])], Context())
    assert (v.cause, v.culprit_nodes, action(v)) == (Cause.HOST_OOM, (), "stop_and_alert")


# fairseq's --stop-time-hours, older (args, "hour(s)") and newer (cfg) wording of fairseq_cli/train.py;
# fairseq then saves and prints "done training" as after any stop.
@pytest.mark.parametrize("stop", [
    "2020-07-01 10:04:32 | INFO | fairseq_cli.train | Stopping training due to cumulative_training_time: "
    "14.00031 > stop_time_hours: 14.0 hour(s)",
    "2023-03-03 10:04:32 | INFO | fairseq_cli.train | Stopping training due to cumulative_training_time: "
    "2.000122 > stop_time_hours: 2.0",
])
def test_a_time_stop_then_done_training_is_the_time_limit_not_success(stop: str) -> None:
    lines = [stop, "2023-03-03 10:04:56 | INFO | fairseq.checkpoint_utils | Saved checkpoint "
             "/ckpt/checkpoint_last.pt (epoch 14 @ 111814 updates, score 3.702) (writing took 22.18 seconds)",
             "2023-03-03 10:04:57 | INFO | fairseq_cli.train | done training in 50637.9 seconds"]
    v = classify(JobStatus(state=JobState.COMPLETED), [node("a", lines), node("b", [])], Context())
    assert (v.cause, action(v)) == (Cause.TIMELIMIT, "resubmit")


def test_done_training_without_a_time_stop_is_still_success() -> None:
    lines = ["2023-03-03 10:04:32 | INFO | fairseq_cli.train | Stopping training due to num_updates: 400000 >= "
             "max_update: 400000", "2023-03-03 10:04:57 | INFO | fairseq_cli.train | done training in 637.9 seconds"]
    v = classify(JobStatus(state=JobState.COMPLETED), [node("a", lines), node("b", [])], Context())
    assert (v.cause, action(v)) == (Cause.SUCCESS, "done")


# pdsh's report of a host's ssh (HPE Slingshot cxibwcheck docs, a CSM install guide): 255 is ssh's
# own error
@pytest.mark.parametrize(("launcher", "host"), [("uan", "cxi-nid0"), ("ncn-m001", "ncn-w001")])
def test_ssh_lost_to_one_host_while_the_others_time_out_is_that_node(launcher: str, host: str) -> None:
    launch = [f"pdsh@{launcher}: {host}: ssh exited with exit code 255",
              f"pdsh@{launcher}: b: ssh exited with exit code 1", f"pdsh@{launcher}: c: ssh exited with exit code 1"]
    nodes = [node(host, progress(5)), node("b", [*progress(6), TIMEOUT]), node("c", [*progress(6), TIMEOUT, *launch])]
    v = classify(FAILED, nodes, Context())
    assert (v.cause, v.culprit_nodes, action(v)) == (Cause.NODE_FAIL, (host,), "resubmit_exclude")


def test_ssh_refused_at_launch_names_no_node() -> None:
    """Host key verification failed on every worker: the site's ssh, no node is excluded."""
    lines = [x for h in ("ncn-w001", "ncn-w002") for x in (
        f"{h}: Host key verification failed.", f"pdsh@ncn-m001: {h}: ssh exited with exit code 255")]
    v = classify(FAILED, [node("ncn-m001", lines), node("ncn-w001", []), node("ncn-w002", [])], Context())
    assert v.culprit_nodes == () and action(v) != "resubmit_exclude"


# argparse's error() (NVIDIA/Megatron-LM#577; docs.python.org argparse), on every rank
@pytest.mark.parametrize("line", [
    "pretrain_gpt.py: error: unrecognized arguments: --local-rank=0",
    "PROG: error: the following arguments are required: bar",
    "train.py: error: argument --foo: invalid int value: 'spam'",
])
def test_a_refused_command_line_is_the_jobs(line: str) -> None:
    lines = ["usage: train.py [-h] [--foo FOO]", line,
             "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:"]
    v = classify(FAILED, [node("a", lines), node("b", lines)], Context())
    assert (v.cause, v.culprit_nodes, action(v)) == (Cause.USER_BUG, (), "stop_and_alert")
