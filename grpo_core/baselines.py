"""Advantages: what the policy gradient multiplies each sample by. GRPO's whole idea lives here.

A critic predicts "what should this prompt score?" and PPO subtracts it. GRPO (DeepSeekMath,
arXiv 2402.03300, section 4) notes that the G answers already sampled for the *same* prompt
give that prediction for free: subtract their mean, divide by their std.

    A_i = (r_i - mean(r)) / std(r)            (outcome supervision, eq. in section 4.1.2)

Beside it, the baselines the book compares it with: none, leave-one-out (RLOO), one mean over
the whole batch, and a critic's value.
"""

from __future__ import annotations

import numpy as np

from ._validate import check_array, check_choice, check_int

#: The advantage kinds :func:`advantages` and :func:`grpo_core.grad_variance` accept.
KINDS = ("none", "group", "group_norm", "loo", "batch", "batch_norm", "critic")

EPS = 1e-8  # added to the std (TRL uses 1e-4)


def _all_equal(r: np.ndarray) -> np.ndarray:
    """``(..., G) -> (..., 1)``: True where every reward of the group is the same."""
    return (r == r[..., :1]).all(axis=-1, keepdims=True)


def group_advantages(r: np.ndarray, normalise: bool = True, *, ddof: int = 0) -> np.ndarray:
    """GRPO's advantage: subtract the group mean, optionally divide by the group std.

    Args:
        r: ``(..., P, G)`` rewards, one group of G per prompt (the last axis is the group).
        normalise: divide by the group's std (+1e-8). False gives the plain group-mean baseline.
        ddof: 0 for the population std (NumPy's default, this book's), 1 for Bessel's
            correction (TRL, verl). Same signs, different scale.

    Returns:
        ``(..., P, G)`` advantages; each group's sum is 0. A group whose rewards are all equal
        (G = 1 always is) gets advantage exactly 0, never NaN. Taught in chapter 3.
    """
    r = check_array(r, "r", min_ndim=1)
    ddof = check_int(ddof, "ddof", 0)
    if ddof > 1:
        raise ValueError(f"ddof must be 0 or 1, got {ddof}")
    if normalise and ddof and r.shape[-1] < 2:
        return np.zeros_like(r)
    return _group_advantages(r, normalise, ddof)


def _group_advantages(r: np.ndarray, normalise: bool, ddof: int) -> np.ndarray:
    """:func:`group_advantages` of checked rewards (the training loop's per-step call)."""
    mean = r.mean(axis=-1, keepdims=True)
    adv = r - mean  # the group baseline
    if normalise:  # (std from the same mean: NumPy's std, bit for bit, one pass less)
        adv = adv / (r.std(axis=-1, keepdims=True, ddof=ddof, mean=mean) + EPS)
    # an all-equal group carries no signal: make its advantage exactly 0, not rounding noise
    return np.where(_all_equal(r), 0.0, adv)


def loo_advantages(r: np.ndarray) -> np.ndarray:
    """Leave-one-out (RLOO) advantage: ``r_i`` minus the mean of the *other* G-1 rewards.

    ``r: (..., P, G) -> (..., P, G)``; needs G >= 2. Equals ``G/(G-1)`` times the group-mean
    advantage, and unlike it is unbiased (the baseline does not contain the sample itself).
    Taught in chapter 2.
    """
    r = check_array(r, "r", min_ndim=1)
    G = r.shape[-1]
    if G < 2:
        raise ValueError(f"leave-one-out needs a group size G >= 2, got G = {G}")
    others = (r.sum(axis=-1, keepdims=True) - r) / (G - 1)
    return np.where(_all_equal(r), 0.0, r - others)


def batch_advantages(r: np.ndarray, normalise: bool = True) -> np.ndarray:
    """One mean (and std) over the whole batch, ignoring prompts: unbiased in direction, noisier.

    ``r: (..., P, G) -> (..., P, G)``; the statistics run over the last two axes.
    A hard prompt's answers then all get negative advantages. Taught in chapter 7.
    """
    r = check_array(r, "r", min_ndim=2)
    adv = r - r.mean(axis=(-2, -1), keepdims=True)
    if normalise:
        adv = adv / (r.std(axis=(-2, -1), keepdims=True) + EPS)
    return adv


def advantages(r: np.ndarray, kind: str, critic_value: np.ndarray | None = None) -> np.ndarray:
    """Advantages of one of the book's kinds, by name.

    Args:
        r: ``(..., P, G)`` rewards.
        kind: one of :data:`KINDS`: ``"none"`` (A = r), ``"group"`` (group mean),
            ``"group_norm"`` (group mean and std: GRPO), ``"loo"`` (leave-one-out),
            ``"batch"`` / ``"batch_norm"`` (one mean over the batch), ``"critic"`` (r - V).
        critic_value: ``(P,)`` baseline values, required for ``kind="critic"``.

    Returns:
        ``(..., P, G)`` advantages. Taught in chapter 2.
    """
    kind = check_choice(kind, "kind", KINDS)
    r = check_array(r, "r", min_ndim=2)
    if kind == "none":
        return r
    if kind in ("group", "group_norm"):
        return group_advantages(r, normalise=kind == "group_norm")
    if kind == "loo":
        return loo_advantages(r)
    if kind in ("batch", "batch_norm"):
        return batch_advantages(r, normalise=kind == "batch_norm")
    if critic_value is None:
        raise ValueError('kind="critic" needs critic_value, a (P,) array of baseline values')
    v = check_array(critic_value, "critic_value")
    if v.shape != r.shape[-2:-1]:
        raise ValueError(
            f"critic_value must have shape (P,) = {r.shape[-2:-1]} to match rewards {r.shape}, "
            f"got {v.shape}"
        )
    return r - v[:, None]
