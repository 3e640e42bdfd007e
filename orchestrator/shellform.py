"""Where a launch command holds shell code (issue 37): the SCRIPT of `bash -c SCRIPT` in every
spelling (`bash -lc`, `bash -e -c`, `bash -o pipefail -c`, `/usr/bin/env bash -c`, `dash -c`,
`srun ... sh -c`, `apptainer exec IMG bash -c`). A value there would be read as code, so a
placeholder in it becomes a reference to its environment variable (plan.render), and the agent
expands no variable in it; a shell whose quoting is not the POSIX one (csh, fish) gets no
placeholder at all after it. Anywhere else a value is pasted as text, so it may hold only
characters no interpreter reads as code (SAFE_VALUE): `flock -c`, `script -c`, `env -S` and
`python -c` take code too, and no list of such programs is ever complete."""

from __future__ import annotations

import re
from pathlib import Path

# a {placeholder}; `{{name}}` is the escape for a literal `{name}`
PLACEHOLDER = re.compile(r"\{\{([a-z_]+)\}\}|\{([a-z_]+)\}")
# what a value pasted into a longer text may hold: letters, digits and _ . , / : = + @ % - (no
# space: `flock -c` or `env -S` split words on it); a placeholder that is the whole argument is
# that one argument, whatever it holds
SAFE_VALUE = re.compile(r"[\w.,/:=+@%-]")
SAFE_TEXT = ("letters, digits and _ . , / : = + @ % - (no space; a placeholder that is the whole "
             "argument may hold anything)")

POSIX_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "ksh93", "mksh", "pdksh", "ash",
                          "yash", "posh", "lksh"})
OTHER_SHELLS = frozenset({"csh", "tcsh", "fish", "rc", "es", "nu", "pwsh", "xonsh", "elvish"})
_TAKES_VALUE = ("--rcfile", "--init-file")


def shell_name(word: str) -> str:
    """`bash` for `/usr/bin/bash` or `bash5.2`; the word's base name otherwise."""
    name = Path(word).name
    stem = name.rstrip("0123456789.")
    return stem if stem in POSIX_SHELLS | OTHER_SHELLS else name


def script_indexes(argv: list[str] | tuple[str, ...]) -> list[int]:
    """The positions of argv that a POSIX shell runs as code: the first word after the options of
    every `SHELL ... -c` in it (a wrapper before it, `env`, `srun`, `timeout`, a container, is
    passed over)."""
    found = []
    for j, word in enumerate(argv):
        if shell_name(word) in POSIX_SHELLS and (i := _script_after(argv, j + 1)) is not None:
            found.append(i)
    return found


def foreign_shell(argv: list[str] | tuple[str, ...]) -> int | None:
    """The position of the first non-POSIX shell (csh, fish, ...) in argv, or None."""
    return next((j for j, w in enumerate(argv) if shell_name(w) in OTHER_SHELLS), None)


def _script_after(argv: list[str] | tuple[str, ...], i: int) -> int | None:
    """After a shell's word at i-1: where its -c SCRIPT is, if an option cluster holds `c`."""
    has_c = False
    while i < len(argv):
        a = argv[i]
        if a in ("--", "-"):
            i += 1
            break
        if a in _TAKES_VALUE:
            i += 2
        elif a.startswith("--"):
            i += 1
        elif len(a) > 1 and a[0] in "-+":
            has_c = has_c or (a[0] == "-" and "c" in a[1:])
            i += 1 + sum(f in "oO" for f in a[1:])  # -o pipefail, -O extglob take a value
        else:
            break
    return i if has_c and i < len(argv) else None


# GNU env's long options that take a value (as `--opt VALUE` or `--opt=VALUE`); a unique prefix
# of a long option is that option, as getopt reads it
_ENV_LONG = {"ignore-environment": False, "null": False, "unset": True, "chdir": True,
             "split-string": True, "block-signal": False, "default-signal": False,
             "ignore-signal": False, "list-signal-handling": False, "debug": False}


def env_cleared(argv: list[str] | tuple[str, ...], before: int) -> bool:
    """An `env` or `sudo` ahead of position `before` that takes the variables a placeholder becomes
    away from the shell: env's `-i`/`-`/`--ignore-environment` (however spelled: `-iu X`, `--ign`),
    an unset of an ORCH_* variable (`-u`, `-uNAME`, `--unset NAME`, `--unset=NAME`), or sudo,
    whose env_reset drops them unless it is told to keep the environment (`-E`)."""
    words = list(argv[:before])
    for j, w in enumerate(words):
        if shell_name(w) == "env" and _env_unsets(words[j + 1:]):
            return True
        if shell_name(w) == "sudo" and not any(
                x == "--preserve-env" or (x.startswith("-") and not x.startswith("--")
                                          and "E" in x) for x in words[j + 1:]):
            return True
    return False


def _env_unsets(words: list[str]) -> bool:
    i = 0
    while i < len(words) and words[i].startswith("-"):
        w = words[i]
        if w in ("-", "--"):
            return w == "-"
        if w.startswith("--"):
            name, eq, value = w[2:].partition("=")
            full = [o for o in _ENV_LONG if o.startswith(name)]
            opt = full[0] if len(full) == 1 else name
            if opt == "ignore-environment":
                return True
            if _ENV_LONG.get(opt) and not eq:
                value, i = (words[i + 1] if i + 1 < len(words) else ""), i + 1
            if opt == "unset" and value.startswith("ORCH_"):
                return True
            i += 1
            continue
        for k, flag in enumerate(w[1:], 1):
            if flag == "i":
                return True
            if flag in "uCS":  # the rest of the group, or the next word, is its value
                value = w[k + 1:] or (words[i + 1] if i + 1 < len(words) else "")
                i += 0 if w[k + 1:] else 1
                if flag == "u" and value.startswith("ORCH_"):
                    return True
                break
        i += 1
    return False


def unsafe_char(value: str, whole: bool = False) -> str | None:
    """The first character of `value` outside SAFE_VALUE, or None; None for a placeholder that is
    the `whole` argument (one argv element, never split nor read as part of a longer code text)."""
    return None if whole else next((c for c in value if not SAFE_VALUE.fullmatch(c)), None)


def pasted(argv: list[str] | tuple[str, ...]) -> list[tuple[int, str]]:
    """(position, name) of each placeholder that is pasted as text: outside the scripts of the
    POSIX shell launches (where a placeholder becomes its variable's reference)."""
    scripts = set(script_indexes(argv))
    return [(i, m.group(2)) for i, arg in enumerate(argv) if i not in scripts
            for m in PLACEHOLDER.finditer(arg) if m.group(2) is not None]
