"""grpo_core.beyond: chapter 17's training of TRL 1.16's eight loss types and knobs.

Oracles: each loss type's on-policy twin through grpo_loss's gradient; chapter 13's exact update;
train_sequences (the same world and update) for train_knobs' plain runs; hand-written loops (a
stale sampler, several rewards) with grpo_loss and torch's Adam.
"""

import numpy as np
import pytest
import torch

import grpo_core as gc
from grpo_core import beyond as bd
from grpo_core import sequences as sq
from grpo_core.loss import ALL_LOSS_TYPES, REGISTRY

WORLD = gc.make_sequence_world(max_len=3)
TWINS = {"grpo": "grpo", "bnpo": "dapo", "dapo": "dapo", "dr_grpo": "dr_grpo", "cispo": "dapo",
         "sapo": "grpo", "luspo": "dr_grpo", "vespo": "dapo"}  # chapter 17's eq. (ch17-onpolicy)


@pytest.mark.parametrize("loss_type", ALL_LOSS_TYPES)
def test_on_policy_each_loss_type_is_one_of_four_averages(loss_type):
    """At mu = 1 the gradient of every loss type is that of its registry twin times the factor
    exact_update_on_policy uses: the identities behind its exact updates."""
    entry = REGISTRY[loss_type]
    assert entry.on_policy_as == TWINS[loss_type]
    factor = {"cispo": 0.5, "luspo": float(WORLD.max_len)}.get(loss_type, 1.0)
    assert entry.on_policy_factor(0.2, 0.5, WORLD.max_len) == factor
    for seed in range(4):
        b = sq.sample_batch(WORLD, WORLD.ref_logits, 8, torch.Generator().manual_seed(seed))
        adv = torch.from_numpy(gc.trl_advantages(b.rewards, 8))
        grads = []
        for lt in (loss_type, entry.on_policy_as):
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
    exact = {lt: sq.exact_update(WORLD, WORLD.ref_logits, 4, lt) for lt in gc.LOSS_TYPES}
    for lt in ("grpo", "bnpo", "dapo", "dr_grpo"):  # chapter 13's four are themselves
        assert torch.equal(g[lt], exact[TWINS[lt]])
    torch.testing.assert_close(g["cispo"], 0.5 * exact["dapo"], rtol=1e-15, atol=0)
    torch.testing.assert_close(g["luspo"], 3 * exact["dr_grpo"], rtol=1e-15, atol=0)
    assert torch.equal(g["sapo"], exact["grpo"]) and torch.equal(g["vespo"], exact["dapo"])
    default = bd.exact_update_on_policy(WORLD, WORLD.ref_logits, 4, "cispo")
    torch.testing.assert_close(default, 0.2 * exact["dapo"])  # epsilon_high None: epsilon caps it
    scale_rl = bd.exact_update_on_policy(WORLD, WORLD.ref_logits, 4, "cispo", epsilon_high=5.0)
    assert torch.equal(scale_rl, exact["dapo"])  # a cap above 1 does not bind on-policy
    with pytest.raises(ValueError, match="loss_type"):
        bd.exact_update_on_policy(WORLD, WORLD.ref_logits, 4, "ppo")


def test_prefix_entropy_is_the_entropy_at_each_token():
    theta = WORLD.ref_logits.expand(2, -1, -1).clone()
    idx = torch.tensor([[0, 5, 12], [3, 3, 39]])
    ent = sq.prefix_entropy(WORLD, theta, idx)
    p = torch.softmax(WORLD.ref_logits, -1)
    H = -(p * p.log()).sum(-1)
    expected = H[WORLD.prefix[idx]] * WORLD.mask[idx]
    torch.testing.assert_close(ent, expected)


def test_train_knobs_plain_runs_are_train_sequences():
    """Without a stale sampler or per-run knobs, train_knobs is train_sequences (same draws,
    same update): bit for bit, at mu = 1 and 2, for two loss types in one call."""
    for mu in (1, 2):
        runs = [dict(loss_type="dapo"), dict(loss_type="grpo", epsilon=0.1)]
        out = bd.train_knobs(WORLD, [3, 4], runs, max_steps=5, num_iterations=mu,
                             record_every=2)
        assert out["steps"].tolist() == [0, 2, 4, 5]
        for k, kw in enumerate(runs):
            alone = gc.train_sequences(WORLD, [3, 4], max_steps=5, num_iterations=mu,
                                       learning_rate=0.1, record_every=2, **kw)
            assert torch.equal(out["logits"][2 * k:2 * k + 2], alone["logits"])
            np.testing.assert_array_equal(out["reward"][2 * k:2 * k + 2], alone["reward"])
            np.testing.assert_array_equal(out["activity"][2 * k:2 * k + 2],
                                          alone["clip_ratio/region_mean"])
        assert out["reward"][:, -1].mean() > out["reward"][:, 0].mean()  # it learns
        assert (out["kept"] == 1).all()


