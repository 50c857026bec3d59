"""The one update every training loop of the book shares: optimiser steps on one sampled batch.

TRL 1.16's ``GRPOTrainer`` generates a batch, then calls ``_compute_loss`` and
``optimizer.step`` on it ``num_iterations`` x ``steps_per_generation`` times
(``trl/trainer/grpo_trainer.py``: ``_prepare_inputs``, lines 1522-1551, shuffles the generation
batch, cuts it into ``steps_per_generation`` mini-batches and serves them in turn,
``num_iterations`` times). pi_old is the policy that sampled: TRL computes its log-probs before
any step (lines 2636-2659) or, when no step can have moved the policy yet, uses
``per_token_logps.detach()`` (line 3066). Here the first forward pass, detached, is pi_old
unless the caller gives it.

The tabular toy (:mod:`grpo_core.training`), the token world (:mod:`grpo_core.sequences`), the
tiny transformer (:mod:`grpo_core.tiny_lm`) and chapter 17's loops (:mod:`grpo_core.beyond`) each
sample and score their own batch, then call :func:`grpo_update`. Taught in chapter 10, right after
:func:`grpo_core.grpo_loss`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from .loss import grpo_loss

# TRL's names of the metrics the book's loops log, in TRL's order, for the clip family (the
# default "dapo"); other loss types log their own (loss.REGISTRY's metrics)
METRICS = ("reward", "reward_std", "frac_reward_zero_std", "completions/mean_length",
           "completions/clipped_ratio", "kl", "entropy", "clip_ratio/low_mean",
           "clip_ratio/high_mean", "clip_ratio/region_mean")
CLIP_METRICS = METRICS[-3:]

Blocks = list[tuple[torch.Tensor | None, dict]]


def grpo_update(forward: Callable[[], tuple[torch.Tensor, Any]], adv: torch.Tensor,
                mask: torch.Tensor, opt, *, num_iterations: int, loss_kwargs: dict | Blocks,
                ref_logp: torch.Tensor | None = None, old_logp: torch.Tensor | None = None,
                steps_per_generation: int = 1,
                add_terms: Callable[..., torch.Tensor] | None = None,
                metrics: bool = True) -> tuple[dict, torch.Tensor, Any]:
    """``num_iterations`` (mu) passes over one sampled batch, cut into ``steps_per_generation``
    disjoint mini-batches: one ``grpo_loss`` and one optimiser step each, as TRL's
    ``_compute_loss`` + ``optimizer.step``.

    Args:
        forward: ``() -> (logp (..., B, T), extras)``: log pi_theta of the sampled tokens, with
            gradient, and whatever else the world computes in the same pass: a dict's
            ``"entropies" (..., B, T)`` go to ``grpo_loss``; all of it to ``add_terms``.
            Leading dims are independent runs: their losses are summed, so with an
            element-wise optimiser each run follows its own trajectory.
        adv: ``(..., B)`` advantages; mask: ``(..., B, T)`` 1 on completion tokens.
        opt: the optimiser of the parameters ``forward`` reads.
        num_iterations: mu; steps_per_generation: the mini-batches (TRL's knob; B must
            divide). TRL shuffles the batch before cutting it: a loop that wants that
            shuffles its sample.
        loss_kwargs: :func:`grpo_core.grpo_loss`'s keywords (``GRPOConfig.loss_kwargs()``),
            or a list of ``(runs, keywords)``: index tensors into the leading run axis, each
            block of runs with its own keywords (one ``grpo_loss`` call per block), which may
            hold the block's tensors ``(runs, B, ...)`` (``sampling_per_token_logps``,
            ``importance_sampling_ratio``).
        ref_logp: ``(..., B, T)`` log pi_ref, when the loss has a KL term.
        old_logp: ``(..., B, T)`` log pi_old when the caller has it (a stale sampler's batch,
            recomputed by the trainer, as TRL does with vLLM); None: the policy now.
        add_terms: ``(loss (...,), logp, old_logp, extras) -> loss``: a world's extra loss
            terms (the toy's exact KL, or its per-run KL estimates), added before the runs
            are summed (``steps_per_generation`` 1).
        metrics: return what TRL logs for the loss type (``grpo_loss(..., return_info=True)``).

    Returns:
        TRL's metrics of the loss type (``clip_ratio/*`` for the clip family,
        ``cispo_clip_ratio``, ...), each the mean over the steps (a float, or ``(R,)`` with a
        leading run axis, NaN for runs whose loss type does not log it); log pi_old
        ``(..., B, T)``; the last ``extras``.
    """
    blocks = [(None, loss_kwargs)] if isinstance(loss_kwargs, dict) else loss_kwargs
    spg, n_steps = steps_per_generation, num_iterations * steps_per_generation
    size = mask.shape[-2] // spg  # completions per mini-batch
    if mask.shape[-2] % spg or (spg > 1 and add_terms is not None):
        raise ValueError(f"steps_per_generation ({spg}) must divide the batch "
                         f"({mask.shape[-2]}), and be 1 with add_terms")
    whole = {} if spg == 1 else {  # TRL's "dapo" normaliser: the whole batch's real tokens
        "num_items_in_batch": mask.sum((-2, -1)).clamp(min=1.0), "steps_per_generation": spg}
    logs: dict = {}
    for _ in range(num_iterations):
        for s in range(spg):  # disjoint mini-batches, one optimiser step each
            rows = slice(s * size, (s + 1) * size)
            logp, extras = forward()  # the whole batch's log-probs
            if old_logp is None:  # the first pass, before any step: pi_old for all the steps
                old_logp = logp.detach()
            entropies = extras.get("entropies") if isinstance(extras, dict) else None
            total = 0.0
            for runs, kw in blocks:
                out = grpo_loss(*(_take(x, runs, rows) for x in (logp, old_logp, ref_logp)),
                                _take(adv[..., None], runs, rows)[..., 0],
                                _take(mask, runs, rows), entropies=_take(entropies, runs, rows),
                                return_info=metrics, **_take(whole, runs, None),
                                **_take(kw, None, rows))  # with the block's own tensors
                loss, info = out if metrics else (out, {})  # (...,) one loss per run
                if add_terms is not None:
                    loss = add_terms(loss, logp, old_logp, extras)
                total = total + loss.sum()  # runs are independent: one gradient each
                for name, value in info.items():  # TRL's metrics, averaged over the steps
                    _log(logs, name, value / n_steps, runs, adv.shape[:-1])
            opt.zero_grad()
            total.backward()
            opt.step()
    return logs, old_logp, extras


def _take(x, runs: torch.Tensor | None, rows: slice | None):
    """The runs ``runs`` (leading axis) and the batch rows ``rows`` (axis -2) of a tensor ``x``
    ``(R, B, ...)``, of each tensor in a dict; anything else as it is."""
    if isinstance(x, dict):
        return {k: _take(v, runs, rows) for k, v in x.items()}
    if not torch.is_tensor(x):
        return x
    x = x if runs is None else x[runs]
    return x if rows is None else x[..., rows, :]


def _log(logs: dict, name: str, value, runs: torch.Tensor | None, shape: tuple) -> None:
    """Add one step's ``value`` of metric ``name`` to ``logs``: a float, or an array over the
    runs ``shape`` whose runs without the metric (another loss type) stay NaN."""
    if runs is None:
        logs[name] = logs.get(name, 0.0) + value
        return
    out = logs.setdefault(name, np.full(shape, np.nan))
    idx = runs.numpy()
    out[idx] = np.where(np.isnan(out[idx]), 0.0, out[idx]) + value
