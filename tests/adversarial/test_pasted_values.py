"""Issue 37, second re-probe (row 20): outside the scripts of the shell launches the tool recognises, a
placeholder's value is pasted into the argument as text, and `flock FILE -c`, `script -qec`, `env -S 'bash -c'`
or `python -c` read that text as code. No list of such programs is complete, so a value pasted into a longer
argument may hold only letters, digits and `_ . , / : = + @ % -` (no space; a placeholder that is the whole
argument is that one argument, whatever it holds): any other character is a config error naming the key and
the character (a checkpoint's name found on disk is refused when the command is rendered)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.plan import SHELL_VARS, UnsafeValue, render
from orchestrator.settings import ConfigError, load_settings
from tests.conftest import base_config, write_config

SCRIPT = "echo {run_dir}/sync {checkpoint_root} {config_dir}"
FORMS = {
    "flock": ["flock", "/tmp/lk", "-c", SCRIPT],
    "script": ["script", "-qec", SCRIPT],
    "env -S bash -c": ["/usr/bin/env", "-S", "bash -c", SCRIPT],
    "env -S bash -e -c": ["/usr/bin/env", "-S", "bash -e -c", SCRIPT],
    "python -c": ["{python}", "-c", "print('{run_dir}')"],
}


@pytest.mark.parametrize("form", sorted(FORMS))
def test_a_hostile_run_dir_pasted_into_code_is_refused_naming_the_key_and_the_character(tmp_path: Path,
                                                                                        form: str) -> None:
    hostile = str(tmp_path / "r_$(touch PWNED)`touch PWNEDBT`")
    cfg = base_config(tmp_path, run_dir=hostile, command=FORMS[form])
    with pytest.raises(ConfigError) as got:
        load_settings(write_config(tmp_path, cfg), {})
    text = str(got.value)
    assert "run_dir" in text and "holds '$'" in text and "command." in text, text
    assert not list(tmp_path.glob("PWNED*"))


def test_a_hostile_config_directory_or_checkpoint_dir_is_refused_too(tmp_path: Path) -> None:
    odd = tmp_path / "d_`x`"
    odd.mkdir()
    with pytest.raises(ConfigError, match="the config file's directory .* holds '`'"):
        load_settings(write_config(odd, base_config(tmp_path, command=["script", "-qec", "ls {config_dir}"])), {})
    cfg = base_config(tmp_path, checkpoint={"dir": str(tmp_path / "c;x")}, command=FORMS["python -c"][:2] + [
        "print('{checkpoint_root}')"])
    with pytest.raises(ConfigError, match=r"checkpoint.dir .* holds ';'"):
        load_settings(write_config(tmp_path, cfg), {})


@pytest.mark.parametrize("form", sorted(FORMS))
def test_safe_values_keep_working_in_every_form(tmp_path: Path, form: str) -> None:
    cfg = base_config(tmp_path, run_dir=str(tmp_path / "runs" / "run-1,a=b+c@d%e"), command=FORMS[form])
    s = load_settings(write_config(tmp_path, cfg), {})
    assert s.command == FORMS[form]


@pytest.mark.parametrize("form", sorted(FORMS))
def test_a_space_inside_a_longer_text_is_refused_as_a_word_split(tmp_path: Path, form: str) -> None:
    """The third re-probe: under `flock -c` a run_dir `.../r fl x` made `mkdir -p {run_dir}/made` create
    `r`, `fl` and `x/made`, outside the run directory. A space splits words there: refused, naming it."""
    cfg = base_config(tmp_path, run_dir=str(tmp_path / "r fl x"), command=FORMS[form])
    with pytest.raises(ConfigError, match="holds ' '"):
        load_settings(write_config(tmp_path, cfg), {})


def test_a_space_in_a_placeholder_that_is_the_whole_argument_is_one_word(tmp_path: Path) -> None:
    cfg = base_config(tmp_path, run_dir=str(tmp_path / "my runs"), command=["python3", "t.py", "--out", "{run_dir}"])
    assert load_settings(write_config(tmp_path, cfg), {}).command[-1] == "{run_dir}"
    argv = render(["python3", "t.py", "--out", "{run_dir}"], {k: "" for k in SHELL_VARS} | {"run_dir": "/a b"})
    assert argv[-1] == "/a b"  # one argument, never split


def test_a_hostile_run_dir_inside_a_recognised_shell_script_is_still_accepted(tmp_path: Path) -> None:
    cfg = base_config(tmp_path, run_dir=str(tmp_path / "r_$(touch PWNED)"), command=["bash", "-lc", SCRIPT])
    load_settings(write_config(tmp_path, cfg), {})  # the script reads "${ORCH_RUN_DIR}", never the text


def test_a_safe_value_pasted_into_python_code_runs_as_data(tmp_path: Path) -> None:
    value = str(tmp_path / "runs" / "r-1")
    argv = render(["{python}", "-c", "print('{run_dir}')"], {k: "" for k in SHELL_VARS}
                  | {"run_dir": value, "python": sys.executable})
    out = subprocess.run(list(argv), capture_output=True, text=True, check=True)
    assert out.stdout.splitlines() == [value]


def test_a_checkpoint_name_found_on_disk_is_never_pasted_when_unsafe() -> None:
    values = {k: "" for k in SHELL_VARS} | {"checkpoint": "/ck/x');__import__('os').system('id');('"}
    with pytest.raises(UnsafeValue, match="command.2: the value of {checkpoint}"):
        render(["python", "-c", "load('{checkpoint}')"], values)
    # inside a recognised shell script it is the variable's reference, never the text
    assert render(["bash", "-c", "load {checkpoint}"], values)[2] == 'load "${ORCH_RESUME_FROM}"'
