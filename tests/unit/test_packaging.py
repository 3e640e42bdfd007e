"""Issue 37: the project builds a wheel (offline, with the build backend pyproject names) that holds every module
of the package and the `orchestrator` console script, so `pipx install .` gives a working command. Built from a copy
in a tmp dir: the build writes build/ and *.egg-info beside its sources."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPO


def _backend_available() -> bool:
    """setuptools >= 68 with a bdist_wheel (its own from 70.1, else the wheel package): what pyproject requires."""
    try:
        from importlib.metadata import version

        major, minor = (int(x) for x in version("setuptools").split(".")[:2])
    except Exception:  # no setuptools, or a version it cannot read
        return False
    return (major, minor) >= (70, 1) or (major >= 68 and importlib.util.find_spec("wheel") is not None)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    if not _backend_available():
        pytest.skip("the build backend (setuptools>=68 and wheel, in the dev extra) is not installed")
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    shutil.copytree(REPO / "orchestrator", src / "orchestrator", ignore=shutil.ignore_patterns("__pycache__"))
    res = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                          "--disable-pip-version-check", "-q", "-w", str(tmp / "dist"), str(src)],
                         capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    (built,) = (tmp / "dist").glob("slurm_segment_orchestrator-*.whl")
    return zipfile.ZipFile(built)


def test_the_wheel_holds_every_module_of_the_package(wheel: zipfile.ZipFile) -> None:
    names = set(wheel.namelist())
    modules = {p.relative_to(REPO).as_posix() for p in (REPO / "orchestrator").rglob("*.py")
               if "__pycache__" not in p.parts}
    assert modules and modules <= names, sorted(modules - names)[:10]
    # the agent every node runs, and the allocation supervisor Slurm starts on the batch host
    assert {"orchestrator/agent/main.py", "orchestrator/agent/allocation.py", "orchestrator/__main__.py"} <= names


def test_the_wheel_declares_the_console_script_and_the_dependencies(wheel: zipfile.ZipFile) -> None:
    meta = {Path(n).name: wheel.read(n).decode() for n in wheel.namelist() if ".dist-info/" in n}
    assert "[console_scripts]\norchestrator = orchestrator.__main__:entry" in meta["entry_points.txt"]
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    requires = [ln for ln in meta["METADATA"].splitlines() if ln.startswith("Requires-Dist:")]
    for dep in declared:  # python-hostlist, typer, ...: all of them, not only what the build saw
        assert any(ln.startswith(f"Requires-Dist: {dep.split('>=')[0]}") for ln in requires), dep
