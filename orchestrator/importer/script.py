"""The per-node launch script: the batch script's own body (module loads, exports, variables,
arrays, functions) and its training launch with srun taken out, run by the agent under bash on every
node."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile

from orchestrator.importer.nodes import NODE_HELPERS
from orchestrator.importer.scan import line_end

HEADER = """\
# The per-node launch, imported from {source} by `orchestrator import-sbatch`: the agent runs \
this under bash
# on every node (resources.tasks_per_node copies), in the place of the training srun. Edit it \
like the original.
{nodes}# Other srun calls (helper steps) share the agent's allocation; one on chosen nodes (-w) is
# started once, by the first of them, as the batch script started it once:
srun() {{
  local list; list=$(__orch_srun_opt -w --nodelist "$@")
  if [ -n "$list" ] && [ -n "${{ORCH_NODE_NAME:-}}" ] && [ -z "${{__orch_first_only:-}}" ]; then
    [ "$(__orch_here "$list")" = 0 ] && [ "${{SLURM_LOCALID:-0}}" = 0 ] || return 0
  fi
  command srun --overlap "$@"
}}
# Under sbatch this body ran once, on the batch host: `hostname` and $HOSTNAME named that host \
(rendezvous
# endpoints are built from them). The agent exports it as ORCH_BATCH_HOST.
hostname() {{
  if [ -z "${{ORCH_BATCH_HOST:-}}" ]; then command hostname "$@"; return; fi
  case "${{1:-}}" in
    "") echo "$ORCH_BATCH_HOST" ;;
    -s|--short) echo "${{ORCH_BATCH_HOST%%.*}}" ;;
    -i|--ip-address|-I|--all-ip-addresses) getent hosts "$ORCH_BATCH_HOST" \
| awk '{{print $1; exit}}' ;;
    *) command hostname "$@" ;;
  esac
}}
[ -z "${{ORCH_BATCH_HOST:-}}" ] || HOSTNAME=$ORCH_BATCH_HOST
# $RANDOM (`MASTER_PORT=$((RANDOM + 10000))`) draws the same on every node, as the batch script drew
# it once:
RANDOM=$(( ${{SLURM_JOB_ID:-0}} % 32768 ))
"""
_SBATCH = re.compile(r"\s*#SBATCH\b")
_BARE = re.compile(r"\s*([A-Z][A-Z0-9_]*)\s*")
_BARE_LINE = re.compile(r"^[ \t]*[A-Z][A-Z0-9_]*[ \t]*$", re.M)
# the header's last line: what the import adds goes after it
HEADER_END = "|| HOSTNAME=$ORCH_BATCH_HOST"
LAUNCH_BEFORE = ("set -o pipefail  # orchestrator: the launch's exit code is the job's, even "
                 "through `| tee`\n")
LAUNCH_AFTER = "\n__orch_rc=$?  # orchestrator: remembered for the end of the script\n"
FOOTER = '\nexit "${__orch_rc:-0}"  # orchestrator: the training launch\'s exit code\n'


def with_launch(text: str, start: int, end: int, replacement: str, line_start: int) -> str:
    """Apply the launch edit and wrap its logical line so its exit code is the script's."""
    text = text[:start] + replacement + text[end:]
    stop = line_end(text, start + len(replacement))
    return text[:line_start] + LAUNCH_BEFORE + text[line_start:stop] + LAUNCH_AFTER + text[
        stop:].rstrip("\n") + \
        FOOTER


def with_array_id(script: str, ids: list[int], notes: list[str]) -> str:
    """An array job's tasks became segments: segment k runs as the k-th task did, with the same
    SLURM_ARRAY_* variables (a script reading `$SLURM_ARRAY_TASK_ID` got -1 or nothing before)."""
    at = script.index("\n", script.index(HEADER_END)) + 1 if HEADER_END in script else 0
    notes.append("SLURM_ARRAY_TASK_ID is set from the segment: segment k runs as array task "
                 f"number k ({ids[0]}, {ids[1] if len(ids) > 1 else '...'}, ...), with "
                 "SLURM_ARRAY_TASK_MIN/MAX/COUNT")
    return script[:at] + array_lines(ids) + script[at:]


_TEE = re.compile(r"(\|&?[ \t]*)tee\b")
TEE_ONCE = ('__orch_tee() { if [ "${SLURM_PROCID:-0}" = 0 ]; then command tee "$@"; '
            "else command tee; fi; }  # orchestrator: `| tee` of the launch writes once per "
            "job, from the first task\n")


def tee_once(script: str, notes: list[str]) -> str:
    """`srun ... | tee -a main_log.txt` wrote one copy of the job's output; every node running the
    launch line would append its own to the same file at once: the first task writes it."""
    a = script.find(LAUNCH_BEFORE)
    b = script.find(LAUNCH_AFTER, a)
    a += len(LAUNCH_BEFORE)
    if a < len(LAUNCH_BEFORE) or b < 0 or not _TEE.search(script, a, b):
        return script
    launch = _TEE.sub(lambda m: m.group(1) + "__orch_tee", script[a:b])
    notes.append("`| tee` of the launch: the file is written by the first task (SLURM_PROCID=0), "
                 "with that node's output, not by every node at once; every node's output is in "
                 "run_dir/segments/NNNN/logs/")
    script = script[:a] + launch + script[b:]
    at = script.index("\n", script.index(HEADER_END)) + 1 if HEADER_END in script else 0
    return script[:at] + TEE_ONCE + script[at:]


