"""Tests of grpo_core.shared: the shared-parameter world (chapter 14)."""

import numpy as np
import pytest
import torch

import grpo_core as gc
from grpo_core.shared import (
    SharedPolicy,
    pass_at_k,
    pass_rate_grad,
    shared_logits,
    shared_update,
    shared_world,
    update_cosine,
)

W = shared_world(0)
F, REW, N = W.features[: W.n_train], W.rewards[: W.n_train], W.n_train


def test_world_shapes_and_one_correct_answer():
    assert W.features.shape == (12, 4, 6) and W.rewards.shape == (12, 4)
    np.testing.assert_array_equal(W.rewards.sum(-1), 1.0)
    np.testing.assert_array_equal(shared_world(0).features, W.features)
    assert not np.array_equal(shared_world(1).features, W.features)


def test_forward_shape_and_seeded_determinism():
    a, b, c = SharedPolicy(F, 3, seed=5), SharedPolicy(F, 3, seed=5), SharedPolicy(F, 3, seed=6)
    assert a().shape == (3, N, 4) and a().dtype == torch.float64
    torch.testing.assert_close(a(), b(), rtol=0, atol=0)
    assert not torch.equal(a(), c())
    torch.testing.assert_close(a()[0], a()[2], rtol=0, atol=0)  # every run starts alike
    np.testing.assert_allclose(a.initial_logits(), shared_logits(a.theta[0].detach().numpy(), F))
    assert np.all(SharedPolicy(F, 2, init_scale=0.0)().detach().numpy() == 0)


