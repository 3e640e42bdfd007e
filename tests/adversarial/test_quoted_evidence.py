"""Issue 15, "accepted nonsense": text a training process prints is not the scheduler's or the agent's word,
and crafted monster lines stay cheap to match."""

from __future__ import annotations

import re

from orchestrator.diagnose.classify import Context, classify
from orchestrator.diagnose.nodes import node_evidence
from orchestrator.diagnose.prefilter import Prefilter
from orchestrator.diagnose.scan import MATCH_CHARS, NodeScan
from orchestrator.diagnose.signatures import build_table
from orchestrator.model import Cause, JobState, JobStatus

SIGS = build_table()
PROG = re.compile(r"iteration\s+(\d+)\s*/\s*\d+")
FAILED = JobStatus(state=JobState.FAILED)


def node(name: str, lines: list[str]) -> NodeScan:
    s = NodeScan(name, f"{name}.log", SIGS, PROG)
    s.feed(list(enumerate(lines, 1)))
    return s


def test_a_rank_quoting_node_failure_excludes_nobody() -> None:
    quoting = node("node1", ["2026-01-01T00:00:00Z 0:  iteration 5/ 10",
                             "2026-01-01T00:00:01Z 0: grep found 'srun: error: Node failure on node7' in old.log"])
    v = classify(FAILED, [node_evidence(quoting), node_evidence(node("node2", [" iteration 5/ 10"]))], Context())
    assert "node7" not in v.culprit_nodes and v.cause != Cause.NODE_FAIL


def test_slurm_itself_naming_a_failed_node_still_counts() -> None:
    said = node("slurm-77", ["srun: error: Node failure on node7"])
    v = classify(FAILED, [node_evidence(said)], Context())
    assert v.cause == Cause.NODE_FAIL and v.culprit_nodes == ("node7",)


def test_a_printed_allocation_marker_does_not_discard_ecc_evidence() -> None:
    s = node("node3", ["2026-01-01T00:00:00Z 1: RuntimeError: CUDA error: uncorrectable ECC error encountered",
                       "2026-01-01T00:00:01Z 1: ORCH-ALLOCATION 999",
                       "2026-01-01T00:00:02Z 1: agent: ORCH-AGENT start segment=9 job=9"])
    assert s.allocations == 0 and any(m.signature == "cuda_ecc" for m in s.matches)
    v = classify(FAILED, [node_evidence(s), node_evidence(node("node4", []))], Context())
    assert v.cause == Cause.GPU_ECC and v.culprit_nodes == ("node3",)


def test_a_prologue_marker_with_no_rank_still_starts_an_allocation() -> None:
    s = node("node3", ["RuntimeError: CUDA error: uncorrectable ECC error encountered", "ORCH-ALLOCATION 1001",
                       " iteration 3/ 9"])
    assert s.allocations == 1 and not s.matches


def test_monster_lines_are_matched_on_their_first_8_kb_only() -> None:
    """Matching cost is bounded by design (no timing here: scripts/bench_scan.py measures speed): a signature
    is looked for in a line's first 8 KB, so a crafted 64 KB line costs what an 8 KB line costs."""
    pf = Prefilter([(x.pattern, x.ignore_case) for x in SIGS])
    near = "x" * (MATCH_CHARS - 100) + " uncorrectable ECC error encountered"
    far = "x" * (MATCH_CHARS + 100) + " uncorrectable ECC error encountered"
    s = NodeScan("n", "n.log", SIGS, PROG)
    s.feed_bytes(1, f"{near}\n{far}\n{'a' * 65000} Error\n".encode(), pf)
    assert [m.line for m in s.matches if m.signature == "cuda_ecc"] == [1]
