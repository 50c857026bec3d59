"""Checkers for the book's "implement it" exercises.

Each chapter's exercise asks the reader to write one function; the chapter calls the checker
below with the reader's function, and the checker compares it with the package's reference on
random inputs (seeded) and prints what differs. Usage in a chapter::

    def my_k2(logp, ref_logp):
        ...                       # the reader's code

    gc.exercises.check_k2(my_k2)  # prints "correct" or the first input where it differs

A checker returns True when every trial agrees, so a solution cell can ``assert`` it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import torch


def _as_array(x: Any) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().double().numpy()
    return np.asarray(x, dtype=np.float64)


def _describe(args: tuple, kwargs: dict) -> str:
    parts = [f"{type(a).__name__} shape {tuple(np.shape(_as_array(a)))}" if hasattr(a, "shape")
             else repr(a) for a in args]
    parts += [f"{k}={v!r}" for k, v in kwargs.items()]
    return ", ".join(parts)


def check(user_fn: Callable, reference_fn: Callable, trials: Iterable[tuple[tuple, dict]], *,
          name: str, rtol: float = 1e-6, atol: float = 1e-9, hint: str = "") -> bool:
    """Compare ``user_fn(*args, **kwargs)`` with ``reference_fn`` on every trial.

    Prints "correct" (and returns True) when all agree to ``rtol``/``atol``; otherwise prints
    the first disagreeing trial (the inputs' shapes, the expected and the returned values, where
    they differ most) and the ``hint``, and returns False. An exception in the reader's code is
    reported, not raised. Used by every chapter's exercise checkers.
    """
    for i, (args, kwargs) in enumerate(trials):
        expected = _as_array(reference_fn(*args, **kwargs))
        try:
            got = user_fn(*args, **kwargs)
        except Exception as e:  # the reader's code: report, do not crash the notebook
            print(f"{name}: your function raised {type(e).__name__}: {e}\n"
                  f"  on trial {i} with ({_describe(args, kwargs)})")
            return False
        got = _as_array(got)
        if got.shape != expected.shape:
            print(f"{name}: wrong shape on trial {i}: expected {expected.shape}, got {got.shape}"
                  f"\n  inputs: ({_describe(args, kwargs)})")
            return False
        if not np.allclose(got, expected, rtol=rtol, atol=atol, equal_nan=True):
            where = np.unravel_index(np.nanargmax(np.abs(got - expected)), got.shape) \
                if got.ndim else ()
            print(f"{name}: differs on trial {i} ({_describe(args, kwargs)})\n"
                  f"  largest difference at index {tuple(int(w) for w in where)}: expected "
                  f"{expected[where]:.6g}, got {got[where]:.6g}" + (f"\n  hint: {hint}" if hint
                                                                    else ""))
            return False
    print(f"{name}: correct")
    return True


def random_logps(rng: np.random.Generator, shape: tuple[int, ...]) -> torch.Tensor:
    """Log-probabilities in (-4, 0) of the given shape, float64: inputs for the checkers."""
    return torch.tensor(-4 * rng.random(shape))


# Chapter checkers are added below, one section per chapter, each a few lines calling `check`.


# --- chapters 1-9 ---
# Each checker draws small random worlds (seeded) and compares the reader's function with the
# package's own on every one of them.

def _worlds(n: int = 4, seed: int = 0, G: int = 5):
    """``n`` random ``(logits (P, A), rewards (P, A), samples (P, G))`` triples, P = 3, A = 6."""
    from .policy import sample_group

    rng = np.random.default_rng(seed)
    for _ in range(n):
        logits, rewards = rng.normal(0, 1, (3, 6)), 10 * rng.random((3, 6))
        yield logits, rewards, sample_group(logits, G, rng)


def check_policy_gradient(user_fn: Callable) -> bool:
    """Chapter 1: ``user_fn(logits (P, A), samples (P, G), adv (P, G)) -> (P, A)``."""
    from .policy import policy_gradient

    trials = [((lg, s, np.take_along_axis(r, s, axis=1)), {}) for lg, r, s in _worlds()]
    return check(user_fn, policy_gradient, trials, name="policy_gradient",
                 hint="(1/G) sum_i A_i (onehot(a_i) - softmax(logits)), one row per prompt")


def check_loo_advantages(user_fn: Callable) -> bool:
    """Chapter 2: ``user_fn(r (P, G)) -> (P, G)``, r_i minus the mean of the other G - 1."""
    from .baselines import loo_advantages

    rng = np.random.default_rng(1)
    trials = [((10 * rng.random((3, G)),), {}) for G in (2, 3, 8)]
    return check(user_fn, loo_advantages, trials, name="loo_advantages",
                 hint="the others' mean is (sum of the group - r_i) / (G - 1)")


def check_group_advantages(user_fn: Callable) -> bool:
    """Chapter 3: ``user_fn(r (P, G), ddof) -> (P, G)``: (r - mean) / (std + 1e-8)."""
    from .baselines import group_advantages

    rng = np.random.default_rng(2)
    trials = [((10 * rng.random((3, G)), ddof), {}) for G in (2, 4, 8) for ddof in (0, 1)]
    trials.append(((np.array([[1.0, 1.0, 1.0, 1.0], [0.0, 1.0, 0.0, 0.0]]), 1), {}))
    return check(user_fn, lambda r, ddof: group_advantages(r, ddof=ddof), trials,
                 name="group_advantages", rtol=1e-6, atol=1e-6,
                 hint="np.std(..., ddof=ddof) over the group axis, plus 1e-8; a group whose "
                      "rewards are all equal gets advantage 0")


def check_critic_advantages(user_fn: Callable) -> bool:
    """Chapter 4: ``user_fn(r (P, G), values (P,)) -> (P, G)``: each reward minus its prompt's V."""
    from .baselines import advantages

    rng = np.random.default_rng(3)
    trials = [((10 * rng.random((3, G)), 5 * rng.random(3)), {}) for G in (1, 4, 8)]
    return check(user_fn, lambda r, v: advantages(r, "critic", v), trials,
                 name="critic_advantages", hint="broadcast V over the group axis: v[:, None]")


