"""The GRPO loss as practised: a clipped probability ratio against pi_old, a per-token KL
estimate against pi_ref, and four ways to average over tokens.

DeepSeekMath (arXiv 2402.03300) section 4.1, eq. (3), as implemented by Hugging Face TRL 1.16
(``GRPOTrainer._compute_loss`` in ``trl/trainer/grpo_trainer.py``; advantages in
``_generate_and_score_completions``). Three snapshots of the policy take part:

- pi_theta, the policy being trained: ``logp``, with gradient;
- pi_old, the policy that *sampled* the batch: ``old_logp``, refreshed every batch. With one
  update per batch (``num_iterations = 1``) it equals pi_theta, so the ratio is exactly 1;
- pi_ref, the frozen reference the KL term leashes to: ``ref_logp``.

Shapes: B sequences (completions) of at most T tokens; ``mask`` marks real tokens (1) and
padding (0). Every function also accepts leading batch dimensions ``(..., B, T)`` (many
independent runs at once) and then returns one value per leading index.

Taught in chapter 10 (the loss), 12 (KL estimators) and 13 (loss types and length).
"""

from __future__ import annotations

import numpy as np
import torch

from ._validate import check_choice, check_float, check_int

LOSS_TYPES = ("grpo", "bnpo", "dapo", "dr_grpo")
IMPORTANCE_SAMPLING_LEVELS = ("token", "sequence")
KL_ESTIMATORS = ("k1", "k2", "k3")
SCALE_REWARDS = ("group", "batch", "none")
STD_EPS = 1e-4  # TRL adds this to the std before dividing


def kl_estimate(logp: torch.Tensor, ref_logp: torch.Tensor, estimator: str = "k3") -> torch.Tensor:
    """Per-token estimate of KL(pi || pi_ref) from tokens sampled from pi (Schulman's k1, k2, k3).

    With ``log_r = ref_logp - logp``: k1 = -log_r, k2 = log_r**2 / 2, k3 = exp(log_r) - log_r - 1
    (TRL's ``per_token_kl``). k1 and k3 are unbiased for the value; their gradients are another
    matter (chapter 12). Shapes: ``(..., B, T) -> (..., B, T)``. Taught in chapter 12.
    """
    log_r = ref_logp - logp
    if estimator == "k1":
        return -log_r
    if estimator == "k2":
        return log_r**2 / 2
    if estimator == "k3":
        return torch.exp(log_r) - log_r - 1
    raise ValueError(f"kl_estimator must be one of {', '.join(map(repr, KL_ESTIMATORS))}; "
                     f"got {estimator!r}")


def importance_ratio(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor,
                     level: str = "token") -> torch.Tensor:
    """pi_theta / pi_old per token ``(..., B, T)``, or per sequence ``(..., B, 1)`` for
    ``level="sequence"`` (GSPO: the exp of the masked mean per-token log-ratio). Chapter 10."""
    log_ratio = logp - old_logp
    if level == "sequence":
        n_tokens = mask.sum(-1, keepdim=True).clamp(min=1)
        log_ratio = (log_ratio * mask).sum(-1, keepdim=True) / n_tokens
    return torch.exp(log_ratio)


def aggregate(per_token: torch.Tensor, mask: torch.Tensor, loss_type: str = "dapo",
              max_completion_length: int | None = None) -> torch.Tensor:
    """Average a per-token loss ``(..., B, T)`` over tokens and sequences, as ``loss_type`` says.

    "grpo": each sequence's token mean, then the mean over sequences (a long answer's tokens
    weigh less); "bnpo" and "dapo": the sum over all tokens / the number of tokens (identical in
    one process without gradient accumulation); "dr_grpo": the sum / (B * max_completion_length)
    (default T), a constant. Returns shape ``(...)``. Taught in chapter 13.
    """
    masked = per_token * mask
    if loss_type == "grpo":
        return (masked.sum(-1) / mask.sum(-1).clamp(min=1)).mean(-1)
    if loss_type in ("bnpo", "dapo"):
        return masked.sum((-2, -1)) / mask.sum((-2, -1)).clamp(min=1)
    if loss_type == "dr_grpo":
        length = mask.shape[-1] if max_completion_length is None else max_completion_length
        return masked.sum((-2, -1)) / (mask.shape[-2] * length)
    raise ValueError(f"loss_type must be one of {', '.join(map(repr, LOSS_TYPES))}; "
                     f"got {loss_type!r}")


