"""Every combination of grpo_loss's knobs against TRL 1.16's code (tests/trl_reference.py):
8 loss types x 768 combinations (ratio level, KL, epsilon_high, delta, top_entropy_quantile,
entropy_coef, off_policy_mask_threshold, vLLM weight; the normalisers and the sampler's
log-probs in turn) x 2 batches, value and gradients to rounding."""

import pytest
from test_loss_trl import KNOB_GRID, check_combinations, make_batch

from grpo_core.loss import ALL_LOSS_TYPES


@pytest.mark.parametrize("loss_type", ALL_LOSS_TYPES)
def test_every_combination_matches_trl(loss_type):
    batches = [make_batch(0), make_batch(1, empty_row=True)]
    check_combinations(loss_type, list(enumerate(KNOB_GRID)), batches)
