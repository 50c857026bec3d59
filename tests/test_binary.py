"""The binary-reward world (grpo_core.binary): the world's construction, the binomial and dead-group
probabilities, the exact update factors against multiset enumeration and Monte Carlo (through the
package's own advantage functions), the factor identities, entropies, errors."""

import math

import numpy as np
import pytest

import grpo_core as gc
from grpo_core import binary as bn


@pytest.fixture(scope="module")
def world():
    return bn.binary_world(0)


def trained_logits(world, seed=1, scale=1.0):
    """A policy away from the reference (so the checks do not only hold at pi_ref)."""
    return world.ref_logits + scale * np.random.default_rng(seed).normal(size=world.rewards.shape)


def test_world_is_binary_with_the_asked_pass_rates(world):
    assert set(np.unique(world.rewards)) == {0.0, 1.0}
    assert world.rewards.shape == world.ref_logits.shape == (6, gc.N_ANSWERS)
    assert world.emb.shape == (6, gc.D_EMB)
    assert np.array_equal(world.rewards.sum(1), bn.N_CORRECT)
    np.testing.assert_allclose(bn.pass_rate(world.ref_logits, world.rewards), bn.PASS_RATES,
                               rtol=1e-12)
    again, other = bn.binary_world(0), bn.binary_world(1)
    assert np.array_equal(again.ref_logits, world.ref_logits)
    assert not np.array_equal(other.rewards, world.rewards)
    three = bn.binary_world(3, n_correct=3, pass_rates=(0.05, 0.5))
    assert np.array_equal(three.rewards.sum(1), [3, 3])
    np.testing.assert_allclose(bn.pass_rate(three.ref_logits, three.rewards), [0.05, 0.5])


@pytest.mark.parametrize("G", [1, 2, 5, 8, 16, 300])
def test_binomial_sums_to_one_and_dead_groups_are_its_ends(G):
    p = np.array([0.0, 0.02, 0.3, 0.5, 0.9, 1.0])
    pmf = bn.correct_count_pmf(p, G)
    assert pmf.shape == (6, G + 1) and np.all(pmf >= 0)
    np.testing.assert_allclose(pmf.sum(-1), 1.0, rtol=1e-12)
    np.testing.assert_allclose(pmf @ np.arange(G + 1), G * p, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(bn.dead_group_prob(p, G), pmf[:, 0] + pmf[:, -1], rtol=1e-10)
    if G <= 16:
        exact = [math.comb(G, k) * 0.3**k * 0.7 ** (G - k) for k in range(G + 1)]
        np.testing.assert_allclose(pmf[2], exact, rtol=1e-12)


def test_review_numbers():
    np.testing.assert_allclose([bn.dead_group_prob(0.1, 8), bn.dead_group_prob(0.1, 16)],
                               [0.430, 0.185], atol=5e-4)
    np.testing.assert_allclose([bn.update_factor(p, 8) for p in (0.5, 0.1, 0.9)],
                               [1.86, 2.33, 2.33], atol=5e-3)


@pytest.mark.parametrize("G", [2, 3, 4])
@pytest.mark.parametrize("kind,exact_kind", [("grpo", "group_norm"), ("dr_grpo", "group"),
                                             ("rloo", "loo")])
def test_expected_update_equals_multiset_enumeration(world, G, kind, exact_kind):
    logits = trained_logits(world)
    want = gc.exact_moments(logits, world.rewards, G, exact_kind).mean
    got = bn.expected_binary_update(logits, world.rewards, G, kind)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-12)  # population std has +1e-8


def _advantages(r, kind):
    """The package's own advantage code, per kind: ``r (n, P, G)``."""
    G = r.shape[-1]
    if kind == "grpo":
        return gc.group_advantages(r, ddof=0)
    if kind == "rloo":
        return gc.loo_advantages(r)
    scale = {"trl": "group", "dr_grpo": "none"}[kind]
    return gc.trl_advantages(r.reshape(*r.shape[:-2], -1), G, scale).reshape(r.shape)


@pytest.mark.parametrize("kind", bn.FACTOR_KINDS)
@pytest.mark.parametrize("dynamic", [False, True])
def test_monte_carlo_mean_update_within_4_standard_errors(world, kind, dynamic):
    G, n = 8, 20000
    logits = trained_logits(world, seed=2, scale=0.5)
    samples = gc.sample_group(logits, G, np.random.default_rng(5), repeats=n)  # (n, P, G)
    r = world.rewards[np.arange(6)[:, None], samples]
    g = gc.policy_gradient(logits, samples, _advantages(r, kind))  # (n, P, A)
    if dynamic:  # DAPO: only live groups count; each prompt's mean over its live groups
        live = r.std(-1) > 0  # (n, P)
        count = live.sum(0)[:, None]
        mean = (g * live[..., None]).sum(0) / count
        sq = (g**2 * live[..., None]).sum(0) / count
        se = np.sqrt((sq - mean**2) / (count - 1))
    else:
        mean, se = g.mean(0), g.std(0, ddof=1) / np.sqrt(n)
    want = bn.expected_binary_update(logits, world.rewards, G, kind, dynamic_sampling=dynamic)
    assert np.all(np.abs(mean - want) <= 4 * se + 1e-12)


