"""The training loop: GRPO on the tabular toy, many independent runs in one tensor.

Each step reads as DeepSeekMath's algorithm (arXiv 2402.03300, section 4.2, Algorithm 1) and as
TRL 1.16's ``GRPOTrainer`` (``trl/trainer/grpo_trainer.py``):

    sample a group of G answers per prompt from pi_old (= the current policy)
    -> rewards -> (KL penalty in the reward, the RLHF/PPO placement, if asked)
    -> advantages -> num_iterations (mu) x [ grpo_loss -> Adam step ] -> log the metrics

The loss is :func:`grpo_core.grpo_loss` (ratio against pi_old, clip, loss type). With mu = 1
the ratio is exactly 1 and the clip never binds: on-policy REINFORCE with a group baseline, the
book's chapters 1-9. The KL term is the toy's exact KL(pi || pi_ref) by default (the toy can
sum over all answers), or a per-sample estimate k1/k2/k3 as practice computes it (chapter 12).

:func:`train_simple` is one run written out whole (about 20 lines); :func:`train_batch` is the
same loop over R runs at once: logits ``(R, P, A)``, one generator per run, the sum of the
runs' losses. Adam is element-wise, so every run follows the trajectory it would follow alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

import numpy as np
import torch

from ._validate import check_array, check_int
from .baselines import _group_advantages, advantages, group_advantages
from .config import LOOPS, LOSS_FIELDS, GRPOConfig, loop_config
from .critic import Critic
from .loss import REGISTRY, grpo_loss, kl_estimate, reward_metrics, trl_advantages
from .optim import Adam
from .policy import _probs_and_log_probs, log_softmax, sample_from_uniforms, softmax
from .update import METRICS, grpo_update
from .world import BETA, D_EMB

PER_RUN = LOOPS["train_batch"].per_run  # the knobs that may differ between one call's runs


def toy_config(**knobs) -> GRPOConfig:
    """The :class:`GRPOConfig` of a tabular run: ``knobs`` over the toy's preset
    (``config.LOOPS["train_batch"]``), refusing the fields it does not read. The advantage is
    the book's ``kind`` unless ``scale_rewards`` is given (then TRL's). Chapter 9."""
    if knobs.get("scale_rewards") is not None and "kind" not in knobs:
        knobs = knobs | {"kind": None}
    return loop_config("train_batch", knobs)


@dataclass(frozen=True)
class TrainResult:
    """What :func:`train_batch` returns; axis 0 is the run.

    logits ``(R, P, A)`` final policy logits; reward ``(R, steps + 1)`` exact expected reward
    before step 0 and after every step; kl ``(R, steps + 1)`` exact KL(pi || pi_ref) to the
    initial reference; metrics: TRL's logged names (:data:`METRICS`) -> ``(R, steps)``, each
    step's sampled batch (clip ratios averaged over the mu iterations); samples_drawn
    ``(R, steps + 1)`` answers drawn per prompt so far; critic_value ``(R, P)`` (None without a
    critic); G, beta ``(R,)``; config: the runs' :class:`GRPOConfig` (per-run knobs as tuples);
    policy: the trained module. Taught in chapter 4 (metrics: chapter 10).
    """

    logits: np.ndarray
    reward: np.ndarray
    kl: np.ndarray
    critic_value: np.ndarray | None
    G: np.ndarray
    beta: np.ndarray
    config: GRPOConfig
    critics: list[Critic] | None = None
    metrics: dict | None = None
    samples_drawn: np.ndarray | None = None
    policy: torch.nn.Module | None = None


class TabularPolicy(torch.nn.Module):
    """R runs' tabular policies: one free logit per (prompt, answer), ``() -> (R, P, A)``."""

    def __init__(self, ref_logits: np.ndarray, n_runs: int) -> None:
        super().__init__()
        start = np.broadcast_to(ref_logits, (n_runs, *np.shape(ref_logits))).copy()
        self.logits = torch.nn.Parameter(torch.tensor(start))

    def forward(self) -> torch.Tensor:
        return self.logits


