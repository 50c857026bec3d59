"""Binary (verifiable) rewards on the tabular toy: pass rates, dead groups, GRPO's weight.

DeepSeekMath (arXiv 2402.03300, section 4) scored answers with a learned reward model; DeepSeek-R1
graded them with rule-based verifiers: reward 1 if correct, else 0. Then a prompt's difficulty is
its pass rate ``p = sum_{a correct} pi(a)``, and a group of G answers with k correct has
``mean = k/G`` and population std ``s = sqrt(k/G (1 - k/G))``. A group that is all right or all
wrong (k = 0 or G) has std 0: every advantage is 0 and it teaches nothing (TRL logs the
fraction of such completions as ``frac_reward_zero_std``; DAPO's dynamic sampling redraws them).

For one-token answers every advantage kind gives an expected update ``c(p, G) * grad p``:
given r_i, ``E[grad log pi(a_i)] = grad p / p`` (r_i = 1) or ``-grad p / (1 - p)`` (r_i = 0),
so ``c = E[(1/G) sum_i A_i (r_i - p)] / (p (1 - p))``, a sum over the binomial number of
correct answers k. GRPO's ``c = E[s] / (p (1 - p))`` is symmetric in p <-> 1 - p: too-easy and
too-hard prompts are both up-weighted (Dr. GRPO, arXiv 2503.20783).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ._validate import check_array, check_choice, check_int
from .loss import STD_EPS
from .policy import softmax
from .world import D_EMB, N_ANSWERS, World

#: Advantage kinds of :func:`update_factor`, each with its std convention:
#: "grpo" (r - mean) / population std (DeepSeekMath, chapters 1-9); "trl" (r - mean) /
#: (Bessel std + 1e-4), TRL 1.16 ``scale_rewards="group"``; "dr_grpo" r - mean,
#: ``scale_rewards="none"``; "rloo" r - (mean of the other G - 1) = G/(G-1) (r - mean).
FACTOR_KINDS = ("grpo", "trl", "dr_grpo", "rloo")
PASS_RATES = (0.02, 0.1, 0.3, 0.5, 0.7, 0.9)  # pass rate of each prompt under pi_ref
N_CORRECT = (1, 3, 1, 2, 3, 4)  # correct answers per prompt (of 12)


def binary_world(seed: int = 0, *, pass_rates: Sequence[float] = PASS_RATES,
                 n_correct: int | Sequence[int] = N_CORRECT) -> World:
    """A binary-reward toy world: 0/1 ``rewards (P, A)``, ``emb (P, 8)``, ``ref_logits (P, A)``.

    From ``np.random.default_rng(seed)``: the reference logits ~ N(0, 0.5), the correct answers
    (``n_correct[p]`` of the 12, an int for all prompts alike), the prompt embeddings. The correct
    answers' reference logits are then shifted by one constant per prompt so that the reference
    pass rate is exactly ``pass_rates[p]`` (in (0, 1)). Taught in chapter 11.
    """
    seed = check_int(seed, "seed", 0)
    rates = check_array(pass_rates, "pass_rates")
    if rates.ndim != 1 or np.any((rates <= 0) | (rates >= 1)):
        raise ValueError(f"pass_rates must be a 1-D sequence of values in (0, 1), got {rates}")
    P = len(rates)
    counts = np.asarray(n_correct)
    counts = np.broadcast_to(counts, (P,)) if counts.ndim == 0 else counts
    if (counts.shape != (P,) or not np.issubdtype(counts.dtype, np.integer)
            or np.any((counts < 1) | (counts >= N_ANSWERS))):
        raise ValueError(f"n_correct must be integers in [1, {N_ANSWERS - 1}] (one per prompt "
                         f"or one for all), got {n_correct!r}")
    rng = np.random.default_rng(seed)
    ref_logits = rng.normal(0, 0.5, (P, N_ANSWERS))
    rewards = np.zeros((P, N_ANSWERS))
    for p in range(P):
        rewards[p, rng.permutation(N_ANSWERS)[: counts[p]]] = 1.0
    emb = rng.normal(0, 1, (P, D_EMB))
    e = np.exp(ref_logits)
    right, wrong = (e * rewards).sum(-1), (e * (1 - rewards)).sum(-1)  # (P,)
    shift = np.log(rates / (1 - rates) * wrong / right)  # right * e^shift / wrong = odds
    return World(rewards=rewards, emb=emb, ref_logits=ref_logits + shift[:, None] * rewards)


def _check_binary(rewards) -> np.ndarray:
    rewards = check_array(rewards, "rewards", min_ndim=2)
    if not np.isin(rewards, (0.0, 1.0)).all() or not rewards.max(-1).all():
        raise ValueError("rewards must be 0/1 with at least one correct answer per prompt")
    return rewards


def pass_rate(logits: np.ndarray, rewards: np.ndarray) -> np.ndarray:
    """``p = sum_a pi(a) r(a)`` per prompt: ``logits (..., P, A), rewards (P, A) -> (..., P)``.

    Chapter 11."""
    return (softmax(logits) * _check_binary(rewards)).sum(-1)


def correct_entropy(logits: np.ndarray, rewards: np.ndarray) -> np.ndarray:
    """Entropy (nats) of pi restricted to the correct answers and renormalised: ``(..., P)``.

    ``log(n_correct)`` when the policy spreads evenly over them, 0 when it has collapsed on one.
    (TRL's ``entropy`` metric is the full policy's; see :func:`policy_entropy`.) Chapter 11."""
    rewards = _check_binary(rewards)
    q = softmax(logits) * rewards
    q = q / q.sum(-1, keepdims=True)
    return 0.0 - (q * np.log(np.where(q > 0, q, 1.0))).sum(-1)  # 0.0 -: no -0


def policy_entropy(logits: np.ndarray) -> np.ndarray:
    """Entropy (nats) of the full policy, ``(..., P, A) -> (..., P)``: TRL's ``entropy``
    (per token; here one token per answer). Chapter 11."""
    pi = softmax(logits)
    return 0.0 - (pi * np.log(np.where(pi > 0, pi, 1.0))).sum(-1)


def _check_p(p, name: str = "p", open_interval: bool = False) -> np.ndarray:
    p = check_array(p, name, min_ndim=0)
    bad = (p <= 0) | (p >= 1) if open_interval else (p < 0) | (p > 1)
    if np.any(bad):
        raise ValueError(f"{name} must lie in {'(0, 1)' if open_interval else '[0, 1]'}")
    return p


def dead_group_prob(p, G: int) -> np.ndarray:
    """P(all G rewards equal) = ``p^G + (1 - p)^G``, elementwise over ``p (...)``; the expected
    ``frac_reward_zero_std`` of a prompt with pass rate p. Chapter 11."""
    p, G = _check_p(p), check_int(G, "G", 1)
    return p**G + (1 - p) ** G


def correct_count_pmf(p, G: int) -> np.ndarray:
    """Binomial P(k of G correct), ``p (...) -> (..., G + 1)``, k = 0..G. Chapter 11."""
    p, G = _check_p(p), check_int(G, "G", 1)
    k = np.arange(G + 1)
    log_comb = np.array([math.lgamma(G + 1) - math.lgamma(j + 1) - math.lgamma(G - j + 1)
                         for j in range(G + 1)])  # in logs: no overflow at large G
    with np.errstate(divide="ignore", invalid="ignore"):  # p = 0 or 1: 0 * log 0 := 0
        lp, lq = np.log(p)[..., None], np.log1p(-p)[..., None]
        log_pmf = log_comb + np.where(k > 0, k * lp, 0.0) + np.where(k < G, (G - k) * lq, 0.0)
    return np.exp(log_pmf)


def update_factor(p, G: int, kind: str = "grpo", *,
                  dynamic_sampling: bool = False) -> np.ndarray:
    """The exact expected update of one group, as a multiple c of ``grad p``: ``p (...) -> (...)``.

    With k correct, v = k/G (1 - k/G) (population variance), each kind's group gives
    ``(1/G) sum_i A_i (r_i - p) = v / scale``: scale = sqrt(v) "grpo" (population std),
    sqrt(v G/(G-1)) + 1e-4 "trl" (Bessel + TRL's epsilon), 1 "dr_grpo", (G-1)/G "rloo";
    dead groups (v = 0) give 0. c = sum_k P(k) v_k / scale_k / (p (1 - p)). Identities: "grpo"
    is exactly 1 at G = 2, "dr_grpo" is (G-1)/G, "rloo" is 1. ``dynamic_sampling`` (DAPO)
    conditions on a live group: c / (1 - p^G - (1-p)^G). Needs p in (0, 1), G >= 2. Chapter 11.
    """
    p, G = _check_p(p, open_interval=True), check_int(G, "G", 2)
    kind = check_choice(kind, "kind", FACTOR_KINDS)
    k = np.arange(G + 1)
    v = k / G * (1 - k / G)  # (G + 1,) population variance of a group with k correct
    live = v > 0
    scale = {"grpo": np.sqrt(v), "trl": np.sqrt(v * G / (G - 1)) + STD_EPS,
             "dr_grpo": np.ones(G + 1), "rloo": np.full(G + 1, (G - 1) / G)}[kind]
    per_k = np.where(live, v / np.where(live, scale, 1.0), 0.0)
    c = (correct_count_pmf(p, G) * per_k).sum(-1) / (p * (1 - p))
    return c / (1 - dead_group_prob(p, G)) if dynamic_sampling else c


def expected_binary_update(logits: np.ndarray, rewards: np.ndarray, G: int, kind: str = "grpo",
                           *, dynamic_sampling: bool = False) -> np.ndarray:
    """The exact expected policy-gradient step on the logits, ``(..., P, A)``: ``c(p, G) * grad p``
    with ``grad p = pi * (r - p)`` for tabular softmax logits (:func:`update_factor`). The mean of
    :func:`grpo_core.policy_gradient` over groups. Chapter 11."""
    pi, p = softmax(logits), pass_rate(logits, rewards)
    c = update_factor(p, G, kind, dynamic_sampling=dynamic_sampling)
    return c[..., None] * pi * (rewards - p[..., None])
