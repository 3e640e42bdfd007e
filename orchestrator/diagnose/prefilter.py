"""Find the few lines worth a closer look in a large block of log bytes.

Every signature (and every special line the scanner reacts to) is compiled into one Hyperscan
database, which scans a whole block at memory speed and reports where something may match; only
those lines are decoded and checked with Python's `re`, which also extracts the named groups.
Without Hyperscan (not installed, or a user pattern it cannot compile) one combined Python regex
does the same, more slowly. The prefilter may over-report, never under-report.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from orchestrator.patterns import LINE_CHARS, backtracking_only

try:  # optional accelerator
    import hyperscan
except ImportError:  # pragma: no cover - depends on the platform
    hyperscan = None  # type: ignore[assignment]
ENGINE_AVAILABLE = hyperscan is not None

# The start of an allocation (used after Slurm printed a JOB-level end banner in the same file).
# a site's prolog or wrapper heading each job's output (`==== job 9123017 ====`)
# `==== job 771021 ====`, `==== job 771021 nodes: gn[101-102] ====`, `#### job 88123 nodes n[1-4]`
JOB_BANNER = (r"^[=#*-]{3,} *(?:[Ss]lurm )?[Jj]ob(?: ?[Ii][Dd])?[ :=]*\d+\b"
              r"(?:.*?[=#*-]{3,}$| nodes?\b)")
ALLOC_START_RE = (r"NCCL INFO NCCL version \d|Starting elastic_operator|Initializing distributed: "
                  r"GLOBAL_RANK|initializing torch distributed|loading checkpoint from|"
                  r"SLURM_RESTART_COUNT\b|SLURM_JOB_ID=\d|"
                  r"\b(?:loaded|resum(?:ed|ing) from) checkpoint|Training starts at step \d|\*{5} "
                  r"Running training \*{5}|^\+ (?:srun|torchrun|deepspeed|accelerate|python)\b|"
                  + JOB_BANNER)
# Lines the scanner handles besides signatures: allocation markers, NCCL addresses, completion,
# py-spy thread headers and failures.
SPECIAL = (
    (r"ORCH-AGENT (?:start|exit)|ORCH-ALLOCATION|Starting with JobEnvironment|Job completed "
     r"successfully", False),
    (r"NCCL INFO (?:NET/\w+|Bootstrap) ?: Using|NCCL INFO comm \S+ rank \d+ ", False),
    (r"srun: error: \S+: tasks? \d|^\s*(?:host|rank)\s+: |--node-ip-address|Local node IP: |"
     r"scontrol show hostnames|scontrol requeue\b|srun: Job step aborted", False),
    (ALLOC_START_RE, False),
    (r"Thread (?:0x)?[0-9a-fA-F]+(?:/\d+)? \((?:idle|active|gil)|hread 0x[0-9a-f]+ \(most recent "
     r"call first|Failed to suspend process|py-spy timed out", False),
    (r"base lid:|port_lid:|instance[-_ ]?id|My host id: ", True),  # a host's own names (lines.py)
    (r"\d\.\d{1,3}\s+[A-Za-z][\w-]*\d|[A-Za-z][\w-]*\d[\w.-]*\s+\d{1,3}\.\d{1,3}\.\d{1,3}\.\d",
     False),  # `IP host` / `host IP` maps (origin.IP_HOST_MAP)
    (r"^(?:={2}|-{3}|#{3}).*(?:={2}|-{3}|#{3}) *$|^\+ +ssh ", False),  # origin.SECTION, ON_HOST
    (r"^GPU \d+: .*\(UUID: GPU-|^\s*local_ranks=\[", False),  # origin.GPU_LISTED
    (r"(?:^|\s)(?:-H|--host|-hosts)\s+[A-Za-z][\w.-]*:\d|: py-spy dump", False),  # SLOTS, py-spy
    (r"\b(?:SLURM_(?:JOB_)?NODELIST|nodes|nodelist)(?: *[:=] *| +)[A-Za-z][\w.-]*\d|job \d+ on ",
     True),  # origin.NODE_LIST
    # origin.HOST_PAREN_IP, HOST_EQ_IP
    (r"[A-Za-z][\w-]*\d[\w.-]* (?:\((?:ip |IP |addr\w* )?|(?:ip|IP|addr\w*)[:=]? ?)\d{1,3}\.\d{1,3}"
     r"\.\d{1,3}\.\d|[A-Za-z][\w-]*\d *= *\d{1,3}\.\d{1,3}\.\d{1,3}\.\d", False),
    (r"rank[\w ()>-]*:? *\d+ *(?:- *\d+ *)?(?:->|=>|:|=)? *[A-Za-z][\w-]*\d", True),  # RANK_MAP
    (r"(?:rank|process) \d+ (?:of \d+ )?(?:is )?(?:on|@) |^\([A-Za-z][\w.-]*\d[\w.-]*:\d"
     r"|MPI startup\(\): +\d+ |distributed init \(rank \d+\).*\bhost ", True),
    # origin.RANK_ON_HOST, HYDRA_MAP, IMPI_ROW
)
_NAMED = re.compile(r"\(\?P<\w+>")
Compiled = dict[tuple[tuple[str, bool], ...], bytes]
# patterns -> a compiled database
Compile = Callable[[tuple[tuple[str, bool], ...]], "hyperscan.Database"]
# serialised databases: a new watch per segment (and per restarted controller) loads one in
# microseconds instead of compiling for 0.15 s
_COMPILED: Compiled = {}
_MAX_COMPILED = 16


def _plain(pattern: str) -> str:
    """Drop group names and every start anchor: the prefilter looks for the pattern anywhere in a
    line, and sees the line with its prefix (`0: `, `[rank3]: `) where a signature sees the text
    after it; an anchor at the start of a later alternative (`...|^Killed$`) would under-report."""
    return _unanchored(_NAMED.sub("(", pattern))


def _unanchored(pattern: str) -> str:
    """`pattern` without its `^` anchors (escaped carets and a class's negation stay)."""
    out, i, in_class = [], 0, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            out.append(pattern[i:i + 2])
            i += 2
            continue
        if in_class:
            in_class = c != "]" or (out[-1] in ("[", "[^"))
        elif c == "[":
            in_class = True
            if pattern[i + 1:i + 2] == "^":
                out.append("[^")
                i += 2
                continue
        elif c == "^":
            i += 1
            continue
        out.append(c)
        i += 1
    return "".join(out)


def _database(patterns: tuple[tuple[str, bool], ...], memory: Compiled,
              compiler: Compile) -> hyperscan.Database:
    """A Hyperscan database of `patterns`, with its own scratch space (never shared between
    watches): from `memory`, else from this host's cache file, else compiled (`compiler`) and kept
    in both."""
    blob = memory.get(patterns) or _cached(patterns)
    if blob is not None:
        try:
            db = hyperscan.loadb(blob, hyperscan.HS_MODE_BLOCK)
            db.scratch = hyperscan.Scratch(db)
        except Exception:  # noqa: BLE001 - a damaged cache file: compile instead
            blob = None
        else:
            memory[patterns] = blob
            return db
    db = compiler(patterns)
    if len(memory) >= _MAX_COMPILED:
        memory.clear()
    memory[patterns] = hyperscan.dumpb(db)
    _store(patterns, memory[patterns])
    return db


def _compile(patterns: tuple[tuple[str, bool], ...]) -> hyperscan.Database:
    db = hyperscan.Database()
    flags = [(hyperscan.HS_FLAG_CASELESS if ci
              else 0) | hyperscan.HS_FLAG_ALLOWEMPTY | hyperscan.HS_FLAG_MULTILINE
             for _, ci in patterns]
    db.compile(expressions=[_plain(p).encode() for p, _ in patterns],
               ids=list(range(len(patterns))), elements=len(patterns), flags=flags)
    return db


def _cache_file(patterns: tuple[tuple[str, bool], ...]) -> Path | None:
    """Where this host keeps the compiled database of `patterns` between processes (`orchestrator
    diagnose` starts fresh each time): $XDG_CACHE_HOME/orchestrator or ~/.cache/orchestrator; None
    if unusable."""
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "orchestrator"
    try:
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError:
        return None
    key = hashlib.sha256(repr((getattr(hyperscan, "__version__", ""),
                               patterns)).encode()).hexdigest()[:32]
    return root / f"hs-{key}.db"


def _cached(patterns: tuple[tuple[str, bool], ...]) -> bytes | None:
    path = _cache_file(patterns)
    try:
        return path.read_bytes() if path is not None else None
    except OSError:
        return None


def _store(patterns: tuple[tuple[str, bool], ...], blob: bytes) -> None:
    """Best effort, atomic (a reader never sees half a file)."""
    path = _cache_file(patterns)
    if path is None:
        return
    try:
        fd, tmp = tempfile.mkstemp(prefix=".hs-", dir=path.parent)
    except OSError:
        return
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(blob)
        os.replace(tmp, path)
    except OSError:
        Path(tmp).unlink(missing_ok=True)


class Prefilter:
    """Finds the lines of a block worth matching (Hyperscan, or one combined Python regex). `memory`
    holds the databases this process compiled or loaded, `compiler` compiles one (a test passes an
    empty memory, as in a new process, and a compiler that fails the test when the cache file should
    have been loaded)."""
    def __init__(self, patterns: Sequence[tuple[str, bool]], memory: Compiled = _COMPILED,
                 compiler: Compile = _compile):
        # a lookaround or backreference: only Python's engine takes it, and on a whole block its
        # time grows with the block's square: matched line by line, on each line's first 8 KB
        self._slow = [re.compile(_plain(p).encode(), re.M | (re.I if ci else 0))
                      for p, ci in patterns if backtracking_only(p)]
        self.patterns = [pc for pc in patterns if not backtracking_only(pc[0])] + list(SPECIAL)
        self.engine = "python"
        self._db = None
        if hyperscan is not None:
            try:
                self._db, self.engine = (_database(tuple(self.patterns), memory, compiler),
                                         "hyperscan")
            except Exception:  # noqa: BLE001 - any unsupported construct: fall back to Python
                self._db = None
        alts = [f"(?i:{_plain(p)})" if ci else f"(?:{_plain(p)})" for p, ci in self.patterns]
        self._rx = re.compile("|".join(alts).encode(), re.MULTILINE)

    def lines(self, data: bytes) -> list[tuple[int, int]]:
        """(start, end) byte offsets of every line of `data` that may match, in order, without
        duplicates."""
        ends: list[int] = []
        if self._db is not None:
            state = {"line_end": -1}

            def on_match(_id: int, _from: int, to: int, _flags: int, _ctx: object) -> None:
                if to > state["line_end"]:
                    ends.append(to)
                    nl = data.find(b"\n", max(to - 1, 0))
                    state["line_end"] = len(data) if nl < 0 else nl

            self._db.scan(data, match_event_handler=on_match)
        else:
            ends = [m.end() for m in self._rx.finditer(data)]
        if self._slow:
            ends = sorted(set(ends) | set(self._slow_ends(data)))
        out: list[tuple[int, int]] = []
        last_end = -1
        for pos in ends:
            k = pos - 1 if pos > 0 else 0
            if data[k:k + 1] == b"\n" and pos < len(data):
                k = pos  # an empty match at the start of the next line
            if k <= last_end:
                continue
            start = data.rfind(b"\n", 0, k) + 1
            end = data.find(b"\n", k)
            end = len(data) if end < 0 else end
            out.append((start, end))
            last_end = end
        return out


    def _slow_ends(self, data: bytes) -> list[int]:
        """A position inside each line that a lookaround pattern matches on its first LINE_CHARS."""
        found, start = [], 0
        while start < len(data):
            nl = data.find(b"\n", start)
            end = len(data) if nl < 0 else nl
            if end > start and any(rx.search(data, start, min(end, start + LINE_CHARS))
                                   for rx in self._slow):
                found.append(start + 1)
            start = end + 1
        return found


_CANDIDATES: dict[bytes, object] = {}


def candidate_ends(pattern: bytes, data: bytes, start: int) -> list[int] | None:
    """End offsets (in `data`) of the lines from `start` on where `pattern` may match, one per line,
    in order: a Hyperscan pass in prefilter mode (it may over-report, never under-report), at memory
    speed whatever the pattern. None when Hyperscan cannot take it: the caller matches the block
    itself."""
    if hyperscan is None:
        return None
    db = _CANDIDATES.get(pattern)
    if db is None:
        try:
            db = hyperscan.Database()
            db.compile(expressions=[_plain(pattern.decode(errors="replace")).encode()], ids=[0],
                       elements=1, flags=[hyperscan.HS_FLAG_PREFILTER | hyperscan.HS_FLAG_MULTILINE
                                          | hyperscan.HS_FLAG_ALLOWEMPTY])
        except Exception:  # noqa: BLE001 - a construct Hyperscan refuses even as a prefilter
            db = False
        _CANDIDATES[pattern] = db
    if db is False:
        return None
    ends: list[int] = []
    state = {"line_end": start - 1}

    def on_match(_id: int, _from: int, to: int, _flags: int, _ctx: object) -> None:
        at = start + to
        if at > state["line_end"]:
            nl = data.find(b"\n", at)
            state["line_end"] = len(data) if nl < 0 else nl
            ends.append(state["line_end"])

    try:
        db.scan(data[start:], match_event_handler=on_match)  # type: ignore[attr-defined]
    # e.g. its scratch busy in another thread: match the block instead
    except Exception:  # noqa: BLE001
        return None
    return ends
