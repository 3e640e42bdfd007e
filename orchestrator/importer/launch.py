"""The training launch of a batch script: which command it is, and the same command with srun taken
out, since the agent is what srun started (one agent per node; the launcher, torchrun & co, runs
under it)."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from orchestrator.importer.names import resolve
from orchestrator.importer.scan import Segment, unquote

RANK_LAUNCHERS = ("srun", "mpirun", "mpiexec")
LAUNCH_WORDS = re.compile(r"(^|[\s/])(torchrun|deepspeed|accelerate)(\s|$)|"
                          r"torch\.distributed\.(run|launch)|accelerate\.commands\.launch|"
                          r"deepspeed\.launcher")
TRAINING_WORDS = re.compile(r"(^|[\s/])python[\d.]*(\s|$)|\.py(\s|$)|" + LAUNCH_WORDS.pattern)
# what a line must hold to be an assignment or a launch (`_classify`, names.assignments): other
# plain lines are not tokenized at all
LAUNCHER_TEXT = re.compile(r"srun|mpirun|mpiexec|python|\.py|torchrun|deepspeed|accelerate|"
                           r"torch\.distributed")
WANTED = re.compile("=|" + LAUNCHER_TEXT.pattern)
_ASSIGNMENT = re.compile(r"[A-Za-z_]\w*=.*", re.S)
_PYTHON = re.compile(r"python[\d.]*$")
_PYTHON_C = re.compile(r"python[\d.]*\s+(-\w+\s+)*-c\b")
CONTAINER_FLAGS = {"--container-remap-root", "--container-mount-home", "--container-writable",
                   "--container-readonly", "--no-container-mount-home", "--container-entrypoint",
                   "--container-entrypoint-log", "--no-container-remap-root"}
SRUN_VALUE = {"-N", "-n", "-c", "-w", "-o", "-e", "-J", "-p", "-t", "-G", "-x", "-A", "-q", "-C",
              "-D", "-m",
              "-d", "-i", "-W", "-r", "-K", "--jobid", "--nodes", "--ntasks", "--ntasks-per-node",
              "--cpus-per-task",
              "--container-image", "--container-mounts", "--container-workdir", "--container-name",
              "--container-env", "--output", "--error", "--input", "--partition", "--time",
              "--nodelist",
              "--exclude", "--mpi", "--gres", "--gpus", "--gpus-per-node", "--gpus-per-task",
              "--cpu-bind",
              "--distribution", "--mem", "--chdir", "--export", "--account", "--qos", "--job-name",
              "--het-group",
              "--relative", "--ntasks-per-gpu", "--mem-per-cpu", "--mem-per-gpu", "--cpus-per-gpu",
              "--gpu-bind",
              "--constraint", "--dependency", "--signal", "--network", "--reservation", "--comment",
              "--wckey",
              "-L", "--licenses", "-M", "--clusters", "--cluster", "--begin", "--deadline",
              "--mail-type",
              "--mail-user", "--switches", "--threads-per-core", "--cores-per-socket",
              "--sockets-per-node",
              "--ntasks-per-core", "--ntasks-per-socket", "--mem-bind", "--hint", "--prolog",
              "--epilog",
              "--task-prolog", "--task-epilog", "--slurmd-debug", "--tmp", "--uid", "--gid",
              "--priority",
              "--profile", "--power", "-S", "--core-spec", "--thread-spec", "--cpu-freq",
              "--delay-boot",
              "--gres-flags", "--mincpus", "--tres-per-task", "--open-mode", "--container",
              "--container-id",
              "--accel-bind", "--acctg-freq", "--bb", "--bbf", "--extra", "--segment",
              "--stepmgr", "--tres-bind", "--nodefile", "-F", "--mcs-label", "--ntasks-per-tres",
              "--time-min", "--gpu-freq"}
MPI_VALUE = {"-n", "-np", "-N", "-H", "--host", "--hostfile", "-hostfile", "--map-by", "--bind-to",
             "-x", "--mca", "-mca", "--npernode", "-ppn", "-f"}


@dataclass
class Launch:
    """The training launch found in a batch script: where it is, its launcher and program."""
    segment: Segment
    # "srun" (a rank launcher: srun/mpirun) or "direct" (torchrun, deepspeed, python from the batch
    # script)
    kind: str
    launcher: str  # srun, mpirun, torchrun, deepspeed, accelerate, python
    program_at: int  # index of the first word after srun and its options
    dropped: list[str]  # srun options that were dropped


def _command_index(words: list[str]) -> int:
    i = 0
    while i < len(words) and (_ASSIGNMENT.fullmatch(words[i]) or words[i] in ("time", "exec", "!")):
        i += 1
    return i


def _is_option_expansion(word: str, env: dict[str, str]) -> bool:
    """`$SRUN_ARGS`, `${AUTO_RESUME}`, `"${ARGS[@]}"` right after srun: srun options, not the
    program."""
    m = re.fullmatch(r"\"?\$\{?([A-Za-z_]\w*)(\[[@*]\])?\}?\"?", word)
    if not m:
        return False
    if m.group(1) not in env:
        return bool(re.search(r"ARGS|SRUN|OPTS|RESUME|FLAGS", m.group(1)))
    value = resolve(env[m.group(1)], env).strip()
    return not value or value.startswith("-")


def _options_end(words: list[str], start: int, values: set[str], env: dict[str, str]) -> int:
    i = start
    while i < len(words):
        w = unquote(words[i])
        if w.startswith("-"):
            i += 2 if (w in values and "=" not in w) else 1
        elif _is_option_expansion(words[i], env):
            i += 1
        else:
            break
    return i


def _classify(seg: Segment, text: str, env: dict[str, str]) -> Launch | None:
    span = text[seg.words[0][0]:seg.words[-1][1]]
    if not LAUNCHER_TEXT.search(span) and not any(c in span for c in "$'\"\\"):
        return None  # no launcher's name in it, and nothing that could make one
    words = seg.texts(text)
    c = _command_index(words)
    if c >= len(words):
        return None
    first = resolve(unquote(words[c]), env).split()
    name = first[0].rsplit("/", 1)[-1] if first else ""
    if name in RANK_LAUNCHERS:
        end = _options_end(words, c + 1, SRUN_VALUE if name == "srun" else MPI_VALUE, env)
        return Launch(seg, "srun", name, end, words[c + 1:end]) if end < len(words) else None
    rest = resolve(" ".join(unquote(w) for w in words[c:]), env)
    m = LAUNCH_WORDS.search(rest) or (_PYTHON.match(name) and TRAINING_WORDS.search(rest))
    if not m or _PYTHON_C.match(rest):
        return None
    launcher = next((w for w in ("torchrun", "deepspeed", "accelerate") if w in rest), "python")
    if "torch.distributed" in rest:
        launcher = "torchrun"
    return Launch(seg, "direct", launcher, c, [])


def _score(launch: Launch, text: str, env: dict[str, str]) -> tuple[int, int]:
    rest = resolve(" ".join(unquote(w) for w in launch.segment.texts(text)[launch.program_at:]),
                   env)
    training = 2 if LAUNCH_WORDS.search(rest) else 1 if TRAINING_WORDS.search(rest) else 0
    if _PYTHON_C.match(rest):  # `srun python -c "import x; x.cleanup()"`: an inline helper
        training = 0
    return (2 if launch.kind == "srun" and training else 0) + training, launch.segment.words[0][0]


def find_launch(segs: list[Segment], text: str, env: dict[str, str]) -> Launch | None:
    """The training launch: a top-level srun (or mpirun) that starts training before any launch run
    from the batch script itself; a launcher (torchrun, deepspeed, accelerate) before plain python;
    the last one on a tie. Data preparation (`python prepare.py` before the srun, `python -c ...`)
    and helper steps inside `$(...)` are not the launch."""
    # A rank launcher or a launch tool scores 2 or more, plain python 1 at most: the lines that can
    # hold one (or expand variables into one) are judged first; every line only when none of them is
    # such a launch.
    strong = _best([s for s in segs if _STRONG.search(text, s.words[0][0], s.words[-1][1])], text,
                   env)
    if strong is not None and strong[0][0] >= 2:
        return strong[1]
    best = _best(segs, text, env)
    if best is not None:
        return best[1]
    # no training words anywhere: under sbatch the srun step is what ran on the nodes, whatever its
    # program (`srun ./run.sh`, `srun bash train.sh`); the last one that is no helper
    steps = [la for la in (_classify(s, text, env) for s in segs)
             if la is not None and la.kind == "srun" and not _helper(la, text, env)]
    return steps[-1] if steps else None


# programs a helper step runs (`srun hostname`, `srun --ntasks-per-node=1 mkdir -p $TMP`)
HELPERS = {"hostname", "nvidia-smi", "echo", "mkdir", "ls", "true", "sleep", "env", "printenv",
           "cat", "rm", "cp", "touch", "date", "df", "free", "uname", "id", "pwd", "rsync", "tar",
           "nproc", "lscpu", "ibstat", "ibv_devinfo", "dcgmi", "scontrol", "sinfo", "killall",
           "pkill", "ulimit", "which"}


def _helper(launch: Launch, text: str, env: dict[str, str]) -> bool:
    words = launch.segment.texts(text)[launch.program_at:]
    first = resolve(unquote(words[0]), env).split() if words else []
    return not first or first[0].rsplit("/", 1)[-1] in HELPERS


_STRONG = re.compile(r"srun|mpirun|mpiexec|torchrun|deepspeed|accelerate|torch\.distributed|"
                     r"[$`'\"\\]")


def _best(segs: list[Segment], text: str,
          env: dict[str, str]) -> tuple[tuple[int, int], Launch] | None:
    found = [la for la in (_classify(s, text, env) for s in segs) if la is not None]
    scored = [(sc, la) for la in found if (sc := _score(la, text, env))[0] > 0]
    return max(scored, key=lambda x: x[0]) if scored else None


def _deepspeed_per_node(words: list[str], c: int) -> tuple[list[str], list[str]]:
    """deepspeed's own multi-node launch (pdsh/openmpi over a hostfile) -> one deepspeed per
    node."""
    out, dropped, i = [], [], c + 1
    while i < len(words) and words[i].startswith("-"):
        flag, eq, _ = words[i].partition("=")
        if flag in ("--hostfile", "--launcher", "--num_nodes", "--include", "--exclude", "-H", "-i",
                    "-e", "--master_addr", "--node_rank", "--no_ssh"):
            dropped.append(words[i] if eq or flag == "--no_ssh" else f"{words[i]} {words[i + 1]}")
            i += 1 if eq or flag == "--no_ssh" else 2
            continue
        out.append(words[i])
        i += 1
    node = ["--no_ssh", "--node_rank=$SLURM_NODEID", "--num_nodes=$SLURM_JOB_NUM_NODES",
            "--master_addr=$MASTER_ADDR"]
    return [words[c], *node, *out, *words[i:]], dropped


def container_options(launch: Launch, env: dict[str, str]) -> list[str]:
    """pyxis/enroot options (`--container-image`, `--container-mounts`, ...) among the dropped srun
    options, also inside an expansion such as `"${ARGS[@]}"`, each as one `--opt=value` word."""
    # an array expansion ("${ARGS[@]}") is one word per element: quotes off, then expanded, then
    # split
    words = shlex.split(" ".join(resolve(unquote(w), env) for w in launch.dropped), posix=True)
    out, i = [], 0
    while i < len(words):
        w = words[i]
        if w.startswith(("--container-", "--no-container-")):
            if ("=" not in w and w not in CONTAINER_FLAGS and not w.startswith("--no-") and i
                + 1 < len(words)):
                w, i = f"{w}={words[i + 1]}", i + 1
            out.append(w)
        i += 1
    return out


_CWD = re.compile(r"\$\(\s*pwd\s*\)|`\s*pwd\s*`|\$\{PWD\}|\$PWD(?![A-Za-z0-9_])")


def without_shell(options: list[str], workdir: str | None) -> tuple[list[str], list[str]]:
    """(carried, refused): srun_args are argv words and no shell expands them on the way to srun, so
    the current directory (`$(pwd)`, `$PWD`) becomes the run's workdir, where sbatch would have
    started the script, and an option whose value still needs the shell (another variable, a
    command) is refused rather than passed on literally."""
    carried: list[str] = []
    refused: list[str] = []
    for option in options:
        value = _CWD.sub(lambda _m: workdir or "$PWD", option) if workdir else option
        (refused if ("$" in value or "`" in value) else carried).append(value)
    return carried, refused


def rewrite(launch: Launch, text: str, multinode: bool) -> tuple[int, int, str, list[str]]:
    """(start, end, replacement): the edit of `text` that makes the launch what the agent runs; and
    notes."""
    seg = launch.segment
    words = seg.texts(text)
    c = _command_index(words)
    notes = restart_owner([unquote(w) for w in words])
    if launch.kind == "srun":
        notes.append(f"the training launch: the agent takes {launch.launcher}'s place (one agent "
                     "per node, resources.tasks_per_node copies of the command on each); "
                     f"{launch.launcher} and its options are dropped: {launch.launcher} "
                     f"{' '.join(launch.dropped) or '(none)'}")
        return seg.words[c][0], seg.words[launch.program_at][0], "", notes
    if launch.launcher == "deepspeed" and multinode and unquote(words[c]).endswith("deepspeed"):
        new, dropped = _deepspeed_per_node(words, c)
        notes.append("deepspeed launched from the batch script starts every host itself "
                     "(pdsh/openmpi); under the orchestrator the agent runs on every node, so "
                     "deepspeed runs once per node with --no_ssh --node_rank=$SLURM_NODEID "
                     f"(dropped: {', '.join(dropped) or 'nothing'})")
        return seg.words[c][0], seg.words[-1][1], " ".join(new), notes
    if multinode:
        notes.append(f"the launch `{launch.launcher}` ran once, on the first node, from the batch "
                     "script; the agent now runs it on every node: check that it is told its node "
                     "rank ($SLURM_NODEID)")
    return seg.words[c][0], seg.words[c][0], "", notes


def restart_owner(words: list[str]) -> list[str]:
    """NVRx's `ft_launcher --max-restarts N` restarts the ranks inside the job itself (issue 40):
    it stays the owner of those restarts, the controller owns the segments around them."""
    if not any(w.rsplit("/", 1)[-1] == "ft_launcher" for w in words):
        return []
    n = next((v for i, w in enumerate(words) for v in [w.partition("=")[2] if "=" in w
              else (words[i + 1] if i + 1 < len(words) else "")]
              if w.split("=")[0] in ("--max-restarts", "--max_restarts")), "0")
    return [f"IN-JOB RESTARTS: ft_launcher (NVRx) restarts the ranks inside each segment's job "
            f"(--max-restarts {n}) and stays their owner: the controller resubmits a segment "
            "only once its job ended, holds no spare nodes of its own (resources.spare_nodes: "
            "0), and stops when NVRx decides the job must not be restarted (exit 93)"]


def rank_step(launch: Launch, text: str, tasks: int,
              in_image: bool = True) -> tuple[int, int, str, list[str]]:
    """The edit for a launch whose srun starts its ranks in a pyxis/enroot container, or on nodes
    the script names (`-w $host`): that srun stays, its options as the script wrote them (the
    script's shell evaluates them, as under sbatch), and runs this node's ranks (`tasks`, or its
    share of the named nodes' step) in a step of their own (`__orch_rank_step`, the script's
    header); the agent stays on the host. (start, end, replacement, notes)."""
    seg = launch.segment
    c = _command_index(seg.texts(text))
    options = text[seg.words[c + 1][0]:seg.words[launch.program_at - 1][1]]
    shown = " ".join(launch.dropped)[:200]
    what = (f"CONTAINER: the launch's own srun, with its container options as the script wrote "
            f"them ({shown}), starts each node's {tasks} rank(s) in the image"
            if in_image else f"NODES NAMED: the launch's own srun ({shown}) runs on the nodes it "
                             "names only, each node starting its own part of the step")
    note = (f"{what}, in a step of its own on that node (`__orch_rank_step`); the agents stay on "
            "the host, so nothing of the orchestrator is needed in the image (only /bin/sh), and "
            "each rank is told its place in the step (SLURM_PROCID, SLURM_NODEID, RANK, "
            "WORLD_SIZE) as the one srun would have told it")
    return (seg.words[c][0], seg.words[launch.program_at][0],
            f"__orch_rank_step {tasks} {options} -- ", [note])
