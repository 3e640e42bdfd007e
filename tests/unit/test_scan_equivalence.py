"""The fast block scanner (prefilter + only flagged lines) finds exactly what the line-by-line one finds."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from orchestrator.diagnose.prefilter import Prefilter
from orchestrator.diagnose.scan import NodeScan
from orchestrator.diagnose.signatures import build_table
from orchestrator.tail import LogTail

SIGS = build_table()
PROG = re.compile(r"iteration\s+(\d+)\s*/\s*\d+")
POOL = [
    "0:  iteration {n}/ 1000 | lm loss: 1.0",
    "[rank3]: RuntimeError: CUDA error: uncorrectable ECC error encountered",
    "2024-01-01T00:00:00Z 1: [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1) ran",
    "srun: error: Node failure on node{n}",
    "Traceback (most recent call last):",
    "ValueError: bad shape {n}",
    "progress 10%\rprogress 50%\rOSError: [Errno 116] Stale file handle",
    "wandb: syncing run",
    "\x00\x00\x00",
    "node1:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.0.0.{n}<0>",
    "agent: ORCH-AGENT start segment={n} job=7",
    'Thread 0x{n} (idle): "MainThread"',
    "    barrier (torch/distributed/distributed_c10d.py:{n})",
    "ordinary line with the word error in it",
]


@settings(max_examples=80, deadline=None)
@example(items=[(i, 7) for i in range(len(POOL))] * 2, cuts=[30, 31, 200])  # every kind of line, in order
@given(st.lists(st.tuples(st.integers(0, len(POOL) - 1), st.integers(1, 99)), max_size=80),
       st.lists(st.integers(1, 400), max_size=6))
def test_block_scan_equals_line_scan(tmp_path_factory: pytest.TempPathFactory, items: list[tuple[int, int]],
                                     cuts: list[int]) -> None:
    text = "".join(POOL[i].format(n=n) + "\n" for i, n in items).encode()
    path: Path = tmp_path_factory.mktemp("scan") / "n.log"
    ref = NodeScan("n", str(path), SIGS, PROG)
    path.write_bytes(text)
    ref.feed(LogTail(path).read_new(final=True))

    fast = NodeScan("n", str(path), SIGS, PROG)
    pf = Prefilter([(s.pattern, s.ignore_case) for s in SIGS])
    path.write_bytes(b"")
    tail = LogTail(path)
    pos = 0
    for cut in sorted(cuts) + [len(text)]:  # the file grows in pieces, cut anywhere, even mid-line
        with path.open("ab") as fh:
            fh.write(text[pos:cut])
        pos = max(pos, cut)
        for first, block, newlines in tail.read_chunks():
            fast.feed_bytes(first, block, pf, newlines)
    for first, block, newlines in tail.read_chunks(final=True):
        fast.feed_bytes(first, block, pf, newlines)

    assert [(m.line, m.signature, m.named_node, m.peer_ip) for m in fast.matches] == \
        [(m.line, m.signature, m.named_node, m.peer_ip) for m in ref.matches]
    assert (fast.last_iteration, fast.first_iteration) == (ref.last_iteration, ref.first_iteration)
    assert (fast.allocations, fast.addresses, fast.top_frames) == (ref.allocations, ref.addresses, ref.top_frames)
