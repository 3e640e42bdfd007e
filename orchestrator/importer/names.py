"""Variables of a batch script: what it assigns (for resolving `$CMD`-style launch lines), what it
uses without defining (named in the notes), and the checkpoint paths its launch passes."""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterator

from orchestrator.importer.scan import Segment, _skip_quoted, unquote

ASSIGN = re.compile(r"([A-Za-z_]\w*)(\+?)=(.*)", re.S)
DEFAULTED = re.compile(r"\$\{([A-Za-z_]\w*)(:?[-=])")
USE = re.compile(r"\$\{?([A-Za-z_]\w*)")
ENV_ALWAYS = re.compile(
    r"SLURM\w*|SLURMD_NODENAME|ORCH_\w+|HOME|USER|LOGNAME|PATH|PWD|OLDPWD|HOSTNAME|SHELL|TERM|LANG|"
    r"LC_\w+|TMPDIR|LD_LIBRARY_PATH|LIBRARY_PATH|CPATH|MANPATH|PYTHONPATH|CUDA_VISIBLE_DEVICES|"
    r"CUDA_HOME|CONDA_\w+|VIRTUAL_ENV|MODULEPATH|BASH\w*|RANDOM|LINENO|SECONDS|PPID|UID|EUID|IFS|"
    r"PS\d|HOSTTYPE|OSTYPE|RANK|LOCAL_RANK|WORLD_SIZE|MASTER_ADDR|MASTER_PORT|NODE_RANK|OMPI_\w+|"
    r"PMI\w*|SINGULARITY\w*|APPTAINER\w*|PIPESTATUS|FUNCNAME|GROUPS|DIRSTACK|EPOCHSECONDS|"
    r"EPOCHREALTIME|SRANDOM|OPTIND|OPTARG|REPLY|COLUMNS|LINES|MACHTYPE")
DECLARE = ("export", "declare", "typeset", "readonly", "local")


def assignments(text: str, segs: list[Segment]) -> dict[str, str]:
    """NAME -> value text (quotes removed; arrays as their element text) of every top-level
    assignment, later ones winning, and `: "${NAME:=default}"` defaults."""
    out: dict[str, str] = {}
    for seg in segs:
        words = seg.texts(text)
        if words and words[0] == ":":
            for d in re.finditer(r"\$\{([A-Za-z_]\w*):?=([^}]*)\}", " ".join(words[1:])):
                out.setdefault(d.group(1), unquote(d.group(2)))
            continue
        start = 1 if words and words[0] in DECLARE else 0
        for w in words[start:]:
            m = ASSIGN.fullmatch(w)
            if not m:
                if w.startswith("-"):
                    continue
                break
            val = m.group(3)
            if val.startswith("(") and val.endswith(")"):
                val = re.sub(r"(?m)\s+#.*$", "", val[1:-1])
            val = unquote(val).replace("\\\n", " ")
            out[m.group(1)] = (out.get(m.group(1), "") + val) if m.group(2) else val
    return out


REF = re.compile(r"\$\{(?P<a>[A-Za-z_]\w*)(?:\[[@*]\])?(?::?[-=](?P<d>[^}]*))?\}|"
                 r"\$(?P<b>[A-Za-z_]\w*)")


def resolve(value: str, env: dict[str, str], depth: int = 0,
            seen: frozenset[str] = frozenset()) -> str:
    """Expand $NAME / ${NAME} / ${NAME[@]} / ${NAME:-default} from `env`; unknown names stay as
    written. `X=${X:-default}` (the environment's value, else the default) reads as its default."""
    if depth > 6:
        return value

    def sub(m: re.Match[str]) -> str:
        name, default = m.group("a") or m.group("b"), m.group("d")
        if name in env and name not in seen:
            return resolve(env[name], env, depth + 1, seen | {name})
        if default is not None:
            return resolve(unquote(default), env, depth + 1, seen)
        return m.group(0)

    return REF.sub(sub, value)