@pytest.mark.parametrize("mode, threshold", [("token_mask", 0.02), ("sequence_mask", None)])
def test_a_stale_sampler_with_vllms_weight_and_the_mask_is_a_hand_loop(mode, threshold):
    """Oracle: the sampler is the policy of 2 steps ago, pi_old the trainer's policy now; vLLM's
    weight (clip_max 1.2: some tokens, or whole sequences, zeroed) and the off-policy mask,
    grpo_loss and torch's Adam, one step per batch; ``kept`` counts the sequences left."""
    run = dict(loss_type="dapo", use_vllm=True, vllm_importance_sampling_mode=mode,
               vllm_importance_sampling_clip_max=1.2, off_policy_mask_threshold=threshold)
    out = bd.train_knobs(WORLD, [5], [run], max_steps=6, learning_rate=0.3, sampler_lag=2,
                         record_every=6)
    theta = WORLD.ref_logits[None].clone().requires_grad_(True)
    opt = torch.optim.Adam([theta], lr=0.3)
    gen, past, kept = torch.Generator().manual_seed(5), [theta.detach().clone()] * 3, []
    for _ in range(6):
        b = sq.sample_batch(WORLD, past[0], 8, [gen])
        samp = b.logp.detach()
        with torch.no_grad():
            old = sq.token_logps(WORLD, theta, b.idx)
        adv = torch.from_numpy(gc.trl_advantages(sq.rewards(WORLD)[b.idx.numpy()], 8))
        isr = gc.loss.vllm_importance_sampling_ratio(old, samp, b.mask, mode, None, 1.2)
        keep = (isr.amax(-1) > 0).double()  # a sequence vLLM's weight zeroes entirely
        if threshold is not None:
            keep = keep * gc.loss.off_policy_mask(adv[..., None], old, samp, b.mask,
                                                  threshold)[..., 0]
        kept.append(float(keep.mean()))
        loss = gc.grpo_loss(sq.token_logps(WORLD, theta, b.idx), old, None, adv, b.mask,
                            sampling_per_token_logps=samp, importance_sampling_ratio=isr,
                            off_policy_mask_threshold=threshold)
        opt.zero_grad()
        loss.sum().backward()
        opt.step()
        past = [*past[1:], theta.detach().clone()]
    torch.testing.assert_close(out["logits"], theta.detach(), rtol=0, atol=1e-12)
    np.testing.assert_allclose(out["kept"][0], kept, rtol=1e-12)
    assert 0 < min(kept) < 1 and max(kept) == 1  # both corrections act, not on fresh batches


def test_batched_runs_equal_lone_runs_and_activity_is_trls_metric():
    runs = [dict(loss_type="sapo"), dict(loss_type="dapo", top_entropy_quantile=0.5,
                                         entropy_coef=0.01, off_policy_mask_threshold=0.01,
                                         use_vllm=True),
            dict(loss_type="vespo"), dict(loss_type="cispo", epsilon_high=0.5)]
    kw = dict(max_steps=6, num_iterations=2, sampler_lag=1, record_every=3)
    both = bd.train_knobs(WORLD, [3, 4], runs, **kw)
    lone = bd.train_knobs(WORLD, [4], runs[1:2], **kw)
    assert torch.equal(both["logits"][3], lone["logits"][0])
    parts = bd.split_runs(both, ["sapo", "masked", "vespo", "cispo"])
    np.testing.assert_array_equal(parts["masked"]["reward"][1], lone["reward"][0])
    np.testing.assert_array_equal(parts["masked"]["activity"][1], lone["activity"][0])
    assert both["reward"].shape == (8, 3) and both["activity"].shape == (8, 6)
    assert (parts["sapo"]["kept"] == 1).all() and (parts["masked"]["kept"] < 1).any()
    # the activity is the metric TRL logs for each loss type, off-policy here (mu = 2, a lag)
    assert (parts["vespo"]["activity"] != 1).any() and (parts["vespo"]["activity"] > 0).all()
    assert (parts["cispo"]["activity"] > 0).any() and (parts["sapo"]["activity"] > 0).any()


def test_bnpo_trains_as_dapo_and_mu_1_never_clips():
    out = bd.train_knobs(WORLD, [0], [dict(loss_type="bnpo"), dict(loss_type="dapo")],
                         max_steps=5)
    assert torch.equal(out["logits"][0], out["logits"][1])
    assert (out["activity"] == 0).all()