def grpo_loss(logp, old_logp, ref_logp, advantages, mask, *, beta=0.0, epsilon=0.2,
              epsilon_high=None, loss_type="dapo", importance_sampling_level="token",
              max_completion_length=None, kl_estimator="k3", use_bias_correction_kl=True):
    """The GRPO loss, term for term as TRL 1.16's ``GRPOTrainer._compute_loss`` (one process,
    no gradient accumulation). Defaults are TRL's.

    Args:
        logp: ``(B, T)`` log pi_theta of the sampled tokens (with gradient).
        old_logp: ``(B, T)`` log pi_old, the sampler's; None means on-policy (``logp.detach()``).
        ref_logp: ``(B, T)`` log pi_ref; needed only when ``beta != 0``.
        advantages: ``(B,)`` one advantage per sequence, shared by its tokens.
        mask: ``(B, T)`` 1 for a completion token, 0 for padding.
        beta: KL coefficient; epsilon, epsilon_high: clip range [1 - epsilon, 1 + epsilon_high]
            (epsilon_high None: epsilon); loss_type, max_completion_length: see :func:`aggregate`;
        importance_sampling_level: "token" or "sequence" (GSPO), see :func:`importance_ratio`;
        kl_estimator: "k3" (TRL), "k1" or "k2", see :func:`kl_estimate`;
        use_bias_correction_kl: multiply the KL term by the ratio (TRL 1.16's default, True).

    Returns:
        The scalar loss (shape ``(...)`` for leading run dimensions). Taught in chapter 10.
    """
    _check_loss_args(logp, old_logp, ref_logp, advantages, mask, beta, epsilon, epsilon_high,
                     loss_type, importance_sampling_level, max_completion_length, kl_estimator)
    old_logp = logp.detach() if old_logp is None else old_logp
    epsilon_high = epsilon if epsilon_high is None else epsilon_high
    A = advantages.unsqueeze(-1)  # (B, 1): a sequence's advantage, given to each of its tokens

    ratio = importance_ratio(logp, old_logp, mask, importance_sampling_level)  # (B, T) or (B, 1)
    clipped = torch.clamp(ratio, 1 - epsilon, 1 + epsilon_high)
    per_token = -torch.min(ratio * A, clipped * A)  # the pessimistic of the two surrogates

    if beta != 0.0:
        kl = kl_estimate(logp, ref_logp, kl_estimator)  # (B, T), an estimate of KL(pi || pi_ref)
        if use_bias_correction_kl:
            kl = kl * ratio  # importance weight: the tokens were sampled from pi_old
        per_token = per_token + beta * kl

    return aggregate(per_token, mask, loss_type, max_completion_length)


def _check_loss_args(logp, old_logp, ref_logp, advantages, mask, beta, epsilon, epsilon_high,
                     loss_type, level, max_completion_length, kl_estimator) -> None:
    """The checks of :func:`grpo_loss`, kept out of its body: each names the bad argument."""
    for name, t in (("logp", logp), ("old_logp", old_logp), ("ref_logp", ref_logp),
                    ("advantages", advantages), ("mask", mask)):
        if t is not None and not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if logp.ndim < 2:
        raise ValueError(f"logp must have shape (B, T), got {tuple(logp.shape)}")
    for name, t in (("old_logp", old_logp), ("ref_logp", ref_logp), ("mask", mask)):
        if t is not None and t.shape != logp.shape:
            raise ValueError(f"{name} must have logp's shape {tuple(logp.shape)}, "
                             f"got {tuple(t.shape)}")
    if advantages.shape != logp.shape[:-1]:
        raise ValueError(f"advantages must have shape {tuple(logp.shape[:-1])} (one per "
                         f"sequence), got {tuple(advantages.shape)}")
    if not bool(((mask == 0) | (mask == 1)).all()):
        raise ValueError("mask must hold only 0 and 1")
    for name, t in (("logp", logp), ("old_logp", old_logp), ("ref_logp", ref_logp),
                    ("advantages", advantages)):
        if t is not None and bool(torch.isnan(t).any()):
            raise ValueError(f"{name} contains NaN")
    check_float(beta, "beta")
    check_float(epsilon, "epsilon", strict=True)
    if epsilon_high is not None:
        check_float(epsilon_high, "epsilon_high", strict=True)
    check_choice(loss_type, "loss_type", LOSS_TYPES)
    check_choice(level, "importance_sampling_level", IMPORTANCE_SAMPLING_LEVELS)
    check_choice(kl_estimator, "kl_estimator", KL_ESTIMATORS)
    if max_completion_length is not None:
        check_int(max_completion_length, "max_completion_length", 1)
    if beta != 0.0 and ref_logp is None:
        raise ValueError("ref_logp is required when beta != 0")


