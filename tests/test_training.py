"""Behaviour and oracle tests of training: batched runs equal lone runs, training works."""

import loop_reference as ref_impl
import numpy as np
import pytest
import torch

import grpo_core as gc

W = gc.toy_world(0)
ARGS = (W.rewards, W.emb, W.ref_logits)


def test_train_matches_a_plain_loop_with_torch_adam():
    ours, _ = gc.train(*ARGS, np.random.default_rng(11), steps=60)
    loop = ref_impl.train(W.rewards, W.ref_logits, np.random.default_rng(11), steps=60)
    np.testing.assert_allclose(ours, loop, atol=1e-12)


def test_batched_runs_equal_lone_runs_bit_for_bit():
    seeds, Gs, betas = [0, 1, 11, 11, 5], [8, 8, 1, 32, 3], [0.02, 0.0, 0.5, 2.0, 0.1]
    batch = gc.train_batch(*ARGS, seeds, G=Gs, beta=betas, steps=80)
    for b, (s, G, beta) in enumerate(zip(seeds, Gs, betas, strict=True)):
        alone, _ = gc.train(*ARGS, np.random.default_rng(s), steps=80, G=G, beta=beta)
        np.testing.assert_array_equal(batch.logits[b], alone)
        np.testing.assert_array_equal(batch.reward[b, -1], gc.evaluate(alone, W.rewards,
                                                                        W.ref_logits)[0])


@pytest.mark.parametrize("options", [dict(baseline="batch"), dict(baseline="none"),
                                     dict(normalise=False), dict(kl_in="reward")])
def test_batched_equals_alone_for_every_option(options):
    batch = gc.train_batch(*ARGS, [3, 4], G=[4, 8], beta=[0.1, 0.5], steps=40, **options)
    for b, (s, G, beta) in enumerate(((3, 4, 0.1), (4, 8, 0.5))):
        alone = gc.train_batch(*ARGS, s, G=G, beta=beta, steps=40, **options)
        np.testing.assert_array_equal(batch.logits[b], alone.logits[0])


def test_one_batch_can_mix_baselines_normalisation_and_kl_placement():
    opts = dict(baseline=["group", "batch", "none", "group"], normalise=[True, False, True, False],
                kl_in=["reward", "loss", "loss", "reward"])
    batch = gc.train_batch(*ARGS, [1, 2, 3, 4], G=[2, 8, 8, 4], beta=0.3, steps=40, **opts)
    for b in range(4):
        alone = gc.train_batch(*ARGS, b + 1, G=[2, 8, 8, 4][b], beta=0.3, steps=40,
                               **{k: v[b] for k, v in opts.items()})
        np.testing.assert_array_equal(batch.logits[b], alone.logits[0])
    assert batch.config.kl_in == ("reward", "loss", "loss", "reward")


def test_kl_in_reward_is_the_seed_placement():
    a = gc.train_kl_in_reward(W.rewards, W.ref_logits, np.random.default_rng(2), steps=30)
    b = gc.train_batch(*ARGS, 2, beta=0.1, steps=30, kl_in="reward").logits[0]
    np.testing.assert_array_equal(a, b)


def test_critic_runs_batched_equal_alone():
    batch = gc.train_batch(*ARGS, [1, 2], critic_seed=[7, 8], steps=40, use_critic=True)
    for b, (s, c) in enumerate(((1, 7), (2, 8))):
        logits, critic = gc.train(*ARGS, np.random.default_rng(s), steps=40, use_critic=True,
                                  critic_seed=c)
        np.testing.assert_allclose(batch.logits[b], logits, atol=1e-6)
        with torch.no_grad():
            v = critic(torch.tensor(W.emb, dtype=torch.float32)).numpy()
        np.testing.assert_allclose(batch.critic_value[b], v, atol=1e-5)


def test_training_raises_expected_reward_for_every_g_at_least_2():
    res = gc.train_batch(*ARGS, range(8), G=[2, 2, 2, 4, 4, 4, 8, 8], steps=300)
    t0 = gc.evaluate(W.ref_logits, W.rewards, W.ref_logits)[0]
    assert np.all(res.reward[:, -1] > t0 + 2.0)
    assert np.all(res.reward[:, -1] < gc.best_reward(W.rewards))
    assert np.all(res.reward[:, 0] == t0)


def test_g_equals_1_leaves_the_reward_at_the_reference():
    res = gc.train_batch(*ARGS, range(4), G=1, steps=300)
    t0 = gc.evaluate(W.ref_logits, W.rewards, W.ref_logits)[0]
    assert np.all(np.abs(res.reward[:, -1] - t0) < 1e-3)


def test_stronger_leash_means_smaller_kl():
    res = gc.train_batch(*ARGS, 0, beta=[0.0, 0.5, 2.0], steps=300)
    assert res.kl[0, -1] > res.kl[1, -1] > res.kl[2, -1]


def test_critic_is_seeded_not_global():
    state = torch.random.get_rng_state()
    c1, c2 = gc.Critic(seed=4), gc.Critic(seed=4)
    assert torch.equal(torch.random.get_rng_state(), state)
    for p, q in zip(c1.parameters(), c2.parameters(), strict=True):
        assert torch.equal(p, q)
    assert gc.n_params(c1) == 161
    torch.manual_seed(123)  # global state must not matter
    a, _ = gc.train(*ARGS, np.random.default_rng(0), steps=20, use_critic=True)
    torch.manual_seed(999)
    b, _ = gc.train(*ARGS, np.random.default_rng(0), steps=20, use_critic=True)
    np.testing.assert_array_equal(a, b)


