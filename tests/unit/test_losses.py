"""Issue 41: the training loss read from the progress lines frameworks print, and the detector of a loss gone bad
(orchestrator/losses.py): NaN/Inf in a row, a spike over a robust baseline, never an eval's loss, a warm-up, a noisy
curve or one outlier."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.losses import LossRule, LossSeries, loss_of, losses_in
from orchestrator.settings import PROGRESS_REGEX

PROGRESS = re.compile(PROGRESS_REGEX)


@pytest.mark.parametrize(("line", "want"), [
    (" iteration      100/  500000 | elapsed time per iteration (ms): 812.3 | lm loss: 6.913731E+00 | loss scale: "
     "65536.0 | grad norm: 1.234 |", 6.913731),
    ("{'loss': 2.3456, 'grad_norm': 1.2, 'learning_rate': 5e-05, 'epoch': 0.12}", 2.3456),
    ("Epoch 0:  45%|####5     | 45/100 [00:10<00:12, 4.50it/s, loss=2.35, v_num=0, val_loss=2.4]", 2.35),
    ("iter 100: loss 4.2345, time 123.45ms, mfu 40.1%", 4.2345),
    ("step 500: train loss 3.2100, val loss 3.2500", 3.21),
    ("step 10/5000 | train loss 4.500000 | norm 1.2 | lr 1e-4", 4.5),
    ("\x1b[31mstep:  10  \x1b[32mloss:  8.1234  \x1b[33mmemory: 10GiB", 8.1234),
    ("| epoch 001 | loss 9.1 | nll_loss 8.9 | ppl 512 | wps 1000", 9.1),
    ('{"epoch": 1, "update": 0.5, "loss": "9.102", "nll_loss": "8.9"}', 9.102),
    ("[batch=10/1000]: Train loss/train/total: 3.4", 3.4),
    ("    train/CrossEntropyLoss=7.2", 7.2),
    ("Epoch 0: : 10/100 [00:10<00:12, reduced_train_loss=2.3, global_step=9.0]", 2.3),
    ("[2018-11-26 14:47:26,759 INFO] Step 5350/50000; acc:  51.25; ppl:  8.43; xent: 2.13; lr: 0.00066", 2.13),
    ("s:3 trl:10.7157 lr:0.000003 norm:13.12", 10.7157),
    ("total_loss: 1.2  loss_cls: 0.3  loss_box_reg: 0.2", 1.2),
    ("Train Loss: 0.5321", 0.5321),
])
def test_the_training_loss_is_read_in_the_formats_frameworks_print(line: str, want: float) -> None:
    assert loss_of(line) == pytest.approx(want)


@pytest.mark.parametrize("line", [" iteration 120/ 600 | lm loss: NAN |", "{'loss': nan, 'learning_rate': 1e-5}",
                                  "loss=inf", "step 7 | train loss -inf"])
def test_a_loss_printed_as_nan_or_inf_is_read_as_such(line: str) -> None:
    value = loss_of(line)
    assert value is not None and not math.isfinite(value)


@pytest.mark.parametrize("line", [
    "{'eval_loss': 2.1, 'eval_runtime': 3.0}", " validation loss at iteration 100 | lm loss value: 6.9E+00 |",
    "val loss 3.25", "eval loss: 2.0", "Loss is NaN at iteration 3", "s:0 tel:11.0092",
    "loss scale: 65536.0", "z_loss: 0.001", "step 100 | grad_norm: nan | lr 1e-4", "step_avg:nanms",
])
def test_an_evaluation_s_loss_a_component_or_no_value_is_not_the_training_loss(line: str) -> None:
    assert loss_of(line) is None


def _series(values: list[float], rule: LossRule | None = None, first: int = 1) -> LossSeries:
    s = LossSeries(rule or LossRule())
    for i, v in enumerate(values):
        s.add(first + i, v, f"step {first + i} | loss {v}")
    return s


def test_nan_twice_in_a_row_is_an_anomaly_from_its_first_step_and_once_is_not() -> None:
    s = _series([2.0] * 5 + [math.nan, 2.0, math.nan, math.inf, 1.9])
    assert s.found is not None and s.found.kind == "nan" and s.found.onset == 8
    assert _series([2.0] * 5 + [math.nan, 2.0, 2.0]).found is None


def test_a_spike_three_times_in_a_row_is_found_from_its_first_step_and_an_outlier_is_not() -> None:
    base = [2.0 + 0.02 * ((i * 7) % 5) for i in range(40)]
    one = _series(base + [6.0] + base[:10])
    assert one.found is None  # an outlier never enters the baseline either
    s = _series(base + [6.0, 7.0, 6.5, 6.8])
    assert s.found is not None and s.found.kind == "spike" and s.found.onset == 41 and s.found.value == 7.0
    assert s.found.baseline == pytest.approx(2.04, abs=0.03)
    assert "spiked to 7 (median 2.04 before) at iteration 41: step 41 | loss 6.0" in s.found.sentence()


def test_too_few_losses_are_not_judged_unless_a_previous_segment_seeds_the_baseline() -> None:
    assert _series([2.0, 2.01, 1.99, 9.0, 9.1, 9.2]).found is None
    seeded = _series([9.0, 9.1, 9.2], LossRule(seed=tuple([2.0, 2.01, 1.99] * 10)))
    assert seeded.found is not None and seeded.found.onset == 1


@settings(max_examples=300, deadline=None)
@given(start=st.floats(2.0, 12.0), floor=st.floats(0.05, 3.0), tau=st.floats(5.0, 2000.0), noise=st.floats(0.0, 0.08),
       n=st.integers(20, 400), seed=st.integers(0, 2**31 - 1), warm=st.integers(0, 5))
def test_a_healthy_curve_warm_up_and_noise_included_never_trips_it(start: float, floor: float, tau: float,
                                                                   noise: float, n: int, seed: int, warm: int) -> None:
    """A decaying loss with multiplicative noise up to 8% (the healthy curves of the blind corpus stay within it) and a
    rise in its first steps (warm-up): no anomaly."""
    import random
    rng = random.Random(seed)
    values = [floor + (start - floor) * math.exp(-i / tau) for i in range(n)]
    values = [v * (1.0 + rng.uniform(-noise, noise)) for v in values]
    for i in range(min(warm, n)):
        values[i] *= 1.4  # the first steps of a run rise before they fall
    assert _series(values).found is None


@settings(max_examples=200, deadline=None)
@given(level=st.floats(0.5, 8.0), noise=st.floats(0.0, 0.05), before=st.integers(20, 200), jump=st.floats(1.6, 20.0),
       seed=st.integers(0, 2**31 - 1))
def test_a_real_jump_that_lasts_is_found_at_its_first_step(level: float, noise: float, before: int, jump: float,
                                                           seed: int) -> None:
    import random
    rng = random.Random(seed)
    values = [level * (1.0 + rng.uniform(-noise, noise)) for _ in range(before)]
    values += [level * jump * (1.0 + rng.uniform(-noise, noise)) for _ in range(5)]
    s = _series(values)
    assert s.found is not None and s.found.kind == "spike" and s.found.onset == before + 1


def test_a_block_s_loss_lines_are_read_with_their_own_step_or_the_block_s() -> None:
    block = (b"noise line\n iteration       7/ 100 | lm loss: 2.5 | loss scale: 1.0 |\n"
             b"{'loss': 2.4, 'epoch': 0.1}\n 10%|#  | 8/80 [00:01<00:09, loss=2.3]\r 11%|#  | 9/80 [00:01, loss=2.2]\n")
    s = LossSeries(LossRule())
    s.feed_bytes(block, PROGRESS, fallback=42)
    assert s.points == 4 and s.baseline() == (2.5, 2.4, 2.3, 2.2)
    text = block.decode()
    assert [(st, v) for st, v, _ in losses_in(text, PROGRESS)] == [(7, 2.5), (7, 2.4), (8, 2.3), (9, 2.2)]


def test_a_loss_wandering_around_zero_has_no_level_to_spike_from_but_nan_still_counts() -> None:
    """A policy-gradient objective (verl, OpenRLHF) crosses zero: its jumps are not spikes; NaN still is."""
    values = [0.02 * ((i * 7) % 11 - 5) for i in range(60)]
    assert _series(values + [0.5, 0.6, 0.55]).found is None
    nan = _series(values + [math.nan, math.nan])
    assert nan.found is not None and nan.found.kind == "nan"


def test_a_step_that_goes_back_is_a_restart_in_the_same_log_and_the_baseline_starts_over() -> None:
    """Three runs appended to one file (or a resume from an older checkpoint): the second run's warm-up is not a
    spike over the first run's converged loss. The same values with steps that keep rising are one."""
    first = [1.0 + 0.01 * (i % 3) for i in range(100)]
    again = [10.0 - 0.1 * i for i in range(10)]
    restarted = LossSeries(LossRule())
    for i, v in enumerate(first):
        restarted.add(i + 1, v, "")
    for i, v in enumerate(again):
        restarted.add(i + 1, v, "")
    assert restarted.found is None
    assert _series(first + again).found is not None