def trl_advantages(rewards, num_generations: int, scale_rewards: str = "group") -> np.ndarray:
    """Advantages the way TRL 1.16 computes them (``_generate_and_score_completions``).

    ``rewards (..., B)`` hold consecutive groups of ``num_generations`` completions of one
    prompt. A = r - (its group's mean), divided by ``std + 1e-4`` where std is, for
    ``scale_rewards`` "group" (TRL's default), the group's Bessel-corrected (n - 1) std; for
    "batch", one Bessel std over the whole batch; for "none" (Dr. GRPO), nothing. A group whose
    rewards are all equal gets exactly 0.

    Differs from :func:`grpo_core.group_advantages` (the book's chapters 1-9): that takes
    ``(P, G)`` and divides by the *population* std (n), with no epsilon. Taught in chapter 11.
    """
    r = np.asarray(rewards, dtype=np.float64)
    G = check_int(num_generations, "num_generations", 2)
    check_choice(scale_rewards, "scale_rewards", SCALE_REWARDS)
    if r.ndim < 1 or r.shape[-1] % G:
        raise ValueError(f"num_generations ({G}) must divide the batch size (the last axis of "
                         f"rewards, shape {r.shape})")
    groups = r.reshape(*r.shape[:-1], -1, G)  # (..., B / G, G)
    adv = groups - groups.mean(-1, keepdims=True)
    if scale_rewards == "group":
        adv = adv / (groups.std(-1, ddof=1, keepdims=True) + STD_EPS)
    elif scale_rewards == "batch":
        adv = adv / (r.std(-1, ddof=1, keepdims=True)[..., None] + STD_EPS)
    adv = np.where(np.ptp(groups, axis=-1, keepdims=True) == 0, 0.0, adv)  # dead groups: 0
    return adv.reshape(r.shape)


def reward_metrics(rewards, num_generations: int, scale_rewards: str = "group") -> dict:
    """TRL's logged reward metrics of one batch ``rewards (B,)``: ``reward`` (mean),
    ``reward_std`` (Bessel std of the batch), ``frac_reward_zero_std`` (the fraction of
    completions whose std, the group's or for "batch" the batch's, is 0). With leading run
    dimensions ``(..., B)`` each value is an array ``(...)``. Chapter 11."""
    r = np.asarray(rewards, dtype=np.float64)
    G = check_int(num_generations, "num_generations", 2)
    check_choice(scale_rewards, "scale_rewards", SCALE_REWARDS)
    if scale_rewards == "batch":
        zero = np.isclose(r.std(-1, ddof=1), 0.0).astype(float)
    else:
        groups = r.reshape(*r.shape[:-1], -1, G)
        zero = np.isclose(groups.std(-1, ddof=1), 0.0).mean(-1)
    return {"reward": _scalar(r.mean(-1)), "reward_std": _scalar(r.std(-1, ddof=1)),
            "frac_reward_zero_std": _scalar(zero)}


def _scalar(x: np.ndarray) -> float | np.ndarray:
    return float(x) if np.ndim(x) == 0 else np.asarray(x)


def clip_metrics(ratio: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                 epsilon: float = 0.2, epsilon_high: float | None = None) -> dict:
    """TRL's ``clip_ratio/low_mean``, ``high_mean``, ``region_mean``: the fraction of tokens
    whose ratio ``(B, T)`` (or ``(B, 1)`` per sequence) lies outside the clip range *on the side
    where the clip binds* (below 1 - epsilon with A < 0, above 1 + epsilon_high with A > 0).
    A masked mean over tokens (over sequences for a per-sequence ratio); with leading run
    dimensions ``(..., B, T)`` each value is an array ``(...)``. Chapter 10."""
    epsilon_high = epsilon if epsilon_high is None else epsilon_high
    A = advantages.unsqueeze(-1)
    low = ((ratio < 1 - epsilon) & (A < 0)).double()
    high = ((ratio > 1 + epsilon_high) & (A > 0)).double()
    region = torch.maximum(low, high)
    weight = torch.ones_like(low) if ratio.shape[-1] == 1 else mask.double()

    def mean(x: torch.Tensor):
        return _scalar(((x * weight).sum((-2, -1)) / weight.sum((-2, -1)).clamp(min=1)).numpy())

    return {"clip_ratio/low_mean": mean(low), "clip_ratio/high_mean": mean(high),
            "clip_ratio/region_mean": mean(region)}
