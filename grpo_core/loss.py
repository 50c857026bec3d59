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

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from ._validate import check_choice, check_float, check_int

LOSS_TYPES = ("grpo", "bnpo", "dapo", "dr_grpo")  # the four that share PPO's clip (chapters 10-13)
VLLM_IS_MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")
IMPORTANCE_SAMPLING_LEVELS = ("token", "sequence")
KL_ESTIMATORS = ("k1", "k2", "k3")
SCALE_REWARDS = ("group", "batch", "none")
AGGREGATIONS = ("sum_then_normalize", "normalize_then_sum")  # multi_objective_aggregation
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


def clipped_surrogate(ratio, A, logp, *, epsilon, epsilon_high, delta=None, **_):
    """PPO's clip (grpo, bnpo, dapo, dr_grpo, luspo): ``-min(ratio * A, clip(ratio) * A)``;
    ``delta`` (INTELLECT-2's two-sided clip) also caps the unclipped ratio from above.
    TRL 1.16 ``grpo_trainer.py`` lines 3112-3120."""
    clipped = torch.clamp(ratio, 1 - epsilon, 1 + epsilon_high)
    if delta is not None:
        ratio = torch.clamp(ratio, max=delta)
    return -torch.min(ratio * A, clipped * A)  # the pessimistic of the two surrogates


def cispo_surrogate(ratio, A, logp, *, epsilon_high, **_):
    """CISPO (MiniMax-M1): REINFORCE weighted by the ratio, capped at ``epsilon_high`` and
    detached, so every token keeps a gradient. Lines 3109-3111."""
    return -torch.clamp(ratio, max=epsilon_high).detach() * A * logp


def sapo_surrogate(ratio, A, logp, *, sapo_temperature_pos, sapo_temperature_neg, **_):
    """SAPO: a soft sigmoid gate ``4 / tau * sigmoid(tau * (ratio - 1))`` in place of the clip
    (slope 1 at ratio 1). Lines 3121-3124; TRL's ``torch.where`` of two Python floats makes the
    temperatures float32, kept here so values match TRL's bit for bit."""
    tau = torch.where(A > 0, sapo_temperature_pos, sapo_temperature_neg)
    return -torch.sigmoid(tau * (ratio - 1)) * 4 / tau * A


def vespo_surrogate(ratio, A, logp, *, log_ratio, mask, importance_sampling_ratio, **knobs):
    """VESPO: REINFORCE weighted by the detached gamma weight of the sequence ratio,
    see :func:`gamma_weights`. Lines 3125-3136."""
    phi = gamma_weights(A, log_ratio, mask, importance_sampling_ratio, knobs["vespo_k_pos"],
                        knobs["vespo_lambda_pos"], knobs["vespo_k_neg"], knobs["vespo_lambda_neg"])
    return -phi * A * logp


@torch.no_grad()
def gamma_weights(A: torch.Tensor, log_ratio: torch.Tensor, mask: torch.Tensor,
                  importance_sampling_ratio: torch.Tensor | None = None, k_pos: float = 2.0,
                  lambda_pos: float = 3.0, k_neg: float = 3.0,
                  lambda_neg: float = 2.0) -> torch.Tensor:
    """VESPO's weight ``phi(w) = exp(lam) * w**k * exp(-lam * w)`` (phi(1) = 1) of the sequence
    ratio ``w = prod_t pi/pi_old`` (a product, not GSPO's geometric mean), with (k, lam) by the
    sign of A. ``A (..., B, 1)``, ``log_ratio, mask (..., B, T)``, ``importance_sampling_ratio``
    (vLLM's weight, ``(..., B, T)`` or ``(..., B, 1)``) joins w. Returns ``(..., B, 1)``, no
    gradient. TRL 1.16 ``GRPOTrainer.get_gamma_weights``, ``grpo_trainer.py`` lines 2972-3018."""
    lower_clamp = math.log(1e-8)
    seq_log_ratio = torch.sum(torch.clamp(log_ratio, -20.0, 20.0) * mask, dim=-1, keepdim=True)
    if importance_sampling_ratio is not None:
        log_is_ratio = torch.clamp(torch.log(importance_sampling_ratio), lower_clamp, 20.0)
        seq_log_ratio += torch.sum(log_is_ratio, dim=-1, keepdim=True)
    log_w = torch.clamp(seq_log_ratio, lower_clamp, 20.0)
    k = torch.where(A >= 0, k_pos, k_neg)
    lam = torch.where(A >= 0, lambda_pos, lambda_neg).clamp(min=1e-4)
    log_phi = lam + k * log_w - lam * torch.exp(log_w)
    return torch.exp(log_phi).nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)


# --- what TRL logs for each loss type, from the ratio the loss used (lines 3254-3290) ------------