def train_simple(rewards: np.ndarray, ref_logits: np.ndarray, seed: int, *, steps: int = 300,
                 G: int = 8, beta: float = BETA, lr: float = 0.05, num_iterations: int = 1,
                 epsilon: float = 0.2, epsilon_high: float | None = None) -> np.ndarray:
    """One GRPO run on the toy, the whole loop in plain sight; returns the logits ``(P, A)``.

    The same trajectory as ``train_batch(rewards, None, ref_logits, seed, ...)`` (tested).
    Taught in chapter 4, which shows it whole.
    """
    rng = np.random.default_rng(seed)
    logits = torch.tensor(ref_logits, requires_grad=True)  # (P, A): the policy's parameters
    ref_lp = torch.log_softmax(torch.tensor(ref_logits), -1)  # (P, A): pi_ref, frozen
    opt, rows = Adam([logits], lr=lr), np.arange(len(rewards))[:, None]
    for _ in range(steps):
        probs = softmax(logits.detach().numpy())  # pi_old: the policy that samples this batch
        samples = sample_from_uniforms(probs, rng.random((len(rewards), G)))  # (P, G)
        adv = group_advantages(rewards[rows, samples])  # (P, G): (r - mean) / std per group
        adv = torch.tensor(adv, dtype=torch.float32).reshape(-1)  # (P G,): one per answer
        idx = torch.from_numpy(samples)
        for k in range(num_iterations):  # mu Adam steps on the same batch
            lp = torch.log_softmax(logits, -1)  # (P, A)
            logp = lp.gather(-1, idx).reshape(-1, 1)  # (P G, 1): an answer is one token
            if k == 0:  # log pi_old: the policy that sampled the batch, fixed for its mu steps
                old_logp = logp.detach()
            loss = grpo_loss(logp, old_logp, None, adv, torch.ones_like(logp),
                             epsilon=epsilon, epsilon_high=epsilon_high)
            loss = loss + beta * (lp.exp() * (lp - ref_lp)).sum(-1).mean()  # exact KL
            opt.zero_grad()
            loss.backward()
            opt.step()
    return logits.detach().numpy()


class _BatchedCritic:
    """R independent :class:`Critic` networks as stacked tensors (one bmm instead of R calls)."""

    def __init__(self, seeds: np.ndarray, lr: float) -> None:
        nets = [Critic(int(s)).net for s in seeds]
        stack = [torch.stack([n[i].weight for n in nets]) for i in (0, 2)]
        bias = [torch.stack([n[i].bias for n in nets]) for i in (0, 2)]
        self.params = [t.detach().clone().requires_grad_(True) for t in (*stack, *bias)]
        self.opt = Adam(self.params, lr=lr)

    def __call__(self, emb: torch.Tensor) -> torch.Tensor:
        """``emb (P, D) -> (R, P)``."""
        w1, w2, b1, b2 = self.params  # (R, H, D), (R, 1, H), (R, H), (R, 1)
        h = torch.tanh(emb @ w1.transpose(1, 2) + b1[:, None, :])  # (R, P, H)
        return (h @ w2.transpose(1, 2)).squeeze(-1) + b2  # (R, P)

    def fit(self, v: torch.Tensor, r: np.ndarray) -> None:
        """One Adam step regressing V(prompt) ``(R, P)`` on each group's mean reward."""
        target = torch.tensor(r.mean(axis=-1), dtype=torch.float32)  # (R, P)
        loss = ((v - target) ** 2).mean(-1).sum()
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()

    def critics(self) -> list[Critic]:
        """The trained networks, one :class:`Critic` module per run."""
        out = []
        w1, w2, b1, b2 = (p.detach() for p in self.params)
        for b in range(w1.shape[0]):
            c = Critic()
            with torch.no_grad():
                for layer, w, bias in ((c.net[0], w1[b], b1[b]), (c.net[2], w2[b], b2[b])):
                    layer.weight.copy_(w)
                    layer.bias.copy_(bias)
            out.append(c)
        return out


