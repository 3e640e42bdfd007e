"""Only the job's nodes count as nodes (issue 22): a log in logs/ is a node once the scheduler lists its node or
its agent wrote a record; stray files are ignored with one warning and cost no read, scan or verdict."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

from loguru import logger

from orchestrator.diagnose.signatures import build_table
from orchestrator.watch.roster import Roster
from orchestrator.watch.segment import SegmentWatch

ECC = "0: RuntimeError: CUDA error: uncorrectable ECC error encountered\n"


def test_a_log_waits_for_its_heartbeat_then_counts() -> None:
    r = Roster()
    assert r.new_nodes(["node1.log", "node2.log"], [], []) == []
    assert r.new_nodes(["node1.log", "node2.log"], ["node2.heartbeat.json"], []) == ["node2"]
    assert r.new_nodes(["node1.log", "node2.log"], ["node2.heartbeat.json", "node1.exit.json"], ["node2"]) == ["node1"]
    assert r.new_nodes(["node1.log", "node2.log"], ["node2.heartbeat.json"], ["node1", "node2"]) == []


def test_the_scheduler_list_confirms_without_records_and_strays_are_said_once() -> None:
    said: list[str] = []
    sink = logger.add(lambda m: said.append(str(m)), level="WARNING")
    try:
        r = Roster()
        r.scheduled(["node3"])
        assert r.new_nodes(["node3.log", "copy.log", "notes.log"], [], []) == ["node3"]
        r.warn_strays(final=False)
        r.warn_strays(final=True)
    finally:
        logger.remove(sink)
    assert len(said) == 1 and "2 file(s)" in said[0] and "copy" in said[0]


def test_no_warning_before_the_scheduler_lists_the_nodes() -> None:
    said: list[str] = []
    sink = logger.add(lambda m: said.append(str(m)), level="WARNING")
    try:
        r = Roster()
        r.new_nodes(["node1.log"], [], [])  # an agent's log just before its first heartbeat
        r.warn_strays(final=False)
    finally:
        logger.remove(sink)
    assert said == []


def test_thousands_of_stray_logs_change_nothing_but_a_warning(tmp_path: Path) -> None:
    logs, nodes = tmp_path / "logs", tmp_path / "nodes"
    logs.mkdir()
    nodes.mkdir()
    for i in range(20_000):
        (logs / f"stray{i}.log").write_text(ECC)
    (logs / "node1.log").write_text("iteration 5/ 100\n")
    (logs / "node2.log").write_text("iteration 5/ 100\n" + ECC)
    for n in ("node1", "node2"):
        (nodes / f"{n}.heartbeat.json").write_text("{}")
    said: list[str] = []
    sink = logger.add(lambda m: said.append(str(m)), level="WARNING")
    watch = SegmentWatch(tmp_path, build_table(), re.compile(r"iteration\s+(\d+)/"), 10.0)
    try:
        watch.slurm_nodes = ["node1", "node2"]
        watch.poll(datetime.now(UTC))
        watch.poll(datetime.now(UTC), final=True)
    finally:
        watch.close()
        logger.remove(sink)
    assert sorted(watch.nodes) == ["node1", "node2"]
    assert {e.node for e in watch.evidence()} == {"node1", "node2"}
    assert watch.max_iteration() == 5
    assert [s for s in said if "logs/" in s and "20000 file(s)" in s] and len(said) == 1


def test_scheduler_logs_are_read_only_when_they_grow(tmp_path: Path) -> None:
    """submitit's per-task logs hold slurmstepd's lines: tied to the task's node, and not reopened while idle."""
    from orchestrator.contract import SegmentPaths

    job = SegmentPaths(tmp_path).submitit / "77"
    job.mkdir(parents=True)
    (job / "77_1_log.out").write_text("slurmstepd: error: *** STEP 77.0 ON node2 CANCELLED AT 2026-01-01 DUE TO "
                                      "NODE FAILURE ***\n")
    (SegmentPaths(tmp_path).submitit / "stray-file").write_text("not a job folder")
    watch = SegmentWatch(tmp_path, build_table(), re.compile(r"iteration\s+(\d+)/"), 10.0)
    reads: list[str] = []
    try:
        watch.slurm_nodes = ["node1", "node2"]
        watch.poll(datetime.now(UTC))
        sw = watch.scheduler_logs[str(job / "77_1_log.out")]
        original = sw.tail.read_chunks

        def counted(final: bool = False, max_bytes: int = 1 << 24) -> list[tuple[int, bytes, int]]:
            reads.append("read")
            return original(final, max_bytes)

        sw.tail.read_chunks = counted  # type: ignore[method-assign]
        watch.poll(datetime.now(UTC))
        assert reads == []  # idle: not reopened
        with (job / "77_1_log.out").open("a") as fh:
            fh.write("srun: error: node2: task 1: Killed\n")
        watch.poll(datetime.now(UTC))
        assert reads == ["read"]
    finally:
        watch.close()
    assert sw.scan.node == "node2" and sw.scan.matches


def test_submitits_own_completion_lines_in_a_segments_task_log_are_not_the_trainings_end(tmp_path: Path) -> None:
    """The per-host scenario's wrong `success` (CI, twice): the stall cancel made task 0's agent return, and
    submitit logged `Job completed successfully` / `Exiting after successful completion` in its per-task file; read
    as the training's end, a hang was judged a finished run. They say the agent's function returned, nothing more."""
    from orchestrator.contract import SegmentPaths

    job = SegmentPaths(tmp_path).submitit / "425"
    job.mkdir(parents=True)
    (job / "425_0_log.out").write_text(
        "srun: Job step aborted: Waiting up to 7 seconds for job step to finish.\n"
        "submitit INFO (2026-12-07 20:05:56,216) - Job completed successfully\n"
        "submitit INFO (2026-12-07 20:05:56,217) - Exiting after successful completion\n")
    watch = SegmentWatch(tmp_path, build_table(), re.compile(r"iteration\s+(\d+)/"), 10.0)
    try:
        watch.slurm_nodes = ["node1", "node2"]
        watch.poll(datetime.now(UTC), final=True)
        scanned = watch.scheduler_logs[str(job / "425_0_log.out")].scan.matches
        assert any(m.kind == "done" for m in scanned)  # the table reads it (offline it is a submitit job's end)
        evidence = watch.evidence()
    finally:
        watch.close()
    assert not [m for n in evidence for m in n.matches if m.kind == "done"], evidence
