"""Every combination of grpo_loss's knobs against TRL 1.16's code (tests/trl_reference.py):
8 loss types x 768 combinations (ratio level, KL, epsilon_high, delta, top_entropy_quantile,
entropy_coef, off_policy_mask_threshold, vLLM weight; the normalisers and the sampler's
log-probs in turn), value and gradients to rounding. Each combination runs on one of two
batches, half on each (a seeded draw, so that the batch is not tied to any knob): one plain, one
with an all-padding row."""

import numpy as np
import pytest
from test_loss_trl import KNOB_GRID, check_combinations, make_batch

from grpo_core.loss import ALL_LOSS_TYPES

# combination index -> its batch: a seeded permutation, half 0 and half 1
ON_BATCH = np.random.default_rng(0).permutation(np.arange(len(KNOB_GRID)) % 2)


def test_each_batch_meets_every_value_of_every_knob():
    for b in (0, 1):
        combos = [c for c, on in zip(KNOB_GRID, ON_BATCH, strict=True) if on == b]
        for k, values in enumerate(zip(*KNOB_GRID, strict=True)):
            assert {c[k] for c in combos} == set(values), (b, k)
    assert ON_BATCH.sum() == len(KNOB_GRID) // 2


@pytest.mark.parametrize("loss_type", ALL_LOSS_TYPES)
def test_every_combination_matches_trl(loss_type):
    batches = [make_batch(0), make_batch(1, empty_row=True)]
    combos = list(enumerate(KNOB_GRID))
    for b, batch in enumerate(batches):
        check_combinations(loss_type, [c for c in combos if ON_BATCH[c[0]] == b], [batch])
