"""Every public function refuses bad input with a message naming the argument and the range."""

import numpy as np
import pytest

import grpo_core as gc

W = gc.toy_world(0)
REW, EMB, REF = W.rewards, W.emb, W.ref_logits


def rng():
    return np.random.default_rng(0)


def nan_at(x):
    y = x.copy()
    y[1, 2] = np.nan
    return y


def inf_at(x):
    y = x.copy()
    y[0, 0] = np.inf
    return y


S = gc.sample_group(REF, 8, rng())
A = np.ones((6, 8))

CASES = [
    # (call, exception, words the message must contain)
    (lambda: gc.sample_group(REF, 0, rng()), ValueError, ["G", ">= 1"]),
    (lambda: gc.sample_group(REF, -3, rng()), ValueError, ["G", ">= 1"]),
    (lambda: gc.sample_group(REF, 2.5, rng()), TypeError, ["G", "integer"]),
    (lambda: gc.sample_group(REF, True, rng()), TypeError, ["G", "integer"]),
    (lambda: gc.sample_group(REF, 8, 0), TypeError, ["rng", "Generator"]),
    (lambda: gc.sample_group(nan_at(REF), 8, rng()), ValueError, ["logits", "finite"]),
    (lambda: gc.sample_group(inf_at(REF), 8, rng()), ValueError, ["logits", "finite"]),
    (lambda: gc.grad_variance(REF, REW, rng(), G=0), ValueError, ["G", ">= 1"]),
    (lambda: gc.grad_variance(REF, REW, rng(), repeats=1), ValueError, ["repeats", ">= 2"]),
    (lambda: gc.grad_variance(REF, REW, rng(), kind="mean"), ValueError,
     ["kind", "'group'", "'group_norm'", "'critic'"]),
    (lambda: gc.grad_variance(REF, REW, rng(), kind="critic"), ValueError, ["critic_value"]),
    (lambda: gc.grad_variance(REF, REW, rng(), kind="critic", critic_value=np.zeros(5)),
     ValueError, ["critic_value", "(6,)"]),
    (lambda: gc.grad_variance(REF, REW[:, :10], rng()), ValueError, ["rewards", "same shape"]),
    (lambda: gc.grad_variance(REF, nan_at(REW), rng()), ValueError, ["rewards", "finite"]),
    (lambda: gc.grad_variance(REF, inf_at(REW), rng()), ValueError, ["rewards", "finite"]),
    (lambda: gc.policy_gradient(REF, S[:5], A[:5]), ValueError, ["prompts"]),
    (lambda: gc.policy_gradient(REF, S, A[:, :4]), ValueError, ["samples", "advantages"]),
    (lambda: gc.policy_gradient(REF, S + 12, A), ValueError, ["samples", "[0, 11]"]),
    (lambda: gc.policy_gradient(REF, S - 20, A), ValueError, ["samples", "[0, 11]"]),
    (lambda: gc.policy_gradient(REF, S.astype(float), A), TypeError, ["samples", "integer"]),
    (lambda: gc.policy_gradient(inf_at(REF), S, A), ValueError, ["logits", "finite"]),
    (lambda: gc.policy_gradient(REF, S, nan_at(A)), ValueError, ["advantages", "finite"]),
    (lambda: gc.group_advantages(nan_at(A)), ValueError, ["r", "finite"]),
    (lambda: gc.group_advantages(A, ddof=2), ValueError, ["ddof"]),
    (lambda: gc.loo_advantages(np.ones((6, 1))), ValueError, ["G >= 2"]),
    (lambda: gc.advantages(A, "critic"), ValueError, ["critic_value"]),
    (lambda: gc.advantages(A, "critic", critic_value=np.ones(3)), ValueError, ["critic_value"]),
    (lambda: gc.advantages(A, "grp"), ValueError, ["kind", "'none'", "'loo'"]),
    (lambda: gc.softmax(np.array([[1.0, np.nan]])), ValueError, ["finite"]),
    (lambda: gc.softmax(np.array(["a"])), TypeError, ["numeric"]),
    (lambda: gc.train_batch(REW, EMB, REF, [rng()], num_generations=0), ValueError,
     ["num_generations", ">= 1"]),
    (lambda: gc.train_batch(REW, EMB, REF, [rng()], num_generations=1.5), TypeError,
     ["num_generations", "integer"]),
    (lambda: gc.train_batch(REW, EMB, REF, [rng()], beta=-0.1), ValueError, ["beta", ">= 0"]),
    (lambda: gc.train_batch(REW, EMB, REF, [rng()], beta=float("nan")), ValueError,
     ["beta", "finite"]),
    (lambda: gc.train_batch(REW, EMB, REF, [rng()], beta=float("inf")), ValueError,
     ["beta", "finite"]),
    (lambda: gc.train_batch(REW, EMB, REF, [rng()], learning_rate=0.0), ValueError,
     ["learning_rate", "> 0"]),
    (lambda: gc.train_batch(REW, EMB, REF, [rng()], learning_rate=-1.0), ValueError,
     ["learning_rate", "> 0"]),
    (lambda: gc.train_batch(REW, EMB, REF, [rng()], max_steps=-1), ValueError,
     ["max_steps", ">= 0"]),
    (lambda: gc.train_batch(REW, EMB, REF, [rng()], kind="critic"), ValueError,
     ["kind", "'group'", "'batch'", "'none'"]),
    (lambda: gc.train_batch(nan_at(REW), EMB, REF, [rng()]), ValueError, ["rewards", "finite"]),
    (lambda: gc.train_batch(REW, EMB, inf_at(REF), [rng()]), ValueError,
     ["ref_logits", "finite"]),
    (lambda: gc.train_batch(REW[:, :5], EMB, REF, [rng()]), ValueError, ["rewards", "(P, A)"]),
    (lambda: gc.train_batch(REW, EMB[:, :3], REF, [rng()], use_critic=True), ValueError,
     ["emb"]),
    (lambda: gc.train_batch(REW, EMB, REF, "11"), TypeError, ["seeds", "integer"]),
    (lambda: gc.train_batch(REW, EMB, REF, [0, 1], num_generations=[2, 4, 8]), ValueError,
     ["equal lengths"]),
    (lambda: gc.train_batch(REW, EMB, REF, 0, kl_in="advantage"), ValueError,
     ["kl_in", "'loss'", "'reward'"]),
    (lambda: gc.train_batch(REW, EMB, REF, -1), ValueError, ["seeds", ">= 0"]),
    (lambda: gc.train_batch(REW, EMB, REF, 0, kl_in="reward", beta=-1.0), ValueError,
     ["beta"]),
    (lambda: gc.exact_moments(REF, REW, 11), ValueError, ["G <= 10"]),
    (lambda: gc.exact_moments(REF, REW, 8, "batch"), ValueError, ["kind"]),
    (lambda: gc.expected_scale("loo", 1), ValueError, ["G >= 2"]),
    (lambda: gc.Critic(seed=-1), ValueError, ["seed"]),
    (lambda: gc.n_params("critic"), TypeError, ["module"]),
    (lambda: gc.make_world(0), TypeError, ["rng", "Generator"]),
]


@pytest.mark.parametrize("call, exc, words", CASES, ids=[str(i) for i in range(len(CASES))])
def test_bad_input_is_refused_with_a_clear_message(call, exc, words):
    with pytest.raises(exc) as info:
        call()
    for word in words:
        assert word in str(info.value), (word, str(info.value))
