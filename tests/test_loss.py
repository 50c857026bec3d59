"""grpo_loss and trl_advantages against TRL 1.16's own code, as ``tests/trl_reference.py``
transcribes it (``GRPOTrainer._compute_loss`` and the advantage block of
``_generate_and_score_completions``; ``tests/test_trl_reference.py`` checks the transcription
against the installed TRL, line by line), for one process without gradient accumulation (the
"dapo" normaliser ``num_items_in_batch`` is ``mask.sum()``).
"""

import itertools

import numpy as np
import pytest
import torch
import trl_reference as trl

import grpo_core as gc
from grpo_core.loss import importance_ratio


def trl_compute_loss(logp, old, ref, adv, mask, *, epsilon_high, **knobs):
    """TRL's loss on these tensors (TRL's defaults, one process)."""
    inputs = dict(completion_mask=mask, advantages=adv, old_per_token_logps=old,
                  ref_per_token_logps=ref, num_items_in_batch=mask.sum())
    return trl.TRLGRPOLoss(epsilon_high=epsilon_high, **knobs)._compute_loss(logp, None, inputs)


def trl_advantages_ref(rewards, num_generations, scale_rewards):
    """TRL's advantages of one reward function's rewards ``(B,)``."""
    return trl.rewards_and_advantages(rewards[:, None], num_generations,
                                      scale_rewards=scale_rewards)[0]


def _batch(seed, B=6, T=5, off_policy=True):
    g = torch.Generator().manual_seed(seed)
    logp = (-torch.rand(B, T, generator=g, dtype=torch.float64) * 3).requires_grad_(True)
    old = (logp.detach() + 0.4 * torch.randn(B, T, generator=g, dtype=torch.float64)
           if off_policy else None)
    ref = logp.detach() + 0.3 * torch.randn(B, T, generator=g, dtype=torch.float64)
    adv = torch.randn(B, generator=g, dtype=torch.float64)
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    mask = (torch.arange(T)[None, :] < lengths[:, None]).double()
    return logp, old, ref, adv, mask


GRID = list(itertools.product(gc.LOSS_TYPES, ("token", "sequence"), (0.0, 0.04),
                              (None, 0.28), (True, False), (True, False)))


