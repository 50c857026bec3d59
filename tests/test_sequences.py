"""The token-sequence world (grpo_core.sequences): enumeration, exact values vs Monte Carlo,
exact expected updates vs autograd through grpo_loss on every group, masks, errors."""

import itertools

import numpy as np
import pytest
import torch

import grpo_core as gc
from grpo_core import sequences as sq


def random_logits(world, seed, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return world.ref_logits + scale * torch.randn(world.ref_logits.shape, generator=g,
                                                  dtype=torch.float64)


@pytest.fixture(scope="module")
def world():
    return sq.make_sequence_world()


@pytest.fixture(scope="module")
def tiny():
    return sq.make_sequence_world(2, 3, seed=1, noise=1.0)  # 15 completions


@pytest.mark.parametrize("V,L", [(1, 1), (2, 3), (3, 6), (4, 4)])
def test_enumeration_and_probabilities_sum_to_one(V, L):
    w = sq.make_sequence_world(V, L, seed=2)
    assert len(w.length) == sum(V**k for k in range(L + 1))
    assert w.ref_logits.shape == (sum(V**k for k in range(L)), V + 1)
    p = sq.sequence_probs(w, random_logits(w, 3, 2.0))
    assert abs(float(p.sum()) - 1) < 1e-12 and bool((p > 0).all())
    eos = (w.tokens == V) & (w.mask == 1)
    assert np.array_equal(w.truncated, ~eos.any(1).numpy())  # truncated: no EOS
    assert np.array_equal(w.length, w.mask.sum(1).numpy().astype(int))
    assert np.all(w.length[w.truncated] == L) and np.all(w.length <= L)
    last = w.tokens[torch.arange(len(w.length)), torch.from_numpy(w.length - 2).clamp(min=0)]
    expected = ~w.truncated & (w.length >= 2) & (last.numpy() == 0)
    assert np.array_equal(w.correct, expected)
    # contexts: each prefix is the context of exactly its own V + 1 next tokens
    pairs = {(int(h), int(t)) for h, t, m in zip(w.prefix.flatten(), w.tokens.flatten(),
                                                 w.mask.flatten(), strict=True) if m}
    assert len(pairs) == w.ref_logits.numel()


def test_world_has_correct_and_wrong_answers_at_many_lengths(world):
    assert len(world.length) == 1093 and world.text(1) == "a<eos>"
    assert set(world.length[world.correct]) == {2, 3, 4, 5, 6}
    assert set(world.length[~world.correct]) == {1, 2, 3, 4, 5, 6}
    assert world.text(1092) == "cccccc…" and world.truncated[1092] and not world.correct[1092]


def test_exact_stats_against_monte_carlo(world):
    logits = random_logits(world, 0, 0.5)
    ex = sq.exact_stats(world, logits, soft_punish_cache=2)
    b = sq.sample_batch(world, logits, 20_000, torch.Generator().manual_seed(5),
                        soft_punish_cache=2)
    for name, x in (("reward", b.rewards), ("length", b.lengths), ("truncated", b.truncated)):
        x = x.astype(float)
        assert abs(x.mean() - ex[name]) < 4 * x.std() / np.sqrt(len(x)), name
    # the sequence KL from sampled log-ratios, and the summed per-token k3 (the same value)
    lr = sq.token_logps(world, world.ref_logits, b.idx)
    for est in ("k1", "k3"):
        x = (gc.kl_estimate(b.logp, lr, est) * b.mask).sum(-1).numpy()
        assert abs(x.mean() - ex["kl"]) < 4 * x.std() / np.sqrt(len(x)), est
    assert abs(ex["k3_sum"] - ex["kl"]) < 1e-12 and ex["kl"] > 0.01
    # per-token entropy: the token mean of each visited context's entropy
    logpi = torch.log_softmax(logits, -1)
    H = -(logpi.exp() * logpi).sum(-1)[world.prefix[b.idx]] * b.mask
    h = H.sum(-1).numpy()
    ratio = h.mean() / b.lengths.mean()
    assert abs(ratio - ex["entropy"]) < 0.01


def test_sampled_logp_matches_the_enumeration(world):
    logits = random_logits(world, 1).requires_grad_(True)
    b = sq.sample_batch(world, logits, 64, torch.Generator().manual_seed(0))
    assert b.logp.shape == b.mask.shape == (64, 6) and b.logp.requires_grad
    full = sq.token_logps(world, logits).sum(-1)
    assert torch.allclose(b.logp.sum(-1), full[b.idx])
    assert np.array_equal(b.mask.sum(-1).numpy(), b.lengths)
    again = sq.sample_batch(world, logits, 64, torch.Generator().manual_seed(0))
    assert torch.equal(again.idx, b.idx)  # seeded: the same draw


def test_mask_truncated_completions_zeroes_truncated_rows(world):
    logits = world.ref_logits.clone()
    logits[:, world.n_tokens] -= 2.0  # rarely EOS: many truncated
    b = sq.sample_batch(world, logits, 200, torch.Generator().manual_seed(1),
                        mask_truncated_completions=True)
    assert b.truncated.any() and (~b.truncated).any()
    assert torch.all(b.mask[torch.from_numpy(b.truncated)] == 0)
    keep = torch.from_numpy(~b.truncated)
    assert np.array_equal(b.mask[keep].sum(-1).numpy(), b.lengths[~b.truncated])


def test_soft_overlong_punishment_as_trl(world):
    r = sq.rewards(world, soft_punish_cache=2)  # L_max 6, L_cache 2: lengths 5, 6 punished
    trl = np.array([0.0 if n <= 4 else (4 - n) / 2 for n in world.length])  # other_rewards.py
    assert np.allclose(r - world.correct, trl)
    assert np.array_equal(sq.rewards(world), world.correct.astype(float))


def all_groups(world, G):
    """Every ordered group of G completions: idx (N^G, G)."""
    return torch.tensor(list(itertools.product(range(len(world.length)), repeat=G)))


CASES = [(lt, G, kw) for lt in gc.LOSS_TYPES for G in (2, 3) for kw in
         ({}, {"mask_truncated_completions": True}, {"soft_punish_cache": 1},
          {"scale_rewards": "none"})]


@pytest.mark.parametrize("loss_type,G,kw", CASES)
def test_exact_update_equals_autograd_over_every_group(tiny, loss_type, G, kw):
    """The oracle: E[-grad grpo_loss] summed over all N^G groups with their probabilities."""
    logits = random_logits(tiny, 7)
    idx = all_groups(tiny, G)  # (M, G)
    theta = logits.expand(len(idx), -1, -1).clone().requires_grad_(True)  # one copy per group
    r = sq.rewards(tiny, kw.get("soft_punish_cache", 0))[idx.numpy()]
    adv = torch.from_numpy(gc.trl_advantages(r, G, kw.get("scale_rewards", "group")))
    mask = tiny.mask[idx]
    if kw.get("mask_truncated_completions"):
        mask = mask * torch.from_numpy(~tiny.truncated[idx.numpy()]).unsqueeze(-1)
    logp = sq.token_logps(tiny, theta, idx)
    loss = gc.grpo_loss(logp, None, None, adv, mask, loss_type=loss_type,
                        max_completion_length=tiny.max_len)  # (M,)
    p = sq.sequence_probs(tiny, logits).detach()[idx].prod(-1)  # (M,) P(group)
    (p * loss).sum().backward()
    oracle = -theta.grad.sum(0)
    exact = sq.exact_update(tiny, logits, G, loss_type, **kw)
    assert torch.allclose(exact, oracle, atol=1e-12), (exact - oracle).abs().max()
    assert oracle.abs().max() > 1e-3


def test_exact_update_against_monte_carlo(world):
    """G = 8 in the 1,093-completion world: 4,000 sampled groups, 4 standard errors."""
    logits = random_logits(world, 2, 0.5)
    M, G = 4000, 8
    theta = logits.expand(M, -1, -1).clone().requires_grad_(True)
    b = sq.sample_batch(world, theta, G, [torch.Generator().manual_seed(100 + i) for i in range(M)])
    adv = torch.from_numpy(gc.trl_advantages(b.rewards, G))
    gc.grpo_loss(b.logp, None, None, adv, b.mask, loss_type="grpo").sum().backward()
    g = -theta.grad.flatten(1).numpy()  # (M, P * (V+1)) one update per group
    exact = sq.exact_update(world, logits, G, "grpo").flatten().numpy()
    for d in (exact / np.linalg.norm(exact), np.random.default_rng(0).normal(size=exact.size)):
        x = g @ d
        assert abs(x.mean() - exact @ d) < 4 * x.std() / np.sqrt(M)


def test_per_sequence_weights_grpo_and_dr_grpo(world):
    """grpo: W(o) = E[A | r(o)] / |o| (a long wrong answer is pushed down less); dr_grpo:
    W depends on the reward only. dapo sits between."""
    w = {lt: sq.sequence_weights(world, world.ref_logits, 8, lt) for lt in gc.LOSS_TYPES}
    for correct in (True, False):
        sel = world.correct == correct
        assert np.ptp(w["grpo"][sel] * world.length[sel]) < 1e-12
        assert np.ptp(w["dr_grpo"][sel]) < 1e-12
    wrong = ~world.correct
    short, long_ = wrong & (world.length == 1), wrong & (world.length == 6)
    assert np.all(w["grpo"][wrong] < 0)
    assert abs(w["grpo"][long_][0]) == pytest.approx(abs(w["grpo"][short][0]) / 6)
    assert np.allclose(w["bnpo"], w["dapo"])
    assert abs(w["dapo"][long_][0]) < abs(w["dapo"][short][0])  # the shared normaliser
    masked = sq.sequence_weights(world, world.ref_logits, 8, "dapo",
                                 mask_truncated_completions=True)
    assert np.all(masked[world.truncated] == 0) and np.all(masked[~world.truncated] != 0)


def test_kl_gradients(world):
    logits = random_logits(world, 4, 0.3)
    grads = sq.kl_gradients(world, logits)
    pi, ref = torch.softmax(logits, -1), torch.softmax(world.ref_logits, -1)
    n_h, t_h = sq._prefix_sites(world)
    lp = sq.token_logps(world, logits)
    lr = sq.token_logps(world, world.ref_logits)
    reach = (lp.cumsum(-1) - lp)[n_h, t_h].exp()[:, None]
    reach_ref = (lr.cumsum(-1) - lr)[n_h, t_h].exp()[:, None]
    assert torch.allclose(grads["k3_tokens"], reach * (pi - ref), atol=1e-12)
    assert torch.allclose(grads["reverse"], reach_ref * (pi - ref), atol=1e-12)
    for a, b in (("k3_tokens", "forward"), ("k3_tokens", "reverse")):
        assert (grads[a] - grads[b]).norm() > 0.05 * grads[b].norm(), (a, b)
    # the forward gradient against a finite difference of the exact sequence KL
    d = torch.randn(logits.shape, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    h = 1e-6
    kl = [float(sq.exact_stats(world, logits + s * h * d)["kl"]) for s in (1, -1)]
    assert abs((kl[0] - kl[1]) / (2 * h) - float((grads["forward"] * d).sum())) < 1e-6


def test_training_raises_reward_and_runs_are_independent(world):
    out = sq.train_sequences(world, [0, 1, 2, 3], max_steps=40, learning_rate=0.05,
                             loss_type="dapo")
    assert out["reward"].shape == (4, 41) and out["clip_ratio/region_mean"].shape == (4, 40)
    assert np.all(out["reward"][:, -1] > out["reward"][:, 0] + 0.2)
    one = sq.train_sequences(world, [2], max_steps=40, learning_rate=0.05, loss_type="dapo")
    assert np.allclose(one["reward"][0], out["reward"][2], atol=1e-12)


def test_training_mu_and_gspo(world):
    for level in ("token", "sequence"):
        out = sq.train_sequences(world, [0, 1], max_steps=10, num_iterations=4,
                                 learning_rate=0.1, importance_sampling_level=level, beta=0.04)
        assert np.all(out["clip_ratio/region_mean"][:, 1:].mean(1) > 0)
        assert np.all(out["kl"][:, -1] > 0)


@pytest.mark.parametrize("call,match", [
    (lambda: sq.make_sequence_world(0, 6), "n_tokens"),
    (lambda: sq.make_sequence_world(3, 0), "max_len"),
    (lambda: sq.make_sequence_world(5, 9), "too many"),
    (lambda: sq.rewards(sq.make_sequence_world(2, 3), 3), "soft_punish_cache"),
    (lambda: sq.sequence_probs(sq.make_sequence_world(2, 3), torch.zeros(7, 2)), "logits"),
    (lambda: sq.sequence_weights(sq.make_sequence_world(2, 3), torch.zeros(7, 3), 1), "G"),
    (lambda: sq.sequence_weights(sq.make_sequence_world(2, 3), torch.zeros(7, 3), 2, "ppo"),
     "loss_type"),
    (lambda: sq.sample_batch(sq.make_sequence_world(2, 3), torch.zeros(2, 7, 3), 4,
                             torch.Generator()), "generators"),
    (lambda: sq.sample_batch(sq.make_sequence_world(2, 3), torch.zeros(7, 3), 4,
                             np.random.default_rng(0)), "generators"),
    (lambda: sq.train_sequences(sq.make_sequence_world(2, 3), [0], max_steps=-1), "max_steps"),
    (lambda: sq.train_sequences(sq.make_sequence_world(2, 3), [0], kl_estimator="exact"),
     "KL in the loss"),
    (lambda: sq.train_sequences(sq.make_sequence_world(2, 3), [0], num_generations=1),
     "num_generations"),
])
def test_bad_arguments_raise_value_error(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_dr_grpo_update_is_a_constant_times_the_policy_gradient(world):
    """With binary rewards E[A | r] depends on r only, so the dr_grpo update is
    (W_correct - W_wrong) grad P(correct); "grpo" and "dapo" are not parallel to it."""
    logits = random_logits(world, 5, 0.5).requires_grad_(True)
    c = torch.from_numpy(world.correct).double()
    (grad_p,) = torch.autograd.grad(sq.sequence_probs(world, logits) @ c, logits)

    def cos(a, b):
        return float((a * b).sum() / (a.norm() * b.norm()))

    upd = {lt: sq.exact_update(world, logits, 8, lt) for lt in ("grpo", "dapo", "dr_grpo")}
    assert cos(upd["dr_grpo"], grad_p) > 1 - 1e-12
    assert cos(upd["grpo"], grad_p) < 0.99 and cos(upd["dapo"], grad_p) < 1 - 1e-6


def test_per_run_settings_equal_lone_runs(world):
    mixed = sq.train_sequences(world, [3, 3, 3], max_steps=15,
                               loss_type=["grpo", "dapo", "dapo"],
                               mask_truncated_completions=[False, True, False],
                               soft_punish_cache=[0, 0, 2], record_every=5)
    for b, kw in enumerate(({"loss_type": "grpo"},
                            {"loss_type": "dapo", "mask_truncated_completions": True},
                            {"loss_type": "dapo", "soft_punish_cache": 2})):
        lone = sq.train_sequences(world, [3], max_steps=15, record_every=5, **kw)
        assert torch.equal(mixed["logits"][b], lone["logits"][0]), kw
        assert np.array_equal(mixed["reward"][b], lone["reward"][0])
    with pytest.raises(ValueError, match="loss_type"):
        sq.train_sequences(world, [0, 1], max_steps=2, loss_type=["grpo"])


@pytest.mark.parametrize("level", ["token", "sequence"])
def test_clip_metrics_match_a_hand_written_step(world, level):
    """Step 0 of a mu = 2 run, by hand with torch's Adam: the ratio after the first step, and
    TRL's clip counts (below 1 - eps where A < 0, above 1 + eps_high where A > 0), a masked
    mean over tokens (per sequence at the sequence level). Two runs with different loss types
    go through two grpo_loss calls: each is pinned."""
    eps, eps_high, lr = 0.05, 0.1, 0.3
    out = sq.train_sequences(world, [3, 4], max_steps=1, num_iterations=2, learning_rate=lr,
                             epsilon=eps, epsilon_high=eps_high, loss_type=["dapo", "grpo"],
                             importance_sampling_level=level)
    for b, (seed, lt) in enumerate(((3, "dapo"), (4, "grpo"))):
        g = torch.Generator().manual_seed(seed)
        u = torch.rand(1, 8, world.max_len, generator=g, dtype=torch.float64)
        theta = world.ref_logits.clone().requires_grad_(True)
        idx = sq._draw(world, theta.detach()[None], [g], 8, u)[0]  # (8,)
        r = sq.rewards(world)[idx.numpy()]
        adv = torch.from_numpy(gc.trl_advantages(r, 8, "group"))
        mask = world.mask[idx]
        opt = torch.optim.Adam([theta], lr=lr)
        old = sq.token_logps(world, theta, idx).detach()
        gc.grpo_loss(sq.token_logps(world, theta, idx), old, None, adv, mask, epsilon=eps,
                     epsilon_high=eps_high, loss_type=lt,
                     importance_sampling_level=level).backward()
        opt.step()
        with torch.no_grad():
            log_ratio = sq.token_logps(world, theta, idx) - old  # (8, L)
        if level == "sequence":
            ratio = ((log_ratio * mask).sum(1) / mask.sum(1)).exp()[:, None]  # (8, 1)
            weight = torch.ones_like(ratio)  # one vote per sequence
        else:
            ratio, weight = log_ratio.exp(), mask
        A = adv[:, None]
        low, high = (ratio < 1 - eps) & (A < 0), (ratio > 1 + eps_high) & (A > 0)
        assert low.any() and high.any()
        for name, hit in (("low", low), ("high", high), ("region", low | high)):
            want = float((hit * weight).sum() / weight.sum()) / 2  # step 1's ratio is 1
            assert out[f"clip_ratio/{name}_mean"][b, 0] == pytest.approx(want, rel=1e-12)


def test_token_by_token_sampler_draws_pi(tiny):
    """Every completion's sampled frequency within 4 standard errors of pi(o)."""
    logits = random_logits(tiny, 11)
    n = 40_000
    b = sq.sample_batch(tiny, logits, n, torch.Generator().manual_seed(3))
    freq = np.bincount(b.idx.numpy(), minlength=len(tiny.length)) / n
    p = sq.sequence_probs(tiny, logits).numpy()
    assert np.all(np.abs(freq - p) < 4 * np.sqrt(p * (1 - p) / n) + 1e-12)


def test_chapter_13_checker_accepts_the_solution_and_rejects_dapo(capsys):
    def solution(per_token, mask, loss_type, max_completion_length):
        masked = per_token * mask
        if loss_type == "grpo":
            return (masked.sum(-1) / mask.sum(-1).clamp(min=1)).mean()  # all-padding rows
        return masked.sum() / (mask.shape[0] * max_completion_length)

    def token_mean(per_token, mask, loss_type, max_completion_length):
        return (per_token * mask).sum() / mask.sum()  # "dapo" for both: wrong

    assert gc.exercises.check_aggregation(solution)
    assert not gc.exercises.check_aggregation(token_mean)
    assert "differs" in capsys.readouterr().out


def test_world_size_limits_at_their_boundaries():
    assert sq.make_sequence_world(10, 1).n_tokens == 10  # ten tokens are allowed
    assert len(sq.make_sequence_world(10, 4).tokens) == 11_111  # <= 100,000 completions
    with pytest.raises(ValueError, match="too many"):
        sq.make_sequence_world(11, 1)


def test_token_logps_broadcast_leading_run_axes(world):
    g = torch.Generator().manual_seed(0)
    logits = world.ref_logits + torch.randn(2, *world.ref_logits.shape, generator=g,
                                            dtype=torch.float64)  # (2, P, V+1)
    idx = torch.randint(len(world.tokens), (2, 5), generator=g)  # (2, B)
    both = sq.token_logps(world, logits, idx)  # (2, 5, L)
    shared = sq.token_logps(world, world.ref_logits, idx)  # one policy, two index rows
    for r in range(2):
        assert torch.allclose(both[r], sq.token_logps(world, logits[r])[idx[r]], atol=1e-12)
        assert torch.allclose(shared[r], sq.token_logps(world, world.ref_logits)[idx[r]],
                              atol=1e-12)


def test_exact_stats_lengths_against_the_enumeration(world):
    logits = random_logits(world, 2, 0.7)
    stats = sq.exact_stats(world, logits)
    no_punishment = sq.exact_stats(world, logits, 0)  # the default: no overlong punishment
    assert all(np.array_equal(stats[k], no_punishment[k]) for k in stats)
    p = sq.sequence_probs(world, logits).numpy()
    c, length = world.correct.astype(float), world.length
    want_c = sum(p[n] * length[n] for n in range(len(p)) if c[n]) / p[c == 1].sum()
    want_w = sum(p[n] * length[n] for n in range(len(p)) if not c[n]) / p[c == 0].sum()
    assert float(stats["length_correct"]) == pytest.approx(want_c, rel=1e-10)
    assert float(stats["length_wrong"]) == pytest.approx(want_w, rel=1e-10)


def test_smallest_batches_and_groups_are_accepted(world):
    batch = sq.sample_batch(world, world.ref_logits, 1, torch.Generator().manual_seed(0))
    assert batch.idx.shape[-1] == 1
    out = sq.train_sequences(world, [0], max_steps=5, num_generations=2, record_every=2)
    np.testing.assert_array_equal(out["steps"], [0, 2, 4, 5])  # and always the last step


def test_train_sequences_defaults_are_the_token_worlds(world):
    """300 steps at learning rate 0.02 unless told (TRL's own defaults are for LLMs)."""
    ours = sq.train_sequences(world, [1], record_every=100)
    explicit = sq.train_sequences(world, [1], record_every=100, max_steps=300,
                                  learning_rate=0.02, num_generations=8)
    np.testing.assert_array_equal(ours["steps"], [0, 100, 200, 300])
    assert torch.equal(ours["logits"], explicit["logits"])
    other = sq.train_sequences(world, [1], record_every=100, max_steps=300, learning_rate=0.03)
    assert not torch.equal(ours["logits"], other["logits"])
