"""TRL 1.16's eight loss types and its other knobs, trained in chapter 13's sequence world.

The mechanism is :func:`grpo_core.grpo_loss`, and every optimiser step is
:func:`grpo_core.grpo_update`'s; this module only runs them. :func:`train_knobs` trains many runs
at once, each with its own :class:`grpo_core.GRPOConfig` loss knobs (loss type, clip bounds,
entropy mask, entropy bonus, off-policy mask, vLLM's weight), optionally from a *stale* sampler
(the policy of ``sampler_lag`` steps ago, as in asynchronous RL, standing in for vLLM).
:func:`exact_update_on_policy` gives the exact expected update of every loss type at mu = 1 from
chapter 13's :func:`grpo_core.sequences.exact_update`. :func:`train_two_rewards` trains a tabular
policy with several reward functions combined by :func:`grpo_core.loss.trl_rewards`. Taught in
chapter 17.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import torch

from . import sequences as sq
from ._validate import check_choice, check_int
from .config import LOSS_FIELDS, GRPOConfig, loop_config
from .loss import (
    ALL_LOSS_TYPES,
    REGISTRY,
    off_policy_mask,
    trl_advantages,
    trl_rewards,
    vllm_importance_sampling_ratio,
)
from .optim import Adam
from .update import grpo_update

# TRL's metric of how much each loss type's clip or gate acts (sapo's is the book's: TRL logs
# nothing for it), one per loss type in loss.REGISTRY's metrics
ACTIVITY = ("clip_ratio/region_mean", "cispo_clip_ratio", "sapo/gate_share", "vespo/phi_seq_mean")
# what a run of train_knobs may set for itself; everything else is one value for all runs
_PER_RUN = LOSS_FIELDS | {"use_vllm", "vllm_importance_sampling_mode",
                          "vllm_importance_sampling_clip_max", "vllm_importance_sampling_clip_min"}


def exact_update_on_policy(world: sq.SequenceWorld, logits: torch.Tensor, G: int,
                           loss_type: str = "dapo", *, epsilon: float = GRPOConfig.epsilon,
                           epsilon_high: float | None = None) -> torch.Tensor:
    """The exact expected update ``(P, V+1)`` of one group of G at mu = 1 for any of the eight
    loss types: ``on_policy_factor`` times the exact update of ``on_policy_as``
    (:data:`grpo_core.loss.REGISTRY`). On-policy the ratio is 1 in value, so "sapo"'s gate has
    slope 1 (its update is "grpo"'s), "vespo"'s gamma weight is phi(1) = 1 ("dapo"'s), "cispo"
    is "dapo" times min(1, epsilon_high), "luspo" (a sum over each answer's tokens, mean over
    answers) is "dr_grpo" times ``max_len``. ``tests/test_beyond.py`` checks each identity on
    sampled batches through ``grpo_loss``'s gradient. Chapter 17."""
    check_choice(loss_type, "loss_type", ALL_LOSS_TYPES)
    entry = REGISTRY[loss_type]
    factor = entry.on_policy_factor(epsilon, epsilon_high, world.max_len)
    return factor * sq.exact_update(world, logits, G, entry.on_policy_as)


def train_knobs(world: sq.SequenceWorld, seeds: Iterable[int], runs: Sequence[Mapping], *,
                sampler_lag: int = 0, record_every: int = 10, **knobs) -> dict:
    """GRPO in the sequence world, ``len(runs) x len(seeds)`` runs at once (run-major: all seeds
    of ``runs[0]``, then of ``runs[1]``, ...). ``runs[k]`` holds the :class:`grpo_core.GRPOConfig`
    fields of run k that ``grpo_loss`` takes (``loss_type``, ``epsilon``,
    ``top_entropy_quantile``, ``entropy_coef``, ``off_policy_mask_threshold``, ...) and vLLM's
    (``use_vllm=True``: vLLM's weight :func:`grpo_core.loss.vllm_importance_sampling_ratio`,
    ``vllm_importance_sampling_mode``, ...); ``knobs`` the others, shared by all runs
    (``max_steps``, ``learning_rate``, ``num_generations``, ``num_iterations``,
    ``steps_per_generation``, ...), over ``config.LOOPS["train_knobs"]``'s preset. Runs with
    equal settings share one ``grpo_loss`` call.

    Each step: sample a generation batch per run (one group of ``num_generations``, or
    ``per_device_train_batch_size`` x ``steps_per_generation`` completions;
    ``torch.Generator().manual_seed(seed)``) from the policy of ``sampler_lag`` steps ago (0:
    the current one), TRL's advantages, then :func:`grpo_core.grpo_update`. pi_old is the
    policy at sampling time in the trainer's hands (the current one), as TRL recomputes it; the
    sampler's log-probs go to the off-policy mask and to vLLM's weight.

    Returns, per run ``(R, S)`` at steps 0, record_every, ..., max_steps: the
    :func:`grpo_core.sequences.exact_stats` (``reward``, ``pass_rate``, ``length``,
    ``entropy``, ...); ``activity (R, max_steps)`` (how much the clip or gate acts, TRL's
    metric of the loss type, :data:`ACTIVITY`, mean over the steps on a batch), ``kept (R,
    max_steps)`` (the share of sequences the off-policy mask keeps and vLLM's weight does not
    zero), ``steps (S,)`` and the final ``logits (R, P, V+1)``. Chapter 17.
    """
    seeds, runs = [int(s) for s in seeds], [dict(r) for r in runs]
    for r in runs:
        shared = sorted(set(r) - _PER_RUN)
        if shared:
            raise ValueError(f"{', '.join(shared)}: one value for all runs of train_knobs "
                             "(a keyword argument)")
    cfgs = [loop_config("train_knobs", knobs | r) for r in runs]
    cfg, S, R = cfgs[0], len(seeds), len(seeds) * len(runs)
    G, spg, lag = cfg.num_generations, cfg.generation_steps, check_int(sampler_lag,
                                                                       "sampler_lag", 0)
    B = cfg.per_device_train_batch_size * spg if cfg.per_device_train_batch_size else G
    every = check_int(record_every, "record_every", 1)
    if cfg.kl_estimator == "exact":
        raise ValueError("kl_estimator='exact': the sequence world trains with the KL in the "
                         "loss (k1, k2, k3)")
    groups: dict[tuple, list[int]] = {}  # equal settings -> their runs: one grpo_loss call
    for k, c in enumerate(cfgs):
        key = tuple(sorted(c.loss_kwargs().items())) + (
            c.use_vllm and (c.vllm_importance_sampling_mode, c.vllm_importance_sampling_clip_min,
                            c.vllm_importance_sampling_clip_max),)
        groups.setdefault(key, []).extend(range(k * S, (k + 1) * S))
    blocks = [(torch.tensor(j), cfgs[j[0] // S]) for j in groups.values()]
    gens = [torch.Generator().manual_seed(s) for s in seeds * len(runs)]
    theta = world.ref_logits.expand(R, -1, -1).clone().requires_grad_(True)
    opt = Adam([theta], lr=cfg.learning_rate, betas=(0.9, cfg.adam_beta2))
    past = [theta.detach().clone()] * (lag + 1)  # the sampler's policies, oldest first
    r_all, ref_lp = torch.from_numpy(sq.rewards(world)), sq.token_logps(world, world.ref_logits)

    def forward(idx):  # (R, B, L) log pi of the sampled tokens, and TRL's entropies
        return sq.token_logps(world, theta, idx), {"entropies": sq.prefix_entropy(world, theta,
                                                                                  idx)}

    history, activity, kept = [], np.zeros((R, cfg.max_steps)), np.ones((R, cfg.max_steps))
    for step in range(cfg.max_steps + 1):
        if step % every == 0 or step == cfg.max_steps:
            history.append((step, sq.exact_stats(world, theta.detach())))
        if step == cfg.max_steps:
            break
        batch = sq.sample_batch(world, past[0], B, gens,  # (R, B) from the stale policy
                                mask_truncated_completions=cfg.mask_truncated_completions)
        idx, mask, sampling_logp = batch.idx, batch.mask, batch.logp.detach()
        adv = torch.from_numpy(trl_advantages(r_all[idx].numpy(), G, cfg.scale_rewards))
        if cfg.float32_advantages:
            adv = adv.float()
        if spg > 1:  # TRL shuffles the batch before cutting it (shuffle_sequence_dict)
            order = torch.stack([torch.randperm(B, generator=g) for g in gens])  # (R, B)
            rows = torch.arange(R).unsqueeze(-1)
            idx, adv, mask, sampling_logp = (idx.gather(1, order), adv.gather(1, order),
                                             mask[rows, order], sampling_logp[rows, order])
        with torch.no_grad():  # the trainer's pi_old, recomputed (the sampler's when no lag)
            old_logp = sq.token_logps(world, theta, idx) if lag else sampling_logp
        loss_blocks, keep = [], torch.ones(R, B, dtype=torch.float64)
        for j, c in blocks:
            kw = c.loss_kwargs() | {"sampling_per_token_logps": sampling_logp[j]}
            if c.use_vllm:  # vLLM's weight, from the sampler's and the trainer's log-probs
                kw["importance_sampling_ratio"] = vllm_importance_sampling_ratio(
                    old_logp[j], sampling_logp[j], mask[j], c.vllm_importance_sampling_mode,
                    c.vllm_importance_sampling_clip_min, c.vllm_importance_sampling_clip_max)
                keep[j] *= (kw["importance_sampling_ratio"].amax(-1) > 0).double()
            if c.off_policy_mask_threshold is not None:
                keep[j] *= off_policy_mask(adv[j].unsqueeze(-1), old_logp[j], sampling_logp[j],
                                           mask[j], c.off_policy_mask_threshold).squeeze(-1)
            loss_blocks.append((j, kw))
        kept[:, step] = keep.mean(-1).numpy()
        metrics, _, _ = grpo_update(lambda i=idx: forward(i), adv, mask, opt,
                                    num_iterations=cfg.num_iterations, loss_kwargs=loss_blocks,
                                    ref_logp=ref_lp[idx], old_logp=old_logp,
                                    steps_per_generation=spg)
        for name in ACTIVITY:  # each run's loss type logs one of them
            if name in metrics:
                activity[:, step] = np.where(np.isnan(metrics[name]), activity[:, step],
                                             metrics[name])
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
                      seeds: Iterable[int], **knobs) -> dict:
    """A tabular policy over A one-token answers for P prompts (``ref_logits (P, A)``), trained
    with F reward functions ``rewards_per_func (P, A, F)`` combined by
    :func:`grpo_core.loss.trl_rewards` (``reward_weights``, ``multi_objective_aggregation``)
    and TRL's advantages: one group of ``num_generations`` per prompt and step, then
    :func:`grpo_core.grpo_update`. ``knobs``: :class:`grpo_core.GRPOConfig` fields over
    ``config.LOOPS["train_two_rewards"]``'s preset. Returns the exact expected reward of each
    function per run and step, ``(R, F, max_steps + 1)`` (averaged over prompts). Chapter 17.
    """
    cfg = loop_config("train_two_rewards", knobs)
    seeds, G, steps = [int(s) for s in seeds], cfg.num_generations, cfg.max_steps
    R, (P, _, F) = len(seeds), rewards_per_func.shape
    if (cfg.per_device_train_batch_size is not None
            and cfg.per_device_train_batch_size * cfg.generation_steps != P * G):
        raise ValueError(f"per_device_train_batch_size ({cfg.per_device_train_batch_size}) must "
                         "be P x num_generations / steps_per_generation: a group for every "
                         "prompt")
    gens = [torch.Generator().manual_seed(s) for s in seeds]
    theta = torch.tensor(ref_logits, dtype=torch.float64).expand(R, -1, -1).clone()
    theta.requires_grad_(True)
    opt = Adam([theta], lr=cfg.learning_rate, betas=(0.9, cfg.adam_beta2))
    rpf = torch.tensor(rewards_per_func, dtype=torch.float64)
    ref_lp = torch.log_softmax(torch.tensor(ref_logits, dtype=torch.float64), -1)  # (P, A)
    mask = torch.ones(R, P * G, 1, dtype=torch.float64)  # one token per answer
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
        total = trl_rewards(r.reshape(R, P * G, F), cfg.reward_weights,
                            cfg.multi_objective_aggregation, num_generations=G)
        adv = torch.from_numpy(trl_advantages(total, G, cfg.scale_rewards,
                                              cfg.multi_objective_aggregation))  # (R, P * G)
        if cfg.float32_advantages:
            adv = adv.float()

        def forward(d=draws):  # (R, P G, 1) log pi of the sampled answers (and entropies)
            lp = torch.log_softmax(theta, -1)  # (R, P, A)
            H = -(lp.exp() * lp).sum(-1, keepdim=True).expand(R, P, G)  # an answer's one token
            return lp.gather(-1, d).reshape(R, P * G, 1), {"entropies": H.reshape(R, P * G, 1)}

        grpo_update(forward, adv, mask, opt, num_iterations=cfg.num_iterations,
                    loss_kwargs=cfg.loss_kwargs(), steps_per_generation=cfg.generation_steps,
                    ref_logp=ref_lp.expand(R, -1, -1).gather(-1, draws).reshape(R, P * G, 1),
                    metrics=False)
    return {"curve": curve}