@pytest.mark.parametrize("loss_type,level,beta,eps_high,bias_kl,off_policy", GRID)
def test_grpo_loss_matches_trl(loss_type, level, beta, eps_high, bias_kl, off_policy):
    for seed in range(3):
        logp, old, ref, adv, mask = _batch(seed, off_policy=off_policy)
        kw = dict(beta=beta, loss_type=loss_type, importance_sampling_level=level)
        ours = gc.grpo_loss(logp, old, ref, adv, mask, epsilon=0.2, epsilon_high=eps_high,
                            max_completion_length=7, use_bias_correction_kl=bias_kl, **kw)
        (g_ours,) = torch.autograd.grad(ours, logp)
        theirs = trl_compute_loss(logp, old, ref, adv, mask, epsilon=0.2, epsilon_high=eps_high,
                                  max_completion_length=7, use_bias_correction_kl=bias_kl, **kw)
        (g_theirs,) = torch.autograd.grad(theirs, logp)
        torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-14)
        torch.testing.assert_close(g_ours, g_theirs, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("scale", gc.SCALE_REWARDS)
def test_trl_advantages_match_trl(scale):
    rng = np.random.default_rng(0)
    for G in (2, 4, 8):
        r = rng.random(G * 5)
        r[:G] = 0.7  # one dead group
        r[G:2 * G] = rng.integers(0, 2, G)  # a binary one
        ref = trl_advantages_ref(torch.tensor(r), G, scale).numpy()
        ours = gc.trl_advantages(r, G, scale)
        # TRL's nanstd forms its Bessel factor count / (count - 1) from integer tensors, so in
        # float32 (torch's default dtype) even for float64 rewards: agreement to float32 rounding.
        np.testing.assert_allclose(ours, ref, rtol=1e-6, atol=1e-12)
        assert (ours[:G] == 0).all()  # exactly 0, not 1e-13


def test_trl_advantages_leading_dims():
    r = np.random.default_rng(1).random((3, 16))
    for scale in gc.SCALE_REWARDS:
        both = gc.trl_advantages(r, 4, scale)
        for i in range(3):
            np.testing.assert_array_equal(both[i], gc.trl_advantages(r[i], 4, scale))


def test_loss_leading_dims_are_independent_runs():
    runs = [_batch(s) for s in range(3)]
    stacked = [torch.stack([b[k].detach() for b in runs]) for k in range(5)]
    logp = stacked[0].requires_grad_(True)
    for loss_type in gc.LOSS_TYPES:
        losses = gc.grpo_loss(logp, *stacked[1:], beta=0.1, loss_type=loss_type)
        assert losses.shape == (3,)
        for i, b in enumerate(runs):
            lone = gc.grpo_loss(b[0].detach(), *b[1:], beta=0.1, loss_type=loss_type)
            torch.testing.assert_close(losses[i], lone, rtol=1e-12, atol=1e-14)


def test_on_policy_value_is_minus_mean_advantage_gradient_is_policy_gradient():
    # mu = 1: ratio == 1, so the value is -(token-weighted mean of A) (0 for zero-sum groups)
    # while the gradient is the plain policy gradient -A * grad log pi / normaliser.
    logp, _, _, adv, mask = _batch(4)
    adv = adv - adv.mean()
    loss = gc.grpo_loss(logp, None, None, adv, mask, loss_type="grpo")
    torch.testing.assert_close(loss, -adv.mean(), rtol=0, atol=1e-15)
    (g,) = torch.autograd.grad(loss, logp)
    expected = -adv[:, None] * mask / mask.sum(-1, keepdim=True) / mask.shape[0]
    torch.testing.assert_close(g, expected, rtol=1e-12, atol=1e-15)


def test_clipped_term_has_zero_gradient_where_the_clip_binds():
    logp = torch.log(torch.tensor([[0.5], [0.5], [0.5], [0.5]], dtype=torch.float64))
    logp.requires_grad_(True)
    old = torch.log(torch.tensor([[0.3], [0.45], [0.8], [0.55]], dtype=torch.float64))
    adv = torch.tensor([1.0, 1.0, -1.0, -1.0], dtype=torch.float64)
    mask = torch.ones(4, 1, dtype=torch.float64)
    # ratios 1.67 (A > 0, above 1.28: clipped), 1.11 (inside), 0.625 (A < 0, below 0.8: clipped),
    # 0.91 (inside)
    loss = gc.grpo_loss(logp, old, None, adv, mask, epsilon=0.2, epsilon_high=0.28)
    (g,) = torch.autograd.grad(loss, logp)
    assert g[0, 0] == 0 and g[2, 0] == 0
    assert g[1, 0] != 0 and g[3, 0] != 0
    m = gc.clip_metrics(importance_ratio(logp, old, mask), adv, mask, 0.2, 0.28)
    assert m == {"clip_ratio/low_mean": 0.25, "clip_ratio/high_mean": 0.25,
                 "clip_ratio/region_mean": 0.5}


def test_kl_estimators_are_unbiased_for_k1_k3_and_gradients_as_named():
    # exact expectations over a 5-answer categorical pi (one token): E[k1] = E[k3] = KL(pi||ref);
    # E_pi[grad k1] = 0; E_pi[grad k2] = grad KL(pi||ref); E_pi[grad k3] = grad KL(ref||pi).
    g = torch.Generator().manual_seed(0)
    theta = torch.randn(5, generator=g, dtype=torch.float64, requires_grad=True)
    ref = torch.log_softmax(torch.randn(5, generator=g, dtype=torch.float64), -1)
    logp = torch.log_softmax(theta, -1)
    p = logp.exp().detach()
    kl_pr = (p * (logp.detach() - ref)).sum()
    for est in ("k1", "k3"):
        value = (p * gc.kl_estimate(logp.detach(), ref, est)).sum()
        torch.testing.assert_close(value, kl_pr, rtol=1e-12, atol=0)

    def expected_grad(est):  # E_{a ~ pi}[grad k(a)], pi held fixed as the sampler
        return torch.autograd.grad((p * gc.kl_estimate(logp, ref, est)).sum(), theta,
                                   retain_graph=True)[0]

    grad_kl_pr = torch.autograd.grad((logp.exp() * (logp - ref)).sum(), theta,
                                     retain_graph=True)[0]
    grad_kl_rp = torch.autograd.grad((ref.exp() * (ref - logp)).sum(), theta,
                                     retain_graph=True)[0]
    torch.testing.assert_close(expected_grad("k1"), torch.zeros(5, dtype=torch.float64),
                               rtol=0, atol=1e-15)
    torch.testing.assert_close(expected_grad("k2"), grad_kl_pr, rtol=1e-10, atol=1e-14)
    torch.testing.assert_close(expected_grad("k3"), grad_kl_rp, rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("change,match", [
    (dict(mask=torch.full((6, 5), 0.5)), "mask"),
    (dict(logp=torch.zeros(6, 4)), "old_logp"),
    (dict(advantages=torch.zeros(5)), "advantages"),
    (dict(logp=torch.full((6, 5), float("nan"))), "logp"),
    (dict(beta=0.1, ref_logp=None), "ref_logp"),
    (dict(loss_type="sum"), "loss_type"),
    (dict(importance_sampling_level="prompt"), "importance_sampling_level"),
    (dict(kl_estimator="k4", beta=0.1), "kl_estimator"),
    (dict(epsilon=0.0), "epsilon"),
    (dict(epsilon_high=-0.1), "epsilon_high"),
    (dict(max_completion_length=0), "max_completion_length"),
])
def test_grpo_loss_rejects_bad_input(change, match):
    logp, old, ref, adv, mask = _batch(0)
    args = dict(logp=logp.detach(), old_logp=old, ref_logp=ref, advantages=adv, mask=mask)
    kw = {}
    for k, v in change.items():
        (args if k in args else kw)[k] = v
    with pytest.raises(ValueError, match=match):
        gc.grpo_loss(**args, **kw)


def test_trl_advantages_rejects_bad_input():
    with pytest.raises(ValueError, match="num_generations"):
        gc.trl_advantages(np.zeros(10), 4)
    with pytest.raises(ValueError, match="scale_rewards"):
        gc.trl_advantages(np.zeros(8), 4, "std")
