"""Every `orchestrator ...` command in README.md, docs/*.md and the `--help` examples runs as written.

The commands run in a copy of the checkout's configs in tmp, in the order each page gives them, after the demo
run (`orchestrator run configs/demo.yaml`) made its run directory there; absolute /tmp paths they write are
mapped into the copy. What needs a cluster is run as far as it can be without one: `run` of a Slurm config
as its `--dry-run`, `status --watch` for one refresh. A synopsis (`orchestrator run CONFIG [--dry-run]`) is
checked for its command and options in `--help`."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.cli.common import Wiring
from orchestrator.clock import Clock, RealClock
from orchestrator.settings import load_settings

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"```[a-z]*\n(.*?)```", re.S)
INLINE = re.compile(r"`(orchestrator [^`]+)`")
PLACEHOLDER = re.compile(r"[A-Z][A-Z_]+|\[.*")  # a whole word: CONFIG, [--json]
COMMANDS = ["run", "stop", "status", "report", "diagnose", "validate", "import-sbatch", "blacklist list",
            "blacklist add", "blacklist remove", "blacklist clear"]


def page_commands(text: str) -> Iterator[tuple[str, bool]]:
    """(command, is_code_block_line) in page order: lines of fenced blocks and inline code spans."""
    spans = [(m.start(), m.group(1), True) for m in FENCE.finditer(text)]
    spans += [(m.start(), m.group(1), False) for m in INLINE.finditer(FENCE.sub(lambda f: " " * len(f[0]), text))]
    for _, body, block in sorted(spans):
        for line in body.splitlines() if block else [body]:
            words = shlex.split(line, comments=True) if block else line.split()
            if words[:1] == ["orchestrator"]:
                yield (shlex.join(words) if block else line), block
            for w in words:  # tmux new -s train 'orchestrator run ...'
                if w.startswith("orchestrator ") and words[:1] != ["orchestrator"]:
                    yield w, block


def help_text(cmd: str) -> str:
    res = CliRunner().invoke(app, [*cmd.split(), "--help"], terminal_width=100)
    assert res.exit_code == 0, res.output
    return res.output


def help_examples(cmd: str) -> list[str]:
    """The example lines of a command's --help: each on its own line right below 'Example(s):'."""
    lines = help_text(cmd).splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() in ("Example:", "Examples:"))
    examples = []
    for line in lines[start + 1:]:
        if not line.strip():
            break
        examples.append(line.strip())
    return examples


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """configs/, the demo's training script and tests/data in tmp, with the demo run made there."""
    root = tmp_path_factory.mktemp("docs")
    shutil.copytree(REPO / "configs", root / "configs")
    (root / "scripts").mkdir()
    shutil.copy(REPO / "scripts" / "demo_train.py", root / "scripts")
    (root / "tests").mkdir()
    (root / "tests" / "data").symlink_to(REPO / "tests" / "data")
    (root / "tmp").mkdir()
    tutorial = (REPO / "docs" / "TUTORIAL.md").read_text()
    (root / "train.sbatch").write_text(FENCE.findall(tutorial)[0])  # the tutorial's own script
    res = run_cli(root, ["run", "configs/demo.yaml"])
    assert res[0] == 0 and (root / "runs" / "demo" / "state.json").is_file(), res[1]
    return root


class Woken(RealClock):
    """The wall clock, woken at every sleep (as by a signal): `status --watch` refreshes once, a retry never waits."""

    def sleep(self, seconds: float) -> bool:
        self.wake()
        return super().sleep(seconds)


def run_cli(root: Path, argv: list[str], clock: Callable[[], Clock] = RealClock) -> tuple[int, str]:
    if argv[0] == "run" and "--dry-run" not in argv:  # a controller with its agents: a process of its own
        proc = subprocess.run([sys.executable, "-m", "orchestrator", *argv], cwd=root, capture_output=True,
                              text=True, timeout=240)
        return proc.returncode, proc.stdout + proc.stderr
    res = CliRunner().invoke(app, argv, catch_exceptions=False, obj=Wiring(clock=clock))
    return res.exit_code, res.output