def _strip_for_uses(text: str) -> list[str]:
    """Lines without comments, without single-quoted awk/sed/perl programs (their `$1`, `$NF` are
    not shell)."""
    lines = []
    for line in text.splitlines():
        s = line.lstrip()
        if s.startswith("#"):
            continue
        lines.append(_PROGRAM.sub(r"\1\2", line) if "'" in line else line)
    return lines


_PROGRAM = re.compile(r"\b(awk|gawk|sed|perl|jq)\b([^|;']*)'[^']*'")


def undefined(text: str) -> list[str]:
    """Names the script uses that it does not define first (in line order) and that the environment
    of a Slurm task does not provide; `${NAME:-default}` uses are not counted."""
    first_def: dict[str, int] = {}
    first_use: dict[str, int] = {}
    lines = _strip_for_uses(text)
    for n, line in enumerate(lines):
        if "$" not in line and "=" not in line and "for" not in line and "read" not in line:
            continue  # neither defines nor uses a name
        for m in re.finditer(r"(?:^|[\s;(])(?:(?:export|declare|typeset|readonly|local)\s+(?:"
                             r"-\w+\s+)*)?([A-Za-z_]\w*)\+?=", line):
            first_def.setdefault(m.group(1), n)
        for m in re.finditer(r"\bfor\s+([A-Za-z_]\w*)\s+in\b|\bread\s+(?:-\w+\s+)*([A-Za-z_]\w*)"
                             r"|\bfor\s*\(\(\s*([A-Za-z_]\w*)\s*=", line):  # for ((i = 0; ...))
            first_def.setdefault(m.group(1) or m.group(2) or m.group(3), n)
        for m in DEFAULTED.finditer(line):
            first_def.setdefault(m.group(1), n)
        for m in USE.finditer(line):
            if (not line[m.end():].startswith((":-", ":=", "-", "="))
                or not line[m.start() + 1:].startswith("{")):
                first_use.setdefault(m.group(1), n)
    out = []
    for name, n in first_use.items():
        if ENV_ALWAYS.fullmatch(name):
            continue
        if name not in first_def or first_def[name] > n or _self_assigned(name, lines[n]):
            out.append(name)
    return out


def _self_assigned(name: str, line: str) -> bool:
    """`X=${X}` / `X="$X"` (no default): the value is what the environment gave, or nothing."""
    # at a command's start (not `echo "X=$X"`)
    return re.search(rf"(?:^\s*(?:[A-Za-z_]\w*=\S*\s+)*|[;&]\s*|"
                     rf"(?:export|declare|typeset|readonly|local)\s+(?:-\w+\s+)*)"
                     rf"{name}=[\"']?\$\{{?{name}\}}?(?![\w:-])", line) is not None


SAVE_FLAGS = {"--save": "megatron", "--save-dir": "megatron", "--save_dir": "megatron",
              "--output_dir": "hf", "--output-dir": "hf", "--checkpoint_dir": "glob",
              "--checkpoint-dir": "glob",
              "--ckpt_dir": "glob", "--ckpt-dir": "glob", "--default_root_dir": "lightning",
              "--checkpoint.folder": "glob", "--save_folder": "glob"}
RESUME_FLAGS = {"--load": "megatron", "--resume_from_checkpoint": "hf",
                "--resume-from-checkpoint": "hf",
                "--ckpt_path": "lightning", "--ckpt-path": "lightning", "--load_dir": "deepspeed",
                "--load-dir": "deepspeed", "--resume": "glob", "--load_path": "glob",
                "--load-path": "glob"}
_FLAG_VALUE = r"(?<![\w-])({flags})(=|[ \t]+)(?!-)(\"[^\"\n]*\"|'[^'\n]*'|[^\s\\;|&)'\"]+)"


def _flag_rx(flags: dict[str, str]) -> re.Pattern[str]:
    return re.compile(_FLAG_VALUE.format(
        flags="|".join(re.escape(f) for f in sorted(flags, key=len, reverse=True))))


