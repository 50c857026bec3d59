"""Properties of the advantages: zero-sum groups, invariances, LOO, all-equal groups."""

import loop_reference as ref_impl
import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import grpo_core as gc

rewards_pg = arrays(np.float64, st.tuples(st.integers(1, 6), st.integers(2, 16)),
                    elements=st.floats(-100, 100, allow_nan=False))


@given(rewards_pg, st.booleans())
def test_group_advantages_sum_to_zero(r, normalise):
    adv = gc.group_advantages(r, normalise)
    np.testing.assert_allclose(adv.sum(axis=-1), 0.0, atol=1e-9 * (1 + np.abs(r).max()))


@given(rewards_pg, st.floats(-50, 50), st.floats(0.1, 10))
def test_normalised_advantages_are_shift_and_scale_invariant(r, shift, scale):
    std = r.std(axis=1)
    assume(np.all(std > 1e-3))
    adv = gc.group_advantages(r)
    # exact but for the +1e-8 beside the std: a relative error of about 1e-8 / std
    tol = 2e-8 / (std.min() * min(scale, 1.0)) * (1 + np.abs(adv).max()) + 1e-9
    np.testing.assert_allclose(gc.group_advantages(r * scale + shift), adv, atol=tol)


@given(rewards_pg)
def test_unnormalised_advantages_are_shift_invariant(r):
    np.testing.assert_allclose(gc.group_advantages(r + 7.0, normalise=False),
                               gc.group_advantages(r, normalise=False), atol=1e-9)


@given(rewards_pg)
def test_leave_one_out_is_g_over_g_minus_1_times_group_mean(r):
    G = r.shape[1]
    np.testing.assert_allclose(gc.loo_advantages(r),
                               G / (G - 1) * gc.group_advantages(r, normalise=False),
                               atol=1e-9 * (1 + np.abs(r).max()))


def test_matches_the_loop_and_the_seed_example():
    r = np.array([[6.67, 2.645, 2.645, 6.67, 4.185, 2.11, 6.67, 6.67]])
    np.testing.assert_allclose(gc.group_advantages(r), ref_impl.group_advantages(r), atol=1e-12)
    np.testing.assert_allclose(gc.group_advantages(r)[0, :2], [0.9603, -1.0881], atol=1e-4)


@pytest.mark.parametrize("value", [0.1, 3.0, 1e6])
@pytest.mark.parametrize("G", [1, 3, 8])
def test_all_equal_group_gets_exactly_zero(value, G):
    r = np.full((2, G), value)
    for normalise in (True, False):
        assert np.all(gc.group_advantages(r, normalise) == 0.0)
    assert np.all(gc.group_advantages(r, ddof=1) == 0.0)
    if G >= 2:
        assert np.all(gc.loo_advantages(r) == 0.0)


def test_bessel_std_same_signs_smaller_scale():
    r = np.array([[1.0, 0.0]])
    np.testing.assert_allclose(gc.group_advantages(r), [[1, -1]], atol=1e-7)
    np.testing.assert_allclose(gc.group_advantages(r, ddof=1), [[2**-0.5, -(2**-0.5)]], atol=1e-7)


def test_batch_baseline_ignores_prompts():
    r = np.array([[9.0, 8.0], [1.0, 2.0]])
    adv = gc.batch_advantages(r, normalise=False)
    np.testing.assert_allclose(adv, r - 5.0)
    assert np.all(adv[1] < 0)  # the hard prompt: every answer negative, the good one included


def test_dispatcher_covers_every_kind():
    r = np.random.default_rng(0).uniform(0, 10, (6, 8))
    v = np.arange(6.0)
    expected = {
        "none": r, "group": gc.group_advantages(r, False), "group_norm": gc.group_advantages(r),
        "loo": gc.loo_advantages(r), "batch": gc.batch_advantages(r, False),
        "batch_norm": gc.batch_advantages(r), "critic": r - v[:, None],
    }
    assert set(expected) == set(gc.KINDS)
    for kind, want in expected.items():
        np.testing.assert_array_equal(gc.advantages(r, kind, critic_value=v), want)
