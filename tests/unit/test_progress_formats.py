"""The default progress_regex on real progress output of 12 frameworks (tests/data/progress/, last step in
expected.json): the last iteration read is the last step printed, and iterations never go back, so a healthy
job printing any of these formats keeps making progress in the agent's heartbeat."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from orchestrator.settings import PROGRESS_REGEX, last_iteration

DATA = Path(__file__).resolve().parents[1] / "data" / "progress"
EXPECTED = json.loads((DATA / "expected.json").read_text())
RX = re.compile(PROGRESS_REGEX)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_last_step(name: str) -> None:
    text = (DATA / name).read_text(encoding="utf-8")
    assert last_iteration(RX, text) == EXPECTED[name]["last_step"]
    seen = [it for line in text.split("\n") if (it := last_iteration(RX, line)) is not None]
    assert len(seen) >= 2 and seen == sorted(seen), seen


@pytest.mark.parametrize("line", [
    "Saving checkpoint to /ckpt/model_name=0--val_loss=0.00-step=49-consumed_samples=25600.0-last.ckpt",
    "Async checkpoint save for step 50 (/results/x.ckpt) finalized successfully.",
    "epoch 001:    100 / 2737 loss=12.968", "| Name | Type | Params |", "NCCL INFO Channel 02/32 : 0 1 2 3",
])
def test_not_progress(line: str) -> None:
    assert last_iteration(RX, line) is None


def test_agent_reads_the_last_bar_of_a_carriage_return_line(tmp_path: Path) -> None:
    from orchestrator.agent.main import NodeAgent
    from orchestrator.model import SegmentSpec

    spec = SegmentSpec(run_name="t", index=1, job_name="t.seg0001", nodes=1, tasks_per_node=1, gpus_per_node=0,
                       time_limit_min=5, command=("true",), workdir=str(tmp_path), run_dir=str(tmp_path),
                       segment_dir=str(tmp_path / "s"), progress_regex=PROGRESS_REGEX)
    agent = NodeAgent(spec, "n1", 0, 1, "1")
    agent.paths.nodes.mkdir(parents=True)
    agent._log = (tmp_path / "log").open("a")
    agent.emit(0, "  0%|  | 1/1000 [00:01<32:08,  1.93s/it]\r  0%|  | 2/1000 [00:02<20:30,  1.23s/it]")
    assert agent.iteration == 2


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_the_watcher_reads_the_same_last_step(name: str, tmp_path: Path) -> None:
    """The controller's watcher (block scanner with the prefilter) agrees with the agent on every format,
    including tqdm bars rewritten with carriage returns, whatever the file's chunking."""
    from orchestrator.diagnose.prefilter import Prefilter
    from orchestrator.diagnose.scan import NodeScan
    from orchestrator.diagnose.signatures import build_table
    from orchestrator.tail import LogTail

    sigs = build_table()
    prefilter = Prefilter([(s.pattern, s.ignore_case) for s in sigs])
    data = (DATA / name).read_bytes()
    path = tmp_path / "n.log"
    path.write_bytes(b"")
    scan, tail = NodeScan("n", str(path), sigs, RX), LogTail(path)
    for cut in (len(data) // 3, 2 * len(data) // 3, len(data)):  # the log grows while it is watched
        with path.open("ab") as fh:
            fh.write(data[path.stat().st_size:cut])
        for first, block, newlines in tail.read_chunks(final=cut == len(data)):
            scan.feed_bytes(first, block, prefilter, newlines)
    assert scan.last_iteration == EXPECTED[name]["last_step"]