def check_variance_none(user_fn: Callable) -> bool:
    """Chapter 5: ``user_fn(logits, rewards, G) -> float``: exact no-baseline variance at G."""
    from .exact import exact_moments

    trials = [((lg, r, G), {}) for (lg, r, _), G in zip(_worlds(3, seed=4), (2, 3, 4), strict=True)]
    return check(user_fn, lambda lg, r, G: exact_moments(lg, r, G, "none").variance, trials,
                 name="variance_none", rtol=1e-9,
                 hint="the G terms are independent: Var(G) = Var(G = 1) / G, and Var(G = 1) is "
                      "sum_a pi(a) r_a^2 |onehot(a) - pi|^2 - |E g|^2 per prompt, summed")


def check_exact_kl(user_fn: Callable) -> bool:
    """Chapter 6: ``user_fn(logits (P, A), ref_logits (P, A)) -> (P,)``: KL per prompt."""
    from .exact import exact_kl

    rng = np.random.default_rng(5)
    trials = [((rng.normal(0, s, (3, 6)), rng.normal(0, 1, (3, 6))), {}) for s in (0.1, 1, 3)]
    return check(user_fn, lambda lg, ref: exact_kl(lg, ref, per_prompt=True), trials,
                 name="exact_kl", rtol=1e-9,
                 hint="sum over answers of pi * (log pi - log pi_ref), with log-softmax")


def check_batch_advantages(user_fn: Callable) -> bool:
    """Chapter 7: ``user_fn(r (P, G)) -> (P, G)``: r minus ONE mean over the whole batch."""
    from .baselines import batch_advantages

    rng = np.random.default_rng(6)
    trials = [((10 * rng.random((P, 4)),), {}) for P in (1, 3, 6)]
    return check(user_fn, lambda r: batch_advantages(r, normalise=False), trials,
                 name="batch_advantages", hint="the mean runs over both axes, prompts and group")