def clip_ratios(ratio, A, logp, *, mask, epsilon, epsilon_high, **_) -> dict:
    """The clip family's ``clip_ratio/low_mean``, ``high_mean``, ``region_mean``: see
    :func:`clip_metrics`. TRL 1.16 lines 3272-3279."""
    return clip_metrics(ratio, A.squeeze(-1), mask, epsilon, epsilon_high)


def cispo_clip_ratio(ratio, A, logp, *, mask, epsilon_high, **_) -> dict:
    """``cispo_clip_ratio``: the share of tokens whose ratio is above the cap ``epsilon_high``
    where A > 0. TRL 1.16 lines 3284-3286."""
    return {"cispo_clip_ratio": masked_mean(((ratio > epsilon_high) & (A > 0)).double(), mask)}


def sapo_gate_share(ratio, A, logp, *, mask, sapo_temperature_pos, sapo_temperature_neg,
                    **_) -> dict:
    """``sapo/gate_share``, the book's (TRL 1.16 logs nothing for "sapo"): the share of the
    on-policy gradient the gate removes, 1 minus its mean slope ``4 sigma'(tau (ratio - 1))``.
    Chapter 17."""
    tau = torch.where(A > 0, sapo_temperature_pos, sapo_temperature_neg).double()
    s = torch.sigmoid(tau * (ratio - 1))
    return {"sapo/gate_share": masked_mean(1 - 4 * s * (1 - s), mask)}


def vespo_phi_mean(ratio, A, logp, *, log_ratio, mask, importance_sampling_ratio,
                   **knobs) -> dict:
    """``vespo/phi_seq_mean``: the mean over sequences of VESPO's weight (:func:`gamma_weights`,
    1 on-policy). TRL 1.16 lines 3287-3288."""
    phi = gamma_weights(A, log_ratio, mask, importance_sampling_ratio, knobs["vespo_k_pos"],
                        knobs["vespo_lambda_pos"], knobs["vespo_k_neg"], knobs["vespo_lambda_neg"])
    return {"vespo/phi_seq_mean": masked_mean(phi, mask)}


# --- the loss types: everything the package knows about each, in one entry -----------------------

@dataclass(frozen=True)
class LossType:
    """One loss type. ``surrogate``: its per-token loss ``(ratio, A, logp, **knobs) -> (B, T)``
    (TRL 1.16 lines 3109-3138). ``aggregation``: how :func:`reduce_loss` averages it, named by
    the loss type whose average it shares: "grpo" (each sequence's token mean, then the mean),
    "bnpo" (the batch's token mean), "dr_grpo" (/ B max_completion_length), "dapo" (/ the
    generation batch's tokens) or "luspo" (each sequence's token sum, then the mean); lines
    3152-3184. ``metrics``: what TRL logs for it, from the same ratio (lines 3270-3290).
    ``on_policy_as``, ``on_policy_factor(epsilon, epsilon_high, max_completion_length)``: at
    mu = 1 (ratio 1 in value) its gradient is the factor times that of ``on_policy_as``, one
    of chapter 13's four averages (chapter 17). ``closed_form``: that gradient is
    ``-A / n_tokens`` per token, which :mod:`grpo_core.training`'s on-policy step writes out.
    ``weighs_vllm``: the surrogate takes vLLM's weight itself (TRL lines 3146-3147 skip it)."""

    surrogate: Callable[..., torch.Tensor]
    aggregation: str
    metrics: Callable[..., dict]
    on_policy_as: str
    on_policy_factor: Callable[[float, float | None, int], float] = lambda eps, high, length: 1.0
    closed_form: bool = False
    weighs_vllm: bool = False


def _cispo_factor(epsilon: float, epsilon_high: float | None, length: int) -> float:
    return min(1.0, epsilon if epsilon_high is None else epsilon_high)  # the constant weight


def _luspo_factor(epsilon: float, epsilon_high: float | None, length: int) -> float:
    return float(length)  # a sum over each answer's tokens, where dr_grpo divides by L_max


REGISTRY: dict[str, LossType] = {  # TRL 1.16's eight, chapters 10-13 and 17
    "grpo": LossType(clipped_surrogate, "grpo", clip_ratios, "grpo", closed_form=True),
    "bnpo": LossType(clipped_surrogate, "bnpo", clip_ratios, "dapo", closed_form=True),
    "dapo": LossType(clipped_surrogate, "dapo", clip_ratios, "dapo", closed_form=True),
    "dr_grpo": LossType(clipped_surrogate, "dr_grpo", clip_ratios, "dr_grpo", closed_form=True),
    "cispo": LossType(cispo_surrogate, "dapo", cispo_clip_ratio, "dapo", _cispo_factor),
    "sapo": LossType(sapo_surrogate, "grpo", sapo_gate_share, "grpo"),
    "luspo": LossType(clipped_surrogate, "luspo", clip_ratios, "dr_grpo", _luspo_factor),
    "vespo": LossType(vespo_surrogate, "dapo", vespo_phi_mean, "dapo", weighs_vllm=True),
}
ALL_LOSS_TYPES = tuple(REGISTRY)
SURROGATES = {name: t.surrogate for name, t in REGISTRY.items()}  # chapter 17's table of them


