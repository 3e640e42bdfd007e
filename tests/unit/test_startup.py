"""Issue 42 item 3: `orchestrator --version` answers without loading the commands (the start-up a monitoring
probe or a wrapper pays on every call); any other argv goes to the CLI unchanged."""

from __future__ import annotations

import subprocess
import sys

from orchestrator import __version__
from tests.conftest import REPO

PROBE = ("import sys\nsys.argv = ['orchestrator'] + sys.argv[1:]\nfrom orchestrator.__main__ import entry\n"
         "try:\n    entry()\nexcept SystemExit:\n    pass\n"
         "print('cli loaded' if 'orchestrator.cli' in sys.modules else 'cli not loaded')")


def test_version_answers_without_loading_the_commands() -> None:
    res = subprocess.run([sys.executable, "-c", PROBE, "--version"], capture_output=True, text=True, cwd=REPO,
                         check=False)
    assert res.returncode == 0 and res.stdout.splitlines() == [f"orchestrator {__version__}", "cli not loaded"], res


def test_everything_else_goes_to_the_cli() -> None:
    for argv in (["--version", "extra"], ["--help"]):
        res = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, cwd=REPO,
                             check=False)
        assert res.stdout.splitlines()[-1] == "cli loaded", res
