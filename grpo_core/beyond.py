"""TRL 1.16's eight loss types and its other knobs, trained in chapter 13's sequence world.

The mechanism is :func:`grpo_core.grpo_loss`; this module only runs it. :func:`train_knobs`
trains many runs at once, each with its own ``grpo_loss`` keywords (loss type, clip bounds,
entropy mask, entropy bonus, off-policy mask, vLLM weight), optionally from a *stale* sampler
(the policy of ``sampler_lag`` steps ago, as in asynchronous RL). :func:`exact_update_on_policy`
gives the exact expected update of every loss type at mu = 1 from chapter 13's
:func:`grpo_core.sequences.exact_update`. :func:`train_two_rewards` trains a tabular policy with
two reward functions combined by :func:`grpo_core.loss.trl_rewards`. Taught in chapter 17.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import torch

from . import sequences as sq
from ._validate import check_choice, check_int
from .loss import (
    ALL_LOSS_TYPES,
    gamma_weights,
    grpo_loss,
    importance_ratio,
    off_policy_mask,
    trl_advantages,
    trl_rewards,
    vllm_importance_sampling_ratio,
)
from .optim import Adam

# What each loss type does with the ratio at mu = 1 (ratio 1, on-policy): which of chapter
# 13's four averages it is, and the factor on it. TRL 1.16 grpo_trainer.py 3109-3184.
ON_POLICY_AS = {"grpo": ("grpo", 1.0), "bnpo": ("dapo", 1.0), "dapo": ("dapo", 1.0),
                "dr_grpo": ("dr_grpo", 1.0), "sapo": ("grpo", 1.0), "vespo": ("dapo", 1.0),
                "cispo": ("dapo", None), "luspo": ("dr_grpo", None)}


def exact_update_on_policy(world: sq.SequenceWorld, logits: torch.Tensor, G: int,
                           loss_type: str = "dapo", *, epsilon: float = 0.2,
                           epsilon_high: float | None = None) -> torch.Tensor:
    """The exact expected update ``(P, V+1)`` of one group of G at mu = 1 for any of the eight
    loss types. On-policy the ratio is 1 in value, so "sapo"'s gate has slope 1 (its update is
    "grpo"'s), "vespo"'s gamma weight is phi(1) = 1 ("dapo"'s), "cispo" is "dapo" times
    min(1, epsilon_high), "luspo" (a sum over each answer's tokens, mean over answers) is
    "dr_grpo" times ``max_len``. ``tests/test_beyond.py`` checks each identity on sampled batches
    through ``grpo_loss``'s gradient. Chapter 17."""
    check_choice(loss_type, "loss_type", ALL_LOSS_TYPES)
    base, factor = ON_POLICY_AS[loss_type]
    if loss_type == "cispo":
        factor = min(1.0, epsilon if epsilon_high is None else epsilon_high)
    elif loss_type == "luspo":
        factor = float(world.max_len)
    return factor * sq.exact_update(world, logits, G, base)


def prefix_entropy(world: sq.SequenceWorld, theta: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """TRL's ``entropies``: the entropy of pi(. | prefix) at each token of the completions
    ``idx (R, B)``, ``(R, B, L)``, 0 on padding, differentiable in ``theta (R, P, V+1)``."""
    R, B = idx.shape
    pre = world.prefix[idx].reshape(R, -1)  # (R, B * L) the prefix each token is drawn at
    logpi = torch.log_softmax(theta[torch.arange(R).unsqueeze(-1), pre], -1)  # only these rows
    return -(logpi.exp() * logpi).sum(-1).view(R, B, -1) * world.mask[idx]


def gate_activity(loss_type: str, ratio: torch.Tensor, A: torch.Tensor, mask: torch.Tensor,
                  log_ratio: torch.Tensor, knobs: Mapping) -> torch.Tensor:
    """Per run ``(...)``, how much the loss type's clip or gate acts, as TRL logs it: for the
    clip types ``clip_ratio/region_mean``; "cispo" ``cispo_clip_ratio`` (ratio above
    epsilon_high with A > 0); "vespo" ``vespo/phi_seq_mean``; "sapo" (TRL logs nothing) 1 minus
    the mean slope of the gate, 4 sigma'(tau (ratio - 1)): the share of the on-policy gradient
    the gate removes. Token-masked means (per sequence for a sequence-level ratio)."""
    eps = knobs.get("epsilon", 0.2)
    eps_high = knobs.get("epsilon_high") or eps
    if loss_type == "cispo":
        x = ((ratio > eps_high) & (A > 0)).double()
    elif loss_type == "sapo":
        tau = torch.where(A > 0, knobs.get("sapo_temperature_pos", 1.0),
                          knobs.get("sapo_temperature_neg", 1.05)).double()
        s = torch.sigmoid(tau * (ratio - 1))
        x = 1 - 4 * s * (1 - s)
    elif loss_type == "vespo":
        x = gamma_weights(A, log_ratio, mask).expand_as(mask)
    else:
        x = (((ratio < 1 - eps) & (A < 0)) | ((ratio > 1 + eps_high) & (A > 0))).double()
    w = mask if x.shape[-1] != 1 else torch.ones_like(x)
    x = x.expand_as(w)
    return (x * w).sum((-2, -1)) / w.sum((-2, -1)).clamp(min=1)


def train_knobs(world: sq.SequenceWorld, seeds: Iterable[int], runs: Sequence[Mapping], *,
                steps: int = 100, G: int = 8, lr: float = 0.1, num_iterations: int = 1,
                sampler_lag: int = 0, record_every: int = 10) -> dict:
    """GRPO in the sequence world, ``len(runs) x len(seeds)`` runs at once (run-major: all seeds
    of ``runs[0]``, then of ``runs[1]``, ...). ``runs[k]`` holds :func:`grpo_core.grpo_loss`
    keywords (``loss_type``, ``epsilon``, ``top_entropy_quantile``, ``entropy_coef``,
    ``off_policy_mask_threshold``, ...), and optionally ``vllm_importance_sampling_mode`` (e.g.
    "sequence_mask": vLLM's weight, :func:`grpo_core.loss.vllm_importance_sampling_ratio` with
    TRL's default clip_max 3); runs with equal keywords share one ``grpo_loss`` call.

    Each step: sample one group of G per run (``torch.Generator().manual_seed(seed)``) from the
    policy of ``sampler_lag`` steps ago (0: the current one), TRL's group advantages, then
    ``num_iterations`` (mu) Adam steps. pi_old is the policy at sampling time in the trainer's
    hands (the current one), as TRL recomputes it; the sampler's log-probs go to the off-policy
    mask and to vLLM's weight.

    Returns, per run ``(R, S)`` at steps 0, record_every, ..., steps: the
    :func:`grpo_core.sequences.exact_stats` (``reward``, ``pass_rate``, ``length``,
    ``entropy``, ...); ``activity (R, steps)`` (:func:`gate_activity`, mean over the mu steps),
    ``kept (R, steps)`` (the share of sequences the off-policy mask keeps and vLLM's weight does
    not zero), ``steps (S,)`` and the final ``logits (R, P, V+1)``. Chapter 17.
    """
    seeds = [int(s) for s in seeds]
    runs = [dict(r) for r in runs]
    S, R = len(seeds), len(seeds) * len(runs)
    steps, mu = check_int(steps, "steps", 1), check_int(num_iterations, "num_iterations", 1)
    G, lag = check_int(G, "G", 2), check_int(sampler_lag, "sampler_lag", 0)
    every = check_int(record_every, "record_every", 1)
    for r in runs:
        check_choice(r.get("loss_type", "dapo"), "loss_type", ALL_LOSS_TYPES)
    groups: dict[tuple, list[int]] = {}  # equal keywords -> their runs: one grpo_loss call
    for k, r in enumerate(runs):
        groups.setdefault(tuple(sorted(r.items())), []).extend(range(k * S, (k + 1) * S))
    groups = {key: torch.tensor(j) for key, j in groups.items()}
    gens = [torch.Generator().manual_seed(s) for s in seeds * len(runs)]
    theta = world.ref_logits.expand(R, -1, -1).clone().requires_grad_(True)
    opt = Adam([theta], lr=lr)
    past = [theta.detach().clone()] * (lag + 1)  # the sampler's policies, oldest first
    r_all = torch.from_numpy(sq.rewards(world))
    history, activity, kept = [], np.zeros((R, steps)), np.ones((R, steps))
    for step in range(steps + 1):
        if step % every == 0 or step == steps:
            history.append((step, sq.exact_stats(world, theta.detach())))
        if step == steps:
            break
        sampler = past[0]
        batch = sq.sample_batch(world, sampler, G, gens)  # (R, G) from the stale policy
        idx, mask = batch.idx, batch.mask
        sampling_logp = batch.logp.detach()
        with torch.no_grad():  # the trainer's pi_old, recomputed (the sampler's when no lag)
            old_logp = sq.token_logps(world, theta, idx) if lag else sampling_logp
        adv = torch.from_numpy(trl_advantages(r_all[idx].numpy(), G))  # (R, G)
        isr = {}  # vLLM's weight of the runs that use it
        for key, j in groups.items():
            mode = dict(key).get("vllm_importance_sampling_mode")
            if mode is not None:
                isr[key] = vllm_importance_sampling_ratio(old_logp[j], sampling_logp[j], mask[j],
                                                          mode)
        for _ in range(mu):
            logp = sq.token_logps(world, theta, idx)
            ent = prefix_entropy(world, theta, idx)
            total = 0.0
            for key, j in groups.items():
                knobs = dict(key)
                knobs.pop("vllm_importance_sampling_mode", None)
                loss = grpo_loss(logp[j], old_logp[j], None, adv[j], mask[j], entropies=ent[j],
                                 sampling_per_token_logps=sampling_logp[j],
                                 importance_sampling_ratio=isr.get(key), **knobs)
                total = total + loss.sum()
                with torch.no_grad():
                    level = knobs.get("importance_sampling_level", "token")
                    ratio = importance_ratio(logp[j], old_logp[j], mask[j], level)
                    activity[j.numpy(), step] += gate_activity(
                        knobs.get("loss_type", "dapo"), ratio, adv[j].unsqueeze(-1), mask[j],
                        logp[j] - old_logp[j], knobs).numpy() / mu
            opt.zero_grad()
            total.backward()
            opt.step()
        with torch.no_grad():
            keep = torch.ones(R, G, dtype=torch.float64)
            for key, j in groups.items():
                if key in isr:
                    keep[j] *= (isr[key].amax(-1) > 0).double()
                thr = dict(key).get("off_policy_mask_threshold")
                if thr is not None:
                    keep[j] *= off_policy_mask(adv[j].unsqueeze(-1), old_logp[j],
                                               sampling_logp[j], mask[j], thr).squeeze(-1)
            kept[:, step] = keep.mean(-1).numpy()
        past = [*past[1:], theta.detach().clone()]
    out = {k: np.stack([h[k] for _, h in history], -1) for k in history[0][1]}
    return {**out, "steps": np.array([t for t, _ in history]), "activity": activity,
            "kept": kept, "logits": theta.detach()}


def split_runs(out: dict, names: Sequence[str]) -> dict:
    """:func:`train_knobs`' output, run-major, as ``{name: {key: (seeds, ...)}}``."""
    n = len(names)
    per = {k: np.split(np.asarray(v), n) for k, v in out.items() if k != "steps"}
    return {name: {**{k: v[i] for k, v in per.items()}, "steps": out["steps"]}
            for i, name in enumerate(names)}


def train_two_rewards(rewards_per_func: np.ndarray, ref_logits: np.ndarray,
                      seeds: Iterable[int], *, multi_objective_aggregation: str,
                      reward_weights: Sequence[float] | None = None, steps: int = 60,
                      G: int = 8, lr: float = 0.05, scale_rewards: str = "group") -> dict:
    """A tabular policy over A one-token answers for P prompts (``ref_logits (P, A)``), trained
    with F reward functions ``rewards_per_func (P, A, F)`` combined by
    :func:`grpo_core.loss.trl_rewards` and TRL's advantages (one group of G per prompt and
    step, ``grpo_loss`` with "dapo" at mu = 1, Adam). Returns the exact expected reward of
    each function per run and step, ``(R, F, steps + 1)`` (averaged over prompts). Chapter 17.
    """
    seeds = [int(s) for s in seeds]
    R, (P, _, F) = len(seeds), rewards_per_func.shape
    gens = [torch.Generator().manual_seed(s) for s in seeds]
    theta = torch.tensor(ref_logits, dtype=torch.float64).expand(R, -1, -1).clone()
    theta.requires_grad_(True)
    opt = Adam([theta], lr=lr)
    rpf = torch.tensor(rewards_per_func, dtype=torch.float64)
    curve = np.zeros((R, F, steps + 1))
    for step in range(steps + 1):
        with torch.no_grad():
            pi = torch.softmax(theta, -1)  # (R, P, A)
            curve[:, :, step] = torch.einsum("rpa,paf->rf", pi, rpf).numpy() / P
        if step == steps:
            break
        with torch.no_grad():
            draws = torch.stack([torch.multinomial(pi[r], G, replacement=True, generator=g)
                                 for r, g in enumerate(gens)])  # (R, P, G)
        r = rpf[torch.arange(P)[None, :, None], draws].numpy()  # (R, P, G, F)
        total = trl_rewards(r.reshape(R, P * G, F), reward_weights, multi_objective_aggregation,
                            num_generations=G)
        adv = torch.from_numpy(trl_advantages(total, G, scale_rewards,
                                              multi_objective_aggregation))  # (R, P * G)
        logp = torch.log_softmax(theta, -1).gather(-1, draws).reshape(R, P * G, 1)
        loss = grpo_loss(logp, None, None, adv, torch.ones_like(logp))
        opt.zero_grad()
        loss.sum().backward()
        opt.step()
    return {"curve": curve}