def off_policy_mask(A: torch.Tensor, logp: torch.Tensor, sampling_logp: torch.Tensor,
                    mask: torch.Tensor, threshold: float) -> torch.Tensor:
    """DeepSeek-V3.2's off-policy sequence mask ``(..., B, 1)``: drop (0) a sequence whose
    advantage is negative *and* whose mean ``log pi_sampler - log pi_theta`` over its tokens
    exceeds ``threshold``; keep (1) the rest. Tokens the sampler could not score (NaN) count 0.
    TRL 1.16 ``GRPOTrainer.get_off_policy_mask``, ``grpo_trainer.py`` lines 2945-2970."""
    kl_div = torch.nan_to_num(sampling_logp - logp.detach(), nan=0.0)
    avg_seq_kl = (kl_div * mask).sum(-1, keepdim=True) / mask.sum(-1, keepdim=True).clamp(min=1.0)
    return ((A >= 0) | (avg_seq_kl <= threshold)).to(dtype=mask.dtype)


def high_entropy_mask(entropies: torch.Tensor, mask: torch.Tensor,
                      top_entropy_quantile: float) -> torch.Tensor:
    """"Beyond the 80/20 rule": True for the tokens ``(..., B, T)`` whose entropy is at least
    the ``1 - top_entropy_quantile`` quantile of the batch's real tokens (float32, as TRL), so
    the loss keeps the top ``top_entropy_quantile`` of tokens by entropy. One quantile per
    leading index. TRL 1.16 ``get_high_entropy_mask``, ``grpo_trainer.py`` lines 1380-1416,
    called at 3049-3050 (one process)."""
    local = torch.where(mask.bool(), entropies.float(), torch.nan).flatten(-2)  # padding: NaN
    threshold = torch.nanquantile(local, 1 - top_entropy_quantile, dim=-1)  # (...), NaN if empty
    keep = entropies * mask.float() >= threshold[..., None, None]
    return keep & mask.bool()


def entropy_bonus(entropies: torch.Tensor, mask: torch.Tensor,
                  gradient_accumulation_steps: int = 1) -> torch.Tensor:
    """The mean entropy ``(...)`` over the tokens of ``mask (..., B, T)`` (the loss subtracts
    ``entropy_coef`` times it), whatever the loss type. TRL 1.16 lines 3189-3211."""
    total = (entropies * mask).sum((-2, -1)) / mask.sum((-2, -1)).clamp(min=1.0)
    return total / gradient_accumulation_steps


def reduce_loss(per_token: torch.Tensor, mask: torch.Tensor, loss_type: str = "dapo",
                max_completion_length: int | None = None, *,
                num_items_in_batch: float | torch.Tensor | None = None,
                gradient_accumulation_steps: int = 1, num_processes: int = 1,
                steps_per_generation: int | None = None) -> torch.Tensor:
    """The eight loss types' aggregations ``(..., B, T) -> (...)`` with TRL's normalisers for one
    micro-batch of ``gradient_accumulation_steps`` on one of ``num_processes`` processes, by the
    loss type's ``aggregation`` (:data:`REGISTRY`).

    "grpo" (also "sapo"), "bnpo", "dr_grpo": :func:`aggregate` / gradient_accumulation_steps;
    "luspo": the sum of each sequence's token losses (a length-weighted sum), mean over
    sequences, / gradient_accumulation_steps; "dapo" (also "cispo", "vespo"): the token sum /
    (num_items_in_batch / num_processes * gradient_accumulation_steps / steps_per_generation),
    num_items_in_batch the real tokens of the whole generation batch on all processes (default:
    this batch's, allowed only with one process, no accumulation and ``steps_per_generation``
    1). ``steps_per_generation`` None means ``gradient_accumulation_steps`` (TRL's default,
    ``grpo_config.py`` lines 1095-1098). TRL 1.16 ``grpo_trainer.py`` lines 3152-3184.
    """
    spg = gradient_accumulation_steps if steps_per_generation is None else steps_per_generation
    how = REGISTRY[loss_type].aggregation
    if how == "dapo":
        n = (mask.sum((-2, -1)) if num_items_in_batch is None
             else torch.as_tensor(num_items_in_batch, dtype=per_token.dtype))
        normalizer = n.clamp(min=1.0) / num_processes * gradient_accumulation_steps / spg
        return (per_token * mask).sum((-2, -1)) / normalizer
    if how == "luspo":
        return (per_token * mask).sum(-1).mean(-1) / gradient_accumulation_steps
    return aggregate(per_token, mask, how, max_completion_length) / gradient_accumulation_steps