def test_runs_may_set_only_their_own_knobs_and_the_loop_refuses_the_rest():
    with pytest.raises(ValueError, match="learning_rate: one value for all runs"):
        bd.train_knobs(WORLD, [0], [dict(learning_rate=0.1)], max_steps=1)
    with pytest.raises(ValueError, match="temperature=0.5: train_knobs does not read"):
        bd.train_knobs(WORLD, [0], [{}], max_steps=1, temperature=0.5)
    with pytest.raises(ValueError, match="KL in the loss"):
        bd.train_knobs(WORLD, [0], [dict(kl_estimator="exact")], max_steps=1)
    with pytest.raises(ValueError, match="token-level vllm_importance_sampling_mode"):
        bd.train_knobs(WORLD, [0], [dict(loss_type="vespo", use_vllm=True)], max_steps=1)


def test_the_presets_are_chapter_17s():
    """lr 0.1, G 8, 100 batches (train_knobs); lr 0.05, G 8, 60 steps (train_two_rewards)."""
    from grpo_core.config import LOOPS
    assert LOOPS["train_knobs"].preset["learning_rate"] == 0.1
    assert LOOPS["train_knobs"].preset["max_steps"] == 100
    assert LOOPS["train_two_rewards"].preset["learning_rate"] == 0.05
    assert LOOPS["train_two_rewards"].preset["max_steps"] == 60
    one = bd.train_knobs(WORLD, [1], [{}], max_steps=11)  # records every 10 steps and the last
    ref = bd.train_knobs(WORLD, [1], [{}], max_steps=11, record_every=1, learning_rate=0.1,
                         num_generations=8)
    assert torch.equal(one["logits"], ref["logits"])
    assert one["steps"].tolist() == [0, 10, 11]


@pytest.mark.parametrize("agg, weights, knobs", [
    ("sum_then_normalize", None, {}), ("normalize_then_sum", [1.0, 0.5], {}),
    ("sum_then_normalize", None, dict(beta=0.1, entropy_coef=0.05))])
def test_train_two_rewards_is_a_hand_loop(agg, weights, knobs):
    """Oracle: per step, G draws per prompt (torch.multinomial with the run's generator), TRL's
    combination and advantages, grpo_loss "dapo" at mu = 1 (with pi_ref's log-prob and each
    answer's entropy, the entropy of pi at its prompt), torch's Adam at the preset's lr 0.05 and
    G 8; the curve is the exact expected reward of each function."""
    g = np.random.default_rng(0)
    rpf, ref = (g.random((3, 5, 2)) < 0.5).astype(float), g.normal(size=(3, 5))
    out = bd.train_two_rewards(rpf, ref, [7], max_steps=4, multi_objective_aggregation=agg,
                               reward_weights=weights, **knobs)
    theta = torch.tensor(ref)[None].clone().requires_grad_(True)
    opt, gen, R = torch.optim.Adam([theta], lr=0.05), torch.Generator().manual_seed(7), None
    curve = []
    for step in range(5):
        pi = torch.softmax(theta.detach(), -1)[0]
        curve.append((pi.numpy()[..., None] * rpf).sum(1).mean(0))
        if step == 4:
            break
        draws = torch.multinomial(pi, 8, replacement=True, generator=gen)  # (P, G)
        R = gc.loss.trl_rewards(rpf[np.arange(3)[:, None], draws.numpy()].reshape(24, 2), weights,
                                agg, num_generations=8)
        adv = torch.from_numpy(gc.trl_advantages(R, 8, "group", agg))
        lp, ref_lp = torch.log_softmax(theta[0], -1), torch.log_softmax(torch.tensor(ref), -1)
        logp = lp.gather(-1, draws).reshape(24, 1)
        ent = -(lp.exp() * lp).sum(-1)[:, None].expand(3, 8).reshape(24, 1)
        loss = gc.grpo_loss(logp, None, ref_lp.gather(-1, draws).reshape(24, 1), adv,
                            torch.ones_like(logp), entropies=ent, **knobs)
        opt.zero_grad()
        loss.backward()
        opt.step()
    np.testing.assert_allclose(out["curve"][0].T, np.array(curve), rtol=1e-12, atol=1e-15)
    assert out["curve"].shape == (1, 2, 5) and not np.allclose(curve[0], curve[-1])


def test_train_two_rewards_counts_completions_per_mini_batch_as_trl():
    """per_device_train_batch_size x steps_per_generation is the generation batch, P x G."""
    rpf, ref = np.ones((2, 3, 2)), np.zeros((2, 3))
    kw = dict(max_steps=1, num_generations=4, steps_per_generation=2)
    alone = bd.train_two_rewards(rpf, ref, [0], **kw)["curve"]
    np.testing.assert_array_equal(
        bd.train_two_rewards(rpf, ref, [0], per_device_train_batch_size=4, **kw)["curve"], alone)
    with pytest.raises(ValueError, match="P x num_generations / steps_per_generation"):
        bd.train_two_rewards(rpf, ref, [0], per_device_train_batch_size=16, **kw)
    with pytest.raises(ValueError, match="P x num_generations / steps_per_generation"):
        bd.train_two_rewards(rpf, ref, [0], per_device_train_batch_size=4, max_steps=1,
                             num_generations=4)


