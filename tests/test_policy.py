"""Oracle and property tests of the policy: softmax, sampler, policy gradient."""

import loop_reference as ref_impl
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import grpo_core as gc

finite = st.floats(-30, 30, allow_nan=False, width=64)


@given(arrays(np.float64, st.tuples(st.integers(1, 4), st.integers(1, 12)), elements=finite))
def test_softmax_and_log_softmax_match_torch(x):
    t = torch.tensor(x)
    np.testing.assert_allclose(gc.softmax(x), torch.softmax(t, -1).numpy(), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(gc.log_softmax(x), torch.log_softmax(t, -1).numpy(), atol=1e-12)


def test_huge_logits_give_finite_probabilities():
    x = np.array([[1e4, 0.0, -1e4], [1e4, 1e4, 1e4]])
    p = gc.softmax(x)
    assert np.all(np.isfinite(p)) and np.all(np.isfinite(gc.log_softmax(x)))
    np.testing.assert_allclose(p, [[1, 0, 0], [1 / 3, 1 / 3, 1 / 3]])


@pytest.mark.parametrize("G", [1, 2, 8, 33])
@pytest.mark.parametrize("seed", [0, 3, 11])
def test_sampler_matches_rng_choice_draw_for_draw(G, seed):
    logits = gc.toy_world(0).ref_logits * (1 + seed)  # also sharper policies
    ours = gc.sample_group(logits, G, np.random.default_rng(seed))
    theirs = ref_impl.sample_group(logits, G, np.random.default_rng(seed))
    np.testing.assert_array_equal(ours, theirs)


def test_repeats_consume_the_generator_like_a_loop():
    ref = gc.toy_world(0).ref_logits
    rng = np.random.default_rng(5)
    loop = np.stack([ref_impl.sample_group(ref, 4, rng) for _ in range(50)])
    np.testing.assert_array_equal(gc.sample_group(ref, 4, np.random.default_rng(5), repeats=50),
                                  loop)


def test_sampler_frequencies_follow_probabilities():
    logits = gc.toy_world(0).ref_logits
    s = gc.sample_group(logits, 20000, np.random.default_rng(0))
    freq = np.stack([np.bincount(row, minlength=12) for row in s]) / 20000
    p = gc.softmax(logits)
    assert np.all(np.abs(freq - p) < 5 * np.sqrt(p * (1 - p) / 20000) + 1e-9)


def test_sampler_never_draws_zero_probability_answers():
    logits = np.array([[0.0, -np.log(1e300) * 3, 0.0]])  # middle answer has probability ~0
    probs = gc.softmax(logits)
    probs[0, 1] = 0.0
    u = np.linspace(0, 1, 101, endpoint=False)[None, :]
    assert 1 not in gc.sample_from_uniforms(probs, u)


@given(st.integers(1, 9), st.integers(0, 2**32 - 1))
@settings(max_examples=30, deadline=None)
def test_policy_gradient_is_autograd_of_mean_advantage_log_prob(G, seed):
    rng = np.random.default_rng(seed)
    logits = rng.normal(0, 2, (6, 12))
    samples = rng.integers(0, 12, (6, G))
    adv = rng.normal(0, 1, (6, G))
    t = torch.tensor(logits, requires_grad=True)
    chosen = torch.log_softmax(t, -1).gather(1, torch.tensor(samples))
    (torch.tensor(adv) * chosen).mean(dim=1).sum().backward()  # mean over G, per prompt
    np.testing.assert_allclose(gc.policy_gradient(logits, samples, adv), t.grad.numpy(),
                               atol=1e-12)


def test_policy_gradient_matches_the_loop_and_broadcasts():
    rng = np.random.default_rng(0)
    logits = rng.normal(0, 1, (6, 12))
    samples = rng.integers(0, 12, (10, 6, 8))
    adv = rng.normal(0, 1, (10, 6, 8))
    batched = gc.policy_gradient(logits, samples, adv)
    assert batched.shape == (10, 6, 12)
    for k in range(10):
        np.testing.assert_allclose(batched[k], ref_impl.policy_gradient(logits, samples[k], adv[k]),
                                   atol=1e-13)


def test_expected_grad_log_prob_is_zero():
    """sum_a pi(a) (onehot(a) - pi) = 0: why subtracting a baseline is legal."""
    logits = gc.toy_world(0).ref_logits
    A = logits.shape[1]
    every = np.tile(np.arange(A), (6, 1))  # each answer once, weighted by its probability
    g = gc.policy_gradient(logits, every, gc.softmax(logits) * A)
    np.testing.assert_allclose(g, 0.0, atol=1e-15)