def test_a_segment_is_seeded_with_the_baseline_before_it_only_when_it_resumes(tmp_path: Path) -> None:
    from types import SimpleNamespace
    from typing import cast

    from orchestrator.state import SegmentRecord
    from orchestrator.watch.losswatch import loss_terms
    from orchestrator.watch.segment import SegmentWatch
    from tests.unit.test_controller_fake import make

    ctl, _, _ = make(tmp_path)
    before = LossSeries(LossRule())
    for i in range(30):
        before.add(i + 1, 2.0, "")
    watch = cast(SegmentWatch, SimpleNamespace(nodes={"node1": SimpleNamespace(losses=before)}))
    resumed = SegmentRecord(index=2, job_name="j", resumed_from="/ckpt/iter_0000020")
    scratch = SegmentRecord(index=2, job_name="j")
    seeded, unseeded = loss_terms(ctl.s, watch, resumed), loss_terms(ctl.s, watch, scratch)
    assert seeded is not None and seeded.seed == (2.0,) * 30
    assert unseeded is not None and unseeded.seed == ()


@pytest.mark.parametrize("noise", [0.005, 0.02])
def test_a_spike_while_the_curve_still_falls_steeply_is_judged_against_where_the_curve_is(noise: float) -> None:
    """A warm-up descent (10 -> ~4.6 over 60 prints): the window's median lags far above the curve, so a spike judged
    against it is hidden. The level is the newest losses' median, the noise the spread of step-to-step changes."""
    falling = [4.5 + 5.5 * math.exp(-i / 15) * (1 + noise * ((i * 5) % 7 - 3) / 3) for i in range(60)]
    spiked = _series(falling + [7.9, 7.5, 7.1, 7.2])
    assert spiked.found is not None and spiked.found.kind == "spike" and spiked.found.onset == 61
    assert _series(falling + [falling[-1] * 0.99] * 10).found is None


@pytest.mark.parametrize("jump", [1.5, 2.2, 4.0])
def test_two_prints_in_a_row_over_the_line_are_a_spike_one_is_an_outlier(jump: float) -> None:
    flat = [2.0 + 0.02 * ((i * 7) % 5 - 2) for i in range(120)]
    two = _series(flat + [2.0 * jump, 1.9 * jump, 2.0, 2.01])
    assert two.found is not None and two.found.onset == 121
    assert _series(flat + [2.0 * jump, 2.0, 2.01, 1.99]).found is None
