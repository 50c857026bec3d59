"""Chapter 6 (the KL term): the KL-regularised optimum that the chapter's frontier is drawn from."""

import numpy as np
import pytest
import torch

import grpo_core as gc
from grpo_core.exact import kl_optimal_logits

W = gc.toy_world(0)
REF, R = W.ref_logits, W.rewards


def objective(logits, beta):
    """E_pi[r] - beta * KL(pi || pi_ref), averaged over prompts."""
    return gc.expected_reward(logits, R) - beta * gc.exact_kl(logits, REF)


@pytest.mark.parametrize("beta", [0.05, 0.3, 2.0])
def test_the_optimum_has_zero_gradient(beta):
    logits = torch.tensor(kl_optimal_logits(R, REF, beta), requires_grad=True)
    lp = torch.log_softmax(logits, -1)
    ref_lp = torch.log_softmax(torch.tensor(REF), -1)
    obj = (lp.exp() * torch.tensor(R)).sum(-1) - beta * (lp.exp() * (lp - ref_lp)).sum(-1)
    obj.sum().backward()
    assert logits.grad.abs().max() < 1e-12


@pytest.mark.parametrize("beta", [0.05, 0.3, 2.0])
def test_no_perturbation_beats_the_optimum(beta):
    best = kl_optimal_logits(R, REF, beta)
    rng = np.random.default_rng(0)
    for _ in range(50):
        other = best + rng.normal(0, 0.3, best.shape)
        assert objective(other, beta) < objective(best, beta)


def test_trained_policies_lie_below_the_frontier():
    """No policy has more reward for its KL than the optimum with the same KL."""
    res = gc.train_batch(R, None, REF, [0, 1], beta=[0.1, 0.5], steps=100)
    for logits in res.logits:
        kl = gc.exact_kl(logits, REF)
        betas = np.geomspace(1e-3, 1e2, 2000)
        kls = np.array([gc.exact_kl(kl_optimal_logits(R, REF, b), REF) for b in betas])
        b = betas[np.argmin(np.abs(kls - kl))]  # the optimum with (about) the same KL
        frontier = gc.expected_reward(kl_optimal_logits(R, REF, b), R)
        assert gc.expected_reward(logits, R) < frontier + 1e-3


def test_limits_and_validation():
    np.testing.assert_allclose(gc.softmax(kl_optimal_logits(R, REF, 1e6)), gc.softmax(REF),
                               atol=1e-5)
    greedy = gc.softmax(kl_optimal_logits(R, REF, 1e-3))
    assert np.all(greedy.argmax(-1) == R.argmax(-1))
    with pytest.raises(ValueError):
        kl_optimal_logits(R, REF, 0.0)
    with pytest.raises(ValueError):
        kl_optimal_logits(R, REF[:, :5], 0.1)