def grpo_loss(logp: torch.Tensor, old_logp: torch.Tensor | None, ref_logp: torch.Tensor | None,
              advantages: torch.Tensor, mask: torch.Tensor, *, beta: float = 0.0,
              epsilon: float = 0.2, epsilon_high: float | None = None,
              delta: float | None = None, loss_type: str = "dapo",
              importance_sampling_level: str = "token", max_completion_length: int | None = None,
              kl_estimator: str = "k3", use_bias_correction_kl: bool = True,
              sapo_temperature_pos: float = 1.0, sapo_temperature_neg: float = 1.05,
              vespo_k_pos: float = 2.0, vespo_lambda_pos: float = 3.0, vespo_k_neg: float = 3.0,
              vespo_lambda_neg: float = 2.0, top_entropy_quantile: float = 1.0,
              entropy_coef: float = 0.0, off_policy_mask_threshold: float | None = None,
              entropies: torch.Tensor | None = None,
              sampling_per_token_logps: torch.Tensor | None = None,
              importance_sampling_ratio: torch.Tensor | None = None,
              num_items_in_batch: float | torch.Tensor | None = None,
              gradient_accumulation_steps: int = 1, num_processes: int = 1,
              steps_per_generation: int | None = None,
              return_info: bool = False) -> torch.Tensor | tuple[torch.Tensor, dict]:
    """The GRPO loss, term for term as TRL 1.16's ``GRPOTrainer._compute_loss``
    (``trl/trainer/grpo_trainer.py`` lines 3020-3184). Names and defaults are TRL's.

    Args:
        logp: ``(B, T)`` log pi_theta of the sampled tokens (with gradient).
        old_logp: ``(B, T)`` log pi_old, the sampler's; None means on-policy (``logp.detach()``).
        ref_logp: ``(B, T)`` log pi_ref; needed only when ``beta != 0``.
        advantages: ``(B,)`` one advantage per sequence, shared by its tokens.
        mask: ``(B, T)`` 1 for a completion token, 0 for padding.
        beta: KL coefficient; kl_estimator: "k3" (TRL), "k1" or "k2", see :func:`kl_estimate`;
            use_bias_correction_kl: multiply the KL term by the ratio (TRL's default, True).
        epsilon, epsilon_high: clip range [1 - epsilon, 1 + epsilon_high] (None: epsilon); for
            "cispo", epsilon_high is the cap of the ratio itself; delta: see
            :func:`clipped_surrogate`.
        loss_type: one of :data:`ALL_LOSS_TYPES`: its entry in :data:`REGISTRY` gives the
            surrogate, the aggregation (:func:`reduce_loss`) and the metrics; sapo_*, vespo_*:
            their knobs.
        importance_sampling_level: "token" or "sequence" (GSPO), see :func:`importance_ratio`.
        top_entropy_quantile, entropies ``(B, T)``: keep only the high-entropy tokens
            (:func:`high_entropy_mask`); entropy_coef: subtract ``entropy_coef`` times the mean
            entropy (:func:`entropy_bonus`). Both need ``entropies``.
        off_policy_mask_threshold, sampling_per_token_logps ``(B, T)`` (default ``old_logp``):
            see :func:`off_policy_mask`.
        importance_sampling_ratio: ``(B, T)`` or ``(B, 1)`` vLLM's correction weight
            (:func:`vllm_importance_sampling_ratio`); multiplies the policy term, or for
            "vespo" joins its gamma weight. None: no vLLM.
        max_completion_length, num_items_in_batch, gradient_accumulation_steps,
            num_processes, steps_per_generation: the normalisers, see :func:`reduce_loss`.
        return_info: also return what TRL logs for this loss type (``clip_ratio/*``,
            ``cispo_clip_ratio``, ...: the entry's ``metrics``), from the same ratio.

    Returns:
        The scalar loss (shape ``(...)`` for leading run dimensions ``(..., B, T)``); with
        ``return_info``, ``(loss, info)``, info's values floats (arrays ``(...)`` with run
        dimensions). Taught in chapters 10 and 17.
    """
    _check_loss_args(locals())
    old_logp = logp.detach() if old_logp is None else old_logp
    epsilon_high = epsilon if epsilon_high is None else epsilon_high
    A = advantages.unsqueeze(-1)  # (B, 1): a sequence's advantage, given to each of its tokens

    ratio = importance_ratio(logp, old_logp, mask, importance_sampling_level)  # (B, T) or (B, 1)
    knobs = dict(epsilon=epsilon, epsilon_high=epsilon_high, delta=delta,
                 sapo_temperature_pos=sapo_temperature_pos,
                 sapo_temperature_neg=sapo_temperature_neg, vespo_k_pos=vespo_k_pos,
                 vespo_lambda_pos=vespo_lambda_pos, vespo_k_neg=vespo_k_neg,
                 vespo_lambda_neg=vespo_lambda_neg, log_ratio=logp - old_logp, mask=mask,
                 importance_sampling_ratio=importance_sampling_ratio)
    per_token = REGISTRY[loss_type].surrogate(ratio, A, logp, **knobs)

    if off_policy_mask_threshold is not None:  # drop stale sequences with A < 0
        sampling = old_logp if sampling_per_token_logps is None else sampling_per_token_logps
        per_token = per_token * off_policy_mask(A, logp, sampling, mask, off_policy_mask_threshold)
    entropy_mask = None
    if top_entropy_quantile < 1.0:  # keep the high-entropy tokens only
        entropy_mask = high_entropy_mask(entropies, mask, top_entropy_quantile)
        per_token = per_token * entropy_mask
    if importance_sampling_ratio is not None and not REGISTRY[loss_type].weighs_vllm:
        per_token = per_token * importance_sampling_ratio  # vLLM's weight, policy term only
    if beta != 0.0:
        kl = kl_estimate(logp, ref_logp, kl_estimator)  # (B, T), an estimate of KL(pi || pi_ref)
        if use_bias_correction_kl:
            kl = kl * ratio  # importance weight: the tokens were sampled from pi_old
        per_token = per_token + beta * kl

    loss = reduce_loss(per_token, mask, loss_type, max_completion_length,
                       num_items_in_batch=num_items_in_batch,
                       gradient_accumulation_steps=gradient_accumulation_steps,
                       num_processes=num_processes, steps_per_generation=steps_per_generation)
    if entropy_coef != 0.0:  # the bonus acts on the tokens the policy term uses
        bonus_mask = mask if entropy_mask is None else mask * entropy_mask
        bonus = entropy_bonus(entropies, bonus_mask, gradient_accumulation_steps)
        loss = loss - entropy_coef * bonus
    if not return_info:
        return loss
    with torch.no_grad():  # what TRL logs, from the ratio this loss used (cleanrl's clipfrac)
        return loss, REGISTRY[loss_type].metrics(ratio.detach(), A, logp, **knobs)