def test_pass_rate_grad_matches_autograd():
    theta = torch.tensor(np.random.default_rng(1).normal(0, 1, 6), requires_grad=True)
    ft = torch.tensor(F)
    p = (torch.softmax(torch.einsum("pad,d->pa", ft, theta), -1) * torch.tensor(REW)).sum(-1)
    jac = torch.stack([torch.autograd.grad(p[i], theta, retain_graph=True)[0] for i in range(N)])
    np.testing.assert_allclose(pass_rate_grad(theta.detach().numpy(), F, REW), jac.numpy(),
                               rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("kind", ["trl", "grpo", "dr_grpo", "rloo"])
def test_exact_update_is_autograd_of_the_weighted_objective(kind):
    th = np.random.default_rng(2).normal(0, 1, 6)
    theta = torch.tensor(th, requires_grad=True)
    logits = torch.einsum("pad,d->pa", torch.tensor(F), theta)
    p = (torch.softmax(logits, -1) * torch.tensor(REW)).sum(-1)  # (P,)
    c = torch.tensor(gc.update_factor(p.detach().numpy(), 8, kind))  # constant per prompt
    (c * p).mean().backward()
    np.testing.assert_allclose(shared_update(th, F, REW, 8, kind), theta.grad.numpy(),
                               rtol=1e-10, atol=1e-13)


def test_dr_grpo_is_the_scaled_true_gradient():
    th = np.random.default_rng(3).normal(0, 1, (2, 6))  # leading run dimension
    g = pass_rate_grad(th, F, REW).mean(-2)
    np.testing.assert_allclose(shared_update(th, F, REW, 8, "dr_grpo"), 7 / 8 * g, rtol=1e-12)
    np.testing.assert_allclose(update_cosine(th, F, REW, 8, "dr_grpo"), 1.0, rtol=1e-12)
    assert np.all(update_cosine(th, F, REW, 8, "trl") < 1.0)


def test_mc_mean_of_grpo_loss_gradient_matches_exact_update():
    """Sampled groups through gc.grpo_loss: the mean gradient is within 4 SE of the exact one."""
    R, G = 4000, 8
    pol = SharedPolicy(F, R, seed=4)
    rng = np.random.default_rng(7)
    lp = torch.log_softmax(pol(), -1)  # (R, P, A)
    samples = gc.sample_from_uniforms(torch.softmax(pol(), -1).detach().numpy(),
                                      rng.random((R, N, G)))
    r = REW[np.arange(N)[:, None], samples]  # (R, P, G)
    adv = torch.tensor(gc.trl_advantages(r.reshape(R, N * G), G, "group"))
    logp = lp.gather(-1, torch.from_numpy(samples)).reshape(R, N * G, 1)
    loss = gc.grpo_loss(logp, logp.detach(), None, adv, torch.ones_like(logp))
    loss.sum().backward()
    est = -pol.theta.grad.numpy()  # (R, D): each run's ascent direction
    exact = shared_update(pol.theta[0].detach().numpy(), F, REW, G, "trl")
    se = est.std(0, ddof=1) / np.sqrt(R)
    assert np.all(np.abs(est.mean(0) - exact) < 4 * se + 1e-12)


def test_pass_at_k():
    p = np.array([0.0, 0.25, 1.0])
    np.testing.assert_allclose(pass_at_k(p, 1), p)
    np.testing.assert_allclose(pass_at_k(p, 8), [0.0, 1 - 0.75**8, 1.0])


def test_training_through_train_batch_raises_the_train_pass_rate():
    R = 4
    pol = SharedPolicy(F, R, seed=0)
    ref = pol.initial_logits()
    res = gc.train_batch(REW, None, ref, list(range(R)), policy=pol, num_generations=8,
                         max_steps=100,
                         scale_rewards="group", beta=0.0)
    assert res.reward.shape == (R, 101)
    np.testing.assert_allclose(res.reward[:, 0], gc.pass_rate(ref, REW).mean())
    assert np.all(res.reward[:, -1] > res.reward[:, 0] + 0.3)
    th = pol.theta.detach().numpy()
    np.testing.assert_allclose(gc.pass_rate(shared_logits(th, F), REW).mean(-1), res.reward[:, -1],
                               rtol=1e-12)


@pytest.mark.parametrize("call, name", [
    (lambda: SharedPolicy(np.zeros((3, 4)), 2), "features"),
    (lambda: SharedPolicy(F, 0), "n_runs"),
    (lambda: SharedPolicy(F, 2, init_scale=-1.0), "init_scale"),
    (lambda: shared_world(0, n_answers=1), "n_answers"),
    (lambda: shared_world(0, noise=-1.0), "noise"),
    (lambda: shared_logits(np.zeros(5), F), "theta"),
    (lambda: pass_at_k(np.array([1.5]), 2), "p"),
    (lambda: pass_at_k(np.array([0.5]), 0), "k"),
    (lambda: shared_update(np.zeros(6), F, REW, 1), "G"),
    (lambda: shared_update(np.zeros(6), F, REW, 8, "ppo"), "kind"),
])
def test_bad_arguments_raise_value_error_naming_them(call, name):
    with pytest.raises(ValueError, match=name):
        call()


def test_a_per_prompt_factor_cancels_in_the_tabular_toy_but_not_with_shared_weights():
    """Chapter 14's premise, under Adam and scale_rewards="none" (advantage proportional to the
    reward): scaling every reward by 10 cancels in both worlds; scaling each prompt by its own
    factor (x0.1 ... x10) cancels with tabular logits (each prompt owns its coordinates), and
    turns the shared update."""
    ref = SharedPolicy(F, 1, seed=0).initial_logits()

    def pass_rates(rewards, shared):
        pol = SharedPolicy(F, 4, seed=0) if shared else None
        res = gc.train_batch(rewards, None, ref, [0, 1, 2, 3], policy=pol, num_generations=8,
                             max_steps=30,
                             scale_rewards="none", beta=0.0)
        return gc.pass_rate(res.logits, REW)  # (4, P)

    w = np.geomspace(0.1, 10, N)[:, None]  # (P, 1) one factor per prompt
    for shared in (False, True):
        base = pass_rates(REW, shared)
        np.testing.assert_allclose(pass_rates(10 * REW, shared), base, atol=1e-5)
    np.testing.assert_allclose(pass_rates(w * REW, False), pass_rates(REW, False), atol=5e-3)
    assert np.abs(pass_rates(w * REW, True) - pass_rates(REW, True)).max() > 0.1
