"""The one update every training loop of the book shares: mu optimiser steps on one sampled batch.

TRL 1.16's ``GRPOTrainer`` generates a batch, then calls ``_compute_loss`` and ``optimizer.step``
``num_iterations`` times on it (TRL 1.16 ``trl/trainer/grpo_trainer.py``: the batch is buffered
by ``_prepare_inputs``, lines 1522-1551, and reused for ``num_iterations`` x
``steps_per_generation`` steps; ``old_per_token_logps`` is None when no step can have moved the
policy, lines 2636-2659, and ``_compute_loss`` then uses ``per_token_logps.detach()``, lines
3065-3066). Here the log-probs of the first
of the mu forward passes, detached, are pi_old: the sampler's log-probs, before any step.

The tabular toy (:mod:`grpo_core.training`), the token world (:mod:`grpo_core.sequences`) and the
tiny transformer (:mod:`grpo_core.tiny_lm`) each sample and score their own batch, then call
:func:`grpo_update`. Taught in chapter 10, right after :func:`grpo_core.grpo_loss`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from .loss import clip_metrics, grpo_loss, importance_ratio

# TRL's names of the metrics the book's loops log, in TRL's order (a loop logs those it has)
METRICS = ("reward", "reward_std", "frac_reward_zero_std", "completions/mean_length",
           "completions/clipped_ratio", "kl", "entropy", "clip_ratio/low_mean",
           "clip_ratio/high_mean", "clip_ratio/region_mean")
CLIP_METRICS = METRICS[-3:]

Blocks = list[tuple[torch.Tensor | None, dict]]


def grpo_update(forward: Callable[[], tuple[torch.Tensor, Any]], adv: torch.Tensor,
                mask: torch.Tensor, opt, *, num_iterations: int,
                loss_kwargs: dict | Blocks, ref_logp: torch.Tensor | None = None,
                add_terms: Callable[..., torch.Tensor] | None = None,
                metrics: bool = True) -> tuple[dict, torch.Tensor, Any]:
    """``num_iterations`` (mu) optimiser steps on one sampled batch, as TRL's
    ``_compute_loss`` + ``optimizer.step``.

    Args:
        forward: ``() -> (logp (..., B, T), aux)``: log pi_theta of the sampled tokens,
            with gradient, and whatever else the world wants from the same pass
            (entropies, the full log-softmax). Leading dims are independent runs: their
            losses are summed, so with an element-wise optimiser each run follows its
            own trajectory.
        adv: ``(..., B)`` advantages; mask: ``(..., B, T)`` 1 on completion tokens.
        opt: the optimiser of the parameters ``forward`` reads.
        loss_kwargs: :func:`grpo_core.grpo_loss`'s keywords
            (``GRPOConfig.loss_kwargs()``), or a list of ``(runs, keywords)``: index
            tensors into the leading run axis, each block of runs with its own loss
            knobs (one ``grpo_loss`` call per block).
        ref_logp: ``(..., B, T)`` log pi_ref, when the loss has a KL term.
        add_terms: ``(loss (...,), logp, old_logp, aux) -> loss``: a world's extra
            loss terms (the toy's exact KL, or its per-run KL estimates), added before
            the runs are summed.
        metrics: compute the clip metrics (False: return an empty dict).

    Returns:
        TRL's clip metrics (``clip_ratio/low_mean``, ``high_mean``, ``region_mean``),
        each the mean over the mu steps (a float, or ``(R,)`` with a leading run axis);
        log pi_old ``(..., B, T)``; the last ``aux``.
    """
    blocks = [(None, loss_kwargs)] if isinstance(loss_kwargs, dict) else loss_kwargs
    clip = {name: 0.0 if adv.ndim == 1 else np.zeros(adv.shape[:-1])  # one value per run
            for name in CLIP_METRICS}
    for k in range(num_iterations):
        logp, aux = forward()
        if k == 0:  # pi_old: the policy that sampled the batch, fixed for its mu steps
            old_logp = logp.detach()
        total = 0.0
        for runs, kw in blocks:
            batch = (_rows(x, runs) for x in (logp, old_logp, ref_logp, adv, mask))
            loss = grpo_loss(*batch, **kw)  # (...,) one loss per run
            if add_terms is not None:
                loss = add_terms(loss, logp, old_logp, aux)
            total = total + loss.sum()  # runs are independent: one gradient each
        opt.zero_grad()
        total.backward()
        opt.step()
        if num_iterations == 1 or not metrics:  # mu = 1: the ratio is exactly 1, no clip
            continue
        for runs, kw in blocks:  # TRL's clip metrics (grpo_trainer.py 3272-3279)
            level = kw.get("importance_sampling_level", "token")
            ratio = importance_ratio(_rows(logp.detach(), runs), _rows(old_logp, runs),
                                     _rows(mask, runs), level)
            values = clip_metrics(ratio, _rows(adv, runs), _rows(mask, runs),
                                  kw.get("epsilon", 0.2), kw.get("epsilon_high"))
            for name, v in values.items():
                if runs is None:
                    clip[name] = clip[name] + v / num_iterations
                else:  # one array over all runs, filled block by block
                    clip[name][runs.numpy()] += v / num_iterations
    return clip if metrics else {}, old_logp, aux


def _rows(x: torch.Tensor | None, runs: torch.Tensor | None) -> torch.Tensor | None:
    """The runs ``runs`` of ``x`` (leading axis), or all of ``x``."""
    return x if runs is None or x is None else x[runs]
