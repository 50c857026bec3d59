"""The chapters 1-9 exercise checkers accept a correct solution and reject a wrong one."""

import numpy as np

import grpo_core as gc
from grpo_core import exercises as ex

sm = gc.softmax


def _pg(logits, samples, adv):
    onehot = np.eye(logits.shape[-1])[samples]  # (P, G, A)
    return (adv[..., None] * (onehot - sm(logits)[:, None, :])).mean(axis=1)


def _group(r, ddof):
    adv = (r - r.mean(-1, keepdims=True)) / (r.std(-1, ddof=ddof, keepdims=True) + 1e-8)
    return np.where(r.std(-1, keepdims=True) == 0, 0.0, adv)


def _k3(logits, ref_logits, samples):
    log_ratio = np.take_along_axis(gc.log_softmax(ref_logits) - gc.log_softmax(logits), samples, -1)
    return np.exp(log_ratio) - log_ratio - 1


def test_checkers_accept_correct_solutions(capsys):
    assert ex.check_policy_gradient(_pg)
    assert ex.check_loo_advantages(lambda r: r - (r.sum(-1, keepdims=True) - r) / (r.shape[-1] - 1))
    assert ex.check_group_advantages(_group)
    assert ex.check_critic_advantages(lambda r, v: r - v[:, None])
    assert ex.check_variance_none(lambda lg, r, G: gc.exact_moments(lg, r, 1, "none").variance / G)
    assert ex.check_exact_kl(
        lambda lg, ref: (sm(lg) * (gc.log_softmax(lg) - gc.log_softmax(ref))).sum(-1))
    assert ex.check_batch_advantages(lambda r: r - r.mean())
    assert ex.check_kl_optimal_policy(lambda r, lg, b: sm(lg + r / b))
    assert ex.check_k3(_k3)
    assert capsys.readouterr().out.count(": correct") == 9


def test_checkers_reject_wrong_solutions(capsys):
    assert not ex.check_batch_advantages(lambda r: r - r.mean(-1, keepdims=True))
    assert not ex.check_group_advantages(lambda r, ddof: _group(r, 0))  # ignores Bessel
    assert not ex.check_policy_gradient(lambda lg, s, a: 2 * _pg(lg, s, a))
    assert not ex.check_k3(lambda lg, ref, s: -_k3(lg, ref, s))
    assert not ex.check_variance_none(lambda lg, r, G: 1 / 0)  # an error is reported
    out = capsys.readouterr().out
    assert "differs on trial" in out and "raised ZeroDivisionError" in out
