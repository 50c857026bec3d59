"""Behaviour and oracle tests of training: batched runs equal lone runs, training works."""

import loop_reference as ref_impl
import numpy as np
import pytest
import torch

import grpo_core as gc

W = gc.toy_world(0)
ARGS = (W.rewards, W.emb, W.ref_logits)


def lone(seed, **knobs):
    """One run: its final logits (P, A) and its critic (None without one)."""
    res = gc.train_batch(*ARGS, [np.random.default_rng(seed)], **knobs)
    return res.logits[0], res.critics[0] if res.critics else None


def logged(*args, **knobs):
    """train_batch with TRL's metrics logged (they are computed only when asked)."""
    return gc.train_batch(*args, metrics=True, **knobs)


def test_train_matches_a_plain_loop_with_torch_adam():
    ours, _ = lone(11, max_steps=60)
    loop = ref_impl.train(W.rewards, W.ref_logits, np.random.default_rng(11), steps=60)
    np.testing.assert_allclose(ours, loop, atol=1e-12)


def test_batched_runs_equal_lone_runs_bit_for_bit():
    seeds, Gs, betas = [0, 1, 11, 11, 5], [8, 8, 1, 32, 3], [0.02, 0.0, 0.5, 2.0, 0.1]
    batch = gc.train_batch(*ARGS, seeds, num_generations=Gs, beta=betas, max_steps=80)
    for b, (s, G, beta) in enumerate(zip(seeds, Gs, betas, strict=True)):
        alone, _ = lone(s, max_steps=80, num_generations=G, beta=beta)
        np.testing.assert_array_equal(batch.logits[b], alone)
        np.testing.assert_array_equal(batch.reward[b, -1], gc.evaluate(alone, W.rewards,
                                                                        W.ref_logits)[0])


@pytest.mark.parametrize("options", [dict(kind="batch_norm"), dict(kind="none"),
                                     dict(kind="group"), dict(kl_in="reward"),
                                     dict(scale_rewards="batch")])
def test_batched_equals_alone_for_every_option(options):
    batch = gc.train_batch(*ARGS, [3, 4], num_generations=[4, 8], beta=[0.1, 0.5], max_steps=40,
                           **options)
    for b, (s, G, beta) in enumerate(((3, 4, 0.1), (4, 8, 0.5))):
        alone = gc.train_batch(*ARGS, s, num_generations=G, beta=beta, max_steps=40, **options)
        np.testing.assert_array_equal(batch.logits[b], alone.logits[0])


def test_one_batch_can_mix_baselines_normalisation_and_kl_placement():
    opts = dict(kind=["group_norm", "batch", "none", "group"],
                kl_in=["reward", "loss", "loss", "reward"])
    batch = gc.train_batch(*ARGS, [1, 2, 3, 4], num_generations=[2, 8, 8, 4], beta=0.3,
                           max_steps=40, **opts)
    for b in range(4):
        alone = gc.train_batch(*ARGS, b + 1, num_generations=[2, 8, 8, 4][b], beta=0.3,
                               max_steps=40, **{k: v[b] for k, v in opts.items()})
        np.testing.assert_array_equal(batch.logits[b], alone.logits[0])
    assert batch.config.kl_in == ("reward", "loss", "loss", "reward")
    assert batch.config.kind == ("group_norm", "batch", "none", "group")


@pytest.mark.parametrize("normalise", [True, False])
def test_kl_in_reward_matches_a_plain_loop_that_penalises_the_reward(normalise):
    """The RLHF placement against an independent loop: r - beta (log pi(a) - log pi_ref(a))
    per sample, before the group baseline; nothing in the loss. Fails if the penalty's sign,
    its estimator or its place (before the baseline) is wrong."""
    kind = "group_norm" if normalise else "group"
    ours = gc.train_batch(*ARGS, [np.random.default_rng(2)], beta=0.5, max_steps=30,
                          kl_in="reward", kind=kind).logits[0]
    loop = ref_impl.train(W.rewards, W.ref_logits, np.random.default_rng(2), steps=30, beta=0.5,
                          normalise=normalise, kl_in="reward")
    np.testing.assert_allclose(ours, loop, atol=1e-6)
    in_loss = ref_impl.train(W.rewards, W.ref_logits, np.random.default_rng(2), steps=30,
                             beta=0.5, normalise=normalise)
    assert np.abs(in_loss - loop).max() > 1e-2  # the placement matters at this beta


