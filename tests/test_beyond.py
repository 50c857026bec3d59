"""grpo_core.beyond: chapter 17's training of TRL 1.16's eight loss types and knobs."""

import numpy as np
import pytest
import torch

import grpo_core as gc
from grpo_core import beyond as bd
from grpo_core import sequences as sq
from grpo_core.loss import ALL_LOSS_TYPES, clip_metrics

WORLD = gc.make_sequence_world(max_len=3)


@pytest.mark.parametrize("loss_type", ALL_LOSS_TYPES)
def test_on_policy_each_loss_type_is_one_of_four_averages(loss_type):
    """At mu = 1 the gradient of every loss type is that of its twin in ON_POLICY_AS times the
    factor exact_update_on_policy uses: the identities behind its exact updates."""
    base, _ = bd.ON_POLICY_AS[loss_type]
    factor = {"cispo": 0.5, "luspo": float(WORLD.max_len)}.get(loss_type, 1.0)
    for seed in range(4):
        b = sq.sample_batch(WORLD, WORLD.ref_logits, 8, torch.Generator().manual_seed(seed))
        adv = torch.from_numpy(gc.trl_advantages(b.rewards, 8))
        grads = []
        for lt in (loss_type, base):
            logp = b.logp.detach().clone().requires_grad_(True)
            kw = dict(epsilon_high=0.5) if lt == "cispo" else {}
            if lt in ("luspo", "dr_grpo"):
                kw["max_completion_length"] = WORLD.max_len
            loss = gc.grpo_loss(logp, None, None, adv, b.mask, loss_type=lt, **kw)
            grads.append(torch.autograd.grad(loss, logp)[0])
        torch.testing.assert_close(grads[0], factor * grads[1], rtol=1e-6, atol=1e-15)


def test_exact_update_on_policy_factors():
    g = {lt: bd.exact_update_on_policy(WORLD, WORLD.ref_logits, 4, lt, epsilon_high=0.5)
         for lt in ALL_LOSS_TYPES}
    torch.testing.assert_close(g["cispo"], 0.5 * g["dapo"])
    torch.testing.assert_close(g["luspo"], 3 * g["dr_grpo"])
    assert torch.equal(g["sapo"], g["grpo"]) and torch.equal(g["vespo"], g["dapo"])
    default = bd.exact_update_on_policy(WORLD, WORLD.ref_logits, 4, "cispo")
    torch.testing.assert_close(default, 0.2 * g["dapo"])  # epsilon_high None: epsilon caps it
    with pytest.raises(ValueError, match="loss_type"):
        bd.exact_update_on_policy(WORLD, WORLD.ref_logits, 4, "ppo")


def test_prefix_entropy_is_the_entropy_at_each_token():
    theta = WORLD.ref_logits.expand(2, -1, -1).clone()
    idx = torch.tensor([[0, 5, 12], [3, 3, 39]])
    ent = bd.prefix_entropy(WORLD, theta, idx)
    p = torch.softmax(WORLD.ref_logits, -1)
    H = -(p * p.log()).sum(-1)
    expected = H[WORLD.prefix[idx]] * WORLD.mask[idx]
    torch.testing.assert_close(ent, expected)


def test_gate_activity_is_trls_clip_ratio_for_the_clip_types():
    g = torch.Generator().manual_seed(0)
    ratio = torch.exp(0.4 * torch.randn(6, 3, generator=g, dtype=torch.float64))
    A = torch.randn(6, generator=g, dtype=torch.float64)
    mask = torch.ones(6, 3, dtype=torch.float64)
    mask[0, 1:] = 0
    act = bd.gate_activity("dapo", ratio, A.unsqueeze(-1), mask, ratio.log(), {"epsilon": 0.2})
    assert float(act) == pytest.approx(clip_metrics(ratio, A, mask)["clip_ratio/region_mean"])
    one = torch.ones(6, 3, dtype=torch.float64)
    assert float(bd.gate_activity("sapo", one, A.unsqueeze(-1), mask, one.log(), {})) == 0.0
    assert float(bd.gate_activity("cispo", one, A.unsqueeze(-1), mask, one.log(),
                                  {"epsilon_high": 5.0})) == 0.0
    assert float(bd.gate_activity("vespo", one, A.unsqueeze(-1), mask, one.log() * 0, {})) == 1.0


def test_train_knobs_batched_runs_equal_lone_runs():
    runs = [dict(loss_type="sapo"), dict(loss_type="dapo", top_entropy_quantile=0.5,
                                         entropy_coef=0.01, off_policy_mask_threshold=0.01,
                                         vllm_importance_sampling_mode="sequence_mask")]
    kw = dict(steps=6, num_iterations=2, sampler_lag=1, record_every=3)
    both = bd.train_knobs(WORLD, [3, 4], runs, **kw)
    lone = bd.train_knobs(WORLD, [4], runs[1:], **kw)
    assert torch.equal(both["logits"][3], lone["logits"][0])
    parts = bd.split_runs(both, ["sapo", "masked"])
    np.testing.assert_array_equal(parts["masked"]["reward"][1], lone["reward"][0])
    assert both["reward"].shape == (4, 3) and both["activity"].shape == (4, 6)
    assert (parts["sapo"]["kept"] == 1).all() and (parts["masked"]["kept"] <= 1).all()


def test_bnpo_trains_as_dapo_and_mu_1_never_clips():
    out = bd.train_knobs(WORLD, [0], [dict(loss_type="bnpo"), dict(loss_type="dapo")], steps=5)
    assert torch.equal(out["logits"][0], out["logits"][1])
    assert (out["activity"] == 0).all()


def test_train_two_rewards_starts_at_the_reference():
    rpf = np.zeros((2, 3, 2))
    rpf[:, 0, 0] = 1.0
    rpf[:, 1, 1] = 1.0
    ref = np.zeros((2, 3))
    for agg in ("sum_then_normalize", "normalize_then_sum"):
        out = bd.train_two_rewards(rpf, ref, [0, 1], multi_objective_aggregation=agg, steps=4)
        assert out["curve"].shape == (2, 2, 5)
        np.testing.assert_allclose(out["curve"][:, :, 0], 1 / 3)


def test_sapo_exercise_checker_accepts_the_solution_and_rejects_one_temperature():
    def solution(ratio, adv, tau_pos, tau_neg):
        tau = torch.where(adv > 0, tau_pos, tau_neg)
        return -4 / tau * torch.sigmoid(tau * (ratio - 1)) * adv

    assert gc.exercises.check_sapo_surrogate(solution)
    assert not gc.exercises.check_sapo_surrogate(
        lambda r, a, tp, tn: -4 / tp * torch.sigmoid(tp * (r - 1)) * a)
