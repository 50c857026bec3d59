"""The toy world: 6 maths prompts, 12 candidate answers each, a fixed table of rewards.

The table plays a *perfect* verifier: the reward is the truth. (DeepSeekMath, arXiv 2402.03300,
section 4, introduced GRPO with a learned reward model; DeepSeek-R1 used rule-based verifiers.)
Prompts differ in difficulty, here a reward *scale*: prompt 0 is easy (its answers can score up
to 10), prompt 5 is hard (nothing scores above 2).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._validate import check_rng

N_PROMPTS, N_ANSWERS, D_EMB = 6, 12, 8
BETA = 0.02  # the book's KL coefficient (TRL defaults to 0.0, DeepSeekMath used 0.04)


def make_world(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Draw the reward table and the prompt embeddings.

    Args:
        rng: the generator to draw from (the book uses ``np.random.default_rng(0)``).

    Returns:
        rewards: ``(P, A) = (6, 12)``, ``10 * U(0, 1) * (1 - 0.8 * difficulty)``, difficulty 0..1.
        emb: ``(P, D) = (6, 8)`` standard-normal prompt embeddings, the critic's input.

    Taught in chapter 1 (``01_toy_world``).
    """
    rng = check_rng(rng)
    difficulty = np.linspace(0.0, 1.0, N_PROMPTS)[:, None]  # (P, 1): 0 easy ... 1 hard
    quality = rng.uniform(0, 1, (N_PROMPTS, N_ANSWERS))  # (P, A)
    rewards = 10.0 * quality * (1.0 - 0.8 * difficulty)
    emb = rng.normal(0, 1, (N_PROMPTS, D_EMB))
    return rewards, emb


def reference_logits(rng: np.random.Generator) -> np.ndarray:
    """The frozen reference (SFT) policy's logits, ``(P, A)``, drawn from N(0, 0.5).

    Not uniform: the reference already has opinions. Draw it right after :func:`make_world`
    from the same generator. Taught in chapter 1.
    """
    rng = check_rng(rng)
    return rng.normal(0, 0.5, (N_PROMPTS, N_ANSWERS))


@dataclass(frozen=True)
class World:
    """Everything a demo needs: ``rewards (P, A)``, ``emb (P, D)``, ``ref_logits (P, A)``.

    Taught in chapter 1."""

    rewards: np.ndarray
    emb: np.ndarray
    ref_logits: np.ndarray


def toy_world(seed: int = 0) -> World:
    """The world of every demo: ``make_world`` then ``reference_logits`` from one seeded generator.

    Taught in chapter 1.
    """
    rng = np.random.default_rng(seed)
    rewards, emb = make_world(rng)
    return World(rewards=rewards, emb=emb, ref_logits=reference_logits(rng))