def test_monte_carlo_dead_fraction_within_4_standard_errors(world):
    G, n = 4, 40000
    samples = gc.sample_group(world.ref_logits, G, np.random.default_rng(7), repeats=n)
    r = world.rewards[np.arange(6)[:, None], samples]
    dead = (r.std(-1) == 0).astype(float)  # (n, P)
    want = bn.dead_group_prob(bn.PASS_RATES, G)
    se = np.sqrt(want * (1 - want) / n)
    assert np.all(np.abs(dead.mean(0) - want) <= 4 * se)
    # TRL's logged metric on one batch, (P * G,) completions in prompt order
    m = gc.reward_metrics(r[0].ravel(), G)
    assert m["frac_reward_zero_std"] == dead[0].mean()


def test_factor_identities():
    p = np.linspace(0.01, 0.99, 99)
    np.testing.assert_allclose(bn.update_factor(p, 2, "grpo"), 1.0, rtol=1e-12)
    for G in (2, 3, 8, 16, 64):
        np.testing.assert_allclose(bn.update_factor(p, G, "dr_grpo"), (G - 1) / G, rtol=1e-10)
        np.testing.assert_allclose(bn.update_factor(p, G, "rloo"), 1.0, rtol=1e-10)
        for kind in ("grpo", "trl"):  # symmetric in p <-> 1 - p
            np.testing.assert_allclose(bn.update_factor(p, G, kind),
                                       bn.update_factor(1 - p, G, kind), rtol=1e-9)
        # Bessel's std is sqrt(G/(G-1)) times the population std; TRL's 1e-4 is a small extra
        np.testing.assert_allclose(bn.update_factor(p, G, "trl"),
                                   bn.update_factor(p, G, "grpo") * math.sqrt((G - 1) / G),
                                   rtol=2e-3)
    # large G: E[s] -> sqrt(p (1 - p)), so the factor -> 1 / sqrt(p (1 - p))
    q = np.array([0.1, 0.3, 0.5])
    np.testing.assert_allclose(bn.update_factor(q, 20000), 1 / np.sqrt(q * (1 - q)), rtol=1e-3)
    # GRPO's weight rises towards both ends (easy and hard), lowest at p = 1/2
    f = bn.update_factor(p, 8)
    assert np.argmin(f) == 49 and f[0] > f[49] and f[-1] > f[49]
    # dynamic sampling: the live-group factor is the plain one over P(live)
    np.testing.assert_allclose(bn.update_factor(p, 8, dynamic_sampling=True),
                               f / (1 - bn.dead_group_prob(p, 8)), rtol=1e-12)


def test_entropies(world):
    rewards = world.rewards
    flat = np.zeros_like(rewards)
    np.testing.assert_allclose(bn.correct_entropy(flat, rewards), np.log(rewards.sum(1)))
    np.testing.assert_allclose(bn.policy_entropy(flat), np.log(gc.N_ANSWERS))
    peaked = np.where(rewards * (np.cumsum(rewards, 1) == 1), 40.0, 0.0)  # on one correct answer
    np.testing.assert_allclose(bn.correct_entropy(peaked, rewards), 0.0, atol=1e-12)
    h = bn.correct_entropy(trained_logits(world), rewards)
    assert np.all(h >= 0) and np.all(h <= np.log(rewards.sum(1)) + 1e-12)
    assert bn.correct_entropy(np.stack([flat, peaked]), rewards).shape == (2, 6)


def test_errors(world):
    with pytest.raises(ValueError, match="pass_rates"):
        bn.binary_world(0, pass_rates=(0.0, 0.5))
    with pytest.raises(ValueError, match="pass_rates"):
        bn.binary_world(0, pass_rates=(0.5, 1.2))
    with pytest.raises(ValueError, match="n_correct"):
        bn.binary_world(0, n_correct=0)
    with pytest.raises(ValueError, match="n_correct"):
        bn.binary_world(0, n_correct=(1, 2))
    with pytest.raises(ValueError, match="n_correct"):
        bn.binary_world(0, n_correct=12)
    with pytest.raises(ValueError, match="seed"):
        bn.binary_world(-1)
    with pytest.raises(ValueError, match="kind"):
        bn.update_factor(0.5, 8, "ppo")
    with pytest.raises(ValueError, match="G"):
        bn.update_factor(0.5, 1)
    with pytest.raises(ValueError, match="G"):
        bn.dead_group_prob(0.5, 0)
    with pytest.raises(TypeError, match="G"):
        bn.dead_group_prob(0.5, 2.5)
    with pytest.raises(ValueError, match="p must"):
        bn.update_factor(1.0, 8)
    with pytest.raises(ValueError, match="p must"):
        bn.dead_group_prob(-0.1, 8)
    with pytest.raises(ValueError, match="rewards"):
        bn.pass_rate(world.ref_logits, world.rewards * 2)
    with pytest.raises(ValueError, match="rewards"):
        bn.correct_entropy(world.ref_logits, np.zeros_like(world.rewards))


def test_exercise_checkers(capsys):
    assert gc.exercises.check_dead_group_prob(bn.dead_group_prob)
    assert not gc.exercises.check_dead_group_prob(lambda p, G: p**G)
    assert gc.exercises.check_grpo_factor(lambda p, G: bn.update_factor(p, G, "grpo"))
    assert not gc.exercises.check_grpo_factor(lambda p, G: bn.update_factor(p, G, "trl"))
    out = capsys.readouterr().out
    assert "dead_group_prob: correct" in out and "grpo_factor: differs" in out