def test_critic_runs_batched_equal_alone():
    batch = gc.train_batch(*ARGS, [1, 2], critic_seed=[7, 8], max_steps=40, use_critic=True)
    for b, (s, c) in enumerate(((1, 7), (2, 8))):
        logits, critic = lone(s, max_steps=40, use_critic=True, critic_seed=c)
        np.testing.assert_allclose(batch.logits[b], logits, atol=1e-6)
        with torch.no_grad():
            v = critic(torch.tensor(W.emb, dtype=torch.float32)).numpy()
        np.testing.assert_allclose(batch.critic_value[b], v, atol=1e-5)


def test_training_raises_expected_reward_for_every_g_at_least_2():
    res = gc.train_batch(*ARGS, range(8), num_generations=[2, 2, 2, 4, 4, 4, 8, 8])
    t0 = gc.evaluate(W.ref_logits, W.rewards, W.ref_logits)[0]
    assert np.all(res.reward[:, -1] > t0 + 2.0)
    assert np.all(res.reward[:, -1] < gc.best_reward(W.rewards))
    assert np.all(res.reward[:, 0] == t0)


def test_g_equals_1_leaves_the_reward_at_the_reference():
    res = gc.train_batch(*ARGS, range(4), num_generations=1)
    t0 = gc.evaluate(W.ref_logits, W.rewards, W.ref_logits)[0]
    assert np.all(np.abs(res.reward[:, -1] - t0) < 1e-3)


def test_stronger_leash_means_smaller_kl():
    res = gc.train_batch(*ARGS, 0, beta=[0.0, 0.5, 2.0])
    assert res.kl[0, -1] > res.kl[1, -1] > res.kl[2, -1]


def test_critic_is_seeded_not_global():
    state = torch.random.get_rng_state()
    c1, c2 = gc.Critic(seed=4), gc.Critic(seed=4)
    assert torch.equal(torch.random.get_rng_state(), state)
    for p, q in zip(c1.parameters(), c2.parameters(), strict=True):
        assert torch.equal(p, q)
    assert gc.n_params(c1) == 161
    torch.manual_seed(123)  # global state must not matter
    a, _ = lone(0, max_steps=20, use_critic=True)
    torch.manual_seed(999)
    b, _ = lone(0, max_steps=20, use_critic=True)
    np.testing.assert_array_equal(a, b)


def test_trained_critic_learns_the_values():
    res = gc.train_batch(*ARGS, range(4), use_critic=True, critic_seed=range(4))
    true_v = gc.expected_reward(res.logits, W.rewards, per_prompt=True)  # (B, P)
    assert np.abs(res.critic_value - true_v).max() < 0.3


def test_untrained_critic_stays_at_its_initialisation():
    _, critic = lone(0, max_steps=10, use_critic=True, train_critic=False)
    for p, q in zip(critic.parameters(), gc.Critic(seed=0).parameters(), strict=True):
        assert torch.equal(p, q)


def test_curves_and_samples_drawn():
    res = gc.train_batch(*ARGS, [0, 1], num_generations=[2, 8], max_steps=5)
    assert res.reward.shape == res.kl.shape == res.samples_drawn.shape == (2, 6)
    np.testing.assert_array_equal(res.samples_drawn[:, -1], [10, 40])


def test_generator_is_consumed_exactly():
    rng = np.random.default_rng(0)
    gc.train_batch(*ARGS, [rng], max_steps=37, num_generations=3)
    ref = np.random.default_rng(0)
    ref.random((37, 6, 3))
    assert rng.random() == ref.random()


def test_train_simple_is_the_batched_loop_for_one_seed():
    for kw in ({}, {"num_iterations": 3, "epsilon_high": 0.28}):
        simple = gc.train_simple(W.rewards, W.ref_logits, 11, steps=40, **kw)
        batched = gc.train_batch(W.rewards, None, W.ref_logits, 11, max_steps=40,
                                 **kw).logits[0]
        np.testing.assert_allclose(simple, batched, rtol=1e-9, atol=1e-12)  # summation order


def test_mu_above_1_moves_the_ratio_and_the_clip_binds():
    res = logged(*ARGS, range(4), max_steps=30, num_iterations=4, beta=0.0)
    one = logged(*ARGS, range(4), max_steps=30, beta=0.0)
    assert (res.metrics["clip_ratio/region_mean"].mean(1) > 0).all()
    assert (res.reward[:, -1] > one.reward[:, -1]).all()  # 4 steps per batch learn faster