def check_kl_optimal_policy(user_fn: Callable) -> bool:
    """Chapter 8: ``user_fn(rewards, ref_logits, beta) -> (P, A)`` probabilities of pi*_beta."""
    from .exact import kl_optimal_logits
    from .policy import softmax

    trials = [((r, lg, beta), {}) for (lg, r, _), beta in
              zip(_worlds(3, seed=7), (0.1, 1.0, 10.0), strict=True)]
    return check(user_fn, lambda r, lg, b: softmax(kl_optimal_logits(r, lg, b)), trials,
                 name="kl_optimal_policy", rtol=1e-9, atol=1e-12,
                 hint="pi*(a) is proportional to pi_ref(a) exp(r(a) / beta): softmax of "
                      "ref_logits + rewards / beta")


def check_k3(user_fn: Callable) -> bool:
    """Chapter 9: ``user_fn(logits, ref_logits, samples (P, G)) -> (P, G)``: k3 at each sample."""
    from .exact import k3_kl

    rng = np.random.default_rng(8)
    trials = [((lg, rng.normal(0, 1, lg.shape), s), {}) for lg, _, s in _worlds(3, seed=8)]
    return check(user_fn, k3_kl, trials, name="k3", rtol=1e-7, atol=1e-12,
                 hint="with ratio = pi_ref(a) / pi(a): ratio - log(ratio) - 1")


# --- chapter 13 ---

def check_aggregation(user_fn: Callable) -> bool:
    """Chapter 13: ``user_fn(per_token (B, T), mask (B, T), loss_type, max_completion_length)
    -> ()`` for loss_type "grpo" and "dr_grpo", as :func:`grpo_core.aggregate`."""
    from .loss import aggregate

    rng = np.random.default_rng(13)
    trials = []
    for B, T in ((4, 6), (8, 5), (3, 9)):
        lengths = rng.integers(1, T + 1, B)
        mask = torch.tensor((np.arange(T) < lengths[:, None]).astype(float))
        for loss_type in ("grpo", "dr_grpo"):
            trials.append(((random_logps(rng, (B, T)), mask, loss_type, T + 2), {}))
    return check(user_fn, aggregate, trials, name="aggregation", rtol=1e-9, atol=1e-12,
                 hint='"grpo": each row\'s masked mean over its own tokens, then the mean over '
                      'rows; "dr_grpo": the masked sum / (B * max_completion_length)')


# --- chapter 11 ---

def check_dead_group_prob(user_fn: Callable) -> bool:
    """Chapter 11: ``user_fn(p (n,), G) -> (n,)``: P(all G binary rewards equal)."""
    from .binary import dead_group_prob

    p = np.array([0.0, 0.02, 0.1, 0.3, 0.5, 0.77, 0.9, 1.0])
    trials = [((p, G), {}) for G in (1, 2, 8, 16)]
    return check(user_fn, dead_group_prob, trials, name="dead_group_prob", rtol=1e-9,
                 hint="a group is dead when all G answers are right or all are wrong; the "
                      "answers are independent")


def check_grpo_factor(user_fn: Callable) -> bool:
    """Chapter 11: ``user_fn(p (n,), G) -> (n,)``: E[population std] / (p (1 - p))."""
    from .binary import update_factor

    p = np.array([0.02, 0.1, 0.3, 0.5, 0.7, 0.95])
    trials = [((p, G), {}) for G in (2, 3, 8, 16)]
    return check(user_fn, lambda q, G: update_factor(q, G, "grpo"), trials, name="grpo_factor",
                 rtol=1e-6, hint="sum over k = 0..G of comb(G, k) p^k (1-p)^(G-k) "
                                 "sqrt(k/G (1 - k/G)), then divide by p (1 - p)")


# --- chapter 12 ---

