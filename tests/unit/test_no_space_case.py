"""Issue 37 re-probe: a full disk's stop quoted the agent's own "ORCH-PREFLIGHT fs: ok: /tmp/enospc-run/..." line
as its evidence: `ENOSPC` was matched in any case, so a path holding the word read as the error. The errno names
count in capitals only; the phrases in any case. The prefilter keeps its engine."""

from __future__ import annotations

import pytest

from orchestrator.diagnose.prefilter import ENGINE_AVAILABLE, Prefilter
from orchestrator.diagnose.signatures import build_table

NO_SPACE = next(s for s in build_table() if s.name == "no_space")


@pytest.mark.parametrize("line", [
    "OSError: [Errno 28] No space left on device: '/lustre/run/ckpt/iter_0001000/mp_rank_00/model_optim_rng.pt'",
    "RuntimeError: [enforce fail at inline_container.cc:595] . unexpected pos 1024 vs 512 ... errno ENOSPC",
    "write error: Disk quota exceeded",
    "ncclSystemError: ... failed to extend /dev/shm/nccl-Xyz to 9637892 bytes (errno 28: ENOSPC)",
    "h5py OSError: Can't write data (file write failed: ... errno = 122, error message = 'EDQUOT')",
])
def test_the_full_disk_in_its_real_spellings(line: str) -> None:
    assert NO_SPACE.regex.search(line)


@pytest.mark.parametrize("line", [
    "agent: ORCH-PREFLIGHT fs: ok: /tmp/enospc-run/segments/0001/nodes writable",
    "saving checkpoint at iteration 20 to /scratch/enospc_tests/ckpt in torch format",
    "reading /home/u/edquot-report.txt",
])
def test_a_path_holding_the_word_is_no_full_disk(line: str) -> None:
    assert not NO_SPACE.regex.search(line)


def test_the_prefilter_still_compiles_on_its_engine() -> None:
    pf = Prefilter([(s.pattern, s.ignore_case) for s in build_table()])
    assert pf.engine == ("hyperscan" if ENGINE_AVAILABLE else "python")