def _sampled_rewards(rewards, seed, steps, **knobs):
    """The rewards ``(steps, P, G)`` each step of a lone run drew, re-derived from the logits
    after each step (train_batch with fewer steps) and the run's uniforms."""
    rng, out, G = np.random.default_rng(seed), [], knobs.get("num_generations", 8)
    u = rng.random((steps, len(rewards), G))
    for t in range(steps):
        logits = W.ref_logits if t == 0 else gc.train_batch(
            rewards, None, W.ref_logits, seed, max_steps=t, **knobs).logits[0]
        samples = gc.sample_from_uniforms(gc.softmax(logits), u[t])
        out.append(np.take_along_axis(rewards, samples, axis=1))
    return np.stack(out)


def test_metrics_have_trl_names_and_match_their_definitions():
    """reward, reward_std, frac_reward_zero_std against their definitions on the rewards the
    run drew (binary rewards: some groups tie); entropy of the policy; clip metrics 0 at mu = 1."""
    rewards = (W.rewards > np.quantile(W.rewards, 0.8, axis=1, keepdims=True)).astype(float)
    knobs = dict(num_generations=4, beta=0.0)
    res = logged(rewards, None, W.ref_logits, [5], max_steps=3, **knobs)
    assert list(res.metrics) == [m for m in gc.METRICS if not m.startswith("completions")]
    r = _sampled_rewards(rewards, 5, 3, **knobs)  # (steps, P, G)
    flat = r.reshape(3, -1)
    np.testing.assert_allclose(res.metrics["reward"][0], flat.mean(-1), rtol=1e-12)
    np.testing.assert_allclose(res.metrics["reward_std"][0], flat.std(-1, ddof=1), rtol=1e-12)
    dead = (r.max(-1) == r.min(-1)).mean(-1)  # the fraction of groups whose rewards all tie
    assert dead.max() > 0 and dead.min() < 1
    np.testing.assert_allclose(res.metrics["frac_reward_zero_std"][0], dead, rtol=1e-12)
    ent0 = -(gc.softmax(W.ref_logits) * gc.log_softmax(W.ref_logits)).sum(-1).mean()
    np.testing.assert_allclose(res.metrics["entropy"][0, 0], ent0, rtol=1e-12)
    np.testing.assert_array_equal(res.samples_drawn[0], 4 * np.arange(4))


def test_g_equals_1_metrics_are_a_group_of_one():
    res = logged(*ARGS, [3], num_generations=1, max_steps=2, beta=0.0)
    r = _sampled_rewards(W.rewards, 3, 2, num_generations=1, beta=0.0).reshape(2, -1)
    np.testing.assert_allclose(res.metrics["reward"][0], r.mean(-1), rtol=1e-12)
    np.testing.assert_allclose(res.metrics["reward_std"][0], r.std(-1, ddof=1), rtol=1e-12)
    assert (res.metrics["frac_reward_zero_std"] == 1).all()


def test_clip_metrics_at_mu_above_1_match_a_hand_computation():
    """Step 0 of a mu = 2 run: the ratio after the first Adam step, clipped where the clip
    binds (below 1 - eps with A < 0, above 1 + eps_high with A > 0), by hand."""
    knobs = dict(num_iterations=2, epsilon=0.01, epsilon_high=0.02, beta=0.0, learning_rate=0.5)
    res = logged(*ARGS, [7], max_steps=1, **knobs)
    u = np.random.default_rng(7).random((6, 8))
    samples = gc.sample_from_uniforms(gc.softmax(W.ref_logits), u)
    adv = gc.group_advantages(np.take_along_axis(W.rewards, samples, 1)).astype(np.float32)
    logits = torch.tensor(W.ref_logits, requires_grad=True)
    opt = torch.optim.Adam([logits], lr=0.5)
    logp = torch.log_softmax(logits, -1).gather(1, torch.tensor(samples))
    (-(torch.tensor(adv, dtype=torch.float64) * logp).mean()).backward()  # ratio 1: REINFORCE
    opt.step()
    with torch.no_grad():
        ratio = (torch.log_softmax(logits, -1).gather(1, torch.tensor(samples)) - logp).exp()
    ratio, a = ratio.numpy(), adv
    low, high = (ratio < 0.99) & (a < 0), (ratio > 1.02) & (a > 0)
    assert low.any() and high.any()
    for name, hit in (("low", low), ("high", high), ("region", low | high)):
        np.testing.assert_allclose(res.metrics[f"clip_ratio/{name}_mean"][0, 0],
                                   hit.mean() / 2, rtol=1e-12)  # step 2's; step 1's is 0