def check_k2(user_fn: Callable) -> bool:
    """Chapter 12: ``user_fn(logp (B, T), ref_logp (B, T)) -> (B, T)``: k2 per token, as
    :func:`grpo_core.kl_estimate` with ``"k2"``; torch tensors in and out (it must backprop)."""
    from .loss import kl_estimate

    rng = np.random.default_rng(12)
    trials = [((random_logps(rng, shape), random_logps(rng, shape)), {})
              for shape in ((4, 6), (2, 3, 5), (1, 1))]
    return check(user_fn, lambda lp, ref: kl_estimate(lp, ref, "k2"), trials, name="k2",
                 rtol=1e-9, atol=1e-12,
                 hint="with log_r = ref_logp - logp: k2 = log_r ** 2 / 2 (the same for -log_r)")


# --- chapter 14 ---

def check_pass_at_k(user_fn: Callable) -> bool:
    """Chapter 14: ``user_fn(p (n,), k) -> (n,)``: P(at least one of k answers is correct)."""
    from .shared import pass_at_k

    p = np.array([0.0, 0.02, 0.25, 0.5, 0.9, 1.0])
    trials = [((p, k), {}) for k in (1, 2, 8, 64)]
    return check(user_fn, pass_at_k, trials, name="pass_at_k", rtol=1e-9, atol=1e-12,
                 hint="the k answers are independent: all k are wrong with probability (1 - p)^k")


# --- chapter 10 ---

def check_clipped_term(user_fn: Callable) -> bool:
    """Chapter 10: ``user_fn(ratio (B, T), adv (B, 1), epsilon, epsilon_high) -> (B, T)``, the
    clipped surrogate per token, ``-min(ratio A, clip(ratio, 1 - eps, 1 + eps_high) A)``;
    compared with :func:`grpo_core.grpo_loss` applied token by token."""
    from .loss import grpo_loss

    def reference(ratio, adv, epsilon, epsilon_high):
        logp = torch.log(ratio)[..., None, None]  # (B, T, 1, 1): each token a lone sequence
        A = adv.expand(ratio.shape)[..., None]  # (B, T, 1)
        return grpo_loss(logp, torch.zeros_like(logp), None, A, torch.ones_like(logp),
                         epsilon=epsilon, epsilon_high=epsilon_high)

    rng = np.random.default_rng(10)
    trials = [((torch.tensor(np.exp(rng.normal(0, 0.4, (B, T)))),
                torch.tensor(rng.normal(0, 1, (B, 1))), 0.2, eps_high), {})
              for B, T, eps_high in ((4, 5, 0.2), (6, 3, 0.28), (1, 8, 0.28))]
    return check(user_fn, reference, trials, name="clipped_term", rtol=1e-9, atol=1e-12,
                 hint="torch.clamp(ratio, 1 - epsilon, 1 + epsilon_high), then the minimum of "
                      "the two products with A, negated (the loss is minimised)")


# --- chapter 15 ---

def check_completion_mask(user_fn: Callable) -> bool:
    """Chapter 15: ``user_fn(tokens (B, T) long, eos: int) -> (B, T)``, TRL's completion mask:
    1 up to and including the first ``eos``, 0 after it, all ones where no ``eos`` came;
    compared with :func:`grpo_core.tiny_lm.completion_mask` on random token batches."""
    from .tiny_lm import completion_mask

    g = torch.Generator().manual_seed(15)
    trials = [((torch.randint(0, vocab, (B, T), generator=g), eos), {})
              for B, T, vocab, eos in ((6, 5, 12, 11), (20, 8, 4, 3), (3, 1, 2, 0))]
    return check(user_fn, completion_mask, trials, name="completion_mask", rtol=0, atol=0,
                 hint="a position is kept when no EOS came strictly before it: a cumulative "
                      "count of EOS tokens, shifted by one")


# --- chapter 17 (TRL's other loss types) ---

