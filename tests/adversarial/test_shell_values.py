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
