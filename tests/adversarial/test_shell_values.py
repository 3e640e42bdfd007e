"""Issue 21, shell: no orchestrator value reaches a user's shell script as code. In a `bash -c SCRIPT` launch
(what import-sbatch writes) a placeholder becomes a quoted reference to its environment variable, whatever
quotes surround it, so a run_dir holding `$(touch X)` runs nothing and a path with spaces stays one word."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from orchestrator.plan import SHELL_VARS, render


@pytest.mark.parametrize("where", ["unquoted", "double", "single", "after a comment"])
def test_a_hostile_run_dir_is_data_in_a_shell_script(tmp_path: Path, where: str) -> None:
    hostile = str(tmp_path / "a b $(touch PWNED) `touch PWNED2`; touch PWNED3")
    script = {"unquoted": "printf '%s\\n' {run_dir}", "double": 'printf "%s\\n" "{run_dir}"',
              "single": "printf '%s\\n' '{run_dir}'",
              # the re-run found it: an apostrophe in a comment (import-sbatch's own header has one) flipped the
              # quote tracking, and a double-quoted placeholder after it was split into words
              "after a comment": "# the agent's note\nprintf \"%s\\n\" \"{run_dir}\" # it's one word"}[where]
    values = {k: "" for k in SHELL_VARS} | {"run_dir": hostile}
    argv = render(["bash", "-c", script, "job"], values)
    assert hostile not in argv[2]  # the value itself never enters the script
    env = {"PATH": "/usr/bin:/bin", "ORCH_RUN_DIR": hostile}
    out = subprocess.run(list(argv), capture_output=True, text=True, cwd=tmp_path, env=env, check=True)
    assert out.stdout.splitlines() == [hostile], out  # one word, exactly the value
    assert not list(tmp_path.glob("PWNED*"))


def test_escaped_and_unknown_placeholders_stay_as_written() -> None:
    argv = render(["bash", "-c", "echo {{run_dir}} {nope} {segment}"], {"segment": "3"})
    assert argv[2] == 'echo {run_dir} {nope} "${ORCH_SEGMENT}"'
    assert render(["python", "t.py", "--seg={segment}"], {"segment": "3"}) == ("python", "t.py", "--seg=3")


def test_a_rewritten_resume_flag_stays_one_argument_whatever_the_checkpoint_path(tmp_path: Path) -> None:
    """Issue 21 re-run (I2): `--load "$CKPT"` became `--load ${ORCH_RESUME_ROOT:-"$CKPT"}`: on every resume a path
    with a space was two arguments and a `*` was globbed."""
    import shutil
    import subprocess

    from orchestrator.importer.names import rewrite_resume

    bash = shutil.which("bash")
    assert bash is not None
    for written in ('"$CKPT"', "'/x/ck dir'", "$CKPT", "/x/plain"):
        script, _ = rewrite_resume(f'CKPT="/x/ck dir"\nprintf "[%s]" --load {written} --x 1\n')
        for resume in ("/y/ck dir", "/y/*", ""):
            env = {"PATH": "/usr/bin:/bin", "ORCH_RESUME_ROOT": resume}
            got = subprocess.run([bash, "-c", script], capture_output=True, text=True, env=env, check=True).stdout
            args = got[1:-1].split("][")
            first = resume or ("/x/plain" if written == "/x/plain" else "/x/ck dir")
            assert args == ["--load", first, "--x", "1"], (written, resume, got)


@pytest.mark.parametrize("launcher", [
    ["bash", "-lc"], ["bash", "-e", "-c"], ["bash", "-o", "pipefail", "-c"], ["/usr/bin/env", "bash", "-c"],
    ["dash", "-c"], ["sh", "-ec"], ["env", "OMP_NUM_THREADS=1", "sh", "-c"], ["timeout", "60", "bash", "-c"],
])
def test_every_spelling_of_a_shell_launch_keeps_a_hostile_run_dir_data(tmp_path: Path, launcher: list[str]) -> None:
    """Issue 37: only a literal `bash -c`/`sh -c` was protected; `bash -lc`, `bash -e -c`, `/usr/bin/env bash -c`
    or `dash -c` pasted the run_dir into the script and its `$(...)` ran, in plan.render and again in the agent's
    $VAR expansion."""
    import shutil

    from orchestrator.agent.taskenv import training_argv

    shell = next(w for w in launcher if Path(w).name in ("bash", "sh", "dash"))
    if not shutil.which(shell):
        pytest.skip(f"{shell} is not installed here")
    hostile = str(tmp_path / "a b $(touch PWNED) `touch PWNED2`; touch PWNED3")
    values = {k: "" for k in SHELL_VARS} | {"run_dir": hostile}
    argv = render([*launcher, 'printf "%s\\n" {run_dir}', "job"], values)
    env = {"PATH": "/usr/bin:/bin", "ORCH_RUN_DIR": hostile, "HOME": str(tmp_path)}
    started = training_argv(argv, env)
    assert not any(hostile in a for a in started[len(launcher):len(launcher) + 1])
    out = subprocess.run(started, capture_output=True, text=True, cwd=tmp_path, env=env, check=True)
    assert out.stdout.splitlines() == [hostile], out
    assert not list(tmp_path.glob("PWNED*"))


@pytest.mark.parametrize(("command", "says"), [
    (["fish", "-c", "train --dir {run_dir}"], "only a POSIX shell"),
    (["env", "-i", "bash", "-c", "train --dir {run_dir}"], "env -i"),
    # the re-probe (E12): other spellings of the same clearing let the value through empty
    (["env", "--unset=ORCH_RUN_DIR", "bash", "-c", "echo RD=[{run_dir}]"], "env -i"),
    (["env", "-iu", "X", "bash", "-c", "echo {run_dir}"], "env -i"),
    (["env", "-0u", "ORCH_RUN_DIR", "bash", "-c", "echo {run_dir}"], "env -i"),
    (["env", "--ignore-env", "bash", "-c", "echo {run_dir}"], "env -i"),
    (["env", "--unse", "ORCH_RUN_DIR", "sh", "-c", "echo {run_dir}"], "env -i"),
    (["sudo", "-u", "trainer", "bash", "-c", "echo {run_dir}"], "sudo"),
])
def test_a_placeholder_a_shell_would_not_get_safely_is_refused(tmp_path: Path, command: list[str], says: str) -> None:
    from orchestrator.settings import ConfigError, load_settings
    from tests.conftest import base_config, write_config

    with pytest.raises(ConfigError, match=says) as got:
        load_settings(write_config(tmp_path, base_config(tmp_path, command=command)), {})
    assert "command" in str(got.value)
    load_settings(write_config(tmp_path, base_config(tmp_path, command=["fish", "-c", "train --dir $ORCH_RUN_DIR"])),
                  {})
    # what keeps the variables is not refused: unsetting another one, a directory, sudo told to keep them
    for keeps in (["env", "-u", "OTHER", "-C", "/"], ["env", "--chdir=/", "A=1"], ["sudo", "-E", "-u", "trainer"]):
        load_settings(write_config(tmp_path, base_config(tmp_path, command=[*keeps, "bash", "-c", "echo {run_dir}"])),
                      {})
