"""The views tell the truth at 3 a.m. (issue 37): the text status of a run stopped on a user bug shows
the error lines and what to change, each once."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from orchestrator.cli.inspect import status_view
from orchestrator.model import RunStatus
from tests.fakes import Fault
from tests.unit.test_controller_fake import make


def text_of(view: object, width: int = 100) -> str:
    console = Console(width=width, record=True)
    console.print(view, crop=False)
    return console.export_text()


def test_status_of_a_user_bug_stop_shows_the_error_line_and_the_advice_once(tmp_path: Path) -> None:
    ctl, _, clock = make(tmp_path, {"all": Fault("bug", at=25)})
    state = ctl.run()
    assert state.status == RunStatus.STOPPED
    flat = " ".join(text_of(status_view(state, clock.now()), width=400).split())
    # the rank, the node, the file and line, the error text
    assert "rank 0 on node1 (node1.log:27), also node2,node3: ValueError: could not broadcast" in flat
    assert flat.count("fix the code, data or config") == 1
    assert flat.count("it will happen again") == 1
    assert "│ what to change │ fix the code, data or config" in flat