def _broadcast_runs(n_seeds: int, **values) -> dict[str, np.ndarray]:
    arrays = {k: np.atleast_1d(np.asarray(v, dtype=object)) for k, v in values.items()}
    for k, a in arrays.items():
        if a.ndim != 1:
            raise ValueError(f"{k} must be a scalar or a 1-D sequence, got shape {a.shape}")
    try:
        shape = np.broadcast_shapes((n_seeds,), *(a.shape for a in arrays.values()))
    except ValueError:
        lengths = {"seeds": n_seeds} | {k: len(a) for k, a in arrays.items()}
        raise ValueError(f"per-run settings must have equal lengths (or length 1): {lengths}") \
            from None
    return {k: np.broadcast_to(a, shape) for k, a in arrays.items()}


def _one_or_all(values: np.ndarray):
    """A per-run knob for :class:`GRPOConfig`: the value if all runs share it, else a tuple."""
    items = values.tolist()
    return items[0] if len(set(items)) == 1 else tuple(items)


def train_batch(rewards: np.ndarray, emb: np.ndarray | None, ref_logits: np.ndarray,
                seeds: int | np.random.Generator | Sequence[int | np.random.Generator], *,
                policy: torch.nn.Module | None = None, metrics: bool = False,
                **knobs) -> TrainResult:
    """Train R independent runs at once; run r equals a lone run with its settings.

    Args:
        rewards: ``(P, A)`` rewards; ref_logits: ``(P, A)`` the reference policy (the start).
        emb: ``(P, D)`` prompt embeddings (read only by the critic; may be None without one).
        seeds: per-run sampling seeds (ints) or generators.
        policy: a module whose call returns logits ``(R, P, A)`` (default: tabular logits
            starting at ``ref_logits``); all runs must then share num_generations.
        metrics: log TRL's metrics (:data:`METRICS`) of every step, in ``.metrics``; they
            cost time, so only when asked.
        knobs: fields of :class:`GRPOConfig` over the toy's :data:`DEFAULTS` (see
            :func:`toy_config`); those in :data:`PER_RUN` may be sequences, one value per run.

    Returns:
        :class:`TrainResult`. Taught in chapter 4 (and used by every chapter with many seeds).
    """
    rewards = check_array(rewards, "rewards", min_ndim=2)
    ref_logits = check_array(ref_logits, "ref_logits", min_ndim=2)
    if rewards.ndim != 2 or ref_logits.shape != rewards.shape:
        raise ValueError(f"rewards {rewards.shape} and ref_logits {ref_logits.shape} must both "
                         "have shape (P, A)")
    seed_list = list(seeds) if isinstance(seeds, Sequence | np.ndarray) else [seeds]
    defaults = toy_config(**{k: v for k, v in knobs.items() if k not in PER_RUN})
    runs = _broadcast_runs(len(seed_list), **{k: knobs.get(k, getattr(defaults, k))
                                              for k in PER_RUN})
    n_runs = len(runs["num_generations"])
    seed_list = seed_list * n_runs if len(seed_list) == 1 else seed_list
    cfg = toy_config(**(knobs | {k: _one_or_all(v) for k, v in runs.items()}))
    rngs = [s if isinstance(s, np.random.Generator)
            else np.random.default_rng(check_int(s, "seeds", 0)) for s in seed_list]
    if cfg.use_critic:
        emb = check_array(emb, "emb", min_ndim=2)
        if emb.shape != (rewards.shape[0], D_EMB):
            raise ValueError(f"emb must have shape (P, D) = {(rewards.shape[0], D_EMB)}, "
                             f"got {emb.shape}")
    Gs = np.array([int(g) for g in runs["num_generations"]])
    if cfg.per_device_train_batch_size not in (None, *(len(rewards) * Gs)):
        raise ValueError(f"per_device_train_batch_size ({cfg.per_device_train_batch_size}) must "
                         f"be P x num_generations: the toy draws a group for every prompt")
    if policy is not None and len(set(Gs.tolist())) > 1:
        raise ValueError("with policy=, all runs must share num_generations")

    own_rng = len({id(rng) for rng in rngs}) == n_runs  # no generator shared by two runs
    if policy is None and own_rng and _closed_form(cfg, runs) and not (
            metrics or cfg.use_critic or cfg.dynamic_sampling):  # every run in one block:
        parts = [(np.arange(n_runs), _train_block(  # groups padded, padding weighs exactly 0
            rewards, emb, ref_logits, rngs, Gs, runs, cfg, policy, metrics))]
    else:  # runs are trained in blocks of equal G
        parts = []
        for g in dict.fromkeys(Gs.tolist()):
            sel = np.flatnonzero(Gs == g)
            block = {k: runs[k][sel] for k in PER_RUN}
            parts.append((sel, _train_block(rewards, emb, ref_logits, [rngs[i] for i in sel],
                                            Gs[sel], block, cfg, policy, metrics)))
    return _assemble(parts, n_runs, Gs, runs, cfg)


