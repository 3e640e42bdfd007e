"""Progress in a long block whose last lines hold none (issue 22: the default progress pattern then ran over the
whole 4 MB block, 5.9 s for 78 MB of realistic output): the lines Hyperscan flags are checked instead, with the
same answer as matching the block itself, and the answer Python alone gives when Hyperscan is missing."""

from __future__ import annotations

import json
import re

import pytest

from orchestrator.diagnose.blocks import block_progress
from orchestrator.settings import PROGRESS_REGEX

RX = re.compile(PROGRESS_REGEX.encode())


def block(progress_at: list[int]) -> bytes:
    out = []
    for i in range(20000):
        if i in progress_at:
            out.append(f"0:  iteration {i:8d}/  500000 | lm loss: 2.0E+00 |")
        else:
            out.append(f"{i % 128}: " + json.dumps({"metrics": {f"m{k}": k * 0.5 for k in range(20)}, "n": i}))
    return ("\n".join(out) + "\n").encode()


@pytest.mark.parametrize("progress_at", [[100, 5000, 9000], [19990], [], [3]])
def test_the_last_progress_line_far_from_the_end_is_found_with_or_without_hyperscan(
        progress_at: list[int]) -> None:
    data = block(progress_at)
    found = block_progress(data, 0, RX, want_first=True)
    # no Hyperscan (the pass answers None): the pattern over the block
    plain = block_progress(data, 0, RX, want_first=True, candidates=lambda *a: None)
    def same(r: tuple[int | None, int, bytes] | None) -> object:
        return r and (r[0], r[1], r[2].rstrip(b"\n"))

    assert same(found) == same(plain)
    if progress_at:
        assert found is not None and found[1] == progress_at[-1]
        assert found[2].startswith(b"0:  iteration")
    else:
        assert found is None


def test_a_progress_line_of_megabytes_is_judged_on_its_end() -> None:
    bar = b"".join(b"\rEpoch 0: %3d%%|##########| %d/4000 [00:10<00:10, 2.00it/s]" % (p, p * 40)
                   for p in range(100)) * 200
    found = block_progress(b"x\n" + bar + b"\n", 0, RX, want_first=False)
    assert found is not None and found[1] == 99 * 40
