"""Where a log line came from: the prefixes launchers stack before it (timestamp, srun --label task,
torch rank), the host it names (pdsh "host: ", NCCL "host:pid:tid", syslog "host kernel:",
"[host]"), and what a whole job's file teaches about which host runs which task, rank or address.

A job-wide file (one slurm-%j.out for every node) is only useful when its lines can be tied to
hosts; `HostMap` collects the ties real stacks print (srun's task reports, NCCL's per-rank init
lines, torchrun's failure summary, address announcements and maps)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime

PREFIX = re.compile(
    r"^\s*(?:\[?(?P<ts>\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?)\]?\s*"
    # Open MPI's --timestamp-output: `Sun Oct 12 04:41:17 2025[1,3]<stderr>:`
    r"|(?P<ct>(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4}) ?)?"
    r"(?:(?P<r1>\d+): |\[rank(?P<r2>\d+)\]:? ?|\[default(?P<r3>\d+)\]:? "
    r"?|\[\d+,(?P<r4>\d+)\]<std(?:out|err)>: ?"
    # MPICH / Intel MPI `-prepend-rank`: `[9] text` (not bash's `[1] 12345` job line)
    r"|\[(?P<r5>\d{1,6})\] (?!\d+$)(?=\S))?"
)
HOST = (r"(?!(?:rank|default|Rank|RANK|node_rank|local_rank)\d+\b)(?![\w.-]*\.\.)"  # not n-01..n-04
        r"[A-Za-z][\w-]*\d[\w.-]*")
# "host: " (pdsh, after an optional "[tag] "), "[host] " / "[tag host] " (an epilog, a wrapper), or
# Ray's worker prefix `(Actor pid=8120, ip=X) `, an address (a host the line names comes first); a
# Python exception's name is no host (`boto3.exceptions.S3UploadFailedError: ...`, `E1Error: ...`)
EXCEPTION_NAME = r"(?:[\w-]+\.)+[A-Z]\w*|[A-Z]\w*(?:Error|Exception|Warning|Interrupt|Exit)"
# (a tag may hold a time, `[hang-check 21:31]`; a kernel log's `[Wed Aug 19 03:58:12 2026]`,
# `[ 12.3]` is no tag)
HOST_PREFIX = re.compile(rf"^(?:\[(?![A-Z][a-z]{{2}} [A-Z][a-z]{{2}} )(?! *\d+\.\d+\])[\w :.-]*\] ?"
                         rf"|(?:prolog|epilog): +)?(?!(?:{EXCEPTION_NAME}): )"
                         rf"(?P<h>{HOST})(?:: +| (?=nvidia-smi: |dmesg: ))(?=\S)"
                         rf"|^\[(?:\w+ )?(?P<b>{HOST})\] ?"
                         r"|^\([\w.]+(?: pid=\d+)?, ip=(?P<y>\d{1,3}(?:\.\d{1,3}){3})\) ")
# NCCL's "host:pid:tid [dev]" is distinctive enough to take a host name without digits from it
HOST_IN_LINE = re.compile(rf"(?:^|\s)(?P<h>[A-Za-z][\w.-]*):\d+:\d+ \[\d+\] (?:\S+:\d+ )?NCCL"
                          rf"|(?:^|\s)(?P<k>{HOST}) kernel: "
                          # UCX's log prefix `[host:pid:thread(:tid)] file.c:N` (its signal
                          # handler's `[host:pid:tid:tid] Caught signal 11 (...)` too)
                          rf"|^\[(?P<u>{HOST}):\d+ ?:\d+(?::\d+)?\] +(?=\w+\.c:\d+ |Caught signal)"
                          # Open MPI's openib BTL: `handle_wc] from HOST to: PEER error polling`
                          rf"|\bhandle_wc\] from (?P<o>{HOST}) to: ")
SRUN_TASK = re.compile(rf"srun: error: (?P<h>{HOST}): tasks? (?P<t>\d+)(?:-(?P<t2>\d+))?: ")
SUMMARY = re.compile(r"^\s*(?P<key>host|rank)\s+: (?P<val>\S.*)$")  # torchrun's ChildFailedError
NCCL_RANK = re.compile(rf"^(?P<h>{HOST}):\d+:\d+ \[\d+\] NCCL INFO comm \S+ rank (?P<r>\d+) ")
NCCL_PID = re.compile(r"^(?P<h>[A-Za-z][\w.-]*):(?P<p>\d+):\d+ \[\d+\] ")
PID_IN_LINE = re.compile(r"\bpid[=: ]+(\d+)")
# a line of `IP host` (`host IP`) pairs, a tag first: `/etc/hosts`, `getent hosts`, a job's own
# node map (`[nodes] 10.0.0.3 gpu-1 | 10.0.0.4 gpu-2`, `# nodes: gpu-1 10.0.0.3, ...`)
_IP = r"\d{1,3}(?:\.\d{1,3}){3}"
IP_HOST = re.compile(rf"({_IP})\s+({HOST})|({HOST})\s+({_IP})")
HOST_IP_FIRST = re.compile(rf"{HOST}\s+{_IP}(?:\s|$)")  # a line that starts `host IP ...`
# a job's own line naming a host and its address: `wk-a2 (172.28.0.12): init ok`, `ray node n3 ip X`
HOST_PAREN_IP = re.compile(rf"(?:^|\s)(?P<h>{HOST}) (?:\((?:ip |IP |addr(?:ess)? )?(?P<ip>{_IP})\)"
                           rf"|(?:ip|IP|addr(?:ess)?)[:=]? ?(?P<ip2>{_IP})\b)")
HOST_EQ_IP = re.compile(rf"({HOST})\s*=\s*({_IP})\b")  # `hosts: gpu3=10.0.0.91 (rank 0-1), ...`
HOSTS_TAG = re.compile(r"^[\w -]*\b(?:hosts?|nodes?|address(?:es)?|ips?)\b[\w -]*:\s",
                       re.IGNORECASE)
# (atomic: a long row of pairs that fails at its end is not tried every way its spaces could split)
IP_HOST_MAP = re.compile(rf"(?:\[[\w -]+\]:? |#\s*[\w -]+:\s*)?(?>(?:{_IP}\s+{HOST}|{HOST}\s+{_IP})"
                         rf"\s*[|,;]?\s*)+")
HOSTS_ROW = re.compile(rf"\s*{_IP}\s+{HOST}(?:\s+{HOST}){{1,3}}\s*")  # /etc/hosts, with aliases
# a section header of an epilog or prolog (`=== epilog gpu-7: dmesg -T ===`, `---- gpu-7 ----`, a
# hang monitor's `== gpu-7 rank 13 ==`): what it holds is that host's; one naming none ends it
SECTION = re.compile(r"^(?:={2,}|-{3,}|#{3,}) *(?P<t>.*?) *(?:={2,}|-{3,}|#{3,}) *$")
KERNEL_LINES = frozenset({"hung_task", "xid_ecc", "gpu_lost", "host_oom"})
# (a NIC, a disk or a GPU index is no host: `ibstat mlx5_0`, `smartctl nvme0n1`, `ip link show ib0`)
DEVICE = r"(?:mlx\d|ib\d|eth\d|en[ops]\d|nvme\d|sd[a-z]\d|hsn\d|bond\d|cxi\d|efa\d|rdmap?\d|hfi\d)"
SECTION_HOST = re.compile(rf"(?<![\w.-])(?!{DEVICE})(?P<h>{HOST})(?![\w-])")
# a command the script traced (`set -x`) running on one named host: `+ srun -w gpu-7 --overlap
# py-spy dump --pid N`, `+ ssh gpu-7 nvidia-smi`
ON_HOST = re.compile(rf"^\+ +(?:srun\b.*?(?:\s-w *|\s--nodelist[= ])|ssh +(?:-\S+ +)*)(?P<h>{HOST})"
                     r"(?![\w.,\[-])")
# a GPU the node lists (`nvidia-smi -L`) or the local ranks torchrun started there
GPU_LISTED = re.compile(r"^GPU (?P<i>\d+): .*\(UUID: GPU-|^\s*local_ranks=\[(?P<l>[\d, ]+)\]")
# mpirun / horovodrun's host slots (`-H vg-a1:4,vg-a2:4`): by slot, rank r runs on the host whose
# slots it falls in
SLOTS = re.compile(rf"(?:^|\s)(?:-H|--host|-hosts)\s+((?:{HOST}:\d+,)*{HOST}:\d+)(?:\s|$)")
# the allocation's node list on its start line (`SLURM_JOB_NODELIST=gpu[01-04]`, `nodes gn[1-2]`)
_LISTED = r"[A-Za-z][\w.-]*(?:\[[\d,-]+\][\w.-]*)?"
NODE_LIST = re.compile(rf"\b(?:(?:SLURM_(?:JOB_)?NODELIST|nodes|nodelist)(?:\s*[:=]\s*| +)"
                       rf"|job \d+ on +)(?P<list>{_LISTED}"
                       rf"(?:,{_LISTED})*)", re.IGNORECASE)


def expand(hostlist_text: str) -> list[str]:
    """A Slurm host list, expanded (at most 4,096 names); nothing when it does not parse."""
    import hostlist

    try:
        return [h for h in hostlist.expand_hostlist(hostlist_text)[:4096] if re.search(r"\d", h)]
    except (hostlist.BadHostlist, ValueError):
        return []


# a job's own rank -> host map: `rank map: 0-7 gpu-011, 8-15 gpu-012` (ranges or single ranks,
# `->`/`:`/`=` allowed between, the pairs separated by `,` `;` `|`)
_RANKS_HOST = rf"(\d+)(?:\s*-\s*(\d+))?\s*(?:->|=>|:|=)?\s*({HOST})"
RANK_MAP = re.compile(rf"\brank(?:s|[ _-]?map(?:ping)?|\s*->\s*host)?\s*:?\s*"
                      rf"(?P<pairs>{_RANKS_HOST}(?:\s*[,;|]\s*{_RANKS_HOST})+)", re.IGNORECASE)
# one rank's host (`rank 8 on cn4014`, mpi4py's `process 8 of 16 on cn4014`, hydra's `(cn4014:8,9)`)
RANK_ON_HOST = re.compile(rf"\b(?:rank|process) (?P<r>\d+)(?: of \d+)?(?: is)? (?:on|@) "
                          rf"(?:host |node )?(?P<h>{HOST})(?![\w-])", re.IGNORECASE)
INIT_ON_HOST = re.compile(rf"distributed init \(rank (?P<r>\d+)\).*\bhost (?P<h>{HOST})")  # DeiT
HYDRA_MAP = re.compile(rf"^\((?P<h>{HOST}):(?P<r>\d+(?:[,-]\d+)*)\)$")
IMPI_ROW = re.compile(rf"MPI startup\(\): +(?P<r>\d+) +\d+ +(?P<h>{HOST}) ")  # Intel MPI's rows
JOB_WIDE = re.compile(r"^(?:slurm|job|output|train|log|stdout|stderr)[-_.]?\d*(?:[-_.]\d+)*$",
                      re.IGNORECASE)
MAX_TIES = 8192


def _stamp(raw: str | None) -> datetime | None:
    if not raw:
        return None
    try:
        ts = datetime.fromisoformat(raw.replace(",", ".").replace(" ", "T").replace("Z", "+00:00"))
    except ValueError:
        return None
    return ts if ts.tzinfo is not None else ts.replace(tzinfo=UTC)


def _ctime(raw: str | None) -> datetime | None:
    try:
        return datetime.strptime(raw, "%a %b %d %H:%M:%S %Y").replace(tzinfo=UTC) if raw else None
    except ValueError:
        return None


@dataclass(frozen=True)
class Prefixes:
    """A line with its launcher prefixes taken apart: time, srun task, torch rank, host, body."""
    ts: datetime | None
    task: int | None  # srun --label task id ("3: ")
    rank: int | None  # torch rank ("[rank3]:", "[default3]:")
    body: str
    host: str | None = None


def parse_prefixes(line: str) -> Prefixes:
    """Strip the stacked prefixes launchers put before a line (timestamp, srun label, torch
    rank)."""
    ts = task = rank = None
    body = line
    for _ in range(3):
        m = PREFIX.match(body)
        if not m or m.end() == 0:
            break
        ts = ts or _stamp(m.group("ts")) or _ctime(m.group("ct"))
        if m.group("r1") is not None and task is None:
            task = int(m.group("r1"))
        # r4: OpenMPI --tag-output "[job,rank]<stdout>:"
        r = m.group("r2") or m.group("r3") or m.group("r4") or m.group("r5")
        if r is not None and (rank is None or m.group("r2") is not None):  # `[rankN]`: global,
            rank = int(r)  # over torchrun --tee's `[defaultN]` (local) before it
        body = body[m.end():]
    return Prefixes(ts, task, rank, body)


def parse_prefix(line: str) -> tuple[datetime | None, int | None, str]:
    p = parse_prefixes(line)
    return p.ts, p.rank if p.rank is not None else p.task, p.body


def parse_line(raw: str) -> Prefixes:
    """Prefixes, then a host prefix (and the prefixes after it), or a host named inside the line."""
    p = parse_prefixes(raw)
    hm = HOST_PREFIX.match(p.body)
    if hm:
        p2 = parse_prefixes(p.body[hm.end():])
        named = hm.group("y") and HOST_IN_LINE.search(p2.body)  # a host beside Ray's address
        return Prefixes(p.ts or p2.ts, p.task if p.task is not None else p2.task,
                        p.rank if p.rank is not None else p2.rank, p2.body, hm.group("h")
                        or hm.group("b") or (named and named.group("h")) or hm.group("y"))
    hm2 = HOST_IN_LINE.search(p.body)
    host = hm2 and (hm2.group("h") or hm2.group("k") or hm2.group("u") or hm2.group("o"))
    return Prefixes(p.ts, p.task, p.rank, p.body, host or None)


@dataclass
class HostMap:
    """Which host runs which srun task, torch rank and address, as the job's own output says."""

    tasks: dict[int, str] = field(default_factory=dict)
    ranks: dict[int, str] = field(default_factory=dict)
    addresses: dict[str, str] = field(default_factory=dict)
    pids: dict[str, str] = field(default_factory=dict)  # pid -> host, NCCL's "host:pid:tid"
    _summary_host: str = ""
    # the one host an epilog's (a hang monitor's) section header named (`=== epilog gpu-7: ... ===`)
    section: str | None = None
    listed: set[str] = field(default_factory=set)  # the allocation's node list, as a line gave it
    line_host: str | None = None  # the host prefix of the last line learned from
    # GPUs a host showed (`nvidia-smi -L`, torchrun's `local_ranks=[...]`); "" the file's own host
    gpus: dict[str, int] = field(default_factory=dict)

    def section_host(self, kind: str, name: str = "") -> str | None:
        """The host of a node report or a kernel's line printed under a header that names it."""
        return self.section if kind == "hw" or name in KERNEL_LINES else None

    def at(self, own: str) -> str:
        """A stack frame's tag: `@host` for a dump whose header line's prefix or section header
        names another host than the file's `own`."""
        host = self.line_host or self.section
        return f"@{host}" if host and host != own else ""

    def learn(self, body: str, task: int | None, host: str | None = None) -> None:
        self.line_host = host
        if len(self.tasks) + len(self.ranks) >= MAX_TIES:
            return
        tm = SRUN_TASK.search(body)
        if tm:
            first = int(tm.group("t"))
            last = int(tm.group("t2") or first)
            # "tasks 16-23": every task of the range
            for task in range(first, min(last, first + 1024) + 1):
                self.tasks.setdefault(task, tm.group("h"))
            return
        pm = NCCL_PID.match(body) if "NCCL" in body and len(self.pids) < MAX_TIES else None
        if pm:
            self.pids.setdefault(pm.group("p"), pm.group("h"))
        nm = NCCL_RANK.match(body) if "NCCL INFO comm" in body else None
        if nm and task is not None:
            self.tasks.setdefault(task, nm.group("h"))
            return
        if IP_HOST_MAP.fullmatch(body) or HOST_IP_FIRST.match(body) or HOSTS_ROW.fullmatch(body):
            for ip, host, host2, ip2 in IP_HOST.findall(body)[:64]:  # a job's `hostname -I` too
                self.learn_address(ip or ip2, host or host2)
            return
        if self._context(body):
            return
        if ("(" in body or "ip" in (low := body.lower()) or "addr" in low) and (
                pm2 := HOST_PAREN_IP.search(body)):
            self.learn_address(pm2.group("ip") or pm2.group("ip2"), pm2.group("h"))
        elif "=" in body and HOSTS_TAG.match(body):
            for host, ip in HOST_EQ_IP.findall(body):
                self.learn_address(ip, host)
        if "ank" in body and (rm := RANK_MAP.search(body)):
            for first, last, host in re.findall(_RANKS_HOST, rm.group("pairs")):
                for rank in range(int(first), min(int(last or first), int(first) + 1024) + 1):
                    self.ranks[rank] = host  # a later allocation's map replaces an earlier one
            return
        if (one := next((m for rx in (RANK_ON_HOST, INIT_ON_HOST, HYDRA_MAP, IMPI_ROW)
                         if (m := rx.search(body.strip()))), None)) is not None:
            for part in one.group("r").split(","):
                lo, _, hi = part.partition("-")
                for rank in range(int(lo), min(int(hi or lo), int(lo) + 1024) + 1):
                    self.ranks[rank] = one.group("h").rstrip(".")  # the sentence's end
            return
        sm = SUMMARY.match(body)
        if sm and sm.group("key") == "host":
            self._summary_host = sm.group("val")
        elif sm and self._summary_host and sm.group("val").split()[0].isdigit():
            self.ranks.setdefault(int(sm.group("val").split()[0]), self._summary_host)
            self._summary_host = ""

    def _context(self, body: str) -> bool:
        """The allocation's node list, a host's GPU count, a section header or a traced command
        on one host (what follows is that host's output); True when the line was one of them."""
        if not self.listed and ("node" in body.lower() or "job" in body) and (
                nl := NODE_LIST.search(body)):
            self.listed = set(expand(nl.group("list")))
        if (gm := GPU_LISTED.match(body)) is not None:
            host = self.line_host or self.section or ""
            count = int(gm.group("i")) + 1 if gm.group("i") else len(gm.group("l").split(","))
            self.gpus[host] = max(self.gpus.get(host, 0), count)
        elif (sec := SECTION.match(body)) is not None:
            named = {h.group("h") for h in SECTION_HOST.finditer(sec.group("t"))}
            self.section = named.pop() if len(named) == 1 else None  # a node list is no host's
        elif (cmd := ON_HOST.match(body)) is not None:
            self.section = cmd.group("h")
        elif self.line_host and body.startswith("py-spy dump"):  # `HOST: py-spy dump --pid N`
            self.section = self.line_host
        elif (hm := SLOTS.search(body)) is not None:  # ranks fill each host's slots in turn
            slots = re.findall(rf"({HOST}):(\d+)", hm.group(1))
            self.ranks.update(dict(enumerate([h for h, n in slots for _ in range(int(n))][:4096])))
        else:
            return False
        return True

    def learn_address(self, ip: str, host: str | None) -> None:
        if host and len(self.addresses) < MAX_TIES:
            self.addresses.setdefault(ip, host)

    def host_of_text(self, text: str) -> str | None:
        """The host of the process a line names (`NVRM: Xid (...): 95, pid=873918`), when NCCL
        announced it."""
        m = PID_IN_LINE.search(text) if self.pids else None
        return self.pids.get(m.group(1)) if m else None

    def host_of(self, task: int | None, rank: int | None) -> str | None:
        if task is not None and task in self.tasks:
            return self.tasks[task]
        if rank is None:
            return None
        # one srun task a rank
        return self.ranks.get(rank) or (self.tasks.get(rank) if not self.ranks else None)

    def hosts(self) -> set[str]:
        return set(self.tasks.values()) | set(self.ranks.values())
