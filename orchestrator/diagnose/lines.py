"""The special lines the scanner reacts to besides signatures: allocation markers, addresses a host
announces, completion, stack dumps (py-spy, faulthandler), Slurm's end banner, and the job's own
list of its hosts."""

from __future__ import annotations

import re

from orchestrator.contract import EXIT_OK_RE, START_RE
from orchestrator.diagnose.prefilter import ALLOC_START_RE, JOB_BANNER

# Our agent marks the start of every allocation in the per-node log; earlier ones are history.
ALLOC_MARK = re.compile(
    START_RE  # our agent
    + r"|submitit INFO \([^)]*\) - Starting with JobEnvironment\(job_id=(?P<sjob>\d+)"  # submitit
    r"|^ORCH-ALLOCATION (?P<mjob>\S+)"  # a marker users can echo from a prologue
)
# NCCL tells which address each host uses: "host:pid:tid [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB
# ; OOB ib0:IP<0>"
NCCL_ADDR = re.compile(r"NCCL INFO (?:NET/\w+|Bootstrap) ?: Using "
                       r".*?(?P<ip>\d+\.\d+\.\d+\.\d+)<\d+>")
# Ray: the address a host joined with (`ray start --node-ip-address=X`; `ray start` prints `Local
# node IP: X`), loopback aside
NODE_IP = re.compile(r"(?:--node-ip-address[= ]|\bLocal node IP: )(?!127\.)(\d+\.\d+\.\d+\.\d+)\b")
# What names this host to its peers besides an IP: its IB port's LID (ibstat 'Base lid: 5', ibstatus
# 'base lid: 0x5', ibv_devinfo 'port_lid: 5'; UCX names a remote port by it) and its EC2 instance id
# (EFA names a peer by it; a reporter states its own as 'My host id')
OWN_LID = re.compile(r"\b(?:[Bb]ase lid|port_lid):\s*(0x[0-9a-fA-F]+|\d+)\b")
OWN_INSTANCE = re.compile(r"(?:\binstance[-_ ]?id\b[\"']?\s*[:=]?\s*[\"']?|My host id: )"
                          r"(i-[0-9a-f]{8,17})\b", re.IGNORECASE)
LOCAL_GID = re.compile(r"localGid ::ffff:(\d+\.\d+\.\d+\.\d+)")
COMPLETED = re.compile(r"submitit INFO \([^)]*\) - Job completed successfully|" + EXIT_OK_RE)
# py-spy's "Thread 0x7F1A... (idle): ..." (`{:#X}`: upper-case digits, `/TID` where it knows the
# OS thread) and faulthandler's "Thread 0x... (most recent call first):" headers; the innermost
# frame is on the next line: py-spy "fn (file:line)" (a native frame has no line), faulthandler
# 'File "path", line N in fn'
PYSPY_THREAD = re.compile(r"^(?:Thread (?:0x)?[0-9a-fA-F]+(?:/\d+)? \((?:idle|active|gil)[^)]*\)"
                          r"|(?:Current )?[Tt]hread 0x[0-9a-f]+ \(most recent call first\):)")
PYSPY_FRAME = re.compile(r"^\s*(?P<fn>[\w<>.:~]+) \((?P<file>[^():]+)(?::\d+)?\)\s*$"
                         # faulthandler: the file's last three path components, as py-spy
                         r"|^\s*File \"[^\"]*?(?P<ffile>(?:[^\"/]+/){0,2}[^\"/]+)\", line \d+ "
                         r"in (?P<ffn>\S+)")
# py-spy --native names a frame it cannot symbolize by its address: `0x14cd955ebdbc (libcuda.so.1)`
NATIVE_ADDRESS = re.compile(r"0x[0-9a-fA-F]+$")
PYSPY_STUCK = re.compile(r"Error: Failed to suspend process|py-spy timed out")
# After Slurm ended a job (a JOB-level banner), these start the next allocation appended to the same
# file.
JOB_END = re.compile(r"\*\*\* JOB \d+ ON \S+ CANCELLED AT|DUE TO JOB REQUEUE")
ALLOC_START = re.compile(ALLOC_START_RE)
# printed once by a job script as it starts: a second one in the same file is the next allocation
JOB_START = re.compile(r"SLURM_JOB_ID=\d|SLURM_RESTART_COUNT\b|" + JOB_BANNER)
_JOB_NAMED = re.compile(r"SLURM_JOB_ID=(\d+)|[Jj]ob(?: ?[Ii][Dd])?[ :=]*(\d+)")


def job_named(line: str) -> int | None:
    """The job id a job's start line names (`SLURM_JOB_ID=N`, `==== job N ====`)."""
    m = _JOB_NAMED.search(line)
    return int(m.group(1) or m.group(2)) if m else None
# a job script's own requeue (`+ scontrol requeue $SLURM_JOB_ID`), or srun ending the training step
# after a task failed: what starts next is another attempt
ATTEMPT_END = re.compile(r"^\+* *scontrol requeue\b|"
                         r"^srun: Job step aborted: Waiting up to \d+ seconds")
# `scontrol show hostnames $SLURM_JOB_NODELIST` in a job script prints the job's hosts, one a line
HOSTNAMES_CMD = re.compile(r"scontrol show hostnames")
BARE_HOST = re.compile(r"^[A-Za-z][\w.-]*\d[\w.-]*$")


def own_names(body: str) -> list[str]:
    """The names a line says this host goes by for its peers (`lid:N`, `i-...`); see `peer_name`."""
    out = [f"lid:{int(m.group(1), 0)}" for m in OWN_LID.finditer(body)] if "lid" in body else []
    if "id" in body:
        out += [m.group(1) for m in OWN_INSTANCE.finditer(body)]
    return out


def peer_name(group: str, value: str) -> str:
    """A peer as a signature's named group captured it, in the form `own_names` learns (a rank:
    `rank:N`, its host from the job's rank map)."""
    if group == "peer_rank":
        return f"rank:{int(value)}"
    return f"lid:{int(value, 0)}" if group == "lid" else value


# the default process group's (global) rank in torch's lines: `[PG 0 (default_pg) Rank 12]`, `[Rank
# 5]`; another group's rank (`[PG ID 2 PG GUID 7 Rank 4]`) is a rank in that group only
PG_RANK = re.compile(r"\[(?:PG (?:ID )?0\b[^\]]*?)?Rank (\d+)\]")


def line_rank(groups: dict[str, str | None], rank: int | None, task: int | None,
              kind: str = "", text: str = "") -> int | None:
    """The rank a line is about: one its signature names (`missing ranks: {13}`), else the rank or
    srun task its prefix gave; in a list of ranks behind, each labelled `N:` after the reporter's
    own tag (`[1,0]<stderr>:21: [allreduce...]`), the label."""
    named = groups.get("rank")
    if named and named.isdigit():
        return int(named)
    if "Rank " in text and (pg := PG_RANK.search(text)):  # over a launcher's local `[default0]`
        return int(pg.group(1))
    if kind == "behind" and task is not None:
        return task
    return rank if rank is not None else task
