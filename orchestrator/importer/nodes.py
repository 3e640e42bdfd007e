"""Steps on chosen nodes (`srun -w $host ...`, `--nodelist=...`): the bash the per-node script
carries so that each node runs its own part of such a step, as under sbatch the batch script's one
srun put it there. A per-host loop (`for h in $hosts; do srun -N1 -w $h ... & done; wait`) then runs
on every node, and each node starts only the pass that names it."""

from __future__ import annotations

import re
from typing import Any

from orchestrator.importer.launch import SRUN_VALUE
from orchestrator.importer.scan import unquote

# `-w LIST`, `-wLIST`, `--nodelist=LIST`, `--nodelist LIST` among a launch's srun options
_LISTED = re.compile(r"-w.*|--nodelist(=.*)?")

# bash, in the per-node script's header (before the `srun` shim that uses it)
_NODE_HELPERS = r"""# Steps on chosen nodes (-w/--nodelist): a node runs only its own part of one.
__orch_hosts() {  # a host list (commas or spaces; ranges through scontrol), one a line
  { local -; set +x; } 2>/dev/null  # quiet under the script's `set -x`
  local l; l=$(printf '%s' "$1" | tr -s ' \t\n,' ','); l=${l#,}; l=${l%,}
  case $l in *\[*) command scontrol show hostnames "$l" 2>/dev/null && return ;; esac
  tr ',' '\n' <<< "$l"
}
__orch_srun_opt() {  # the value of srun option $1 (short) / $2 (long) among srun's options "${@:3}"
  { local -; set +x; } 2>/dev/null
  local short=$1 long=$2 prev="" o value=""; shift 2
  for o in "$@"; do
    [ "$o" = "--" ] && break
    if [ -n "$prev" ] && { [ "$prev" = "$short" ] || [ "$prev" = "$long" ]; }; then value=$o
    elif [[ $o != -* ]]; then
      case $prev in @VALUED@) ;; *) break ;; esac  # the program: srun's options end here
    else
      case $o in "$long="*) value=${o#*=} ;; esac
      if [ -n "$short" ] && [[ $o == "$short"?* ]]; then value=${o#"$short"}; fi
    fi
    prev=$o
  done
  printf '%s' "$value"
}
__orch_here() {  # this node's index in host list $1, or -1
  { local -; set +x; } 2>/dev/null
  local hosts i; mapfile -t hosts < <(__orch_hosts "$1")
  for i in "${!hosts[@]}"; do
    [ "${hosts[$i]}" = "${ORCH_NODE_NAME:-}" ] && { echo "$i"; return; }
  done
  echo -1
}
"""

# srun's options that take a value as the next word: after them a word is not the program
NODE_HELPERS = _NODE_HELPERS.replace("@VALUED@", "|".join(sorted(SRUN_VALUE)))


def listed(dropped: list[str]) -> bool:
    """The launch's srun names its nodes (`-w`, `--nodelist`)."""
    return any(_LISTED.fullmatch(unquote(w)) for w in dropped)


def first_node_only(launcher: str, kind: str, nodes: int) -> bool:
    """A launch run straight from the batch script (no srun) in a job of several nodes runs once, on
    the first node, under sbatch (the other nodes wait; its own helper steps may use them); only
    deepspeed (pdsh/ssh) and mpirun start the other hosts themselves."""
    return kind != "srun" and nodes > 1 and launcher not in ("deepspeed", "mpirun", "mpiexec")


FIRST_NODE = ("FIRST NODE: the launch `{launcher}` (line {line}) has no srun, so under sbatch it "
              "ran once, on the first node, and the job's {others} other node(s) ran nothing of "
              "it: it runs so here (resources.launch_nodes: first); the others are held idle, "
              "the script's own `srun -w NODE ...` steps start from the first node as the batch "
              "script started them, and the verdicts read the first node alone. A training that "
              "expects ranks on every node waits for them, as under sbatch: put srun before it")
def on_first_node(launcher: str, line: int, resources: dict[str, Any], notes: list[str]) -> None:
    """The launch runs on the first node only; the other nodes of the job idle."""
    resources["launch_nodes"] = "first"
    notes.append(FIRST_NODE.format(launcher=launcher, line=line,
                                   others=resources.get("nodes", 1) - 1))