def _assemble(parts, n_runs, Gs, runs, cfg) -> TrainResult:
    """Put the blocks of :func:`train_batch` back in run order."""
    def gather(key):
        first = parts[0][1][key]
        if first is None:
            return None
        out = np.empty((n_runs, *first.shape[1:]), dtype=first.dtype)
        for sel, part in parts:
            out[sel] = part[key]
        return out

    metrics = None if parts[0][1]["metrics"] is None else {}
    for name in parts[0][1]["metrics"] or ():
        metrics[name] = np.empty((n_runs, cfg.max_steps))
        for sel, part in parts:
            metrics[name][sel] = part["metrics"][name]
    critics = None
    if cfg.use_critic:
        critics = [None] * n_runs
        for sel, part in parts:
            for i, c in zip(sel, part["critics"], strict=True):
                critics[i] = c
    return TrainResult(
        logits=gather("logits"), reward=gather("reward"), kl=gather("kl"),
        critic_value=gather("critic_value"), G=Gs, beta=np.array(runs["beta"], dtype=float),
        config=cfg, critics=critics, metrics=metrics, samples_drawn=gather("drawn"),
        policy=parts[0][1]["policy"] if len(set(Gs.tolist())) == 1 else None)


CHUNK = 32  # steps whose uniforms are drawn, and whose curves are computed, at once


def _uniforms(rngs, steps: int, P: int, Gs: np.ndarray, chunk: int = CHUNK):
    """Per step, ``(R, P, max G)`` uniforms, run r's ``Gs[r]`` first (the rest 0, padding);
    drawn ``chunk`` steps at a time per run, which is the same stream as one
    ``rng.random((P, G))`` call per step."""
    for t0 in range(0, steps, chunk):
        n = min(chunk, steps - t0)
        u = np.zeros((n, len(rngs), P, Gs.max()))
        for i, (rng, G) in enumerate(zip(rngs, Gs, strict=True)):
            u[:, i, :, :G] = rng.random((n, P, G))
        yield from u


def _redraw_dead(samples, probs, rewards, rngs, max_redraws):
    """Dynamic sampling, the toy's version: redraw each prompt's group while its rewards are all
    equal, at most ``max_redraws`` times. Unlike DAPO's Algorithm 1 (arXiv 2503.14476, §3.2),
    which over-samples prompts and fills the batch with other prompts' live groups, this redraws
    the same prompt (the toy trains every prompt at every step), so a prompt that is almost
    always solved keeps costing samples. Returns the samples ``(R, P, G)`` and the extra answers
    drawn per prompt ``(R,)``. Chapter 11."""
    R, P, G = samples.shape
    extra = np.zeros(R)
    for _ in range(max_redraws):
        dead = np.ptp(rewards[np.arange(P)[None, :, None], samples], axis=-1) == 0  # (R, P)
        if not dead.any():
            break
        n_dead = dead.sum(-1)  # (R,)
        u = np.concatenate([rng.random((n, G)) for rng, n in zip(rngs, n_dead, strict=True)])
        run, prompt = np.nonzero(dead)  # run-major, the order of the draws above
        samples[run, prompt] = sample_from_uniforms(probs[run, prompt], u)
        extra += n_dead * G / P
    return samples, extra


