"""Exact quantities against closed forms, autograd and Monte Carlo."""

import numpy as np
import pytest
import torch

import grpo_core as gc
from grpo_core.exact import kl_optimal_logits

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


# The KL-regularised optimum pi*_beta, which chapter 6's reward-KL frontier is drawn from.


def _kl_objective(logits, beta):
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
        assert _kl_objective(other, beta) < _kl_objective(best, beta)


def test_trained_policies_lie_below_the_frontier():
    """No policy has more reward for its KL than the optimum with the same KL."""
    res = gc.train_batch(R, None, REF, [0, 1], beta=[0.1, 0.5], max_steps=100)
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


# The k3 KL estimator that the toy's exact KL stands in for (chapter 9).

P, A = REF.shape
ALL = np.tile(np.arange(A), (P, 1))  # (P, A): every answer once, to take exact expectations


def _perturbed(seed=0, scale=1.0):
    return REF + np.random.default_rng(seed).normal(0, scale, REF.shape)


def test_k3_is_zero_at_the_reference_and_never_negative():
    assert np.all(gc.k3_kl(REF, REF, ALL) == 0.0)
    for seed in range(5):
        assert np.all(gc.k3_kl(_perturbed(seed, 2.0), REF, ALL) >= 0.0)


def test_k3_matches_its_formula():
    logits = _perturbed(1)
    ratio = gc.softmax(REF) / gc.softmax(logits)
    np.testing.assert_allclose(gc.k3_kl(logits, REF, ALL), ratio - np.log(ratio) - 1, atol=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_k3_value_is_unbiased_for_kl_pi_ref(seed):
    logits = _perturbed(seed)
    expected = (gc.softmax(logits) * gc.k3_kl(logits, REF, ALL)).sum(-1).mean()
    assert abs(expected - gc.exact_kl(logits, REF)) < 1e-12


def test_k3_monte_carlo_mean_approaches_the_exact_kl():
    logits = _perturbed(3)
    samples = gc.sample_group(logits, 64, np.random.default_rng(0), repeats=500)  # (R, P, G)
    est = gc.k3_kl(logits, REF, samples)
    assert est.shape == samples.shape
    se = est.mean(axis=(-1, -2)).std() / np.sqrt(len(est))
    assert abs(est.mean() - gc.exact_kl(logits, REF)) < 4 * se


def test_k3_expected_gradient_is_that_of_the_reverse_kl():
    """Samples held fixed (drawn from pi): E[grad k3] = grad KL(pi_ref || pi) = pi - pi_ref."""
    logits = _perturbed(4)
    pi0 = torch.tensor(gc.softmax(logits))
    t = torch.tensor(logits, requires_grad=True)
    log_ratio = torch.log_softmax(torch.tensor(REF), -1) - torch.log_softmax(t, -1)
    (pi0 * (torch.exp(log_ratio) - log_ratio - 1)).sum().backward()
    np.testing.assert_allclose(t.grad.numpy(), gc.softmax(logits) - gc.softmax(REF), atol=1e-12)
    # and the numpy function has the same expected value as the torch expression
    val = (gc.softmax(logits) * gc.k3_kl(logits, REF, ALL)).sum()
    assert abs(val - (pi0 * (torch.exp(log_ratio) - log_ratio - 1)).sum().item()) < 1e-12


def test_k3_broadcasts_batched_logits():
    logits = np.stack([_perturbed(0), _perturbed(1)])  # (2, P, A)
    out = gc.k3_kl(logits, REF, np.broadcast_to(ALL, (2, P, A)))
    np.testing.assert_array_equal(out[1], gc.k3_kl(_perturbed(1), REF, ALL))


def test_k3_rejects_bad_input():
    with pytest.raises(ValueError):
        gc.k3_kl(REF, REF, np.full((P, 2), A))  # answer index out of range
    with pytest.raises(TypeError):
        gc.k3_kl(REF, REF, np.zeros((P, 2)))  # float indices
    with pytest.raises(ValueError):
        gc.k3_kl(REF[:, :5], REF, ALL[:, :5])  # shapes disagree
