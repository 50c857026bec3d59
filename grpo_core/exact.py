"""Exact quantities that a 12-answer toy world allows: no sampling, no noise.

- the true policy gradient of the expected reward, ``probs * (r - sum(probs * r))``;
- the expected reward, the exact KL(pi || pi_ref), and the best reward any policy can reach;
- the exact mean and variance of each gradient *estimator*, by enumerating every multiset of G
  answers a group can be (multinomial probabilities), and closed forms for the mean's scale.

These are the reference lines of the book's plots (DeepSeekMath, arXiv 2402.03300, section 4).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ._validate import (
    check_array,
    check_choice,
    check_float,
    check_int,
    check_same_shape,
    check_samples,
)
from .baselines import EPS
from .policy import log_softmax, softmax


def expected_reward(logits: np.ndarray, rewards: np.ndarray, *, per_prompt: bool = False):
    """Expected verifier reward ``sum_a pi(a) r(a)``, averaged over prompts.

    ``logits (..., P, A), rewards (P, A) -> (...)`` (or ``(..., P)`` with ``per_prompt``).
    Taught in chapter 1.
    """
    logits = check_array(logits, "logits", min_ndim=2)
    rewards = check_array(rewards, "rewards", min_ndim=2)
    check_same_shape(logits.shape[-2:], "logits (P, A)", rewards.shape, "rewards")
    per = (softmax(logits) * rewards).sum(axis=-1)
    return per if per_prompt else per.mean(axis=-1)


def reward_std(logits: np.ndarray, rewards: np.ndarray) -> np.ndarray:
    """Each prompt's reward std under the policy, ``sigma_p = sqrt(sum_a pi(a) (r(a) - E r)^2)``.

    ``logits (..., P, A), rewards (P, A) -> (..., P)``. The number a large group's std tends
    to, so the one GRPO's advantage divides by (about 1/sigma_p per prompt). Taught in chapter 2.
    """
    logits = check_array(logits, "logits", min_ndim=2)
    rewards = check_array(rewards, "rewards", min_ndim=2)
    check_same_shape(logits.shape[-2:], "logits (P, A)", rewards.shape, "rewards")
    probs = softmax(logits)
    mean = (probs * rewards).sum(axis=-1, keepdims=True)
    return np.sqrt((probs * (rewards - mean) ** 2).sum(axis=-1))


def exact_kl(logits: np.ndarray, ref_logits: np.ndarray, *, per_prompt: bool = False):
    """Exact ``KL(pi || pi_ref) = sum_a pi(a) (log pi(a) - log pi_ref(a))``, averaged over prompts.

    ``logits (..., P, A), ref_logits (P, A) -> (...)``. Taught in chapter 6.
    """
    logits = check_array(logits, "logits", min_ndim=2)
    ref_logits = check_array(ref_logits, "ref_logits", min_ndim=2)
    check_same_shape(logits.shape[-2:], "logits (P, A)", ref_logits.shape, "ref_logits")
    per = (softmax(logits) * (log_softmax(logits) - log_softmax(ref_logits))).sum(axis=-1)
    return per if per_prompt else per.mean(axis=-1)


def k3_kl(logits: np.ndarray, ref_logits: np.ndarray, samples: np.ndarray) -> np.ndarray:
    """DeepSeekMath's per-sample KL estimator (Schulman's k3) at the sampled answers.

    ``k3(a) = pi_ref(a) / pi(a) - log(pi_ref(a) / pi(a)) - 1``, never negative. Averaged over
    ``a ~ pi`` its *value* is exactly ``KL(pi || pi_ref)``; differentiated as a loss with the
    samples held fixed, its expected gradient is that of ``KL(pi_ref || pi)``, the other
    direction. The book's training loop uses the exact KL instead (:func:`exact_kl`).

    Args:
        logits: ``(..., P, A)`` policy logits; ref_logits: ``(P, A)`` the reference.
        samples: ``(..., P, G)`` answer indices (leading axes as in ``logits``).

    Returns:
        ``(..., P, G)`` one estimate per sample. Taught in chapter 9.
    """
    logits = check_array(logits, "logits", min_ndim=2)
    ref_logits = check_array(ref_logits, "ref_logits", min_ndim=2)
    check_same_shape(logits.shape[-2:], "logits (P, A)", ref_logits.shape, "ref_logits")
    samples = check_samples(samples, logits.shape[-1])
    log_ratio = log_softmax(ref_logits) - log_softmax(logits)  # (..., P, A) log(pi_ref / pi)
    lead = np.broadcast_shapes(log_ratio.shape[:-1], samples.shape[:-1])  # (..., P)
    log_ratio = np.broadcast_to(log_ratio, lead + log_ratio.shape[-1:])
    picked = np.take_along_axis(log_ratio, np.broadcast_to(samples, lead + samples.shape[-1:]),
                                axis=-1)
    return np.expm1(picked) - picked  # ratio - 1 - log(ratio), accurate near ratio = 1


def evaluate(logits: np.ndarray, rewards: np.ndarray, ref_logits: np.ndarray):
    """Expected true reward under the policy, and its exact KL from the reference.

    ``logits (P, A) -> (float, float)``; batched ``(..., P, A) -> ((...), (...))`` arrays.
    Taught in chapter 1.
    """
    true, kl = expected_reward(logits, rewards), exact_kl(logits, ref_logits)
    if np.ndim(true) == 0:
        return float(true), float(kl)
    return true, kl


def best_reward(rewards: np.ndarray) -> float:
    """The ceiling: the mean over prompts of each prompt's best answer (5.5465 in the book's
    world). Only a deterministic policy on the best answers reaches it. Taught in chapter 1."""
    rewards = check_array(rewards, "rewards", min_ndim=2)
    return float(rewards.max(axis=-1).mean())


def kl_optimal_logits(rewards: np.ndarray, ref_logits: np.ndarray, beta: float) -> np.ndarray:
    """Logits of the policy that maximises ``E_pi[r] - beta * KL(pi || pi_ref)`` on every prompt.

    The maximiser is ``pi*(a) = pi_ref(a) exp(r(a) / beta) / Z`` (the KL-regularised optimum),
    i.e. logits ``ref_logits + rewards / beta``: ``rewards, ref_logits (P, A) -> (P, A)``, beta > 0.
    Sweeping beta traces the most reward any policy can have for its KL. Taught in chapter 6.
    """
    rewards = check_array(rewards, "rewards", min_ndim=2)
    ref_logits = check_array(ref_logits, "ref_logits", min_ndim=2)
    check_same_shape(rewards, "rewards", ref_logits, "ref_logits")
    beta = check_float(beta, "beta", strict=True)
    return ref_logits + rewards / beta


def true_gradient(logits: np.ndarray, rewards: np.ndarray) -> np.ndarray:
    """Gradient of each prompt's expected reward w.r.t. its logits: ``probs * (r - E[r])``.

    ``logits (..., P, A), rewards (P, A) -> (..., P, A)``. What every unbiased estimator
    averages to. Taught in chapter 2.
    """
    logits = check_array(logits, "logits", min_ndim=2)
    rewards = check_array(rewards, "rewards", min_ndim=2)
    check_same_shape(logits.shape[-2:], "logits (P, A)", rewards.shape, "rewards")
    probs = softmax(logits)
    return probs * (rewards - (probs * rewards).sum(axis=-1, keepdims=True))


#: estimator kinds with an exact enumeration (each prompt's group is independent of the others)
EXACT_KINDS = ("none", "group", "group_norm", "loo", "critic")
MAX_EXACT_G = 10


@lru_cache(maxsize=64)
def multisets(n_answers: int, G: int) -> np.ndarray:
    """Every multiset of G answers out of ``n_answers`` as a count matrix ``(M, A)``.

    ``M = C(G + A - 1, G)``: 75,582 for G = 8, A = 12. Built recursively: the count of the
    first answer, then every multiset of the rest. Taught in chapter 2.
    """
    n_answers = check_int(n_answers, "n_answers", 1)
    G = check_int(G, "G", 0)
    if n_answers == 1:
        out = np.array([[G]], dtype=np.int64)
    else:
        out = np.concatenate([
            np.column_stack([np.full(len(rest), first, dtype=np.int64), rest])
            for first in range(G, -1, -1)
            for rest in (multisets(n_answers - 1, G - first),)
        ])
    out.setflags(write=False)
    return out


@lru_cache(maxsize=16)
def _multiset_table(n_answers: int, G: int) -> tuple[np.ndarray, np.ndarray]:
    """Counts as floats ``(M, A)`` and the log multinomial coefficients ``(M,)``."""
    counts = multisets(n_answers, G)
    log_factorial = np.array([math.lgamma(k + 1) for k in range(G + 1)])
    return counts.astype(np.float64), math.lgamma(G + 1) - log_factorial[counts].sum(axis=1)


@dataclass(frozen=True)
class Moments:
    """Exact moments of a gradient estimator: ``mean (P, A)``, total ``variance`` E||g - Eg||^2,
    and ``per_prompt_variance (P,)``. Taught in chapter 2."""

    mean: np.ndarray
    variance: float
    per_prompt_variance: np.ndarray


def exact_moments(
    logits: np.ndarray,
    rewards: np.ndarray,
    G: int,
    kind: str = "group",
    critic_value: np.ndarray | None = None,
) -> Moments:
    """Exact mean and variance of the policy-gradient estimator with ``kind`` advantages.

    Enumerates every multiset of G answers per prompt with its multinomial probability: the
    estimate depends only on how often each answer was drawn. Prompts are independent, so
    their variances add. ``"batch"`` couples prompts and is not enumerable (see
    :func:`expected_scale`). Needs G <= 10 (G = 8 has 75,582 multisets per prompt).

    Args:
        logits: ``(P, A)``; rewards: ``(P, A)``; critic_value: ``(P,)`` for ``kind="critic"``.

    Taught in chapter 2.
    """
    logits = check_array(logits, "logits", min_ndim=2)
    rewards = check_array(rewards, "rewards", min_ndim=2)
    check_same_shape(logits, "logits", rewards, "rewards")
    G = check_int(G, "G", 1)
    if G > MAX_EXACT_G:
        raise ValueError(f"exact enumeration needs G <= {MAX_EXACT_G}, got G = {G}")
    kind = check_choice(kind, "kind", EXACT_KINDS)
    if kind == "loo" and G < 2:
        raise ValueError(f"leave-one-out needs a group size G >= 2, got G = {G}")
    if kind == "critic":
        if critic_value is None:
            raise ValueError('kind="critic" needs critic_value, a (P,) array of baseline values')
        critic_value = check_array(critic_value, "critic_value")
        if critic_value.shape != rewards.shape[:1]:
            raise ValueError(f"critic_value must have shape {rewards.shape[:1]}, "
                             f"got {critic_value.shape}")
    counts, log_coef = _multiset_table(rewards.shape[1], G)  # (M, A) float, (M,)
    probs, log_probs = softmax(logits), log_softmax(logits)
    means, variances = [], []
    for p in range(rewards.shape[0]):
        r, pi = rewards[p], probs[p]
        w = np.exp(log_coef + counts @ log_probs[p])  # (M,) multinomial probability
        m = counts @ r / G  # (M,) group mean reward
        if kind == "none":
            adv = np.broadcast_to(r, counts.shape)
        elif kind == "critic":
            adv = np.broadcast_to(r - critic_value[p], counts.shape)
        else:
            adv = r[None, :] - m[:, None]  # (M, A): advantage of answer a within the multiset
            if kind == "loo":
                adv = adv * G / (G - 1)
            elif kind == "group_norm":
                std = np.sqrt((counts * adv**2).sum(axis=1) / G)
                drawn = counts > 0  # a group whose drawn rewards are all equal gets 0
                same = (np.where(drawn, r, np.inf).min(axis=1)
                        == np.where(drawn, r, -np.inf).max(axis=1))[:, None]
                adv = np.where(same, 0.0, adv / (std[:, None] + EPS))
        ca = counts * adv  # (M, A): sum of the advantages of each answer's draws
        total = ca.sum(axis=1)  # (M,)
        # the estimate is g = (ca - pi * total) / G; its mean and squared norm, without
        # materialising g: ||g||^2 = (|ca|^2 - 2 total (ca . pi) + total^2 |pi|^2) / G^2
        mean = (w @ ca - pi * (w @ total)) / G
        sq_norm = (np.einsum("ma,ma->m", ca, ca) - 2 * total * (ca @ pi)
                   + total**2 * (pi @ pi)) / G**2
        means.append(mean)
        variances.append(float(w @ sq_norm - mean @ mean))
    per_prompt = np.array(variances)
    return Moments(mean=np.array(means), variance=float(per_prompt.sum()),
                   per_prompt_variance=per_prompt)


def expected_scale(kind: str, G: int, n_prompts: int = 6) -> float:
    """Closed-form ratio E[estimate] / true gradient for the baselines that have one.

    - ``"none"``, ``"loo"``, a perfect ``"critic"`` (V = E[r]): 1 (unbiased);
    - ``"group"``: ``(G - 1) / G``: the group mean contains the sample itself, and
      E[r_i (onehot(a_i) - probs)] is the true gradient, so 1/G of it cancels;
    - ``"batch"``: ``1 - 1 / (P G)`` for the same reason, with the batch of P*G samples.

    ``"group_norm"`` has no closed form (use :func:`exact_moments`). Taught in chapter 2.
    """
    kind = check_choice(kind, "kind", ("none", "loo", "critic", "group", "batch"))
    G = check_int(G, "G", 1)
    n_prompts = check_int(n_prompts, "n_prompts", 1)
    if kind == "group":
        return (G - 1) / G
    if kind == "batch":
        return 1.0 - 1.0 / (n_prompts * G)
    if kind == "loo" and G < 2:
        raise ValueError(f"leave-one-out needs a group size G >= 2, got G = {G}")
    return 1.0