def with_array_task(script: str, task: int, ids: list[int]) -> str:
    """One task of an array, imported as its own run: the same SLURM_ARRAY_* in every segment."""
    at = script.index("\n", script.index(HEADER_END)) + 1 if HEADER_END in script else 0
    return script[:at] + array_task_lines(task, ids) + script[at:]


def array_task_lines(task: int, ids: list[int]) -> str:
    return (f"export SLURM_ARRAY_TASK_ID={task}  # orchestrator: this run is array task {task}\n"
            f"export SLURM_ARRAY_TASK_MIN={min(ids)} SLURM_ARRAY_TASK_MAX={max(ids)} "
            f"SLURM_ARRAY_TASK_COUNT={len(ids)}\n")


def array_lines(ids: list[int]) -> str:
    """The SLURM_ARRAY_* exports of segment $ORCH_SEGMENT, as the array's task of the same rank had
    them."""
    if ids == list(range(ids[0], ids[0] + len(ids))):
        pick = f"$(( ORCH_SEGMENT - 1 + {ids[0]} ))"
    else:
        pick = (f"$(_ids=({' '.join(map(str, ids))}); echo \"${{_ids[ORCH_SEGMENT - "
                f"1]:-{ids[-1]}}}\")")
    return (f"export SLURM_ARRAY_TASK_ID={pick}  # orchestrator: segment k runs as the k-th array "
            f"task\nexport SLURM_ARRAY_TASK_MIN={min(ids)} SLURM_ARRAY_TASK_MAX={max(ids)} "
            f"SLURM_ARRAY_TASK_COUNT={len(ids)}\n")


_SBATCH_LINES = re.compile(r"^[ \t]*#SBATCH\b.*(?:\n|$)", re.M)
_TRAILING = re.compile(r"[ \t]+$", re.M)


def tidy(text: str, source: str) -> str:
    """Drop the shebang and #SBATCH lines; no tabs or trailing blanks (the YAML block stays
    readable). Done with whole-text substitutions: a 20 MB script is never held as a list of its
    lines."""
    text = text.replace("\r\n", "\n")
    if text.startswith("#!"):
        text = text[text.find("\n") + 1:] if "\n" in text else ""
    text = _TRAILING.sub("", _SBATCH_LINES.sub("", text).replace("\t", "    "))
    return HEADER.format(source=source, nodes=NODE_HELPERS) + text.lstrip("\n").rstrip("\n") + "\n"


def syntax_error(script: str) -> tuple[int, str] | None:
    """(line, message) of the first error `bash -n` finds, or None (also when bash is not
    installed)."""
    bash = shutil.which("bash")
    if bash is None:
        return None
    # from a file, not a pipe: bash reads a pipe one byte per system call (7.7 s for a 20 MB script,
    # 0.45 s as a file)
    with tempfile.NamedTemporaryFile("w", suffix=".sh", encoding="utf-8",
                                     errors="surrogateescape") as f:
        f.write(script)
        f.flush()
        res = subprocess.run([bash, "-n", f.name], capture_output=True, text=True, timeout=30,
                             check=False)
    if res.returncode == 0:
        return None
    m = re.search(r"line (\d+): (.*)", res.stderr)
    return (int(m.group(1)), m.group(2).strip()) if m else (0, res.stderr.strip())


def bare_names(script: str, notes: list[str]) -> str:
    """A line that is only an upper-case name (`SAVE_INTERVAL`) runs as a command that does not
    exist: an assignment missing its `=value`. Under `set -e` the original stops there; commented
    out, and named."""
    if not _BARE_LINE.search(script):
        return script  # the common case, without splitting a large script into its lines
    delims = set(re.findall(r"<<-?\s*['\"]?([A-Za-z_]\w*)", script))
    lines = script.split("\n")
    for i, line in enumerate(lines):
        m = _BARE.fullmatch(line) if line[:1].isspace() or line[:1].isupper() else None
        if m and m.group(1) not in delims:
            lines[i] = "# orchestrator: commented out, not a command (a missing `=value`?): " + line
            notes.append(f"`{m.group(1)}` alone on a line runs as a command that does not exist "
                         "(an assignment without `=value`?); the original stops there under `set "
                         "-e`: commented out")
    return "\n".join(lines)


