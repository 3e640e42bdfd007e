"""Issue 15, "hangs": a progress_regex whose group can be empty never kills the agent's output reader (the
training would then block on a full stdout pipe)."""

from __future__ import annotations

import re
from pathlib import Path

from orchestrator.agent.main import NodeAgent
from orchestrator.settings import last_iteration, load_settings, parse_overrides
from tests.conftest import base_config, write_config


def test_an_optional_group_reads_as_no_progress() -> None:
    rx = re.compile(r"step (\d+)?")
    assert last_iteration(rx, "step x") is None and last_iteration(rx, "step 7") == 7


def test_the_agent_keeps_reading_after_a_line_its_pattern_half_matches(tmp_path: Path) -> None:
    from datetime import UTC, datetime

    from orchestrator.blacklist import ExcludePlan
    from orchestrator.plan import plan
    from orchestrator.state import RunState

    s = load_settings(write_config(tmp_path, base_config(tmp_path, progress_regex=r"step (\d+)?")),
                      parse_overrides([]))
    now = datetime.now(UTC)
    spec = plan(s, RunState(run="r", created_at=now, updated_at=now), None, ExcludePlan(nodes=()), "python")
    agent = NodeAgent(spec, "node1", 0, 1, "1")
    agent.paths.logs.mkdir(parents=True)
    agent.paths.nodes.mkdir(parents=True)
    agent._log = agent.paths.log("node1").open("a", encoding="utf-8")
    for line in ("step x", "step ", "step 12", "step y"):
        agent.emit(0, line)  # never raises
    assert agent.iteration == 12