def _check_loss_args(a: dict) -> None:
    """The checks of :func:`grpo_loss` (``a`` its arguments), kept out of its body: each names
    the bad argument."""
    logp, mask = a["logp"], a["mask"]
    tensors = ("logp", "old_logp", "ref_logp", "advantages", "mask", "entropies",
               "sampling_per_token_logps", "importance_sampling_ratio")
    for name in tensors:
        if a[name] is not None and not isinstance(a[name], torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(a[name]).__name__}")
    if logp.ndim < 2:
        raise ValueError(f"logp must have shape (B, T), got {tuple(logp.shape)}")
    for name in ("old_logp", "ref_logp", "mask", "entropies", "sampling_per_token_logps"):
        if a[name] is not None and a[name].shape != logp.shape:
            raise ValueError(f"{name} must have logp's shape {tuple(logp.shape)}, "
                             f"got {tuple(a[name].shape)}")
    isr = a["importance_sampling_ratio"]
    if isr is not None and isr.shape not in (logp.shape, (*logp.shape[:-1], 1)):
        raise ValueError(f"importance_sampling_ratio must have shape {tuple(logp.shape)} or "
                         f"{(*logp.shape[:-1], 1)}, got {tuple(isr.shape)}")
    if isr is not None and not bool((isr >= 0).all()):  # False for NaN too
        raise ValueError("importance_sampling_ratio must be >= 0 (no NaN)")
    if a["advantages"].shape != logp.shape[:-1]:
        raise ValueError(f"advantages must have shape {tuple(logp.shape[:-1])} (one per "
                         f"sequence), got {tuple(a['advantages'].shape)}")
    if not bool(((mask == 0) | (mask == 1)).all()):
        raise ValueError("mask must hold only 0 and 1")
    for name in ("logp", "old_logp", "ref_logp", "advantages", "entropies"):
        if a[name] is not None and bool(torch.isnan(a[name]).any()):
            raise ValueError(f"{name} contains NaN")
    for name, check in LOSS_KNOB_CHECKS.items():  # the checks GRPOConfig makes too
        check(a[name], name)
    if a["beta"] != 0.0 and a["ref_logp"] is None:
        raise ValueError("ref_logp is required when beta != 0")
    if (a["top_entropy_quantile"] < 1 or a["entropy_coef"] != 0) and a["entropies"] is None:
        raise ValueError("entropies (B, T) are required when top_entropy_quantile < 1 or "
                         "entropy_coef != 0")
    gas = check_int(a["gradient_accumulation_steps"], "gradient_accumulation_steps", 1)
    n_proc = check_int(a["num_processes"], "num_processes", 1)
    spg = a["steps_per_generation"]
    if spg is not None:
        check_int(spg, "steps_per_generation", 1)
    n_items = a["num_items_in_batch"]
    if n_items is None and REGISTRY[a["loss_type"]].aggregation == "dapo" and (
            gas, n_proc, 1 if spg is None else spg) != (1, 1, 1):
        raise ValueError("num_items_in_batch (the real tokens of the whole generation batch, "
                         "all processes) is required with gradient_accumulation_steps, "
                         "num_processes or steps_per_generation != 1")
    if n_items is not None and not bool((torch.as_tensor(n_items) > 0).all()):
        raise ValueError(f"num_items_in_batch must be > 0, got {n_items}")