def passing_bash_n(script: str, notes: list[str]) -> str:
    """Comment out the lines `bash -n` rejects (the original script has the same error), naming
    each."""
    script = bare_names(script, notes)
    for _ in range(10):
        err = syntax_error(script)
        if err is None:
            return script
        line, msg = err
        lines = script.split("\n")
        if not 0 < line <= len(lines):
            notes.append(f"the launch script fails `bash -n`: {msg}; fix it by hand")
            return script
        bad = lines[line - 1]
        lines[line - 1] = "# orchestrator: commented out, `bash -n` rejects it: " + bad
        notes.append(f"`{bad.strip()}` is a bash syntax error ({msg}; the original script stops "
                     "there too): commented out in the launch script")
        script = "\n".join(lines)
    return script


# A launch whose srun puts its ranks in a container (pyxis/enroot: --container-image, ...): that
# srun is kept, options as the script wrote them (the shell evaluates them, as under sbatch), for
# this node's ranks only, in a step of their own. The agent and this body stay on the host; the
# ranks run in the image, which needs nothing but /bin/sh. The wrapper tells each rank its place in
# the whole job, as the script's one srun would have (a step of one node says SLURM_PROCID 0..N-1),
# and marks it for the agent (ORCH_AGENT_PID, ORCH_RANK_STEP: its dumps and its stop find it).
RANK_STEP = r"""__orch_rank_step() {  # orchestrator: the launch's own srun, for this node's ranks
  local tasks=$1 opts=(); shift
  while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do opts+=("$1"); shift; done
  [ "$#" -gt 0 ] && shift
  local nnodes=${ORCH_NNODES:-1} node_rank=${ORCH_NODE_RANK:-0}
  local nodes=${SLURM_STEP_NODELIST:-${SLURM_JOB_NODELIST:-}} cpus=${SLURM_CPUS_PER_TASK:-}
  local list n; list=$(__orch_srun_opt -w --nodelist "${opts[@]}")
  if [ -n "$list" ]; then  # a step on chosen nodes: this node's part of it, if it is one of them
    node_rank=$(__orch_here "$list"); [ "$node_rank" -ge 0 ] || return 0
    nodes=$(__orch_hosts "$list" | paste -sd, -); nnodes=$(( $(tr -cd , <<< "$nodes" | wc -c) + 1 ))
  fi
  # the step's tasks a node, as its own options say once the shell has evaluated them
  n=$(__orch_srun_opt '' --ntasks-per-node "${opts[@]}")
  if [ -z "$n" ]; then
    n=$(__orch_srun_opt -n --ntasks "${opts[@]}")
    case $n in ''|*[!0-9]*) n= ;; *) n=$(( n / nnodes )) ;; esac
  fi
  case $n in ''|*[!0-9]*|0) ;; *) tasks=$n ;; esac
  (  # each task's CPUs, as sbatch's environment gave the script's srun (the agent holds them all)
    unset SLURM_TRES_PER_TASK
    [ -z "$cpus" ] || export SLURM_CPUS_PER_TASK=$(( cpus / tasks > 0 ? cpus / tasks : 1 ))
    exec srun "${opts[@]}" --overlap --nodes=1 --ntasks="$tasks" --ntasks-per-node="$tasks" \
      --nodelist="${ORCH_NODE_NAME:?}" /bin/sh -c "$__ORCH_RANK_ENV" orch-rank \
      "$((node_rank * tasks))" "$((nnodes * tasks))" "$node_rank" "$nnodes" "$nodes" \
      "${ORCH_AGENT_PID:-}" "$tasks" "$@"
  )
}
__ORCH_RANK_ENV='r=$(($1 + ${SLURM_LOCALID:-0})); export SLURM_PROCID=$r RANK=$r ORCH_RANK=$r \
LOCAL_RANK=${SLURM_LOCALID:-0} ORCH_LOCAL_RANK=${SLURM_LOCALID:-0} SLURM_NTASKS=$2 SLURM_NPROCS=$2 \
SLURM_STEP_NUM_TASKS=$2 WORLD_SIZE=$2 ORCH_WORLD_SIZE=$2 SLURM_NODEID=$3 SLURM_NNODES=$4 \
SLURM_STEP_NUM_NODES=$4 SLURM_STEP_NODELIST=$5 SLURM_NODELIST=$5 ORCH_AGENT_PID=$6 \
ORCH_RANK_STEP=1 SLURM_NTASKS_PER_NODE=$7 SLURM_STEP_TASKS_PER_NODE="$7(x$4)" \
SLURM_TASKS_PER_NODE="$7(x$4)"; shift 7; exec "$@"'
"""


def with_rank_step(script: str) -> str:
    """The launch's kept srun (`__orch_rank_step TASKS OPTIONS -- PROGRAM`), defined in the
    header."""
    at = script.index("\n", script.index(HEADER_END)) + 1 if HEADER_END in script else 0
    return script[:at] + RANK_STEP + script[at:]


# after the header: the `srun` shim starts every helper step from here, as the batch script did
FIRST_ONLY = ("__orch_first_only=1  # orchestrator: this node alone runs the script "
              "(resources.launch_nodes: first)\n")


def first_only(script: str) -> str:
    """The per-node script of a launch on the first node only (the header's end is its mark)."""
    at = script.index("\n", script.index(HEADER_END)) + 1 if HEADER_END in script else 0
    return script[:at] + FIRST_ONLY + script[at:]