def test_trained_critic_learns_the_values():
    res = gc.train_batch(*ARGS, range(4), use_critic=True, critic_seed=range(4))
    true_v = gc.expected_reward(res.logits, W.rewards, per_prompt=True)  # (B, P)
    assert np.abs(res.critic_value - true_v).max() < 0.3


def test_untrained_critic_stays_at_its_initialisation():
    _, critic = gc.train(*ARGS, np.random.default_rng(0), steps=10, use_critic=True,
                         train_critic=False)
    for p, q in zip(critic.parameters(), gc.Critic(seed=0).parameters(), strict=True):
        assert torch.equal(p, q)


def test_curves_and_samples_drawn():
    res = gc.train_batch(*ARGS, [0, 1], G=[2, 8], steps=5)
    assert res.reward.shape == res.kl.shape == res.samples_drawn.shape == (2, 6)
    np.testing.assert_array_equal(res.samples_drawn[:, -1], [10, 40])


def test_generator_is_consumed_exactly():
    rng = np.random.default_rng(0)
    gc.train(*ARGS, rng, steps=37, G=3)
    ref = np.random.default_rng(0)
    ref.random((37, 6, 3))
    assert rng.random() == ref.random()


def test_train_simple_is_the_batched_loop_for_one_seed():
    for kw in ({}, {"num_iterations": 3, "epsilon_high": 0.28}):
        simple = gc.train_simple(W.rewards, W.ref_logits, 11, steps=40, **kw)
        batched = gc.train_batch(W.rewards, None, W.ref_logits, 11, steps=40, **kw).logits[0]
        np.testing.assert_allclose(simple, batched, rtol=1e-9, atol=1e-12)  # summation order


def test_mu_above_1_moves_the_ratio_and_the_clip_binds():
    res = gc.train_batch(*ARGS, range(4), steps=30, num_iterations=4, beta=0.0)
    one = gc.train_batch(*ARGS, range(4), steps=30, beta=0.0)
    assert (res.metrics["clip_ratio/region_mean"].mean(1) > 0).all()
    assert (one.metrics["clip_ratio/region_mean"] == 0).all()  # mu = 1: ratio exactly 1
    assert (res.reward[:, -1] > one.reward[:, -1]).all()  # 4 steps per batch learn faster


def test_metrics_have_trl_names_and_match_their_definitions():
    res = gc.train_batch(*ARGS, [0, 1], steps=5)
    assert set(res.metrics) == set(gc.training.METRICS)
    assert all(v.shape == (2, 5) for v in res.metrics.values())
    assert (res.metrics["frac_reward_zero_std"] == 0).all()  # continuous rewards never tie
    ent0 = -(gc.softmax(W.ref_logits) * gc.log_softmax(W.ref_logits)).sum(-1).mean()
    np.testing.assert_allclose(res.metrics["entropy"][:, 0], ent0, rtol=1e-12)
    np.testing.assert_array_equal(res.samples_drawn[0], 8 * np.arange(6))


def test_dynamic_sampling_redraws_dead_groups_and_counts_them():
    rewards = (W.rewards > np.quantile(W.rewards, 0.8, axis=1, keepdims=True)).astype(float)
    plain = gc.train_batch(rewards, None, W.ref_logits, [0, 1], steps=10, G=4, beta=0.0)
    dyn = gc.train_batch(rewards, None, W.ref_logits, [0, 1], steps=10, G=4, beta=0.0,
                         dynamic_sampling=True)
    assert plain.metrics["frac_reward_zero_std"].mean() > 0.2
    assert dyn.metrics["frac_reward_zero_std"].mean() < plain.metrics["frac_reward_zero_std"].mean()
    assert (dyn.samples_drawn[:, -1] > plain.samples_drawn[:, -1]).all()


def test_ref_reset_releases_the_leash():
    kw = dict(steps=60, beta=0.5)
    frozen = gc.train_batch(*ARGS, [0], **kw)
    reset = gc.train_batch(*ARGS, [0], ref_reset_every=10, **kw)
    assert reset.kl[0, -1] > frozen.kl[0, -1]  # KL to the initial reference grows past the leash


def test_kl_estimators_in_the_loss_and_the_reward_train():
    for kw in ({"kl_estimator": "k3"}, {"kl_estimator": "k2"},
               {"kl_estimator": "k1", "kl_in": "reward"}):
        res = gc.train_batch(*ARGS, [0], steps=30, beta=0.1, **kw)
        assert res.reward[0, -1] > res.reward[0, 0] + 0.5
        assert (res.metrics["kl"][0, 1:] > 0).all()


@pytest.mark.parametrize("knob,value", [("num_iterations", 0), ("epsilon", 0.0),
                                        ("loss_type", "sum"), ("kl_estimator", "k4"),
                                        ("scale_rewards", "std"), ("adam_beta2", 1.0),
                                        ("ref_reset_every", 0), ("kind", "critic")])
def test_bad_knobs_name_themselves(knob, value):
    with pytest.raises(ValueError, match=knob):
        gc.train_batch(*ARGS, [0], steps=1, **{knob: value})
