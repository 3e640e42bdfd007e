"""What import-sbatch refuses, with one line naming the script's line and what to do, rather than a
config that would run something other than what sbatch runs: a heterogeneous job, a launch inside a
shell loop (one launch per host or per item), a script with no launch it recognises, and a job
array whose tasks do different work (a sweep) or run side by side.

And what it takes out, with a note: the script's own resubmission (`sbatch "$0"`, `scontrol
requeue`), since the controller submits the next segment itself."""

from __future__ import annotations

import re
from dataclasses import dataclass

from orchestrator.importer.scan import Segment, segments, unquote


class Refused(ValueError):
    """The script cannot run under the orchestrator as it runs under sbatch."""

    def __init__(self, line: int | None, message: str):
        self.line = line
        super().__init__(message)

    def where(self, script: str) -> str:
        return f"{script}:{self.line}" if self.line else script


def line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, max(0, pos)) + 1


_HET = re.compile(r"^[ \t]*#SBATCH[ \t]+(hetjob|packjob)\b", re.M)


def hetjob(text: str) -> None:
    """`#SBATCH hetjob` (or the old `packjob`): components with different resources."""
    m = _HET.search(text)
    if m:
        raise Refused(line_of(text, m.start()),
                      f"`#SBATCH {m.group(1)}` makes a heterogeneous job (components with their "
                      "own resources); the orchestrator submits one homogeneous job per segment: "
                      "run the training component as its own script, or keep using sbatch")


def het_launch(words: list[str], line: int) -> None:
    """`srun A : B` or `srun --het-group=...`: a heterogeneous step (MPMD)."""
    if ":" in [unquote(w) for w in words] or any(
            unquote(w).startswith(("--het-group", "--pack-group")) for w in words):
        raise Refused(line, "the launch is a heterogeneous (MPMD) srun step (`srun A : B` or "
                            "--het-group): the agent starts one program per task and cannot "
                            "split it; launch one program, or keep using sbatch")


_LOOP_WORDS = re.compile(r"\b(for|while|until|select|do|done)\b")
_LEAD = {"then", "do", "else", "{", "(", "!", "time", "&&", "||"}


@dataclass
class _Open:
    """A loop the scan is inside: its keyword and line."""
    word: str
    line: int


def enclosing_loop(text: str, launch: Segment) -> _Open | None:
    """The shell loop (`for`/`while`/`until`/`select` ... `done`) the launch is inside, if any."""
    stack: list[_Open] = []
    for seg in segments(text[:launch.words[0][0]], _LOOP_WORDS):
        words = [unquote(w) for w in seg.texts(text)]
        i = 0
        while i < len(words) and words[i] in _LEAD:
            i += 1
        if i < len(words) and words[i] in ("for", "while", "until", "select"):
            stack.append(_Open(words[i], line_of(text, seg.words[i][0])))
        elif words and words[0] == "done" and stack:
            stack.pop()
    return stack[-1] if stack else None


def shebang(text: str, notes: list[str]) -> None:
    """sbatch refuses a script whose first line is not `#!INTERPRETER`: refused when the `#!` is
    further down (a licence header above it), said when there is none."""
    if text.startswith("#!"):
        return
    at = text.find("\n#!")
    if at >= 0:
        raise Refused(1, "the first line is not `#!` and an interpreter, so sbatch refuses this "
                         "file (\"This does not look like a batch script\"); the `#!` is on line "
                         f"{line_of(text, at + 1)}: move it to line 1")
    notes.append("no `#!/bin/bash` on line 1: sbatch would refuse the script as it is; the "
                 "orchestrator runs it under bash")


def bash_rejects(text: str, error: tuple[int, str] | None) -> None:
    """A script `bash -n` rejects stops at that line under sbatch (the lines before it ran, the
    launch after it never did): refused, naming the line, rather than imported with the line
    commented out and the rest run. `error` is `bash -n`'s (line, message) on `text`."""
    first = text.split("\n", 1)[0]
    if error is None or (first.startswith("#!") and not re.search(r"\b(ba)?sh\b", first)):
        return  # another interpreter's script is not bash's to judge
    line, msg = error
    raise Refused(line or None, f"bash rejects this script ({msg}), so under sbatch it stops "
                                "there, never reaching what follows; fix the line (a placeholder "
                                "left to fill in?) and import it again")


_SOME_NODES = re.compile(r"(-w|--nodelist|-r|--relative|-x|--exclude)(=.*|(?<=^-[wrx])\S+)?")
_COUNT = re.compile(r"(-N|--nodes|-n|--ntasks)(?:=(.*)|(?<=^-[Nn])(\d+))?")