def test_trl_advantages_zero_dead_groups_exactly_at_g3():
    """With G = 3 the mean of equal rewards is not exact (0.1 + 0.1 + 0.1 != 0.3): a dead group's
    advantages are 0 only because trl_advantages sets them so (TRL's std is 0 there)."""
    r = np.array([0.1, 0.1, 0.1, 1.0, 0.0, 0.5])
    assert (r[:3] - r[:3].mean() != 0).any()  # the residue the zeroing removes
    adv = gc.trl_advantages(r, 3, "group")
    assert (adv[:3] == 0).all()
    res = gc.train_batch(np.full((6, 12), 0.1), None, W.ref_logits, [0], num_generations=3,
                         scale_rewards="group", max_steps=3, beta=0.0)
    np.testing.assert_array_equal(res.logits[0], W.ref_logits)  # dead groups move nothing


def test_dynamic_sampling_redraws_dead_groups_and_counts_them():
    rewards = (W.rewards > np.quantile(W.rewards, 0.8, axis=1, keepdims=True)).astype(float)
    plain = logged(rewards, None, W.ref_logits, [0, 1], max_steps=10, num_generations=4,
                           beta=0.0)
    dyn = logged(rewards, None, W.ref_logits, [0, 1], max_steps=10, num_generations=4,
                         beta=0.0, dynamic_sampling=True)
    assert plain.metrics["frac_reward_zero_std"].mean() > 0.2
    assert dyn.metrics["frac_reward_zero_std"].mean() < plain.metrics["frac_reward_zero_std"].mean()
    assert (dyn.samples_drawn[:, -1] > plain.samples_drawn[:, -1]).all()


def test_ref_reset_releases_the_leash():
    kw = dict(max_steps=60, beta=0.5)
    frozen = gc.train_batch(*ARGS, [0], **kw)
    reset = gc.train_batch(*ARGS, [0], sync_ref_model=True, ref_model_sync_steps=10,
                           ref_model_mixup_alpha=1.0, **kw)
    assert reset.kl[0, -1] > frozen.kl[0, -1]  # KL to the initial reference grows past the leash


@pytest.mark.parametrize("alpha", [1.0, 0.6])
def test_ref_sync_is_trls_mixup_every_k_steps(alpha):
    """TRL's SyncRefModelCallback: after step K (and 2K, ...), pi_ref's parameters (the toy's
    logits) <- alpha x the policy's + (1 - alpha) x pi_ref's. The logged k3 ``kl`` of step K
    reads the new reference; recomputed here by hand from the logits after K steps."""
    K, kw = 5, dict(beta=0.5, kl_estimator="exact")
    synced = logged(*ARGS, [4], max_steps=K + 1, sync_ref_model=True,
                            ref_model_sync_steps=K, ref_model_mixup_alpha=alpha, **kw)
    frozen = logged(*ARGS, [4], max_steps=K + 1, **kw)
    np.testing.assert_array_equal(synced.metrics["kl"][:, :K], frozen.metrics["kl"][:, :K])
    logits = logged(*ARGS, [4], max_steps=K, **kw).logits[0]  # the policy after K steps
    ref = gc.log_softmax(alpha * logits + (1 - alpha) * W.ref_logits)
    u = np.random.default_rng(4).random((K + 1, 6, 8))[K]
    samples = gc.sample_from_uniforms(gc.softmax(logits), u)
    lp, rp = (np.take_along_axis(x, samples, 1) for x in (gc.log_softmax(logits), ref))
    k3 = (np.exp(rp - lp) - (rp - lp) - 1).mean()
    np.testing.assert_allclose(synced.metrics["kl"][0, K], k3, rtol=1e-10)
    assert abs(frozen.metrics["kl"][0, K] - k3) > 1e-4


def test_kl_estimators_in_the_loss_and_the_reward_train():
    for kw in ({"kl_estimator": "k3"}, {"kl_estimator": "k2"},
               {"kl_estimator": "k1", "kl_in": "reward"}):
        res = logged(*ARGS, [0], max_steps=30, beta=0.1, **kw)
        assert res.reward[0, -1] > res.reward[0, 0] + 0.5
        assert (res.metrics["kl"][0, 1:] > 0).all()