def check_sapo_surrogate(user_fn: Callable) -> bool:
    """Chapter 17: ``user_fn(ratio (B, T), adv (B, 1), tau_pos, tau_neg) -> (B, T)``, SAPO's
    per-token loss ``-4 / tau * sigmoid(tau * (ratio - 1)) * A`` with tau = tau_pos where
    A > 0, else tau_neg; compared with :func:`grpo_core.loss.sapo_surrogate` (TRL 1.16
    ``grpo_trainer.py`` lines 3121-3124), in float64 to 1e-6: TRL's ``torch.where`` of two
    Python floats gives float32 temperatures, and either is accepted."""
    from .loss import sapo_surrogate

    def reference(ratio, adv, tau_pos, tau_neg):
        tau = torch.where(adv > 0, torch.tensor(tau_pos, dtype=torch.float64),
                          torch.tensor(tau_neg, dtype=torch.float64))  # float64 temperatures
        return sapo_surrogate(ratio, adv, None, sapo_temperature_pos=tau, sapo_temperature_neg=tau)

    rng = np.random.default_rng(17)
    trials = [((torch.tensor(np.exp(rng.normal(0, 0.5, (B, T)))),
                torch.tensor(rng.normal(0, 1, (B, 1))), tp, tn), {})
              for B, T, tp, tn in ((4, 5, 1.0, 1.05), (6, 3, 0.5, 2.0), (1, 8, 3.0, 0.7))]
    return check(user_fn, reference, trials, name="sapo_surrogate", rtol=1e-6, atol=1e-9,
                 hint="the temperature per sequence is torch.where(A > 0, tau_pos, tau_neg); "
                      "the gate 4 / tau * sigmoid(tau * (ratio - 1)) has slope 1 at ratio 1")


# --- chapter 16 (TRL) ---

def _trl_reward_trials(n: int = 6, seed: int = 16):
    """Batches as TRL hands them to a reward function, for the sort task: prompt texts, decoded
    completions (``<eos>`` dropped, as TRL's skip_special_tokens does) and completion ids up to
    and including the first ``<eos>``: right answers, wrong orders, truncated ones."""
    from . import tiny_lm as T
    from . import trl_bridge

    rng = np.random.default_rng(seed)
    for _ in range(n):
        prompts = torch.as_tensor(rng.integers(0, 10, (8, 3)))
        prompts = torch.cat([prompts, torch.full((8, 1), T.SEP)], 1)
        right = T.answers(prompts).tolist()
        ids = []
        for p, a in zip(prompts.tolist(), right, strict=True):
            kind = rng.integers(4)
            if kind == 0:
                ids.append(a)  # right
            elif kind == 1:
                ids.append(p[:3] + [T.EOS])  # copied unsorted (right if already sorted)
            elif kind == 2:
                ids.append(a[:3] + [int(rng.integers(10)), int(rng.integers(10))])  # no <eos>
            else:
                ids.append(list(rng.permutation(a[:3])) + [T.EOS])
        ids = [[int(t) for t in row] for row in ids]
        texts = [" ".join(trl_bridge.TEXT[t] for t in row if t != T.EOS) for row in ids]
        yield (), {"prompts": trl_bridge.prompt_text(prompts), "completions": texts,
                   "completion_ids": ids, "trainer_state": None}


def check_trl_reward(user_fn: Callable) -> bool:
    """Chapter 16: a reward function with TRL's signature, ``(prompts, completions,
    completion_ids, **kwargs) -> list[float]``, for a dataset with only a ``"prompt"`` column: 1.0
    where the completion's ids are the prompt's digits sorted, then ``<eos>`` (11)."""
    from . import tiny_lm as T
    from . import trl_bridge

    def reference(prompts, completions, completion_ids, **kwargs):
        digits = torch.tensor([[int(d) for d in p.split()[:3]] for p in prompts])
        answer = T.answers(torch.cat([digits, torch.full_like(digits[:, :1], T.SEP)], 1))
        return trl_bridge.sort_reward(prompts, completions, completion_ids, answer.tolist())

    return check(user_fn, reference, _trl_reward_trials(), name="trl reward",
                 hint="compare completion_ids[:4] with the prompt's digits sorted, then 11: "
                      "the decoded text has no <eos>, so a text check also passes '1 2 3 4 5'")