def _optional(check: Callable) -> Callable:
    """A check that also lets None (the knob off) through."""
    return lambda v, n: v is None or check(v, n)


def _fraction(v, n):
    if not 0 <= check_float(v, n) <= 1:
        raise ValueError(f"{n} must be in [0, 1], got {v}")


def _reward_weights(v, n):
    for w in v:
        check_float(w, n, minimum=-math.inf)


# The range checks of every knob of this module's functions, by TRL's name: grpo_loss runs those
# of its arguments, GRPOConfig all of them on its fields (one validator, two callers).
KNOB_CHECKS: dict[str, Callable[[object, str], object]] = {
    "beta": lambda v, n: check_float(v, n),
    "epsilon": lambda v, n: check_float(v, n, strict=True),
    "epsilon_high": _optional(lambda v, n: check_float(v, n, strict=True)),
    "delta": _optional(lambda v, n: check_float(v, n, strict=True)),
    "loss_type": lambda v, n: check_choice(v, n, ALL_LOSS_TYPES),
    "importance_sampling_level": lambda v, n: check_choice(v, n, IMPORTANCE_SAMPLING_LEVELS),
    "kl_estimator": lambda v, n: check_choice(v, n, KL_ESTIMATORS),
    "use_bias_correction_kl": lambda v, n: check_choice(v, n, (True, False)),
    "max_completion_length": _optional(lambda v, n: check_int(v, n, 1)),
    "sapo_temperature_neg": lambda v, n: check_float(v, n, strict=True),
    "sapo_temperature_pos": lambda v, n: check_float(v, n, strict=True),
    "vespo_k_pos": lambda v, n: check_float(v, n),
    "vespo_lambda_pos": lambda v, n: check_float(v, n),
    "vespo_k_neg": lambda v, n: check_float(v, n),
    "vespo_lambda_neg": lambda v, n: check_float(v, n),
    "top_entropy_quantile": _fraction,
    "entropy_coef": lambda v, n: check_float(v, n, minimum=-math.inf),
    "off_policy_mask_threshold": _optional(lambda v, n: check_float(v, n, minimum=-math.inf)),
    # trl_rewards' and vllm_importance_sampling_ratio's knobs
    "reward_weights": _optional(_reward_weights),
    "multi_objective_aggregation": lambda v, n: check_choice(v, n, AGGREGATIONS),
    "vllm_importance_sampling_mode": lambda v, n: check_choice(v, n, VLLM_IS_MODES),
    "vllm_importance_sampling_clip_max": _optional(lambda v, n: check_float(v, n)),
    "vllm_importance_sampling_clip_min": _optional(lambda v, n: check_float(v, n)),
}
LOSS_KNOB_CHECKS = {name: KNOB_CHECKS[name] for name in (  # grpo_loss's knobs
    "beta", "epsilon", "epsilon_high", "delta", "loss_type", "importance_sampling_level",
    "kl_estimator", "use_bias_correction_kl", "max_completion_length", "sapo_temperature_neg",
    "sapo_temperature_pos", "vespo_k_pos", "vespo_lambda_pos", "vespo_k_neg", "vespo_lambda_neg",
    "top_entropy_quantile", "entropy_coef", "off_policy_mask_threshold")}


def vllm_importance_sampling_ratio(old_logp: torch.Tensor, sampling_logp: torch.Tensor,
                                   mask: torch.Tensor, mode: str = "sequence_mask",
                                   clip_min: float | None = None,
                                   clip_max: float | None = 3.0) -> torch.Tensor:
    """vLLM's importance-sampling correction weight: ``pi_old / pi_sampler`` of each token
    ``(..., B, T)`` (``mode`` "token_*") or of each sequence ``(..., B, 1)`` ("sequence_*", the
    product over its tokens); "*_truncate" clamps it to [clip_min, clip_max], "*_mask" sets it
    to 0 outside. Tokens the sampler could not score (NaN) get ratio 1. Defaults are TRL's
    (``vllm_importance_sampling_mode``, ``_clip_min``, ``_clip_max``, ``grpo_config.py`` lines
    934-961). TRL 1.16 ``grpo_trainer.py`` lines 2658-2703. Passed to :func:`grpo_loss` as
    ``importance_sampling_ratio``. Chapter 17."""
    check_choice(mode, "vllm_importance_sampling_mode", VLLM_IS_MODES)
    diff = torch.nan_to_num((old_logp - sampling_logp) * mask, nan=0.0)
    if mode in ("sequence_mask", "sequence_truncate"):
        diff = diff.sum(dim=-1, keepdim=True)
    ratio = torch.exp(diff)
    if mode.endswith("_truncate"):
        if clip_min is None and clip_max is None:
            raise ValueError("vllm_importance_sampling_clip_min or _clip_max must be set for a "
                             "*_truncate mode")
        return torch.clamp(ratio, min=clip_min, max=clip_max)
    lo = -math.inf if clip_min is None else clip_min
    hi = math.inf if clip_max is None else clip_max
    return ratio.masked_fill((ratio < lo) | (ratio > hi), value=0.0)


