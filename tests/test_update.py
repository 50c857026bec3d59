"""grpo_update: mu optimiser steps on one batch, against a hand-written loop and TRL's metrics."""

import numpy as np
import pytest
import torch

import grpo_core as gc
from grpo_core.optim import Adam


def _batch(R=3, B=6, T=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    theta = torch.randn(R, B, T, 5, generator=g, dtype=torch.float64)  # free logits per token
    tok = torch.randint(0, 5, (R, B, T), generator=g)
    adv = torch.randn(R, B, generator=g, dtype=torch.float64)
    mask = (torch.rand(R, B, T, generator=g) < 0.8).double()
    mask[..., 0] = 1.0
    ref = torch.log_softmax(torch.randn(R, B, T, 5, generator=g, dtype=torch.float64), -1)
    return theta, tok, adv, mask, ref.gather(-1, tok[..., None]).squeeze(-1)


def _logp(theta, tok):
    return torch.log_softmax(theta, -1).gather(-1, tok[..., None]).squeeze(-1)


@pytest.mark.parametrize("mu, level", [(1, "token"), (3, "token"), (3, "sequence")])
def test_grpo_update_is_mu_steps_of_torch_adam_on_grpo_loss(mu, level):
    """Oracle: a plain loop with torch.optim.Adam; pi_old is the batch's first log-probs; the
    clip metrics are TRL's (grpo_trainer.py 3272-3279) averaged over the mu steps, by hand."""
    theta, tok, adv, mask, ref = _batch()
    kw = dict(beta=0.1, epsilon=0.05, epsilon_high=0.1, importance_sampling_level=level)
    ours = theta.clone().requires_grad_(True)
    clip, old, aux = gc.grpo_update(lambda: (_logp(ours, tok), "aux"), adv, mask,
                                    Adam([ours], lr=0.3), num_iterations=mu, loss_kwargs=kw,
                                    ref_logp=ref)
    hand = theta.clone().requires_grad_(True)
    opt = torch.optim.Adam([hand], lr=0.3)
    old_hand = _logp(hand, tok).detach()
    want = {"low": np.zeros(3), "high": np.zeros(3), "region": np.zeros(3)}
    for _ in range(mu):
        logp = _logp(hand, tok)
        loss = gc.grpo_loss(logp, old_hand, ref, adv, mask, **kw).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        lr_ = (logp.detach() - old_hand)
        if level == "sequence":
            ratio = ((lr_ * mask).sum(-1) / mask.sum(-1)).exp()[..., None]
            w = torch.ones_like(ratio)
        else:
            ratio, w = lr_.exp(), mask
        A = adv[..., None]
        low, high = (ratio < 0.95) & (A < 0), (ratio > 1.1) & (A > 0)
        for name, hit in (("low", low), ("high", high), ("region", low | high)):
            want[name] += ((hit * w).sum((-2, -1)) / w.sum((-2, -1))).numpy() / mu
    torch.testing.assert_close(ours, hand, rtol=0, atol=1e-12)
    assert torch.equal(old, old_hand) and aux == "aux"
    for name in ("low", "high", "region"):
        np.testing.assert_allclose(clip[f"clip_ratio/{name}_mean"], want[name], rtol=1e-12)
    if mu > 1:
        assert want["low"].max() > 0 and want["high"].max() > 0


def test_blocks_of_runs_with_their_own_loss_knobs_equal_each_block_alone():
    theta, tok, adv, mask, ref = _batch(R=4)
    kws = [dict(loss_type="grpo", epsilon=0.05), dict(loss_type="dr_grpo", epsilon=0.02)]
    runs = [torch.tensor([0, 2]), torch.tensor([1, 3])]
    both = theta.clone().requires_grad_(True)
    clip, _, _ = gc.grpo_update(lambda: (_logp(both, tok), None), adv, mask, Adam([both], lr=0.3),
                                num_iterations=2, ref_logp=ref,
                                loss_kwargs=list(zip(runs, kws, strict=True)))
    for j, kw in zip(runs, kws, strict=True):
        alone = theta[j].clone().requires_grad_(True)
        c, _, _ = gc.grpo_update(lambda a=alone, j=j: (_logp(a, tok[j]), None), adv[j],
                                 mask[j], Adam([alone], lr=0.3), num_iterations=2,
                                 loss_kwargs=kw, ref_logp=ref[j])
        assert torch.equal(both.detach()[j], alone.detach())
        for name, v in c.items():
            np.testing.assert_array_equal(clip[name][j.numpy()], v)


def test_add_terms_sees_this_steps_logp_pi_old_and_aux_and_its_term_is_trained():
    theta, tok, adv, mask, ref = _batch(R=2)
    seen = []

    def add(loss, logp, old, aux):
        seen.append((logp.detach().clone(), old.clone(), aux))
        return loss + 10.0 * (logp * mask).sum((-2, -1))  # pushes every sampled token up

    p = theta.clone().requires_grad_(True)
    _, old, _ = gc.grpo_update(lambda: (_logp(p, tok), len(seen)), adv * 0, mask,
                               Adam([p], lr=0.1), num_iterations=2, loss_kwargs={},
                               add_terms=add)
    assert len(seen) == 2 and seen[1][2] == 1
    assert torch.equal(seen[0][1], old) and torch.equal(seen[1][1], old)
    assert torch.equal(seen[0][0], old) and not torch.equal(seen[1][0], old)
    assert (_logp(p, tok).detach() < old)[mask == 1].all()  # + 10 logp is minimised
    assert torch.equal(_logp(p, tok).detach()[mask == 0], old[mask == 0])  # padding: untouched


def test_default_clip_range_is_trls_and_metric_shapes_follow_the_runs():
    """loss_kwargs without epsilon: the clip metrics use TRL's 0.2 (as grpo_loss does); one
    run without a run axis gives floats, R runs give (R,) arrays, also at mu = 1 (zeros)."""
    theta, tok, adv, mask, _ = _batch(R=1, B=64, T=3, seed=3)
    theta, tok, adv, mask = theta[0], tok[0], adv[0], mask[0]  # no run axis
    for mu in (1, 2):
        p = theta.clone().requires_grad_(True)
        clip, _, _ = gc.grpo_update(lambda p=p: (_logp(p, tok), None), adv, mask,
                                    Adam([p], lr=0.4), num_iterations=mu, loss_kwargs={})
        assert set(clip) == {"clip_ratio/low_mean", "clip_ratio/high_mean",
                             "clip_ratio/region_mean"}
        assert all(isinstance(v, float) for v in clip.values())
        if mu == 1:
            assert all(v == 0.0 for v in clip.values())
            continue
        q = theta.clone().requires_grad_(True)
        opt = torch.optim.Adam([q], lr=0.4)
        old = _logp(q, tok).detach()
        gc.grpo_loss(_logp(q, tok), old, None, adv, mask).backward()
        opt.step()
        ratio = (_logp(q, tok).detach() - old).exp()
        low = ((ratio < 0.8) & (adv[:, None] < 0)).double()
        high = ((ratio > 1.2) & (adv[:, None] > 0)).double()
        assert low.sum() > 0 and high.sum() > 0
        want = float((low * mask).sum() / mask.sum()) / 2
        assert clip["clip_ratio/low_mean"] == pytest.approx(want, rel=1e-12)
        assert clip["clip_ratio/high_mean"] == pytest.approx(
            float((high * mask).sum() / mask.sum()) / 2, rel=1e-12)
    theta, tok, adv, mask, _ = _batch(R=3)
    p = theta.clone().requires_grad_(True)
    clip, _, _ = gc.grpo_update(lambda: (_logp(p, tok), None), adv, mask, Adam([p], lr=0.1),
                                num_iterations=1, loss_kwargs={})
    assert all(np.array_equal(v, np.zeros(3)) for v in clip.values())
    none, _, _ = gc.grpo_update(lambda: (_logp(p, tok), None), adv, mask, Adam([p], lr=0.1),
                                num_iterations=2, loss_kwargs={}, metrics=False)
    assert none == {}


def test_on_policy_update_clips_nothing_and_is_reinforce():
    """mu = 1: ratio 1, so the gradient is -A grad log pi averaged over tokens ("dapo")."""
    theta, tok, adv, mask, _ = _batch(R=1)
    p = theta.clone().requires_grad_(True)
    clip, _, _ = gc.grpo_update(lambda: (_logp(p, tok), None), adv, mask, Adam([p], lr=0.1),
                                num_iterations=1, loss_kwargs={})
    assert all(v == 0 for v in clip.values())
    q = theta.clone().requires_grad_(True)
    g, = torch.autograd.grad(-(adv[..., None] * _logp(q, tok) * mask).sum() / mask.sum(), q)
    torch.testing.assert_close(p.detach(), theta - 0.1 * g / (g.abs() + 1e-8), rtol=0,
                               atol=1e-12)


def test_metric_names_are_trls():
    assert gc.METRICS[-3:] == ("clip_ratio/low_mean", "clip_ratio/high_mean",
                               "clip_ratio/region_mean")
    assert len(set(gc.METRICS)) == len(gc.METRICS) == 10


def test_mini_batches_are_trls_steps_per_generation():
    """Oracle: TRL's steps_per_generation with gradient accumulation 1 (grpo_trainer.py
    1522-1551, 3169-3173): pi_old is the batch's log-probs before any step; each of the mu
    passes cuts the batch into disjoint mini-batches in order, one optimizer step each, with
    the "dapo" normaliser num_items_in_batch / steps_per_generation (the whole batch's
    tokens); the metrics are averaged over all mu x spg steps."""
    theta, tok, adv, mask, ref = _batch(R=2, B=6, seed=4)
    for loss_type in ("dapo", "grpo"):
        kw = dict(beta=0.1, epsilon=0.05, loss_type=loss_type)
        ours = theta.clone().requires_grad_(True)
        info, old, _ = gc.grpo_update(lambda o=ours: (_logp(o, tok), None), adv, mask,
                                      Adam([ours], lr=0.3), num_iterations=2, loss_kwargs=kw,
                                      ref_logp=ref, steps_per_generation=3)
        hand = theta.clone().requires_grad_(True)
        opt = torch.optim.Adam([hand], lr=0.3)
        pi_old = _logp(hand, tok).detach()
        n_items, want = mask.sum((-2, -1)), np.zeros(2)
        for _ in range(2):
            for rows in (slice(0, 2), slice(2, 4), slice(4, 6)):
                loss, step = gc.grpo_loss(
                    _logp(hand, tok)[:, rows], pi_old[:, rows], ref[:, rows], adv[:, rows],
                    mask[:, rows], num_items_in_batch=n_items, steps_per_generation=3,
                    return_info=True, **kw)
                opt.zero_grad()
                loss.sum().backward()
                opt.step()
                want += step["clip_ratio/region_mean"] / 6
        torch.testing.assert_close(ours, hand, rtol=0, atol=1e-12)
        assert torch.equal(old, pi_old) and want.max() > 0
        np.testing.assert_allclose(info["clip_ratio/region_mean"], want, rtol=1e-12)
    with pytest.raises(ValueError, match="steps_per_generation"):
        gc.grpo_update(lambda: (_logp(ours, tok), None), adv, mask, Adam([ours], lr=0.3),
                       num_iterations=1, loss_kwargs={}, steps_per_generation=4)


def test_a_given_pi_old_entropies_and_block_tensors_reach_grpo_loss():
    """A caller's pi_old (a stale sampler's batch) for every step; the forward pass's entropies
    and a block's own tensors (vLLM's weight), cut with the batch, go to grpo_loss."""
    theta, tok, adv, mask, ref = _batch(R=2, B=4, seed=5)
    g = torch.Generator().manual_seed(1)
    stale = _logp(theta, tok) + 0.3 * torch.randn(2, 4, 4, generator=g, dtype=torch.float64)
    isr = torch.rand(2, 4, 4, generator=g, dtype=torch.float64) + 0.5

    def forward(p):
        lp = torch.log_softmax(p, -1)
        return lp.gather(-1, tok[..., None]).squeeze(-1), {"entropies": -(lp.exp() * lp).sum(-1)}

    kw = dict(entropy_coef=0.3, top_entropy_quantile=0.5, off_policy_mask_threshold=0.0)
    for spg in (1, 2):
        ours = theta.clone().requires_grad_(True)
        _, old, extras = gc.grpo_update(
            lambda o=ours: forward(o), adv, mask, Adam([ours], lr=0.2), num_iterations=2,
            old_logp=stale, steps_per_generation=spg,
            loss_kwargs=[(torch.tensor([0, 1]), kw | {"importance_sampling_ratio": isr,
                                                      "sampling_per_token_logps": stale})])
        assert old is stale and set(extras) == {"entropies"}
        hand = theta.clone().requires_grad_(True)
        opt = torch.optim.Adam([hand], lr=0.2)
        size = 4 // spg
        for _ in range(2):
            for s in range(spg):
                r = slice(s * size, (s + 1) * size)
                logp, ex = forward(hand)
                loss = gc.grpo_loss(logp[:, r], stale[:, r], None, adv[:, r], mask[:, r],
                                    entropies=ex["entropies"][:, r],
                                    importance_sampling_ratio=isr[:, r],
                                    sampling_per_token_logps=stale[:, r],
                                    **({"num_items_in_batch": mask.sum((-2, -1)),
                                        "steps_per_generation": spg} if spg > 1 else {}), **kw)
                opt.zero_grad()
                loss.sum().backward()
                opt.step()
        torch.testing.assert_close(ours, hand, rtol=0, atol=1e-12)


def test_each_block_logs_its_loss_types_metrics_others_are_nan():
    """TRL logs clip_ratio/* for the clip family only, cispo_clip_ratio for "cispo" (TRL 1.16
    grpo_trainer.py 3272-3288): a call with both has each, NaN for the other's runs."""
    theta, tok, adv, mask, _ = _batch(R=4, seed=6)
    p = theta.clone().requires_grad_(True)
    blocks = [(torch.tensor([0, 2]), {"loss_type": "dapo"}),
              (torch.tensor([1, 3]), {"loss_type": "cispo"})]
    info, _, _ = gc.grpo_update(lambda: (_logp(p, tok), None), adv, mask, Adam([p], lr=0.3),
                                num_iterations=2, loss_kwargs=blocks)
    assert set(info) == {*gc.update.CLIP_METRICS, "cispo_clip_ratio"}
    assert np.isnan(info["cispo_clip_ratio"][[0, 2]]).all()
    assert np.isnan(info["clip_ratio/region_mean"][[1, 3]]).all()
    assert (info["cispo_clip_ratio"][[1, 3]] > 0).all()  # ratio 1 > epsilon_high 0.2 where A > 0
    assert not np.isnan(info["clip_ratio/low_mean"][[0, 2]]).any()


def test_one_forward_per_step_and_trls_token_count_for_a_nearly_empty_batch():
    """pi_old is the first pass's log-probs (no extra forward: mu x spg calls); the whole batch's
    token count, clamped at 1 as TRL does, normalises "dapo" (SGD shows the scale Adam hides)."""
    theta, tok, adv, mask, _ = _batch(R=2, B=4, seed=7)
    calls = []
    p = theta.clone().requires_grad_(True)

    def forward():
        calls.append(1)
        return _logp(p, tok), None

    gc.grpo_update(forward, adv, mask, Adam([p], lr=0.1), num_iterations=3, loss_kwargs={},
                   steps_per_generation=2)
    assert len(calls) == 6
    one = torch.zeros_like(mask)
    one[:, 0, 0] = 1.0  # one real token in each run's batch, in the first mini-batch
    ours = theta.clone().requires_grad_(True)
    gc.grpo_update(lambda: (_logp(ours, tok), None), adv, one, torch.optim.SGD([ours], lr=0.5),
                   num_iterations=1, loss_kwargs={}, steps_per_generation=2)
    hand = theta.clone().requires_grad_(True)
    loss = -(adv[:, 0] * _logp(hand, tok)[:, 0, 0]).sum() * 2  # / (1 token / 2 mini-batches)
    loss.backward()
    torch.testing.assert_close(ours, theta - 0.5 * hand.grad, rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="be 1 with add_terms"):
        gc.grpo_update(forward, adv, mask, Adam([p], lr=0.1), num_iterations=1,
                       loss_kwargs={}, steps_per_generation=2, add_terms=lambda loss, *a: loss)