@pytest.mark.parametrize("knob,value", [("num_iterations", 0), ("epsilon", 0.0),
                                        ("loss_type", "sum"), ("kl_estimator", "k4"),
                                        ("scale_rewards", "std"), ("adam_beta2", 1.0),
                                        ("ref_model_sync_steps", 0), ("kind", "critic"),
                                        ("max_steps", -1), ("temperature", 0.7),
                                        ("seed", 3), ("mask_truncated_completions", True),
                                        ("loss_type", ("dapo", "grpo")),
                                        ("per_device_train_batch_size", 8)])
def test_bad_knobs_name_themselves(knob, value):
    with pytest.raises(ValueError, match=knob):
        gc.train_batch(*ARGS, [0], **({"max_steps": 1} | {knob: value}))


def test_metrics_only_when_asked_and_the_run_is_the_same():
    quiet = gc.train_batch(*ARGS, [0, 1], max_steps=30, num_iterations=4, beta=0.1,
                           kl_estimator="k3")
    loud = logged(*ARGS, [0, 1], max_steps=30, num_iterations=4, beta=0.1, kl_estimator="k3")
    assert quiet.metrics is None and loud.metrics["clip_ratio/region_mean"].max() > 0
    np.testing.assert_array_equal(quiet.logits, loud.logits)


def test_unknown_knobs_and_the_old_names_are_refused():
    for old in ("G", "lr", "steps", "baseline", "normalise", "ref_reset_every"):
        with pytest.raises(TypeError, match=old):
            gc.train_batch(*ARGS, [0], **{old: 1})


def test_the_toy_defaults_and_the_advantage_switch():
    """train_batch's config: the toy's DEFAULTS over GRPOConfig's; scale_rewards switches the
    advantage to TRL's (kind None), kind to the book's (scale_rewards None)."""
    cfg = gc.training.toy_config()
    assert (cfg.learning_rate, cfg.max_steps, cfg.beta, cfg.kind) == (0.05, 300, 0.02,
                                                                     "group_norm")
    assert cfg.scale_rewards is None and cfg.kl_estimator == "exact" and cfg.float32_advantages
    trl = gc.training.toy_config(scale_rewards="batch")
    assert trl.kind is None and trl.scale_rewards == "batch"
    with pytest.raises(ValueError, match="exclusive"):
        gc.training.toy_config(scale_rewards="group", kind="group")
    res = gc.train_batch(*ARGS, [0], max_steps=2, per_device_train_batch_size=48)
    assert res.config.per_device_train_batch_size == 48


def test_train_simple_defaults_are_the_toys():
    simple = gc.train_simple(W.rewards, W.ref_logits, 11)  # 300 steps, G 8, beta 0.02, lr 0.05
    batched = gc.train_batch(W.rewards, None, W.ref_logits, 11).logits[0]
    np.testing.assert_allclose(simple, batched, rtol=1e-9, atol=1e-12)


def test_policy_runs_share_g_and_return_the_trained_module():
    pol = gc.training.TabularPolicy(W.ref_logits, 2)
    res = gc.train_batch(*ARGS, [0, 1], policy=pol, num_generations=4, max_steps=3)
    assert res.policy is pol and np.array_equal(res.logits, pol.logits.detach().numpy())
    assert gc.train_batch(*ARGS, [0, 1], num_generations=[4, 8], max_steps=2).policy is None
    with pytest.raises(ValueError, match="share num_generations"):
        gc.train_batch(*ARGS, [0, 1], policy=gc.training.TabularPolicy(W.ref_logits, 2),
                       num_generations=[4, 8], max_steps=1)
    gc.train_batch(*ARGS, [0], temperature=1.0, seed=42, max_steps=1)  # TRL's values: fine


def test_exact_kl_curve_is_the_kl_of_the_logits():
    res = gc.train_batch(*ARGS, [0, 1], beta=[0.0, 0.5], max_steps=20)
    np.testing.assert_allclose(res.kl[:, -1], gc.exact_kl(res.logits, W.ref_logits), rtol=1e-10)
    np.testing.assert_allclose(res.reward[:, -1], gc.expected_reward(res.logits, W.rewards),
                               rtol=1e-12)


