"""The policy: a softmax over answers, its sampler, and the policy-gradient estimator.

For a sampled answer ``a`` with advantage ``A``, the gradient of ``A * log pi(a)`` with respect
to that prompt's logits is exactly ``A * (onehot(a) - probs)``. The estimator averages it over the
G answers of each group. With one update per batch and an exact KL, GRPO is this estimator
with the group advantage as ``A``, plus a KL term (DeepSeekMath, arXiv 2402.03300, section 4);
the ratio and clip of the general objective are chapter 10's.

Everything here is vectorised: no Python loop over prompts, samples or repeats.
"""

from __future__ import annotations

import numpy as np

from ._validate import check_array, check_int, check_rng, check_samples


def softmax(x: np.ndarray) -> np.ndarray:
    """Probabilities along the last axis. ``(..., A) -> (..., A)``.

    Subtracting the row maximum first cancels in the ratio and keeps ``exp`` from overflowing,
    so logits of 1e4 still give finite probabilities. Taught in chapter 1.
    """
    x = check_array(x, "x")
    x = x - x.max(axis=-1, keepdims=True)  # overflow safety; cancels in the ratio
    e = np.exp(x)
    return e / e.sum(axis=-1, keepdims=True)


def log_softmax(x: np.ndarray) -> np.ndarray:
    """Log-probabilities along the last axis, computed stably. ``(..., A) -> (..., A)``.

    Taught in chapter 1.
    """
    x = check_array(x, "x")
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def _probs_and_log_probs(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`softmax` and :func:`log_softmax` of checked logits ``(..., A)`` in one pass, bit
    for bit the same numbers: the training loop's per-step call, without the input checks."""
    x = x - x.max(axis=-1, keepdims=True)
    e = np.exp(x)
    total = e.sum(axis=-1, keepdims=True)
    return e / total, x - np.log(total)


def sample_from_uniforms(probs: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Inverse-CDF sampling: answer index for each uniform draw.

    Args:
        probs: ``(..., P, A)`` probabilities (broadcast against ``u``'s leading axes).
        u: ``(..., P, G)`` uniforms in [0, 1).

    Returns:
        ``(..., P, G)`` int64 indices: the number of CDF entries <= u. This is exactly what
        ``numpy.random.Generator.choice(A, size=G, p=row)`` does with ``rng.random(G)``, so the
        draws match it draw for draw. Taught in chapter 1.
    """
    cdf = np.cumsum(probs, axis=-1)
    cdf /= cdf[..., -1:]  # as numpy's choice does: the last entry is exactly 1
    idx = np.count_nonzero(cdf[..., None, :] <= u[..., :, None], axis=-1)  # searchsorted right
    return np.minimum(idx, probs.shape[-1] - 1).astype(np.int64)


def sample_group(
    logits: np.ndarray, G: int, rng: np.random.Generator, *, repeats: int | None = None
) -> np.ndarray:
    """Sample a group of ``G`` answers per prompt, with replacement.

    Args:
        logits: ``(P, A)`` policy logits.
        G: group size, an integer >= 1.
        rng: the generator; consumed exactly as a per-prompt
            ``rng.choice(A, size=G, p=probs[p])`` loop consumes it.
        repeats: if given, draw that many independent groups at once.

    Returns:
        ``(P, G)`` answer indices, or ``(repeats, P, G)`` with ``repeats``.

    Taught in chapter 1.
    """
    G = check_int(G, "G", 1)
    rng = check_rng(rng)
    probs = softmax(logits)
    if probs.ndim != 2:
        raise ValueError(f"logits must have shape (P, A), got {probs.shape}")
    shape = probs.shape[:1] + (G,)
    if repeats is not None:
        shape = (check_int(repeats, "repeats", 1),) + shape
    return sample_from_uniforms(probs, rng.random(shape))


def policy_gradient(logits: np.ndarray, samples: np.ndarray, advantages: np.ndarray) -> np.ndarray:
    """The policy-gradient estimate, averaged over each group's G samples.

    ``grad[p] = (1/G) * sum_i advantages[p, i] * (onehot(samples[p, i]) - probs[p])``

    Args:
        logits: ``(..., P, A)``; leading axes broadcast against ``samples``.
        samples: ``(..., P, G)`` answer indices.
        advantages: ``(..., P, G)``, one scalar per sample.

    Returns:
        ``(..., P, A)``: the gradient of ``mean_i(A_i * log pi(a_i))`` per prompt, i.e. the
        ascent direction on the logits. Taught in chapter 1.
    """
    logits = check_array(logits, "logits", min_ndim=2)
    n_answers = logits.shape[-1]
    samples = check_samples(samples, n_answers)
    advantages = check_array(advantages, "advantages", min_ndim=2)
    if samples.shape != advantages.shape:
        raise ValueError(
            f"samples {samples.shape} and advantages {advantages.shape} must have the same shape"
        )
    if samples.shape[-2] != logits.shape[-2]:
        raise ValueError(
            f"samples have {samples.shape[-2]} prompts (axis -2) but logits have "
            f"{logits.shape[-2]}"
        )
    probs = softmax(logits)
    G = samples.shape[-1]
    lead = np.broadcast_shapes(probs.shape[:-1], samples.shape[:-1])  # (..., P)
    samples = np.broadcast_to(samples, lead + (G,))
    advantages = np.broadcast_to(advantages, lead + (G,))
    # sum_i A_i * onehot(a_i): scatter-add each advantage into its answer's slot
    n_rows = int(np.prod(lead))
    flat = np.arange(n_rows).repeat(G) * n_answers + samples.ravel()
    weighted = np.bincount(flat, weights=advantages.ravel(), minlength=n_rows * n_answers)
    weighted = weighted.reshape(lead + (n_answers,))
    return (weighted - probs * advantages.sum(axis=-1, keepdims=True)) / G