def trl_rewards(rewards_per_func, reward_weights=None,
                multi_objective_aggregation: str = "sum_then_normalize",
                num_generations: int | None = None) -> np.ndarray:
    """One reward per completion from several reward functions, as TRL 1.16 combines them.

    ``rewards_per_func (..., B, F)``: column f holds reward function f's rewards; NaN where it
    returned None. ``reward_weights`` (F,): default all 1 (``grpo_trainer.py`` lines 568-576).
    "sum_then_normalize" (TRL's default): the weighted sum, NaN ignored (``nansum``);
    "normalize_then_sum" (GDPO): each function's rewards are first normalised within their
    group of ``num_generations`` (nanmean, Bessel nanstd + 1e-4), then summed with the weights.
    A completion for which *every* function returned None gets NaN, which
    :func:`trl_advantages` leaves out of the baseline and gives advantage 0; one for which only
    some did gets the sum of the others. Returns ``(..., B)``, to pass to :func:`trl_advantages`
    with the same ``multi_objective_aggregation``. TRL 1.16 ``grpo_trainer.py`` lines 2755-2797
    (None becomes NaN: 1627-1636). Chapter 17.
    """
    r = np.asarray(rewards_per_func, dtype=np.float64)
    check_choice(multi_objective_aggregation, "multi_objective_aggregation", AGGREGATIONS)
    if r.ndim < 2:
        raise ValueError(f"rewards_per_func must have shape (B, F) (one column per reward "
                         f"function), got {r.shape}")
    if np.isinf(r).any():
        raise ValueError("rewards_per_func must not be infinite (None is NaN)")
    F = r.shape[-1]
    w = np.ones(F) if reward_weights is None else np.asarray(reward_weights, dtype=np.float64)
    if w.shape != (F,) or not np.isfinite(w).all():
        raise ValueError(f"reward_weights must be {F} finite numbers (one per reward function), "
                         f"got {reward_weights!r}")
    unscorable = np.isnan(r).all(-1)
    if multi_objective_aggregation == "normalize_then_sum":
        if num_generations is None:
            raise ValueError('num_generations is required for "normalize_then_sum"')
        G = _check_groups(r.shape[-2], num_generations, "rewards_per_func")
        groups = r.reshape(*r.shape[:-2], -1, G, F)  # (..., B / G, G, F)
        with warnings.catch_warnings():  # a group of all-None rewards: NaN, as TRL
            warnings.simplefilter("ignore", RuntimeWarning)
            std = np.nanstd(groups, -2, ddof=1, keepdims=True)
            centred = groups - np.nanmean(groups, -2, keepdims=True)
            r = (centred / (std + STD_EPS)).reshape(r.shape)
    total = np.nansum(r * w, -1)
    return np.where(unscorable, np.nan, total)


def _check_groups(B: int, num_generations: int, name: str) -> int:
    G = check_int(num_generations, "num_generations", 2)
    if B % G:
        raise ValueError(f"num_generations ({G}) must divide the batch size ({B}, {name})")
    return G