def as_written(root: Path, cmd: str) -> list[str] | None:
    """argv of `cmd` for the workspace (None: a synopsis), its run directory seeded when it reads one."""
    words = shlex.split(cmd)[1:]
    if any(PLACEHOLDER.fullmatch(w) for w in cmd.split()) or "/" in (words or [""])[0]:
        return None  # a synopsis: `orchestrator blacklist list/add TARGET`
    argv = [str(root / "tmp" / w[5:]) if w.startswith("/tmp/") else w for w in words]
    if len(argv) < 2 and argv[:1] != ["--version"]:
        return None  # `orchestrator status` named in prose
    config = root / argv[1] if len(argv) > 1 and argv[1].endswith(".yaml") else None
    if config and config.is_file() and argv[0] in ("status", "report", "stop", "blacklist"):
        seed_run(root, config)
    if config and config.is_file() and argv[0] == "run" and "--dry-run" not in argv:
        if load_settings(config, {}).backend.kind == "slurm":
            argv.append("--dry-run")  # submitting needs the cluster: the dry run shows what it would submit
    return argv


def seed_run(root: Path, config: Path) -> None:
    """A run directory for a config that never ran here: the demo run's, under the config's run name."""
    s = load_settings(config, {})
    if (s.run_dir / "state.json").exists():
        return
    shutil.copytree(root / "runs" / "demo", s.run_dir, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("*.lock", "lock", "controller.log*"))
    state = json.loads((s.run_dir / "state.json").read_text())
    state["run"] = s.name
    (s.run_dir / "state.json").write_text(json.dumps(state))


def check_synopsis(cmd: str) -> None:
    words = cmd.split()[1:]
    sub = [w for w in words[:2] if re.fullmatch(r"[a-z][a-z/-]*", w)]
    names = [" ".join([*sub[:1], s]) if len(sub) > 1 else sub[0] for s in (sub[1].split("/") if len(sub) > 1
                                                                            else sub[:1])]
    for name in names:
        text = help_text(name)
        for opt in re.findall(r"--[a-z][a-z-]*", cmd):
            assert opt in text, f"{cmd}: {name} --help has no {opt}"


def run_all(root: Path, commands: list[str], monkeypatch: pytest.MonkeyPatch) -> list[str]:
    monkeypatch.chdir(root)
    failures = []
    for cmd in commands:
        argv = as_written(root, cmd)
        if argv is None:
            check_synopsis(cmd)
            continue
        code, output = run_cli(root, argv, Woken)  # --watch: one refresh
        if code != 0:
            failures.append(f"{cmd}\n  -> exit {code}: {output[-600:]}")
    return failures


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_command_on_the_page_runs_as_written(page: Path, workspace: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    commands = [c for c, _ in page_commands(page.read_text())]
    failures = run_all(workspace, commands, monkeypatch)
    assert not failures, "\n".join(failures)


def test_every_help_example_runs_as_written(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    examples = [e for c in COMMANDS for e in help_examples(c)]
    assert len(examples) >= len(COMMANDS) and all(e.startswith("orchestrator ") for e in examples), examples
    failures = run_all(workspace, [*examples, "orchestrator --version", "orchestrator --help"], monkeypatch)
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("cmd", COMMANDS)
def test_help_examples_stay_one_per_line(cmd: str) -> None:
    """Click reflows a docstring paragraph into one line ('Examples: orchestrator run a orchestrator run b')."""
    examples = help_examples(cmd)
    assert examples and all(e.count("orchestrator ") == 1 for e in examples), examples


def test_the_pages_have_commands_to_run() -> None:
    found = {p.name: [c for c, _ in page_commands(p.read_text())] for p in PAGES}
    assert "orchestrator import-sbatch train.sbatch -o configs/train.yaml" in found["TUTORIAL.md"]
    assert "orchestrator run configs/train.yaml" in found["TUTORIAL.md"]  # from inside tmux '...'
    assert sum(map(len, found.values())) >= 20, found


def test_version() -> None:
    from orchestrator import __version__

    res = CliRunner().invoke(app, ["--version"])
    assert res.exit_code == 0 and res.output.strip() == f"orchestrator {__version__}"