def test_train_knobs_at_zero_steps_is_the_reference_policy():
    out = bd.train_knobs(WORLD, [1], [{}], max_steps=0)
    assert out["steps"].tolist() == [0] and out["activity"].shape == (1, 0)
    assert torch.equal(out["logits"][0], WORLD.ref_logits)


def test_sapo_exercise_checker_accepts_the_solution_and_rejects_one_temperature():
    def solution(ratio, adv, tau_pos, tau_neg):
        tau = torch.where(adv > 0, tau_pos, tau_neg)
        return -4 / tau * torch.sigmoid(tau * (ratio - 1)) * adv

    assert gc.exercises.check_sapo_surrogate(solution)
    assert not gc.exercises.check_sapo_surrogate(
        lambda r, a, tp, tn: -4 / tp * torch.sigmoid(tp * (r - 1)) * a)


@pytest.mark.parametrize("spg, size", [(4, 2), (2, 4)])
def test_gspos_recipe_is_a_hand_loop_of_disjoint_mini_batches(spg, size):
    """steps_per_generation=4 with 2 answers per mini-batch (GSPO's recipe), or 2 with 4: the
    group of 8 is shuffled with the run's generator (TRL's shuffle_sequence_dict), cut into spg,
    one Adam step on each against the sampler's pi_old, "grpo" averaging each mini-batch."""
    LIVE = gc.make_sequence_world(2, 3)  # noqa: N806  pass rate 0.17: live groups
    gspo = dict(loss_type="grpo", importance_sampling_level="sequence", epsilon=3e-4,
                epsilon_high=4e-4)
    out = bd.train_knobs(LIVE, [2], [gspo], max_steps=3, learning_rate=0.3,
                         steps_per_generation=spg, per_device_train_batch_size=size)
    assert out["steps"].tolist() == [0, 3] and out["activity"].shape == (1, 3)
    theta = LIVE.ref_logits[None].clone().requires_grad_(True)
    opt, gen, act = torch.optim.Adam([theta], lr=0.3), torch.Generator().manual_seed(2), []
    for _ in range(3):
        b = sq.sample_batch(LIVE, theta.detach().clone(), 8, [gen])
        adv = torch.from_numpy(gc.trl_advantages(sq.rewards(LIVE)[b.idx.numpy()], 8))
        order = torch.randperm(8, generator=gen)
        idx, adv, old = b.idx[:, order], adv[:, order], b.logp.detach()[:, order]
        mask = LIVE.mask[idx]
        clipped = 0.0
        for s in range(spg):
            r = slice(size * s, size * (s + 1))
            loss, info = gc.grpo_loss(sq.token_logps(LIVE, theta, idx)[:, r], old[:, r], None,
                                      adv[:, r], mask[:, r], return_info=True,
                                      num_items_in_batch=mask.sum((-2, -1)),
                                      steps_per_generation=spg, **gspo)
            clipped += info["clip_ratio/region_mean"] / spg
            opt.zero_grad()
            loss.sum().backward()
            opt.step()
        act.append(float(clipped[0]))
    torch.testing.assert_close(out["logits"], theta.detach(), rtol=0, atol=1e-12)
    np.testing.assert_allclose(out["activity"][0], act, rtol=1e-12)
    assert max(act) > 0
    two = bd.train_knobs(LIVE, [2, 5], [gspo], max_steps=3, learning_rate=0.3,
                         steps_per_generation=spg, per_device_train_batch_size=size)
    assert torch.equal(two["logits"][:1], out["logits"])  # each run shuffles its own batch


def test_runs_differing_only_in_vllms_mode_or_the_bonus_train_apart():
    """Runs whose settings differ only in vLLM's mode (or that set only the entropy bonus) get
    their own grpo_loss call: each equals its lone run."""
    runs = [dict(use_vllm=True), dict(use_vllm=True, vllm_importance_sampling_mode="token_mask",
                                      vllm_importance_sampling_clip_max=1.1),
            dict(entropy_coef=0.2)]
    kw = dict(max_steps=4, sampler_lag=2, learning_rate=0.3, record_every=4)
    both = bd.train_knobs(WORLD, [6], runs, **kw)
    for k, run in enumerate(runs):
        assert torch.equal(both["logits"][k], bd.train_knobs(WORLD, [6], [run], **kw)["logits"][0])
    assert not torch.equal(both["logits"][0], both["logits"][1])