def _advantages(r: np.ndarray, kinds: np.ndarray, Gs: np.ndarray,
                cfg: GRPOConfig) -> np.ndarray:
    """``(R, P, G)`` advantages: TRL's (``scale_rewards``) or each run's ``kind``; run r's group
    is its first ``Gs[r]`` answers (the rest padding, advantage 0)."""
    R, P, G = r.shape
    if len(set(Gs.tolist())) > 1:  # padded groups: each G's runs alone, padding gets 0
        out = np.zeros_like(r)
        for g in dict.fromkeys(Gs.tolist()):
            sel = Gs == g
            out[sel, :, :g] = _advantages(np.ascontiguousarray(r[sel, :, :g]), kinds[sel],
                                          Gs[sel], cfg)
        return out
    if cfg.scale_rewards is not None:
        return trl_advantages(r.reshape(R, P * G), G, cfg.scale_rewards).reshape(r.shape)
    if (kinds == kinds[0]).all():  # one kind for all runs (the usual call): one call
        if kinds[0] in ("group", "group_norm"):  # GRPO's, without the checks of every step
            return _group_advantages(r, kinds[0] == "group_norm", ddof=0)
        return advantages(r, kinds[0])
    out = np.empty_like(r)
    for kind in dict.fromkeys(kinds.tolist()):
        sel = kinds == kind
        out[sel] = advantages(r[sel], kind)
    return out


def kl_term(lp, logp, old_logp, ref_lp, ref_logp, mask, estimator: str,
             use_bias_correction_kl: bool, loss_type: str) -> torch.Tensor:
    """``(R,)`` the KL term of the loss with beta = 1: the exact KL(pi || pi_ref) averaged over
    prompts (``lp``, ``ref_lp``: ``(R, P, A)`` log-probabilities of every answer), or
    ``grpo_loss``'s per-token estimate k1/k2/k3 at the sampled answers (``logp``, ``old_logp``,
    ``ref_logp``, ``mask``: ``(R, B, T)``), its KL part: the loss is linear in beta. Chapter 12."""
    if estimator == "exact":
        return (lp.exp() * (lp - ref_lp)).sum(-1).mean(-1)
    zero_adv = torch.zeros(logp.shape[:-1], dtype=logp.dtype)
    return grpo_loss(logp, old_logp, ref_logp, zero_adv, mask, beta=1.0,
                     kl_estimator=estimator, loss_type=loss_type,
                     use_bias_correction_kl=use_bias_correction_kl)


# the loss knobs the closed-form step implements: the KL's (exact only), the loss type's
# normaliser, and the clip's bounds (on-policy the ratio is 1, so the clip never binds). Every
# other knob of grpo_loss must be at its default, or the step goes through autograd.
_CLOSED_FORM_READS = ("beta", "kl_estimator", "use_bias_correction_kl", "loss_type",
                      "max_completion_length", "importance_sampling_level", "epsilon",
                      "epsilon_high")


def _closed_form(cfg: GRPOConfig, runs: dict) -> bool:
    """Whether :func:`_closed_form_grad` is the tabular step's gradient: mu = 1, token level,
    a loss type whose on-policy gradient is ``-A / n_tokens`` (``closed_form`` in
    :data:`grpo_core.loss.REGISTRY`), every loss knob the step does not implement at its
    default, and in the loss at most one KL term, the exact one (the runs' (estimator, bias
    correction) pairs with beta > 0 and ``kl_in="loss"``)."""
    in_loss = {(est, bias) for est, bias, where, beta in zip(
        runs["kl_estimator"], runs["use_bias_correction_kl"], runs["kl_in"], runs["beta"],
        strict=True) if where == "loss" and beta != 0}
    others_default = all(getattr(cfg, f.name) == f.default for f in fields(GRPOConfig)
                         if f.name in LOSS_FIELDS and f.name not in _CLOSED_FORM_READS)
    return (cfg.num_iterations == 1 and REGISTRY[cfg.loss_type].closed_form
            and cfg.importance_sampling_level == "token" and others_default
            and len(in_loss) <= 1 and all(est == "exact" for est, _ in in_loss))