def test_critic_advantage_is_reward_minus_value():
    """One step by hand: A = r - V(prompt) from the seeded, untrained critic (its fit comes
    after), then Adam's first step lr g / (|g| + eps) on the REINFORCE gradient."""
    res = gc.train_batch(*ARGS, [np.random.default_rng(5)], use_critic=True, critic_seed=3,
                         max_steps=1, beta=0.0)
    u = np.random.default_rng(5).random((6, 8))
    samples = gc.sample_from_uniforms(gc.softmax(W.ref_logits), u)
    with torch.no_grad():
        v = gc.Critic(3)(torch.tensor(W.emb, dtype=torch.float32)).numpy()
    r = np.take_along_axis(W.rewards, samples, 1)
    adv = (torch.tensor(r, dtype=torch.float32) - torch.tensor(v)[:, None]).double().numpy()
    g = -gc.policy_gradient(W.ref_logits, samples, adv) / 6
    np.testing.assert_allclose(res.logits[0], W.ref_logits - 0.05 * g / (np.abs(g) + 1e-8),
                               rtol=0, atol=1e-9)


def test_g_equals_2_logs_trl_reward_metrics_and_one_prompt_groups_of_one():
    res = gc.train_batch(*ARGS, [0], num_generations=2, max_steps=20, metrics=True)
    assert res.metrics["frac_reward_zero_std"].max() < 1  # continuous rewards: groups differ
    one = gc.train_batch(W.rewards[:1], None, W.ref_logits[:1], [0], num_generations=1,
                         max_steps=3, metrics=True)
    assert (one.metrics["reward_std"] == 0).all()  # one reward per step: no spread


