"""The segment watcher's reading of agent records (tmp files, no cluster)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

from orchestrator.contract import DumpRecord, ExitRecord, Heartbeat, ProcessDump, SegmentPaths, write_record
from orchestrator.diagnose.signatures import build_table
from orchestrator.watch.segment import SegmentWatch

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_who_did_not_answer_a_dump_request(tmp_path: Path) -> None:
    """After a dump request: a node whose agent exited had nothing to answer (not stuck); a node that
    answered with a process in state D is stuck; a live node whose agent stayed silent is stuck."""
    paths = SegmentPaths(tmp_path)
    paths.logs.mkdir(parents=True)
    paths.nodes.mkdir()
    for n in ("node1", "node2", "node3"):
        paths.log(n).write_text(" iteration 5/ 10\n")
        write_record(paths.heartbeat(n), Heartbeat(node=n))
    watch = SegmentWatch(tmp_path, build_table(), re.compile(r"iteration\s+(\d+)\s*/\s*\d+"), 5.0)
    try:
        watch.poll(T0)
        write_record(paths.exit("node1"), ExitRecord(node="node1", exit_code=134))
        watch.poll(T0 + timedelta(seconds=1))
        watch.request_dumps(T0 + timedelta(seconds=2))
        write_record(paths.dump("node2"), DumpRecord(node="node2", request=watch.dump_request_id, processes=[
            ProcessDump(pid=7, state="D", wchan="hrtimer_nanosleep", stack_summary="Thread 7 (idle)")]))
        watch.poll(T0 + timedelta(seconds=3))
        stuck = {e.node: e.stuck_detail for e in watch.evidence()}
    finally:
        watch.close()
    assert watch.dumps_in() == {"node2"}
    assert stuck["node1"] == ""
    assert stuck["node2"].startswith("pid 7 in uninterruptible sleep")
    assert stuck["node3"].startswith("the agent did not answer the stack-dump request")
