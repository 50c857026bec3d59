"""Chapter 9 (GRPO, compressed): the k3 KL estimator that the toy's exact KL stands in for."""

import numpy as np
import pytest
import torch

import grpo_core as gc

W = gc.toy_world(0)
REF, R = W.ref_logits, W.rewards
P, A = REF.shape
ALL = np.tile(np.arange(A), (P, 1))  # (P, A): every answer once, to take exact expectations


def policy(seed=0, scale=1.0):
    return REF + np.random.default_rng(seed).normal(0, scale, REF.shape)


def test_k3_is_zero_at_the_reference_and_never_negative():
    assert np.all(gc.k3_kl(REF, REF, ALL) == 0.0)
    for seed in range(5):
        assert np.all(gc.k3_kl(policy(seed, 2.0), REF, ALL) >= 0.0)


def test_k3_matches_its_formula():
    logits = policy(1)
    ratio = gc.softmax(REF) / gc.softmax(logits)
    np.testing.assert_allclose(gc.k3_kl(logits, REF, ALL), ratio - np.log(ratio) - 1, atol=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_k3_value_is_unbiased_for_kl_pi_ref(seed):
    logits = policy(seed)
    expected = (gc.softmax(logits) * gc.k3_kl(logits, REF, ALL)).sum(-1).mean()
    assert abs(expected - gc.exact_kl(logits, REF)) < 1e-12


def test_k3_monte_carlo_mean_approaches_the_exact_kl():
    logits = policy(3)
    samples = gc.sample_group(logits, 64, np.random.default_rng(0), repeats=500)  # (R, P, G)
    est = gc.k3_kl(logits, REF, samples)
    assert est.shape == samples.shape
    se = est.mean(axis=(-1, -2)).std() / np.sqrt(len(est))
    assert abs(est.mean() - gc.exact_kl(logits, REF)) < 4 * se


def test_k3_expected_gradient_is_that_of_the_reverse_kl():
    """Samples held fixed (drawn from pi): E[grad k3] = grad KL(pi_ref || pi) = pi - pi_ref."""
    logits = policy(4)
    pi0 = torch.tensor(gc.softmax(logits))
    t = torch.tensor(logits, requires_grad=True)
    log_ratio = torch.log_softmax(torch.tensor(REF), -1) - torch.log_softmax(t, -1)
    (pi0 * (torch.exp(log_ratio) - log_ratio - 1)).sum().backward()
    np.testing.assert_allclose(t.grad.numpy(), gc.softmax(logits) - gc.softmax(REF), atol=1e-12)
    # and the numpy function has the same expected value as the torch expression
    val = (gc.softmax(logits) * gc.k3_kl(logits, REF, ALL)).sum()
    assert abs(val - (pi0 * (torch.exp(log_ratio) - log_ratio - 1)).sum().item()) < 1e-12


def test_k3_broadcasts_batched_logits():
    logits = np.stack([policy(0), policy(1)])  # (2, P, A)
    out = gc.k3_kl(logits, REF, np.broadcast_to(ALL, (2, P, A)))
    np.testing.assert_array_equal(out[1], gc.k3_kl(policy(1), REF, ALL))


def test_k3_rejects_bad_input():
    with pytest.raises(ValueError):
        gc.k3_kl(REF, REF, np.full((P, 2), A))  # answer index out of range
    with pytest.raises(TypeError):
        gc.k3_kl(REF, REF, np.zeros((P, 2)))  # float indices
    with pytest.raises(ValueError):
        gc.k3_kl(REF[:, :5], REF, ALL[:, :5])  # shapes disagree
