"""Lines of a batch script that ran once under sbatch, before the training launch: data preparation,
a DeepSpeed config written with `cat > ... <<EOF`, a download, `mkdir`, `nvidia-smi`. Under the
orchestrator the script's body runs on every node, so these would run N times at once, into the same
files. They go to the batch script's setup instead (submitit's `setup`: once, on the batch host,
before the step), and the per-node script keeps only what shapes the launch's shell: variables,
functions, options, the directory, sourced environments, modules.

The unit of the split is a top-level command with everything nested in it (an
`if`/`for`/`while`/`case`/`{ }` block, a function, a here-document); a unit that both sets variables
and does work stays on every node (and runs once before, too: it is part of the setup), with a
note."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from orchestrator.importer.scan import Segment, segments, unquote
from orchestrator.importer.script import FOOTER, LAUNCH_AFTER, LAUNCH_BEFORE, passing_bash_n

# what sets up the launch's shell: these run on every node (they are also in the setup, which runs
# all of it)
ENV_WORDS = {"export", "source", ".", "module", "ml", "cd", "pushd", "popd", "set", "shopt",
             "ulimit", "umask",
             "unset", "declare", "typeset", "readonly", "local", "trap", "alias", "eval", "conda",
             "mamba",
             "micromamba", "spack", "hash", "enable", "function", "shift", "return", "break",
             "continue", "read", "mapfile", "readarray", "getopts"}
# words that neither set anything nor do work: tests, loop heads, block words
NEUTRAL_WORDS = {"[", "[[", "test", "true", "false", ":", "for", "case", "select", "fi", "done",
                 "esac", "}", ")", "in", ";;"}
# words that only print or stop: alone they ran once (a banner), next to variables they are harmless
# on every node
PRINT_WORDS = {"echo", "printf", "exit", "date", "hostname", "env", "printenv", "sleep", "pwd",
               "whoami", "wait"}
LEADING = {"if", "then", "do", "else", "elif", "while", "until", "!", "{", "time", "(", "exec"}
OPENERS = {"if", "for", "while", "until", "case", "select", "{", "("}
CLOSERS = {"fi", "done", "esac", "}", ")"}
_ASSIGNMENT = re.compile(r"[A-Za-z_]\w*(\[[^]]*\])?\+?=.*", re.S)
_FUNCTION = re.compile(r"[\w.:-]+\(\)(\{)?")
SBATCH_LINE = re.compile(r"\A#!.*\n|^[ \t]*#SBATCH\b.*\n", re.M)
MAX_PREFIX = 2 << 20  # a prefix larger than this (generated scripts) is left whole on every node
# the run's environment (config env, ORCH_*), written by the Slurm backend for the setup: sbatch
# gave it the same
LOAD_ENV = '[ ! -r "${ORCH_SETUP_ENV:-}" ] || { set -a; . "$ORCH_SETUP_ENV"; set +a; }\n'


@dataclass
class Unit:
    """A top-level command with what is nested in it: [start, end) of the text, and what it does."""
    start: int
    end: int
    kind: str  # "env" (shapes the shell), "once" (does work), "mixed" (both)


def _kind(words: list[str]) -> str:
    if len(words) == 1 and re.fullmatch(r"[A-Z][A-Z0-9_]*", words[0]):
        # a bare name (a missing `=value`): the launch script comments it out, with its own note
        return "neutral"
    i = 0
    while i < len(words) and (words[i] in LEADING or words[i].endswith(")") and i == 0
                              and words[i] != "()"):
        i += 1
    while i < len(words) and _ASSIGNMENT.fullmatch(words[i]):
        i += 1
    if i >= len(words):
        return "env" if any(_ASSIGNMENT.fullmatch(w) for w in words) else "neutral"
    first = words[i]
    if (first in ENV_WORDS or _FUNCTION.fullmatch(first)
        or (i + 1 < len(words) and words[i + 1] in ("()", "("))):
        return "env"
    return "neutral" if first in NEUTRAL_WORDS else "print" if first in PRINT_WORDS else "once"


def _depth_change(words: list[str]) -> int:
    change = 0
    for n, w in enumerate(words):
        if (n == 0 or words[n - 1] in LEADING) and w in OPENERS:
            change += 1
        elif n == 0 and w in CLOSERS:
            change -= 1
        elif w == "{" and n > 0 and (_FUNCTION.fullmatch(words[n - 1]) or words[n - 1] in ("()",)):
            change += 1
        if _FUNCTION.fullmatch(w) and w.endswith("{"):
            change += 1
    return change


def _function_head(words: list[str]) -> bool:
    """`NAME ()`, `NAME()` or `function NAME` without its body on the same line."""
    return (len(words) == 2 and words[1] == "()" or len(words) == 1 and words[0].endswith("()")
            or len(words) == 2 and words[0] == "function")


def _merge(kinds: set[str]) -> str:
    kinds = kinds - {"neutral"}
    if kinds == {"print"}:
        return "once"
    kinds.discard("print")
    if not kinds:
        return "env"
    return kinds.pop() if len(kinds) == 1 else "mixed"


def units(text: str, stop: int) -> list[Unit] | None:
    """The finished top-level units of text[:stop], or None when the nesting can't be followed (a
    closing word with nothing open: then nothing moves)."""
    out: list[Unit] = []
    depth, start, kinds, function = 0, -1, set[str](), False
    for seg in segments(text[:stop]):
        words = [unquote(w) for w in seg.texts(text)]
        if depth == 0 and start < 0:
            start, kinds, function = seg.line_start, set(), _function_head(words)
        kinds.add(_kind(words))
        depth += _depth_change(words)
        if depth < 0:
            return None
        # `NAME ()` with its `{` body on the next line: one unit, a definition (it runs nothing)
        if depth == 0 and not _continues(text, seg) and not _function_head(words):
            out.append(Unit(start, -1, "env" if function else _merge(kinds)))
            start = -1
    # an unfinished unit at the end holds the launch (inside an `if`, a loop, a function): not part
    # of the prefix
    for a, b in zip(out, out[1:], strict=False):
        a.end = b.start
    if out:
        out[-1].end = start if start >= 0 else stop
    return out


def _continues(text: str, seg: Segment) -> bool:
    """The segment is followed on its line by `&&`, `||` or `|`: the next segment is part of the
    same command."""
    rest = text[seg.words[-1][1]:text.find("\n", seg.words[-1][1])
                if "\n" in text[seg.words[-1][1]:] else None]
    return bool(re.match(r"\s*(&&|\|\|?)", rest)) or rest.rstrip().endswith(("&&", "||", "|"))


def _body(text: str, unit: Unit) -> str:
    """The unit's text without the blank and comment lines that follow it (they stay where they
    are)."""
    lines = text[unit.start:unit.end].split("\n")
    while lines and (not lines[-1].strip() or lines[-1].lstrip().startswith("#")):
        lines.pop()
    return "\n".join(lines)


def split_once(script: str, stop: int, notes: list[str],
               args: tuple[str, ...] = ()) -> tuple[str, str | None]:
    """(per-node script, setup): the units of script[:stop] that only do work are replaced by a
    comment in the per-node script; the setup is all of script[:stop] (it sets the variables the
    work reads), in a subshell that stops the batch script where the original would have stopped
    (`set -e`, `exit`)."""
    if stop > MAX_PREFIX:
        return script, None
    found = units(script, stop)
    if found is None:
        notes.append("the lines before the launch could not be followed (unbalanced if/for/{ }): "
                     "they all run on every node; move work that must run once to "
                     "backend.slurm.setup")
        return script, None
    for u in found:
        if u.kind == "mixed":
            notes.append(f"`{' '.join(_body(script, u).split())[:120]}` both sets variables and "
                         "does work: it runs on every node (and once in the setup, if there is "
                         "one); split it if the work must run once")
    once = [u for u in found if u.kind == "once"]
    if not once:
        return script, None
    prefix = SBATCH_LINE.sub("", script[:found[-1].end]).replace(LAUNCH_BEFORE, "").strip("\n")
    setup = ("( # orchestrator: the lines before the launch, once, as under sbatch, with the run's "
             "environment\n" + LOAD_ENV
             + ("set -- " + shlex.join(args) + "  # the script's arguments\n" if args else "")
             # not `( ... ) || exit`: bash ignores `set -e` in such a list
             + prefix + "\nexit 0\n)\n"
             + '__orch_setup_rc=$?; [ "$__orch_setup_rc" = 0 ] || exit "$__orch_setup_rc"')
    setup = passing_bash_n(setup, [])  # repaired as the per-node script is (its notes say what was)
    shown = [" ".join(_body(script, u).split()) for u in once]
    for u in reversed(found):
        body = _body(script, u)
        # `clear; srun ...`: on the launch's line
        if u.kind == "once" and "\n" not in script[u.start + len(body):stop]:
            work = body.rstrip("; \t")
            script = script[:u.start] + ":" + script[u.start + len(work):]
        elif u.kind == "once":
            script = (script[:u.start] + "# orchestrator: ran once before the launch "
                                         "(backend.slurm.setup): "
                      + " ".join(body.split())[:120] + script[u.start + len(body):])
    notes.append(f"RUN ONCE: {len(once)} command(s) before the launch ran once under sbatch; they "
                 "now run once, in the batch script before the step (backend.slurm.setup), and are "
                 "commented out of the per-node script: " + "; ".join(s[:80] for s in shown[:8])
                 + (" ..." if len(shown) > 8 else ""))
    return script, setup


GATE = ('if [ "${SLURM_PROCID:-0}" = 0 ]; then  # orchestrator: ran once under sbatch, after the '
        "launch: the first task runs it\n")
# what every task must still do after the launch: wait for a launch sent to the background, exit
# with the launch's code
_EVERY_TASK = re.compile(r"\b(wait|exit|return)\b")
# an srun on chosen nodes (-w/--nodelist): the first of those nodes starts it (the per-node script's
# `srun`), so it is not gated to the first task
_LISTED_SRUN = re.compile(r"(?m)^[^#\n]*\bsrun\b(?:[^\n]|\\\n)*\s(-w|--nodelist\b)")


def once_after(script: str, notes: list[str]) -> str:
    """The commands after the launch (a profiler's `--resume`, an eval, a copy of the results) ran
    once under sbatch, in the batch script: in the per-node script they run on the first task only
    (SLURM_PROCID 0). `wait` and `exit` stay on every task."""
    a, b = script.find(LAUNCH_AFTER), script.rfind(FOOTER)
    if a < 0 or b < a:
        return script
    start = a + len(LAUNCH_AFTER)
    tail = script[start:b]
    found = units(tail, len(tail))
    if found is None:
        if tail.strip():
            notes.append("the lines after the launch close a block the launch is in (an `if`, a "
                         "function): they run on every node; move work that must run once to "
                         "after the controller, or guard it with SLURM_PROCID=0")
        return script
    once = [u for u in found if u.kind == "once" and not _EVERY_TASK.search(_body(tail, u))
            and not _LISTED_SRUN.search(_body(tail, u))]
    for u in reversed(once):
        body = _body(tail, u)
        tail = tail[:u.start] + GATE + body + "\nfi" + tail[u.start + len(body):]
    if once:
        shown = [" ".join(_body(script[start:b], u).split())[:80] for u in once]
        notes.append(f"RUN ONCE AFTER THE LAUNCH: {len(once)} command(s) after the launch ran once "
                     "under sbatch; they now run on the first task only (SLURM_PROCID=0): "
                     + "; ".join(shown[:8]) + (" ..." if len(shown) > 8 else ""))
    return script[:start] + tail + script[b:]