@torch.no_grad()
def _closed_form_grad(logits: torch.Tensor, idx: torch.Tensor, adv: torch.Tensor,
                      n_tokens: torch.Tensor, ref_lp: torch.Tensor | None,
                      kl_weight: torch.Tensor | None) -> torch.Tensor:
    """The gradient ``(R, P, A)`` that autograd gives for one on-policy step of the tabular
    toy (:func:`_closed_form`), written out in the same operations and order, so bit for bit
    the same, without building an autograd graph (a step of one run: ~0.05 ms, not ~0.5).

    ``idx (R, P, G)`` the sampled answers, ``adv (R, P G)``, ``n_tokens (R,)`` the loss's
    normaliser (P G; times max_completion_length for dr_grpo), ``kl_weight (R, P, A)`` each
    run's beta / P (None: no KL term). At mu = 1 the ratio is exactly 1 and the clip never
    binds: each sampled answer's log-prob gets ``-A / n_tokens`` (PPO's min splits it in two
    halves that add back), scattered onto its answer (padding, A = 0, adds -0.0: nothing);
    the exact KL adds ``w e + (w (lp - lp_ref)) e`` with ``e = exp(lp)``; then log-softmax's
    backward. Checked against autograd in ``tests/test_training.py``.
    """
    lp = torch.log_softmax(logits, -1)  # (R, P, A)
    R, P, G = idx.shape
    g0 = torch.ones(R, dtype=lp.dtype) / n_tokens  # d loss / d per-token loss
    per_sample = -(g0[:, None] * adv).reshape(R, P, G)  # d loss / d log pi(a_i)
    grad_lp = torch.zeros_like(lp).scatter_add_(-1, idx, per_sample)
    if kl_weight is not None:  # d/d lp of w sum_a e (lp - lp_ref): the two uses of lp, then
        e = lp.exp()  # the gathered one, in autograd's order of accumulation
        grad_lp = kl_weight * e + (kl_weight * (lp - ref_lp)) * e + grad_lp
    return torch._log_softmax_backward_data(grad_lp, lp, -1, lp.dtype)


