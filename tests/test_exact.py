"""Exact quantities against closed forms, autograd and Monte Carlo."""

import numpy as np
import pytest
import torch

import grpo_core as gc

W = gc.toy_world(0)
REF, R = W.ref_logits, W.rewards


def test_world_numbers():
    assert round(gc.best_reward(R), 4) == 5.5465
    assert round(gc.evaluate(REF, R, REF)[0], 4) == 3.0131
    assert gc.evaluate(REF, R, REF)[1] == 0.0


def test_true_gradient_is_autograd_of_expected_reward():
    t = torch.tensor(REF, requires_grad=True)
    (torch.softmax(t, -1) * torch.tensor(R)).sum().backward()  # sum over prompts: per-row grads
    np.testing.assert_allclose(gc.true_gradient(REF, R), t.grad.numpy(), atol=1e-12)


def test_exact_kl_matches_torch():
    rng = np.random.default_rng(0)
    logits = rng.normal(0, 1, (6, 12))
    lp, lq = torch.log_softmax(torch.tensor(logits), -1), torch.log_softmax(torch.tensor(REF), -1)
    want = torch.nn.functional.kl_div(lq, lp, log_target=True, reduction="none").sum(-1).mean()
    assert abs(gc.exact_kl(logits, REF) - want.item()) < 1e-12


def test_multisets_count_and_sum():
    m = gc.multisets(12, 8)
    assert m.shape == (75582, 12) and np.all(m.sum(axis=1) == 8)
    assert len({tuple(row) for row in m}) == len(m)


@pytest.mark.parametrize("G", [1, 2, 3, 5])
def test_multinomial_weights_sum_to_one_and_none_is_unbiased(G):
    from grpo_core.exact import _multiset_table

    counts, log_coef = _multiset_table(R.shape[1], G)
    weights = np.exp(log_coef[:, None] + counts @ gc.log_softmax(REF).T)  # (M, P)
    np.testing.assert_allclose(weights.sum(axis=0), 1.0, rtol=1e-12)
    m = gc.exact_moments(REF, R, G, "none")
    np.testing.assert_allclose(m.mean, gc.true_gradient(REF, R), atol=1e-12)


@pytest.mark.parametrize("G", [2, 3, 4, 6])
def test_expected_scale_closed_forms(G):
    truth = gc.true_gradient(REF, R)
    fitted = gc.expected_reward(REF, R, per_prompt=True)
    for kind in ("group", "loo", "critic"):
        m = gc.exact_moments(REF, R, G, kind, critic_value=fitted)
        np.testing.assert_allclose(m.mean, gc.expected_scale(kind, G) * truth, atol=1e-12)


def test_group_mean_estimator_monte_carlo_mean_is_shrunk_truth():
    """The Monte-Carlo mean of the group-baseline estimator is (G-1)/G times the exact gradient,
    within its standard error."""
    G, n = 4, 40000
    g = gc.gradient_estimates(REF, R, np.random.default_rng(0), G, "group", repeats=n)
    se = g.std(axis=0) / np.sqrt(n)
    z = (g.mean(axis=0) - (G - 1) / G * gc.true_gradient(REF, R)) / (se + 1e-15)
    assert np.abs(z).max() < 4.5


def test_batch_baseline_mean_scale_by_monte_carlo():
    G, n = 2, 40000
    g = gc.gradient_estimates(REF, R, np.random.default_rng(1), G, "batch", repeats=n)
    se = g.std(axis=0) / np.sqrt(n)
    z = (g.mean(axis=0) - gc.expected_scale("batch", G, 6) * gc.true_gradient(REF, R)) / se
    assert np.abs(z).max() < 4.5


def test_exact_variance_agrees_with_monte_carlo():
    for kind, exact in (("none", 9.8951), ("group", 2.1094), ("loo", 2.7552)):
        m = gc.exact_moments(REF, R, 8, kind)
        assert round(m.variance, 4) == exact
        mc = gc.grad_variance(REF, R, np.random.default_rng(2), 8, kind, repeats=20000)
        assert abs(mc - m.variance) < 0.03 * m.variance


def test_seed_findings_for_normalised_advantages():
    truth = gc.true_gradient(REF, R)
    for G, scale, cosine in ((2, 0.254, 0.848), (4, 0.374, 0.870), (8, 0.422, 0.873)):
        mean = gc.exact_moments(REF, R, G, "group_norm").mean
        assert round(float((mean * truth).sum() / (truth * truth).sum()), 3) == scale
        cos = (mean * truth).sum() / np.linalg.norm(mean) / np.linalg.norm(truth)
        assert round(float(cos), 3) == cosine


def test_exact_perfect_critic_and_reduction():
    fitted = gc.expected_reward(REF, R, per_prompt=True)
    assert round(gc.exact_moments(REF, R, 8, "critic", fitted).variance, 3) == 2.352
    none, group = (gc.exact_moments(REF, R, 8, kind).variance for kind in ("none", "group"))
    ratio = none / group
    assert round(ratio, 2) == 4.69


def test_reward_std_is_the_large_group_limit_of_the_group_std():
    sigma = gc.reward_std(REF, R)  # (P,)
    draws = gc.sample_group(REF, 200_000, np.random.default_rng(0))  # (P, n)
    r = np.take_along_axis(R, draws, axis=1)
    assert np.allclose(r.std(axis=1), sigma, rtol=0.01)
    loop = [np.sqrt(sum(p * (R[k, a] - (gc.softmax(REF[k]) * R[k]).sum()) ** 2
                        for a, p in enumerate(gc.softmax(REF[k])))) for k in range(len(R))]
    assert np.allclose(sigma, loop, rtol=1e-12)
    assert gc.reward_std(np.stack([REF, REF]), R).shape == (2, len(R))


def test_alignment_scale_and_cosine():
    truth = gc.true_gradient(REF, R)
    scale, cosine = gc.alignment(0.875 * truth, truth)
    assert np.isclose(scale, 0.875) and np.isclose(cosine, 1.0)
    bent = truth * np.arange(1, len(R) + 1)[:, None]
    s_pp, c_pp = gc.alignment(bent, truth, per_prompt=True)
    assert np.allclose(s_pp, np.arange(1, len(R) + 1)) and np.allclose(c_pp, 1.0)
    _, c = gc.alignment(bent, truth)
    assert c < 1 - 1e-3  # prompts reweighted: the overall direction bends
    group = gc.exact_moments(REF, R, 4, "group").mean
    assert np.isclose(gc.alignment(group, truth)[0], gc.expected_scale("group", 4))
    with pytest.raises(ValueError, match="truth"):
        gc.alignment(truth, truth[:, :3])