def test_redraw_dead_redraws_only_dead_groups_and_counts_answers_per_prompt():
    """_redraw_dead against a hand computation: which groups are dead is decided within each
    group (over its G answers), only those are redrawn, from each run's own generator, and the
    extra answers are counted per prompt (n_dead * G / P)."""
    from grpo_core.training import _redraw_dead

    rewards = np.array([[0.0, 1.0, 1.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])  # (P, A)
    probs = np.full((2, 3, 3), 1 / 3)  # (R, P, A)
    samples = np.array([[[1, 2, 1, 2], [0, 1, 0, 2], [0, 2, 1, 1]],   # run 0: prompt 0 dead
                        [[0, 1, 0, 1], [1, 1, 2, 2], [2, 2, 2, 2]]])  # run 1: prompts 1, 2 dead
    G, P = 4, 3
    dead = np.array([[True, False, False], [False, True, True]])
    expect = samples.copy()
    for r, seed in enumerate((7, 8)):
        u = np.random.default_rng(seed).random((dead[r].sum(), G))
        expect[r, dead[r]] = gc.sample_from_uniforms(probs[r, dead[r]], u)
    out, extra = _redraw_dead(samples.copy(), probs, rewards,
                              [np.random.default_rng(7), np.random.default_rng(8)], max_redraws=1)
    np.testing.assert_array_equal(out, expect)
    np.testing.assert_allclose(extra, [1 * G / P, 2 * G / P])


def test_reward_std_of_one_prompt_and_one_answer_is_zero():
    """A batch of a single answer has no spread: reward_std 0, not the NaN of a Bessel std."""
    rewards, ref = W.rewards[:1], W.ref_logits[:1]
    res = logged(rewards, None, ref, [0], num_generations=1, max_steps=2, beta=0.0)
    assert (res.metrics["reward_std"] == 0).all()


CLOSED_FORM_OPTIONS = [
    dict(), dict(beta=[0.0, 0.02, 0.5]), dict(loss_type="grpo"), dict(loss_type="bnpo"),
    dict(loss_type="dr_grpo", max_completion_length=7), dict(kl_in=["reward", "loss", "loss"]),
    dict(float32_advantages=False), dict(scale_rewards="group"), dict(use_critic=True),
    dict(dynamic_sampling=True), dict(num_generations=[1, 1, 1]), dict(epsilon=2.0),
    dict(sync_ref_model=True, ref_model_sync_steps=7, ref_model_mixup_alpha=0.6)]


@pytest.mark.parametrize("options", CLOSED_FORM_OPTIONS)
def test_closed_form_step_is_autograds_bit_for_bit(options):
    """The tabular loop's on-policy step without autograd (_closed_form_grad) trains exactly
    as grpo_update's autograd step (taken when a policy module is passed), metrics included."""
    fast = logged(*ARGS, [0, 1, 11], max_steps=40, **options)
    slow = logged(*ARGS, [0, 1, 11], max_steps=40, policy=gc.training.TabularPolicy(
        W.ref_logits, 3), **options)
    np.testing.assert_array_equal(fast.logits, slow.logits)
    np.testing.assert_array_equal(fast.kl, slow.kl)
    for name, value in slow.metrics.items():
        np.testing.assert_array_equal(fast.metrics[name], value)


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dapo", "dr_grpo"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_closed_form_grad_is_the_gradient_of_the_loss(loss_type, dtype):
    """Oracle: _closed_form_grad equals autograd's gradient of grpo_loss + beta x the exact KL
    on random logits, samples, advantages and betas, bit for bit."""
    rng = np.random.default_rng(3)
    for R, G in ((1, 1), (3, 8), (5, 32)):
        P, A = 6, 12
        logits = torch.tensor(rng.normal(0, 2, (R, P, A)), requires_grad=True)
        ref_lp = torch.log_softmax(torch.tensor(rng.normal(0, 0.5, (R, P, A))), -1)
        idx = torch.from_numpy(rng.integers(0, A, (R, P, G)))
        adv = torch.tensor(rng.normal(0, 1, (R, P * G)), dtype=dtype)
        beta = torch.tensor(rng.choice([0.0, 0.02, 0.5], R))
        length = 5 if loss_type == "dr_grpo" else None
        lp = torch.log_softmax(logits, -1)
        logp = lp.gather(-1, idx).reshape(R, P * G, 1)
        loss = gc.grpo_loss(logp, logp.detach(), None, adv, torch.ones_like(logp),
                            loss_type=loss_type, max_completion_length=length)
        kl = gc.training.kl_term(lp, None, None, ref_lp, None, None, "exact", True, loss_type)
        (0.0 + (loss + beta * kl).sum()).backward()
        weight = beta[:, None, None].expand(R, P, A) / P
        grad = gc.training._closed_form_grad(logits, idx, adv, P * G * (length or 1), ref_lp,
                                             weight)
        assert torch.equal(grad, logits.grad)
        logits.grad = None
        logp = torch.log_softmax(logits, -1).gather(-1, idx).reshape(R, P * G, 1)
        loss = gc.grpo_loss(logp, logp.detach(), None, adv, torch.ones_like(logp),
                            loss_type=loss_type, max_completion_length=length)
        loss.sum().backward()  # no KL term
        grad = gc.training._closed_form_grad(logits, idx, adv, P * G * (length or 1), None, None)
        assert torch.equal(grad, logits.grad)


@pytest.mark.parametrize("options, closed", [
    (dict(), True), (dict(loss_type="dr_grpo"), True), (dict(num_iterations=2), False),
    (dict(loss_type="cispo"), False), (dict(importance_sampling_level="sequence"), False),
    (dict(kl_estimator="k3", beta=0.1), False), (dict(kl_in="reward", kl_estimator="k3"), True),
    (dict(kl_estimator=["exact", "k3"], beta=0.1), False), (dict(beta=0.0), True),
    (dict(kl_estimator="k3", beta=0.0), True),  # beta 0: no KL term in the loss at all
    (dict(use_bias_correction_kl=[True, False], beta=0.1), False)])  # two exact KL terms
def test_closed_form_only_where_it_is_the_gradient(options, closed, monkeypatch):
    """The closed-form step is taken for the tabular policy at mu = 1 with the clipped loss
    types and the exact KL (or none) in the loss; everything else goes through grpo_update."""
    calls = []
    monkeypatch.setattr(gc.training, "grpo_update",
                        lambda *a, **k: calls.append(1) or gc.update.grpo_update(*a, **k))
    gc.train_batch(*ARGS, [0, 1], max_steps=2, **options)
    assert (not calls) == closed
    gc.train_batch(*ARGS, [0, 1], max_steps=2, policy=gc.training.TabularPolicy(W.ref_logits, 2),
                   **options)
    assert calls  # a policy module: always autograd


@pytest.mark.parametrize("knob", sorted(set(gc.config.LOSS_FIELDS)
                                         - set(gc.training._CLOSED_FORM_READS)))
def test_closed_form_needs_every_loss_knob_it_does_not_implement_at_its_default(knob,
                                                                              monkeypatch):
    """A loss knob the closed-form step does not write out (chapter 17's block, a future one)
    sends the step through autograd, which reads it: the fast path cannot drop a knob."""
    value = {"delta": 0.5, "top_entropy_quantile": 0.5, "entropy_coef": 0.1,
             "off_policy_mask_threshold": -1.0}.get(knob, 4.0)  # sapo/vespo: no effect on dapo
    cfg = gc.training.toy_config(**{knob: value})
    runs = {k: np.array(cfg.values(k), dtype=object) for k in gc.training.PER_RUN}
    assert gc.training._closed_form(gc.training.toy_config(), runs)
    assert not gc.training._closed_form(cfg, runs)
    if knob in ("delta", "top_entropy_quantile", "entropy_coef", "off_policy_mask_threshold"):
        calls = []
        monkeypatch.setattr(gc.training, "grpo_update",
                            lambda *a, **k: calls.append(1) or gc.update.grpo_update(*a, **k))
        with_knob = gc.train_batch(*ARGS, [0], max_steps=3, **{knob: value})
        assert calls and not np.array_equal(with_knob.logits,
                                            gc.train_batch(*ARGS, [0], max_steps=3).logits)


def test_an_estimator_in_the_reward_needs_no_listing(monkeypatch):
    """The reward's KL penalty reads the sampled log-probs for any estimator but k1 (and the
    exact KL, which is k1 there): a new estimator "k4" (here k2 under another name) reaches
    them without being listed in the loop."""
    k2 = gc.train_batch(*ARGS, [0], max_steps=3, kl_in="reward", kl_estimator="k2", beta=0.1)
    monkeypatch.setattr(gc.config, "TRAIN_KL_ESTIMATORS", (*gc.config.TRAIN_KL_ESTIMATORS, "k4"))
    monkeypatch.setattr(gc.training, "kl_estimate", lambda lp, ref, est="k3": gc.loss.kl_estimate(
        lp, ref, "k2" if est == "k4" else est))
    k4 = gc.train_batch(*ARGS, [0], max_steps=3, kl_in="reward", kl_estimator="k4", beta=0.1)
    np.testing.assert_array_equal(k2.logits, k4.logits)


@pytest.mark.parametrize("options, blocks", [
    (dict(), 1), (dict(metrics=True), 3), (dict(use_critic=True), 3),
    (dict(dynamic_sampling=True), 3), (dict(num_iterations=2), 3),
    (dict(kl_estimator="k3", beta=0.1), 3)])
def test_runs_of_different_g_train_in_one_padded_block_only_with_the_closed_form(options, blocks,
                                                                                  monkeypatch):
    """Mixed group sizes share one loop (groups padded to the largest) when the step is the
    closed form and nothing reads the padding; else one block per G. Same runs either way."""
    calls = []
    block = gc.training._train_block
    monkeypatch.setattr(gc.training, "_train_block",
                        lambda *a, **k: calls.append(1) or block(*a, **k))
    res = gc.train_batch(*ARGS, [0, 1, 2], num_generations=[2, 8, 3], max_steps=20, **options)
    assert len(calls) == blocks and res.policy is None
    for b, G in enumerate((2, 8, 3)):
        alone = gc.train_batch(*ARGS, b, num_generations=G, max_steps=20, **options)
        np.testing.assert_array_equal(res.logits[b], alone.logits[0])
        np.testing.assert_array_equal(res.samples_drawn[b], alone.samples_drawn[0])


def test_a_generator_shared_by_runs_of_different_g_is_drawn_block_by_block():
    """One generator for every run: the runs of each G draw from it in turn, block after block
    (padding all runs into one loop would interleave the draws)."""
    res = gc.train_batch(*ARGS, np.random.default_rng(3), num_generations=[4, 8, 4], max_steps=30)
    g = np.random.default_rng(3)
    fours = gc.train_batch(*ARGS, [g, g], num_generations=4, max_steps=30).logits
    eight = gc.train_batch(*ARGS, g, num_generations=8, max_steps=30).logits
    np.testing.assert_array_equal(res.logits, np.stack([fours[0], eight[0], fours[1]]))


@pytest.mark.parametrize("log", [False, True])
def test_every_step_of_the_curves_is_that_steps_policy(log):
    """The curves (computed 32 steps at a time) at step k are those of the policy after k
    steps, at the chunks' edges too: the last value of a k-step run with the same seeds."""
    long = gc.train_batch(*ARGS, [0, 1], num_generations=[4, 8], max_steps=70, metrics=log)
    for k in (1, 31, 32, 33, 63, 64, 65):
        short = gc.train_batch(*ARGS, [0, 1], num_generations=[4, 8], max_steps=k, metrics=log)
        np.testing.assert_array_equal(long.reward[:, k], short.reward[:, -1])
        np.testing.assert_array_equal(long.kl[:, k], short.kl[:, -1])
        np.testing.assert_array_equal(long.reward[:, k], gc.evaluate(short.logits, W.rewards,
                                                                        W.ref_logits)[0])
        if log:
            np.testing.assert_array_equal(long.metrics["entropy"][:, k - 1],
                                          short.metrics["entropy"][:, -1])