def on_some_nodes(dropped: list[str], nodes: int, line: int, named: bool = False) -> None:
    """The launch's srun runs on nodes Slurm picks (`--nodes=8` of 9, `-n1`) or excludes some
    (`-x`, `-r`): the agent runs one launch on every node of the step, so a job split between
    launches that way cannot run as written. Nodes the script names (`-w $NODE`, `named`) run their
    own part of it."""
    words = [unquote(w) for w in dropped]
    for i, w in enumerate(words):
        m = _SOME_NODES.fullmatch(w)
        if named and (m is None or m.group(1) in ("-w", "--nodelist")):
            continue
        if m:
            raise Refused(line, f"the training launch's srun runs on chosen nodes ({w}"
                                f"{'' if m.group(2) or i + 1 >= len(words) else ' ' + words[i + 1]}"
                                "): the orchestrator runs the launch on every node of the job; "
                                "keep using sbatch for a job split between launches, or write the "
                                "config by hand")
        c = _COUNT.fullmatch(w)
        value = (c.group(2) or c.group(3) if c and (c.group(2) or c.group(3))
                 else words[i + 1] if c and i + 1 < len(words) else None)
        if value is not None and value.isdigit() and int(value) < nodes:
            flag = c.group(1) if c else w
            raise Refused(line, f"the training launch's srun asks for {flag} {value} in a "
                                f"job of {nodes} nodes: it runs on part of the job, and the "
                                "orchestrator runs the launch on every node; keep using sbatch for "
                                "a job split between launches, or write the config by hand")


def no_launch() -> Refused:
    return Refused(None, "no training launch recognised (srun, mpirun, torchrun, deepspeed, "
                         "accelerate, python ...) in a job of several nodes: run as it is, the "
                         "whole script would start on every node, which sbatch never does; write "
                         "the config by hand (`command:` is what one node runs), see "
                         "docs/TUTORIAL.md")


def no_launch_no_nodes() -> Refused:
    return Refused(None, "no training launch recognised and no #SBATCH --nodes: with sbatch's one "
                         "node the whole script would run there as it is, but a script given its "
                         "node count at submission (sbatch -N ...) would not run as meant; if the "
                         "job is one node, add `#SBATCH --nodes=1`, otherwise write the config by "
                         "hand (`command:` is what one node runs)")


def in_loop(loop: _Open, launch_line: int) -> Refused:
    return Refused(launch_line,
                   f"the training launch is inside a `{loop.word}` loop (line {loop.line}) and "
                   "sent to the background without the nodes it runs on: sbatch starts one step "
                   "per item where Slurm finds room, the orchestrator starts one launch per node "
                   "and cannot place them so; name each pass's nodes (`srun -w $host ...`), or "
                   "write the config by hand (SLURM_NODEID tells a node its index), see "
                   "docs/TUTORIAL.md")


def backgrounded(text: str, launch: Segment) -> bool:
    """The launch is sent to the background (`srun ... &`)."""
    return re.match(r"[ \t]*&(?!&)", text[launch.words[-1][1]:]) is not None


_TASK_ID = re.compile(r"\$\{?SLURM_ARRAY_TASK_ID\b")
_ARRAY_LINE = re.compile(r"^[ \t]*#SBATCH\b.*?(--array\b|-a\b)", re.M)
_SBATCH_LINES = re.compile(r"^[ \t]*#SBATCH\b.*$", re.M)


@dataclass
class Array:
    """An #SBATCH --array: its value as written and its task ids."""
    spec: str
    ids: list[int]

    @property
    def throttle(self) -> int | None:
        m = re.search(r"%(\d+)", self.spec)
        return int(m.group(1)) if m else None


def task_id_use(text: str) -> int | None:
    """The line of the first use of $SLURM_ARRAY_TASK_ID outside #SBATCH lines and comments."""
    body = _SBATCH_LINES.sub("", text)
    for m in _TASK_ID.finditer(body):
        line_start = body.rfind("\n", 0, m.start()) + 1
        if "#" not in body[line_start:m.start()]:
            return line_of(body, m.start())
    return None


