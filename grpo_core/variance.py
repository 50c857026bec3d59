"""Monte-Carlo measurements of the gradient estimators: their variance and their mean direction.

The variance ``E||g - E g||^2`` over independent gradient estimates is what a baseline buys
down (DeepSeekMath, arXiv 2402.03300, section 4: GRPO's group mean replaces PPO's critic as the
baseline). All repeats are drawn in one array operation; the generator is consumed exactly as
a loop of ``sample_group`` calls would consume it.
"""

from __future__ import annotations

import numpy as np

from ._validate import check_array, check_int, check_rng, check_same_shape
from .baselines import advantages
from .policy import policy_gradient, sample_group


def gradient_estimates(
    logits: np.ndarray,
    rewards: np.ndarray,
    rng: np.random.Generator,
    G: int = 8,
    kind: str = "group",
    repeats: int = 400,
    critic_value: np.ndarray | None = None,
) -> np.ndarray:
    """``repeats`` independent policy-gradient estimates, ``(repeats, P, A)``.

    Each draws a fresh group of G answers per prompt, computes ``kind`` advantages (see
    :data:`grpo_core.baselines.KINDS`) and the estimator. Taught in chapter 2.
    """
    logits = check_array(logits, "logits", min_ndim=2)
    rewards = check_array(rewards, "rewards", min_ndim=2)
    check_same_shape(logits, "logits", rewards, "rewards")
    rng = check_rng(rng)
    samples = sample_group(logits, G, rng, repeats=repeats)  # (R, P, G)
    r = rewards[np.arange(rewards.shape[0])[:, None], samples]  # (R, P, G)
    return policy_gradient(logits, samples, advantages(r, kind, critic_value))


def grad_variance(
    logits: np.ndarray,
    rewards: np.ndarray,
    rng: np.random.Generator,
    G: int = 8,
    kind: str = "group",
    repeats: int = 400,
    critic_value: np.ndarray | None = None,
) -> float:
    """``E||g - E g||^2`` over ``repeats`` independent gradient estimates (chapter 2's measure).

    Args:
        logits, rewards: ``(P, A)``. rng: consumed as ``repeats`` calls of ``sample_group``.
        G: group size. kind: advantage kind. repeats: >= 2. critic_value: ``(P,)``.

    Returns:
        The empirical total variance (sum over all P*A coordinates, population form).
        Taught in chapter 2.
    """
    repeats = check_int(repeats, "repeats", 2)
    g = gradient_estimates(logits, rewards, rng, G, kind, repeats, critic_value)
    return float(((g - g.mean(axis=0)) ** 2).sum(axis=(1, 2)).mean())


def cos_mean_grad(
    ref: np.ndarray, rewards: np.ndarray, repeats: int = 400, G: int = 8, *, seed: int = 7
) -> float:
    """Cosine between the mean gradient with no baseline and with the group-mean baseline.

    Both means use ``repeats`` estimates from ``default_rng(seed)``.
    The exact cosine is 1 (see :func:`grpo_core.exact.exact_moments`); the printed 0.996 is
    Monte-Carlo noise. Taught in chapter 2.
    """
    repeats = check_int(repeats, "repeats", 1)
    means = [gradient_estimates(ref, rewards, np.random.default_rng(seed), G, kind, repeats)
             .mean(axis=0).ravel() for kind in ("none", "group")]
    a, b = means
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def alignment(g: np.ndarray, truth: np.ndarray, *, per_prompt: bool = False):
    """How long an expected gradient is along the truth, and the cosine between them.

    ``g, truth (P, A) -> (scale, cosine)``: ``scale = <g, truth> / |truth|^2`` (1: unbiased,
    (G-1)/G: the group mean's shrink) and ``cosine = <g, truth> / (|g| |truth|)``. With
    ``per_prompt`` both are ``(P,)``, each prompt's row against its own row of the truth.
    Taught in chapter 2.
    """
    g = check_array(g, "g", min_ndim=2)
    truth = check_array(truth, "truth", min_ndim=2)
    check_same_shape(g, "g", truth, "truth")
    axis = -1 if per_prompt else (-2, -1)
    dot = (g * truth).sum(axis=axis)
    scale = dot / (truth**2).sum(axis=axis)
    cosine = dot / np.sqrt((g**2).sum(axis=axis) * (truth**2).sum(axis=axis))
    return scale, cosine
