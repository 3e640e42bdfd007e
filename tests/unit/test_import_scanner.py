"""The batch-script scanner skips plain lines that can hold no launch or assignment (a 20 MB script in seconds):
the skip must never change which commands, assignments or launch import-sbatch finds."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from orchestrator.importer.launch import WANTED, find_launch
from orchestrator.importer.names import assignments
from orchestrator.importer.scan import Segment, segments

PIECES = ["echo", "ls", "srun", "python", "train.py", "torchrun", "--nproc", "A=1", "B=$A", "x", " ", " ", "\t",
          "\n", "\n", ";", "|", "&&", "&", "> /dev/null", "2>&1", "# c", "#", "'", '"', "\\\n", "\\", "$(", ")",
          "${", "}", "`", "(", "<<EOF\nbody srun x\nEOF\n", "<<-'E'\n\tq\"\n\tE\n", "=", "export", "{", "mpirun",
          '"$X"', "$L", "'q r'", '"a b"', "V=\"x y\"", "||", "\n$CMD", "\nexec \"$PY\" t.py"]

scripts = st.lists(st.sampled_from(PIECES), max_size=60).map("".join)


def _key(text: str, seg: Segment) -> tuple[int, tuple[tuple[int, int], ...]]:
    return seg.line_start, tuple(seg.words)


@settings(max_examples=1500, deadline=None)
@given(scripts)
@example("}${\nsrun")  # a close before the open: the `${` runs on to the next line (found by hypothesis)
def test_skipping_plain_lines_keeps_every_command_that_matters(text: str) -> None:
    every = segments(text)
    kept = segments(text, WANTED)
    assert {_key(text, s) for s in kept} <= {_key(text, s) for s in every}
    mattering = {_key(text, s) for s in every if WANTED.search(text, s.words[0][0], s.words[-1][1])}
    assert mattering <= {_key(text, s) for s in kept}
    assert assignments(text, kept) == assignments(text, every)
    a, b = find_launch(kept, text, {}), find_launch(every, text, {})
    assert (a is None) == (b is None)
    if a is not None and b is not None:
        assert (a.segment.words, a.kind, a.launcher, a.program_at) == (b.segment.words, b.kind, b.launcher,
                                                                          b.program_at)


def test_a_plain_line_is_skipped_and_a_launch_after_many_is_found() -> None:
    text = "".join(f"echo shard {i} && ls /data/{i} > /dev/null  # c {i}\n" for i in range(2000))
    text += 'srun --mpi=pmix python train.py --lr 3e-4\n'
    kept = segments(text, WANTED)
    assert len(segments(text)) > 2000 and len(kept) == 1
    found = find_launch(kept, text, {})
    assert found is not None and found.launcher == "srun" and found.segment.texts(text)[-1] == "3e-4"


def test_quotes_and_heredocs_still_span_lines_when_skipping() -> None:
    text = 'echo "a\nsrun fake" x\ncat <<EOF\npython not_a_launch.py\nEOF\nls\nFOO=1 python real.py\n'
    kept = segments(text, WANTED)
    words = [s.texts(text) for s in kept]
    assert words == [['echo', '"a\nsrun fake"', 'x'], ['cat', '<<EOF'], ['FOO=1', 'python', 'real.py']]