def array(text: str, arr: Array, task: int | None, script: str) -> str:
    """How the array runs: "chain" (one chain of segments: `%1` and the same work in every task),
    "task" (one task of it, `--array-task`, or an array of one); otherwise Refused."""
    at = _ARRAY_LINE.search(text)
    line = line_of(text, at.start()) if at else None
    if task is not None:
        if task not in arr.ids:
            raise Refused(line, f"--array-task {task}: not a task of --array={arr.spec} "
                                f"(ids {_shown(arr.ids)})")
        return "task"
    if len(arr.ids) == 1:
        return "task"
    use = task_id_use(text)
    stem = _stem(script) or "task"
    how = (f"orchestrator import-sbatch SCRIPT --array-task ID -o {stem}-ID.yaml, for "
           f"each ID of {_shown(arr.ids)}, and run each config (`orchestrator runs runs/` shows "
           "them together)")
    if use is not None:
        at_once = (f"at most {arr.throttle} at once" if arr.throttle
                   else "all at once")
        raise Refused(line, f"--array={arr.spec} is a sweep: its tasks do different work "
                            f"($SLURM_ARRAY_TASK_ID, line {use}), and one chain of segments would "
                            "run the next task's work on a retry; import each task as its own run: "
                            f"{how}; run {at_once}, as the array did")
    if arr.throttle != 1:
        at_once = f"up to {arr.throttle}" if arr.throttle else f"all {len(arr.ids)}"
        raise Refused(line, f"--array={arr.spec} runs {at_once} of its tasks at once, and the "
                            "script does not read $SLURM_ARRAY_TASK_ID: copies of the same work "
                            "side by side; if the tasks continue one training, they are a chain: "
                            f"write `%1` (--array={arr.spec.split('%')[0]}%1); if the program "
                            f"reads the task id itself, import one task per run: {how}")
    return "chain"


def _shown(ids: list[int]) -> str:
    return ",".join(map(str, ids)) if len(ids) <= 6 else f"{ids[0]}..{ids[-1]} ({len(ids)} ids)"


def _stem(script: str) -> str:
    return re.sub(r"\.[A-Za-z]+$", "", script.rsplit("/", 1)[-1])


# `sbatch "$0"`, `sbatch ${BASH_SOURCE[0]}`, `sbatch --dependency=afterany:$SLURM_JOB_ID $0`, and
# `scontrol requeue $SLURM_JOB_ID`: the script's own next job
_SELF = r"(?:\$0\b|\$\{0\}|\$\{?BASH_SOURCE\b|\$\{?SLURM_JOB_NAME\b|{name})"


# `#SBATCH --job-name=NAME` / `-J NAME`: a script resubmitted by a path whose file is named after
# its job is the script itself, whatever the file is called now
_JOB_NAME = re.compile(r"(?m)^#SBATCH[ \t]+(?:--job-name[= ]|-J[ \t]*)[\"']?([\w.+-]+)")
_OTHER_SBATCH = re.compile(r"(?<![\w./:-])sbatch\b(?![\w.-])")


def resubmissions(text: str, script: str, notes: list[str]) -> str:
    """The script's own resubmission, made a no-op (`: sbatch ...`) with a note: the controller
    submits the next segment, and a second job beside it would train the same run twice. Its own
    file is named by `$0`, the script's name, or the job's name; any other `sbatch` the script
    runs stays, with a note (an eval job, or this training's next job under a name not seen)."""
    stems = {_stem(script)} | {_stem(m.group(1)) for m in _JOB_NAME.finditer(text)}
    alts = "|".join(re.escape(s) for s in sorted(stems) if s)
    name = rf"(?<![\w.-])(?:{alts})(?:\.\w+)?(?![\w.-])" if alts else r"\b\B"
    rx = re.compile(r"(?<![\w./:-])(sbatch\b(?=[^\n;|&]*" + _SELF.replace("{name}", name)
                    + r")|scontrol[ \t]+requeue(?:hold)?\b)")
    found: list[tuple[int, str]] = []

    def strike(m: re.Match[str]) -> str:
        before = text[text.rfind("\n", 0, m.start()) + 1:m.start()]
        if before.lstrip().startswith("#") or " #" in before:
            return m.group(0)  # in a comment
        end = text.find("\n", m.start())
        found.append((line_of(text, m.start()),
                      text[m.start():end if end >= 0 else None].strip()[:100]))
        return ": " + m.group(1)

    out = rx.sub(strike, text)
    for line, what in found:
        notes.append(f"RESUBMISSION TAKEN OUT: `{what}` (line {line}) submitted or requeued this "
                     "script again; the controller submits the next segment itself, so it now "
                     "reads `: ...` (does nothing)")
    for m in _OTHER_SBATCH.finditer(out):
        start = out.rfind("\n", 0, m.start()) + 1
        before = out[start:m.start()]
        if before.lstrip().startswith("#") or " #" in before or before.rstrip().endswith(":"):
            continue  # a comment, or one taken out above
        end = out.find("\n", m.start())
        what = out[m.start():end if end >= 0 else None].strip()[:100]
        at = line_of(out, m.start())
        notes.append(f"ANOTHER JOB SUBMITTED: `{what}` (line {at}) still runs, "
                     "once per segment, as under sbatch; if it submits this training's next job, "
                     "take it out: the controller submits the next segment itself")
    return out
