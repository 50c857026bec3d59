"""Shared parameters: prompts that share one weight vector, where GRPO's per-prompt weight acts.

DeepSeekMath (arXiv 2402.03300, section 4) trains one network on every prompt. In the tabular toy
each prompt owns its logits, so under per-coordinate Adam a constant per-prompt factor (such as
GRPO's 1/std) cancels. Here the logits are ``features (P, A, D) @ theta (D,)``: every prompt's
update moves the same theta, and the expected update ``(1/P) sum_p c_p grad_theta p_p`` is a
*weighted* sum whose weights ``c_p`` (:func:`grpo_core.update_factor`) depend on each prompt's
pass rate p_p: GRPO up-weights too-easy and too-hard prompts, Dr. GRPO weighs all alike
((G-1)/G). Rewards are 0/1 (one correct answer per prompt, as a verifier), answers one token,
so everything is enumerable: pass@1 = p and pass@k = 1 - (1 - p)^k exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ._validate import check_array, check_int
from .binary import pass_rate, update_factor
from .policy import softmax


@dataclass(frozen=True)
class SharedWorld:
    """``features (P, A, D)``, 0/1 ``rewards (P, A)``; prompts ``[:n_train]`` train, the rest are
    held out. Taught in chapter 14."""

    features: np.ndarray
    rewards: np.ndarray
    n_train: int


def shared_world(seed: int = 0, *, n_train: int = 8, n_held_out: int = 4, n_answers: int = 4,
                 dim: int = 6, noise: float = 1.0) -> SharedWorld:
    """A world whose prompts share theta: features ~ N(0, 1) from ``np.random.default_rng(seed)``.

    A hidden ``theta_star (D,)`` marks each prompt's correct answer: the argmax of
    ``features @ theta_star + noise * N(0, 1)`` (the noise makes some prompts disagree with the
    common direction, so no theta solves them all). Returns :class:`SharedWorld` with
    ``features (P, A, D)``, ``rewards (P, A)``, ``P = n_train + n_held_out``. Chapter 14.
    """
    seed = check_int(seed, "seed", 0)
    n_train, n_held_out = check_int(n_train, "n_train", 1), check_int(n_held_out, "n_held_out", 0)
    A, D = check_int(n_answers, "n_answers", 2), check_int(dim, "dim", 1)
    if not np.isfinite(noise) or noise < 0:
        raise ValueError(f"noise must be a finite number >= 0, got {noise}")
    rng = np.random.default_rng(seed)
    P = n_train + n_held_out
    features = rng.normal(0, 1, (P, A, D))
    theta_star = rng.normal(0, 1, D)
    score = features @ theta_star + noise * rng.normal(0, 1, (P, A))
    rewards = np.zeros((P, A))
    rewards[np.arange(P), score.argmax(-1)] = 1.0
    return SharedWorld(features=features, rewards=rewards, n_train=n_train)


class SharedPolicy(torch.nn.Module):
    """R runs of a linear policy with weights shared across prompts: ``() -> logits (R, P, A)``.

    ``logits[r] = features @ theta[r]`` with ``features (P, A, D)``, ``theta (R, D)`` a Parameter
    (float64). Every run starts at the same ``theta_0 = init_scale * N(0, 1)`` drawn from
    ``torch.Generator().manual_seed(seed)`` (``init_scale = 0``: all zeros, the uniform policy), so
    one ``ref_logits = policy.initial_logits()`` serves all runs of ``train_batch(...,
    policy=...)``. Taught in chapter 14.
    """

    def __init__(self, features: np.ndarray, n_runs: int, seed: int = 0, *,
                 init_scale: float = 1.0) -> None:
        super().__init__()
        features = check_array(features, "features", min_ndim=3)
        if features.ndim != 3:
            raise ValueError(f"features must have shape (P, A, D), got {features.shape}")
        n_runs, seed = check_int(n_runs, "n_runs", 1), check_int(seed, "seed", 0)
        if not np.isfinite(init_scale) or init_scale < 0:
            raise ValueError(f"init_scale must be a finite number >= 0, got {init_scale}")
        gen = torch.Generator().manual_seed(seed)
        theta0 = init_scale * torch.randn(features.shape[-1], generator=gen, dtype=torch.float64)
        self.register_buffer("features", torch.tensor(features))
        self.theta = torch.nn.Parameter(theta0.expand(n_runs, -1).clone())  # (R, D)

    def forward(self) -> torch.Tensor:
        """Logits ``(R, P, A) = einsum(features (P, A, D), theta (R, D))``."""
        return torch.einsum("pad,rd->rpa", self.features, self.theta)

    def initial_logits(self) -> np.ndarray:
        """The logits ``(P, A)`` of run 0 now (before training: every run's start)."""
        with torch.no_grad():
            return self()[0].numpy().copy()


def shared_logits(theta: np.ndarray, features: np.ndarray) -> np.ndarray:
    """``theta (..., D), features (P, A, D) -> logits (..., P, A)``. Chapter 14."""
    theta, features = check_array(theta, "theta"), check_array(features, "features", min_ndim=3)
    if features.ndim != 3 or theta.shape[-1] != features.shape[-1]:
        raise ValueError(f"theta (..., D) {theta.shape} and features (P, A, D) {features.shape} "
                         "must share D")
    return np.einsum("pad,...d->...pa", features, theta)


def pass_at_k(p, k: int) -> np.ndarray:
    """P(at least one of k independent answers is correct) = ``1 - (1 - p)^k``, ``p (...)``.

    pass@1 is the pass rate itself. Chapter 14."""
    p, k = check_array(p, "p", min_ndim=0), check_int(k, "k", 1)
    if np.any((p < 0) | (p > 1)):
        raise ValueError("p must lie in [0, 1]")
    return 1.0 - (1.0 - p) ** k


def pass_rate_grad(theta: np.ndarray, features: np.ndarray, rewards: np.ndarray) -> np.ndarray:
    """``grad_theta p_p = sum_a pi_a (r_a - p_p) f_{p,a}``: ``theta (..., D) -> (..., P, D)``.

    Chapter 14."""
    logits = shared_logits(theta, features)
    pi, p = softmax(logits), pass_rate(logits, rewards)
    return np.einsum("...pa,pad->...pd", pi * (rewards - p[..., None]), features)


def shared_update(theta: np.ndarray, features: np.ndarray, rewards: np.ndarray, G: int,
                  kind: str = "trl") -> np.ndarray:
    """The exact expected GRPO step on theta, ``(1/P) sum_p c(p_p, G) grad_theta p_p (..., D)``.

    ``c`` is :func:`grpo_core.update_factor` (``kind`` "trl": TRL's ``scale_rewards="group"``,
    Bessel std + 1e-4; "grpo": population std; "dr_grpo": ``"none"``, c = (G-1)/G; "rloo": 1),
    the expected gradient of minus the one-token loss averaged over the P G answers. Chapter 14.
    """
    G = check_int(G, "G", 2)
    c = update_factor(pass_rate(shared_logits(theta, features), rewards), G, kind)  # (..., P)
    return (c[..., None] * pass_rate_grad(theta, features, rewards)).mean(-2)


def update_cosine(theta: np.ndarray, features: np.ndarray, rewards: np.ndarray, G: int,
                  kind: str = "trl") -> np.ndarray:
    """Cosine of :func:`shared_update` with ``grad_theta`` of the mean pass rate: ``(...)``.

    1 when every prompt is weighted alike (Dr. GRPO); below 1 when the weights differ.
    Chapter 14."""
    u = shared_update(theta, features, rewards, G, kind)
    g = pass_rate_grad(theta, features, rewards).mean(-2)
    return (u * g).sum(-1) / (np.linalg.norm(u, axis=-1) * np.linalg.norm(g, axis=-1))
