"""Steps on chosen nodes (`srun -w $host ...`, `--nodelist=...`): the bash the per-node script
carries so that each node runs its own part of such a step, as under sbatch the batch script's one
srun put it there. A per-host loop (`for h in $hosts; do srun -N1 -w $h ... & done; wait`) then runs
on every node, and each node starts only the pass that names it."""

from __future__ import annotations

import re

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