def trl_advantages(rewards, num_generations: int, scale_rewards: str = "group",
                   multi_objective_aggregation: str = "sum_then_normalize") -> np.ndarray:
    """Advantages the way TRL 1.16 computes them (``_generate_and_score_completions``).

    ``rewards (..., B)`` hold consecutive groups of ``num_generations`` completions of one
    prompt. A = r - (its group's mean), divided by ``std + 1e-4`` where std is, for
    ``scale_rewards`` "group" (TRL's default), the group's Bessel-corrected (n - 1) std; for
    "batch", one Bessel std over the whole batch; for "none" (Dr. GRPO), nothing. A group whose
    rewards are all equal gets exactly 0 (TRL, in float32: 0 up to rounding for non-dyadic
    rewards; eight rewards of 0.3 give 3e-4 there, a group that TRL's frac_reward_zero_std does
    not count: chapter 11). With ``multi_objective_aggregation="normalize_then_sum"`` (rewards from
    :func:`trl_rewards`) A = (r - batch mean) / (batch std + 1e-4) whatever ``scale_rewards``.

    NaN rewards (every reward function returned None) are left out of every mean and std
    (TRL's nanmean and nanstd) and get advantage 0, as does every completion whose std is
    undefined (a group with a single scored completion). TRL 1.16 ``grpo_trainer.py`` lines
    2761-2810. Differs from :func:`grpo_core.group_advantages` (the book's chapters 1-9): that
    takes ``(P, G)`` and divides by the *population* std (n), with no epsilon. Chapters 11, 17.
    """
    r = np.asarray(rewards, dtype=np.float64)
    check_choice(scale_rewards, "scale_rewards", SCALE_REWARDS)
    check_choice(multi_objective_aggregation, "multi_objective_aggregation", AGGREGATIONS)
    if r.ndim < 1:
        raise ValueError(f"rewards must have shape (B,), got {r.shape}")
    G = _check_groups(r.shape[-1], num_generations, "the last axis of rewards")
    if np.isinf(r).any():
        raise ValueError("rewards must not be infinite (NaN marks an unscorable completion)")
    groups = r.reshape(*r.shape[:-1], -1, G)  # (..., B / G, G)
    with warnings.catch_warnings():  # groups or batches with < 2 scored rewards: NaN, then 0
        warnings.simplefilter("ignore", RuntimeWarning)
        if multi_objective_aggregation == "normalize_then_sum":
            adv = (r - np.nanmean(r, -1, keepdims=True)) / (
                np.nanstd(r, -1, ddof=1, keepdims=True) + STD_EPS)
            return np.nan_to_num(adv, nan=0.0)
        adv = groups - np.nanmean(groups, -1, keepdims=True)
        if scale_rewards == "group":
            adv = adv / (np.nanstd(groups, -1, ddof=1, keepdims=True) + STD_EPS)
        elif scale_rewards == "batch":
            adv = adv / (np.nanstd(r, -1, ddof=1, keepdims=True)[..., None] + STD_EPS)
        dead = np.nanmax(groups, -1, keepdims=True) == np.nanmin(groups, -1, keepdims=True)
    adv = np.where(dead, 0.0, adv)  # dead groups: exactly 0
    return np.nan_to_num(adv, nan=0.0).reshape(r.shape)


def reward_metrics(rewards, num_generations: int, scale_rewards: str = "group") -> dict:
    """TRL's logged reward metrics of one batch ``rewards (B,)``: ``reward`` (mean),
    ``reward_std`` (Bessel std of the batch), ``frac_reward_zero_std`` (the fraction of
    completions whose std, the group's or for "batch" the batch's, is 0). NaN rewards are left
    out (TRL's nanmean, nanstd). With leading run dimensions ``(..., B)`` each value is an array
    ``(...)``. Chapter 11."""
    r = np.asarray(rewards, dtype=np.float64)
    G = check_int(num_generations, "num_generations", 2)
    check_choice(scale_rewards, "scale_rewards", SCALE_REWARDS)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        if scale_rewards == "batch":
            zero = np.isclose(np.nanstd(r, -1, ddof=1), 0.0).astype(float)
        else:
            groups = r.reshape(*r.shape[:-1], -1, G)
            zero = np.isclose(np.nanstd(groups, -1, ddof=1), 0.0).mean(-1)
        return {"reward": _scalar(np.nanmean(r, -1)),
                "reward_std": _scalar(np.nanstd(r, -1, ddof=1)),
                "frac_reward_zero_std": _scalar(zero)}


def _scalar(x: np.ndarray) -> float | np.ndarray:
    return float(x) if np.ndim(x) == 0 else np.asarray(x)


def masked_mean(x: torch.Tensor, mask: torch.Tensor):
    """TRL's ``global_masked_mean`` in one process: the mean of ``x (..., B, T)`` over the real
    tokens of ``mask``, or over the sequences for a per-sequence ``x (..., B, 1)``; a float, or
    an array ``(...)`` with leading run dimensions. TRL 1.16 lines 3260-3266."""
    weight = torch.ones_like(x) if x.shape[-1] == 1 else mask.double()
    return _scalar(((x * weight).sum((-2, -1)) / weight.sum((-2, -1)).clamp(min=1)).numpy())


def clip_metrics(ratio: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                 epsilon: float = 0.2, epsilon_high: float | None = None) -> dict:
    """TRL's ``clip_ratio/low_mean``, ``high_mean``, ``region_mean``: the fraction of tokens
    whose ratio ``(B, T)`` (or ``(B, 1)`` per sequence) lies outside the clip range *on the side
    where the clip binds* (below 1 - epsilon with A < 0, above 1 + epsilon_high with A > 0).
    A masked mean over tokens (over sequences for a per-sequence ratio); with leading run
    dimensions ``(..., B, T)`` each value is an array ``(...)``. Logged by TRL for the clip
    family only (:data:`REGISTRY`). Chapter 10."""
    epsilon_high = epsilon if epsilon_high is None else epsilon_high
    A = advantages.unsqueeze(-1)
    low = ((ratio < 1 - epsilon) & (A < 0)).double()
    high = ((ratio > 1 + epsilon_high) & (A > 0)).double()
    region = torch.maximum(low, high)
    return {"clip_ratio/low_mean": masked_mean(low, mask),
            "clip_ratio/high_mean": masked_mean(high, mask),
            "clip_ratio/region_mean": masked_mean(region, mask)}