def _uncommented(text: str, rx: re.Pattern[str]) -> Iterator[tuple[re.Match[str], int]]:
    """(match, line number) of `rx` over the whole text (one search, not one per line) outside
    comment lines."""
    line, at = 1, 0
    for m in rx.finditer(text):
        line += text.count("\n", at, m.start())
        at = m.start()
        start = text.rfind("\n", 0, m.start()) + 1
        if not text[start:m.start()].lstrip().startswith("#"):
            yield m, line


def flag_values(text: str, flags: dict[str, str]) -> list[tuple[str, str, int]]:
    """(flag, value as written, line) for every `--flag VALUE` / `--flag=VALUE` outside comments."""
    return [(m.group(1), m.group(3), n) for m, n in _uncommented(text, _flag_rx(flags))]


def resume_var(flag: str) -> str:
    return ("ORCH_RESUME_ROOT" if RESUME_FLAGS.get(flag) in ("megatron", "deepspeed")
            else "ORCH_RESUME_FROM")


def rewrite_resume(text: str) -> tuple[str, list[tuple[str, str, int]]]:
    """Make every resume flag take the orchestrator's newest complete checkpoint when there is one:
    `--resume_from_checkpoint X` -> `--resume_from_checkpoint "${ORCH_RESUME_FROM:-X}"` (X as before
    on the first segment, one argument either way). Megatron's `--load` and DeepSpeed's `--load_dir`
    take the checkpoint *root* (they read the tracker file in it), so they get
    `"${ORCH_RESUME_ROOT:-X}"`."""
    matches = list(_uncommented(text, _flag_rx(RESUME_FLAGS)))
    found = [(m.group(1), m.group(3), n) for m, n in matches]
    if not matches:
        return text, found
    quoted = _double_quoted(text)
    out, last = [], 0
    for m, _n in matches:
        out += [text[last:m.start()], _resume_value(m, _inside(quoted, m.start()))]
        last = m.end()
    return "".join(out) + text[last:], found


def _resume_value(m: re.Match[str], in_string: bool) -> str:
    var = resume_var(m.group(1))
    # `options+=" --load ${CKPT}"`: already one word of a string; no quotes of its own
    if in_string:
        return f"{m.group(1)}{m.group(2)}${{{var}:-{m.group(3)}}}"
    return f"{m.group(1)}{m.group(2)}\"${{{var}:-{_in_double_quotes(m.group(3))}}}\""


# what can start or hide a quote: the rest is skipped in one search
_QUOTE_STOPS = re.compile(r"[\\'\"#]")


def _double_quoted(text: str) -> list[tuple[int, int]]:
    """The spans of text inside "..." at the top level (a string may span lines)."""
    out, i = [], 0
    while (m := _QUOTE_STOPS.search(text, i)) is not None:
        i, c = m.start(), m.group()
        if c == "\\":
            i += 2
        elif c == "'":
            j = text.find("'", i + 1)
            i = len(text) if j < 0 else j + 1
        elif c == "#" and (i == 0 or text[i - 1] in " \t\n;"):
            j = text.find("\n", i)
            i = len(text) if j < 0 else j
        elif c == '"':
            j = _skip_quoted(text, i)
            out.append((i, j))
            i = j
        else:
            i += 1
    return out


def _inside(spans: list[tuple[int, int]], pos: int) -> bool:
    k = bisect.bisect_right(spans, (pos, 1 << 62)) - 1
    return k >= 0 and spans[k][0] < pos < spans[k][1]


def _in_double_quotes(value: str) -> str:
    """The word `value` as written, for the inside of `"${VAR:-...}"`: one argument on every segment
    (a checkpoint path with a space or a `*` is never split or globbed)."""
    if len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1]
    if len(value) >= 2 and value[0] == value[-1] == "'":
        return re.sub(r'([\\$`"}])', r"\\\1", value[1:-1])
    out, depth = [], 0  # a `}` closing a `${...}` of the value stays; a lone one is escaped
    for k, ch in enumerate(value):
        if ch == "{" and k and value[k - 1] == "$":
            depth += 1
        elif ch == "}":
            if not depth:
                out.append("\\")
            depth = max(depth - 1, 0)
        out.append(ch)
    return "".join(out)