def _train_block(rewards, emb, ref_logits, rngs, Gs, runs, cfg, policy, log) -> dict:
    """The loop for R runs (see :func:`train_batch`) that share G, or with the closed-form step
    and no metrics, critic or redraws, whose groups ``Gs (R,)`` are padded to the largest."""
    R, (P, A), S, G = len(rngs), rewards.shape, cfg.max_steps, int(Gs.max())
    tabular = policy is None  # the book's policy: its on-policy step has a closed form
    policy = TabularPolicy(ref_logits, R) if policy is None else policy
    opt = Adam(list(policy.parameters()), lr=cfg.learning_rate, betas=(0.9, cfg.adam_beta2))
    ref0 = log_softmax(ref_logits)  # (P, A): the initial reference, for the KL curve
    ref_lp = torch.tensor(np.broadcast_to(ref0, (R, P, A)).copy())  # (R, P, A) pi_ref per run
    ref_logits_t = torch.tensor(np.broadcast_to(ref_logits, (R, P, A)).copy())  # pi_ref's logits
    betas = np.array(runs["beta"], dtype=float)
    # the KL term's kinds: (estimator, bias correction) -> each run's beta where it applies
    in_loss, in_reward = {}, {}
    kinds = zip(runs["kl_estimator"], runs["use_bias_correction_kl"], strict=True)
    for est, bias in dict.fromkeys(kinds):
        this = (runs["kl_estimator"] == est) & (runs["use_bias_correction_kl"] == bias)
        in_loss[est, bias] = torch.tensor(np.where(this & (runs["kl_in"] == "loss"), betas, 0.))
        in_reward[est, bias] = np.where(this & (runs["kl_in"] == "reward"), betas, 0.0)
    mask = torch.ones(R, P * G, 1, dtype=torch.float64)  # every answer is one real token
    critic = _BatchedCritic(runs["critic_seed"], cfg.critic_lr) if cfg.use_critic else None
    emb_t = torch.tensor(emb, dtype=torch.float32) if cfg.use_critic else None
    rows = np.arange(P)[:, None]
    reward_curve, kl_curve, drawn = np.empty((R, S + 1)), np.empty((R, S + 1)), np.zeros((R, S + 1))
    recent = np.empty((2, CHUNK, R, P, A))  # the last CHUNK steps' probabilities, log-probs
    metrics = {name: np.zeros((R, S)) for name in METRICS if not name.startswith("completions")}
    uniforms = _uniforms(rngs, S, P, Gs)
    drawn_r, kl_sampled = np.empty((R, S, P, G)), torch.empty(R, S, P, G, dtype=torch.float64)
    loss_kwargs = cfg.run(0).loss_kwargs() | {"beta": 0.0}  # each run's KL term: add_kl
    entropies = cfg.top_entropy_quantile < 1 or cfg.entropy_coef != 0  # grpo_loss needs them

    def forward():  # (R, P G, 1) log pi of the sampled answers (one token each); lp (R, P, A)
        lp = torch.log_softmax(policy(), -1)
        extras = {"lp": lp}
        if entropies:  # an answer's one token: the entropy of pi(. | its prompt)
            H = -(lp.exp() * lp).sum(-1)  # (R, P)
            extras["entropies"] = H[..., None].expand(R, P, G).reshape(R, P * G, 1)
        return lp.gather(-1, idx).reshape(R, P * G, 1), extras

    in_loss = [(est, bias, b) for (est, bias), b in in_loss.items() if b.any()]  # in use
    in_reward = [(est, b) for (est, _), b in in_reward.items() if b.any()]
    # the sampled log-probs: for the log, and for an estimator of the reward's penalty (k1 and
    # "exact" read the log-ratio table below)
    need_lp = log or any(est not in ("k1", "exact") for est, _ in in_reward)
    need_ref = need_lp or any(est != "exact" for est, _, _ in in_loss)
    closed_form = tabular and _closed_form(cfg, runs)
    if closed_form:  # the loss's normaliser and each run's weight of the exact KL's gradient
        length = cfg.max_completion_length if cfg.loss_type == "dr_grpo" else None
        n_tokens = torch.tensor(P * Gs * (length or 1), dtype=torch.float64)  # one token each
        kl_weight = in_loss[0][2][:, None, None].expand(R, P, A) / P if in_loss else None

    def add_kl(loss, logp, old_logp, extras):  # each run's beta x its KL term: linear in beta
        lp = extras["lp"]
        for est, bias, beta_l in in_loss:
            loss = loss + beta_l * kl_term(lp, logp, old_logp, ref_lp, ref_logp, mask, est,
                                            bias, cfg.loss_type)
        return loss

    for t in range(S + 1):
        with torch.no_grad():
            logits_np = policy().numpy()  # (R, P, A)
        probs, lp_np = _probs_and_log_probs(logits_np)  # softmax, log_softmax
        recent[0, t % CHUNK], recent[1, t % CHUNK] = probs, lp_np
        if t % CHUNK == CHUNK - 1 or t == S:  # the curves of these CHUNK steps, at once
            t0, (pi, lp) = t - t % CHUNK, recent[:, :t % CHUNK + 1]  # (n, R, P, A) each
            reward_curve[:, t0:t + 1] = (pi * rewards).sum(-1).mean(-1).T  # as in evaluate()
            kl_curve[:, t0:t + 1] = (pi * (lp - ref0)).sum(-1).mean(-1).T
            if log:  # over prompts
                metrics["entropy"][:, t0:t + 1] = -(pi * lp)[:S - t0].sum(-1).mean(-1).T
        if t == S:
            break
        # 1. sample a group per prompt from pi_old (the current policy), and score it
        samples = sample_from_uniforms(probs, next(uniforms))  # (R, P, G)
        extra = 0.0
        if cfg.dynamic_sampling:
            samples, extra = _redraw_dead(samples, probs, rewards, rngs, cfg.max_redraws)
        drawn[:, t + 1] = drawn[:, t] + Gs + extra
        r = rewards[rows, samples]  # (R, P, G)
        if log:  # TRL's reward metrics come from these, at the end (_log_rewards)
            drawn_r[:, t] = r
        idx = torch.from_numpy(samples)
        if need_lp:
            sampled_lp = torch.tensor(np.take_along_axis(lp_np, samples, axis=-1))  # (R, P, G)
        sampled_ref = ref_lp.gather(-1, idx) if need_ref else None  # (R, P, G)
        if log:
            kl_sampled[:, t] = kl_estimate(sampled_lp, sampled_ref)  # TRL's k3, averaged later
        # 2. RLHF/PPO placement: penalise the reward before the baseline, with the sampled
        # log-ratio log pi(a) - log pi_ref(a) (k1; "exact" too) or k2 / k3
        for est, beta_r in in_reward:
            est = "k1" if est == "exact" else est
            pen = (np.take_along_axis(lp_np - ref_lp.numpy(), samples, axis=-1)
                   if est == "k1" else kl_estimate(sampled_lp, sampled_ref, est).numpy())
            r = r - beta_r[:, None, None] * pen
        # 3. advantages (float32 by default, as the book's reference runs computed them)
        if critic is not None:
            v = critic(emb_t)  # (R, P)
            adv = torch.tensor(r, dtype=torch.float32) - v.detach()[..., None]
            if cfg.train_critic:
                critic.fit(v, r)
        else:
            adv = torch.tensor(_advantages(r, runs["kind"], Gs, cfg),
                               dtype=torch.float32 if cfg.float32_advantages else torch.float64)
        adv = adv.reshape(R, P * G)
        ref_logp = None if sampled_ref is None else sampled_ref.reshape(R, P * G, 1)
        # 4. mu Adam steps on this one batch: the ratio to pi_old moves, the clip may bind
        if closed_form:  # mu = 1: grpo_update's step without autograd (no clip metrics)
            opt.zero_grad()
            policy.logits.grad = _closed_form_grad(policy.logits, idx, adv, n_tokens, ref_lp,
                                                   kl_weight)
            opt.step()
        else:
            clip, _, _ = grpo_update(forward, adv, mask, opt, num_iterations=cfg.num_iterations,
                                     loss_kwargs=loss_kwargs, add_terms=add_kl, metrics=log)
            for name, value in clip.items():
                metrics[name][:, t] = value
        if cfg.sync_ref_model and (t + 1) % cfg.ref_model_sync_steps == 0:
            # TRL's SyncRefModelCallback (trl/trainer/callbacks.py 135-154): pi_ref's parameters
            # <- alpha x the policy's + (1 - alpha) x pi_ref's; alpha = 1 is a reset (DeepSeek-R1)
            with torch.no_grad():
                alpha = cfg.ref_model_mixup_alpha
                ref_logits_t = alpha * policy() + (1 - alpha) * ref_logits_t
                ref_lp = torch.log_softmax(ref_logits_t, -1)

    if log:
        _log_rewards(metrics, drawn_r, cfg)
        metrics["kl"][:] = kl_sampled.mean((-2, -1))
    with torch.no_grad():
        final = policy().numpy().copy()
    return {"logits": final, "reward": reward_curve, "kl": kl_curve, "drawn": drawn,
            "metrics": metrics if log else None, "policy": policy,
            "critic_value": critic(emb_t).detach().numpy().astype(np.float64) if critic else None,
            "critics": critic.critics() if critic else None}


def _log_rewards(metrics, r, cfg) -> None:
    """TRL's reward metrics of every step's sampled rewards ``r (R, S, P, G)``, at once."""
    R, S, P, G = r.shape
    if G >= 2:
        for name, value in reward_metrics(r.reshape(R, S, P * G), G, cfg.scale_rewards
                                          or "group").items():
            metrics[name][:] = value
    else:  # a group of one has std 0 (TRL refuses num_generations = 1)
        metrics["reward"][:] = r.mean((-2, -1))
        metrics["reward_std"][:] = r.reshape(R, S, -1).std(-1, ddof=1) if P > 1 else 0.0
        metrics["frac_reward_zero_std"][:] = 1.0
