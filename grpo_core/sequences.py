"""Answers as token sequences: an exactly enumerable world for length and loss averaging.

DeepSeekMath (arXiv 2402.03300) section 4.1.2 gives each token of answer o_i the advantage of
its sequence and averages the per-token loss over |o_i|; Dr. GRPO (arXiv 2503.20783) and DAPO
(arXiv 2503.14476) average differently. Here a completion is a string over ``n_tokens`` tokens
``a, b, c, ...`` followed by EOS, at most ``max_len`` tokens (TRL's ``max_completion_length``):
a completion that reaches ``max_len`` tokens without EOS is *truncated*. With 3 tokens and
max_len 6 there are sum_{k<=6} 3^k = 1,093 completions, so every expectation is an exact sum.
The policy is a table of logits per prefix, ``(P, V + 1)`` (last column: EOS), P = number of
prefixes of fewer than max_len tokens. The verifier accepts a completion that ends with EOS
and whose last word is ``a``. Taught in chapter 13.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ._validate import check_choice, check_int
from .loss import LOSS_TYPES, SCALE_REWARDS, STD_EPS, kl_estimate, trl_advantages


@dataclass(frozen=True)
class SequenceWorld:
    """Every completion, enumerated. N completions, L = max_len, P prefixes, V + 1 tokens.

    tokens, prefix, mask: ``(N, L)`` token ids (EOS = V; padding 0), the prefix index each
    token is drawn at, 1 for a completion token. length ``(N,)``: |o| (EOS counts, padding
    not); truncated, correct ``(N,)`` bools; ref_logits ``(P, V + 1)``. Chapter 13.
    """

    n_tokens: int
    max_len: int
    tokens: torch.Tensor
    prefix: torch.Tensor
    mask: torch.Tensor
    length: np.ndarray
    truncated: np.ndarray
    correct: np.ndarray
    ref_logits: torch.Tensor

    def text(self, n: int) -> str:
        """Completion ``n`` as text, e.g. ``"bca<eos>"`` or ``"bbbbbb…"`` (truncated)."""
        ids = self.tokens[n, : int(self.length[n])].tolist()
        s = "".join("abcdefghij"[i] if i < self.n_tokens else "<eos>" for i in ids)
        return s + ("…" if self.truncated[n] else "")


def make_sequence_world(n_tokens: int = 3, max_len: int = 6, *, seed: int = 0,
                        eos_logit: float = -0.5, noise: float = 0.5) -> SequenceWorld:
    """The world: pi_ref's logits are ``noise * N(0, 1)`` per prefix and token (seeded), plus
    ``eos_logit`` on EOS. Raises ValueError for n_tokens < 1 or > 10, max_len < 1, or more than
    100,000 completions. Taught in chapter 13."""
    V, L = check_int(n_tokens, "n_tokens", 1), check_int(max_len, "max_len", 1)
    if V > 10 or sum(V**k for k in range(L + 1)) > 100_000:
        raise ValueError(f"n_tokens={V}, max_len={L} give too many completions to enumerate "
                         "(at most 10 tokens and 100,000 completions)")
    offset = np.cumsum([0] + [V**k for k in range(L)])  # prefix index of the first k-prefix
    rows = []
    for k in range(L + 1):  # k content tokens; EOS follows unless k == L (truncated)
        content = np.indices((V,) * k).reshape(k, V**k).T  # (V^k, k) in lexicographic order
        for c in content:
            ids = [*c, V] if k < L else list(c)
            pre = [offset[t] + int(np.dot(c[:t], V ** np.arange(t)[::-1])) for t in range(len(ids))]
            rows.append((ids, pre, k == L, k < L and k > 0 and c[-1] == 0))
    N = len(rows)
    tokens, prefix, mask = (np.zeros((N, L), dtype=np.int64) for _ in range(3))
    for n, (ids, pre, _, _) in enumerate(rows):
        tokens[n, : len(ids)], prefix[n, : len(pre)], mask[n, : len(ids)] = ids, pre, 1
    g = torch.Generator().manual_seed(seed)
    ref = noise * torch.randn(int(offset[-1]), V + 1, generator=g, dtype=torch.float64)
    ref[:, V] += eos_logit
    return SequenceWorld(V, L, torch.from_numpy(tokens), torch.from_numpy(prefix),
                         torch.from_numpy(mask).double(), mask.sum(1),
                         np.array([r[2] for r in rows]), np.array([r[3] for r in rows]), ref)


def token_logps(world: SequenceWorld, logits: torch.Tensor,
                idx: torch.Tensor | None = None) -> torch.Tensor:
    """log pi of each token of each completion, 0 on padding: ``(..., P, V+1) -> (..., N, L)``,
    or of the completions ``idx (..., B)`` only: ``(..., B, L)``. Differentiable. Chapter 13."""
    if logits.shape[-2:] != world.ref_logits.shape:
        raise ValueError(f"logits must have shape (..., {world.ref_logits.shape[0]}, "
                         f"{world.n_tokens + 1}), got {tuple(logits.shape)}")
    if idx is None:
        logp = logits - logits.logsumexp(-1, keepdim=True)  # log_softmax, faster on rows of 4
        return logp[..., world.prefix, world.tokens] * world.mask
    lead = torch.broadcast_shapes(logits.shape[:-2], idx.shape[:-1])
    table = logits.expand(*lead, *logits.shape[-2:]).reshape(-1, *logits.shape[-2:])
    pre, tok = (x[idx].expand(*lead, -1, -1).reshape(len(table), -1)
                for x in (world.prefix, world.tokens))  # (R, B * L)
    rows = table[torch.arange(len(table)).unsqueeze(-1), pre]  # (R, B * L, V+1): only these
    out = torch.log_softmax(rows, -1).gather(-1, tok.unsqueeze(-1)).view(*lead, *idx.shape[-1:], -1)
    return out * world.mask[idx]


def sequence_probs(world: SequenceWorld, logits: torch.Tensor) -> torch.Tensor:
    """pi(o) of every completion, ``(..., N)``; sums to 1. Chapter 13."""
    return token_logps(world, logits).sum(-1).exp()


def rewards(world: SequenceWorld, soft_punish_cache: int = 0) -> np.ndarray:
    """Reward of every completion ``(N,)``: 1 if correct, else 0, plus DAPO's soft overlong
    punishment with L_max = max_len, L_cache = ``soft_punish_cache`` (0: none): a length |o| in
    (L_max - L_cache, L_max] loses (|o| - (L_max - L_cache)) / L_cache (TRL 1.16,
    ``trl/rewards/other_rewards.py`` line 83). Chapter 13."""
    L = world.max_len
    cache = check_int(soft_punish_cache, "soft_punish_cache", 0)
    if cache >= L:
        raise ValueError(f"soft_punish_cache must be < max_len ({L}), got {cache}")
    r = world.correct.astype(np.float64)
    if cache:
        r = r - np.clip(world.length - (L - cache), 0, None) / cache
    return r


def exact_stats(world: SequenceWorld, logits: torch.Tensor, soft_punish_cache: int = 0) -> dict:
    """Exact statistics of the policy ``(..., P, V+1)``, each ``(...)``: ``reward`` (expected),
    ``pass_rate``, ``truncated`` (P(no EOS)), ``length`` (E|o|), ``length_correct`` and
    ``length_wrong`` (E[|o| | correct or wrong]), ``kl`` (the sequence KL(pi || pi_ref)),
    ``k3_sum`` (E of the summed per-token k3: equals ``kl``), ``entropy`` (the per-token
    entropy averaged over expected tokens, TRL's ``entropy``). Chapter 13."""
    with torch.no_grad():
        lp, lr = token_logps(world, logits), token_logps(world, world.ref_logits)
        out = _stats(world, logits, lp, lr.sum(-1), rewards(world, soft_punish_cache))
        p = lp.sum(-1).exp()
        out["k3_sum"] = (p * (kl_estimate(lp, lr, "k3") * world.mask).sum(-1)).sum(-1).numpy()
    return out


def _stats(world: SequenceWorld, logits: torch.Tensor, lp: torch.Tensor,
           ref_seq_logp: torch.Tensor, r: np.ndarray) -> dict:
    """:func:`exact_stats` from token log-probs ``lp (..., N, L)`` and rewards ``r`` ``(N,)`` or
    ``(..., N)``, without ``k3_sum``."""
    seq = lp.sum(-1)
    p = seq.exp()  # (..., N)
    length, c = torch.from_numpy(world.length).double(), torch.from_numpy(world.correct).double()
    # the probability of reaching each prefix: exp of a completion's log-prob up to it
    n_h, t_h = _prefix_sites(world)
    reach = (lp.cumsum(-1) - lp)[..., n_h, t_h].exp()  # (..., P)
    logpi = torch.log_softmax(logits, -1)
    H = -(logpi.exp() * logpi).sum(-1)  # (..., P) entropy of each prefix's next token
    out = {"reward": (p * torch.from_numpy(r)).sum(-1), "pass_rate": p @ c, "length": p @ length,
           "truncated": p @ torch.from_numpy(world.truncated).double(),
           "length_correct": (p * c) @ length / (p @ c),
           "length_wrong": (p * (1 - c)) @ length / (p @ (1 - c)),
           "kl": (p * (seq - ref_seq_logp)).sum(-1),
           "entropy": (reach * H).sum(-1) / (p @ length)}
    return {k: v.numpy() for k, v in out.items()}


def _prefix_sites(world: SequenceWorld) -> tuple[torch.Tensor, torch.Tensor]:
    """For each prefix h, one (completion, position) where it is the context: ``(P,), (P,)``."""
    n, t = np.nonzero(world.mask.numpy())
    h = world.prefix.numpy()[n, t]
    first = np.unique(h, return_index=True)[1]
    return torch.from_numpy(n[first]), torch.from_numpy(t[first])


def sequence_weights(world: SequenceWorld, logits: torch.Tensor, G: int, loss_type: str = "dapo",
                     *, scale_rewards: str = "group", mask_truncated_completions: bool = False,
                     soft_punish_cache: int = 0, max_completion_length: int | None = None
                     ) -> np.ndarray:
    """The exact per-completion weight W(o) ``(N,)`` of the expected on-policy update (mu = 1,
    beta = 0) from one group of G completions with TRL's advantages:
    E[-grad loss] = sum_o pi(o) W(o) grad log pi(o).

    W(o) = G E[A_1 c_1 | o_1 = o], c_1 the token weight ``loss_type`` gives completion 1:
    1/(G |o_1|) for "grpo", 1/(sum_j |o_j|) for "bnpo"/"dapo" (the batch is the group),
    1/(G max_completion_length) for "dr_grpo"; 0 for a masked truncated completion. A_1 and c_1
    depend on o_1 only through its (reward, length), and on the other G - 1 completions through
    the multiset of theirs: the expectation is an exact sum over those multisets. Chapter 13.
    """
    from .exact import _multiset_table

    G = check_int(G, "G", 2)
    check_choice(loss_type, "loss_type", LOSS_TYPES)
    check_choice(scale_rewards, "scale_rewards", SCALE_REWARDS)
    with torch.no_grad():
        p = sequence_probs(world, logits).numpy()
    if p.ndim != 1:
        raise ValueError("sequence_weights takes the logits of one policy, (P, V+1)")
    r = rewards(world, soft_punish_cache)
    ell = np.where(world.truncated & mask_truncated_completions, 0, world.length)
    pairs, tau = np.unique(np.stack([r, ell]), axis=1, return_inverse=True)  # types (2, K)
    rT, lT = pairs
    q = np.bincount(tau.ravel(), p, len(rT))  # (K,) P(type)
    counts, logcoef = _multiset_table(len(rT), G - 1)  # the other G - 1: (M, K), (M,)
    with np.errstate(divide="ignore"):
        prob = np.exp(logcoef + np.where(counts > 0, counts * np.log(q), 0.0).sum(1))  # (M,)
    W = np.zeros(len(rT))
    for j in range(len(rT)):
        mean = (rT[j] + counts @ rT) / G  # (M,)
        var = np.clip((rT[j] ** 2 + counts @ rT**2 - G * mean**2) / (G - 1), 0, None)
        A = rT[j] - mean
        if scale_rewards != "none":  # one group: the batch std is the group std
            A = A / (np.sqrt(var) + STD_EPS)
        A = np.where(counts @ (rT != rT[j]) == 0, 0.0, A)  # an all-equal group: exactly 0
        if lT[j] == 0:
            continue  # masked: its tokens carry no loss
        if loss_type == "grpo":
            c = 1 / (G * lT[j])
        elif loss_type == "dr_grpo":
            c = 1 / (G * (max_completion_length or world.max_len))
        else:
            c = 1 / np.maximum(lT[j] + counts @ lT, 1)
        W[j] = G * prob @ (A * c)
    return W[tau.ravel()]


def exact_update(world: SequenceWorld, logits: torch.Tensor, G: int, loss_type: str = "dapo",
                 **kwargs) -> torch.Tensor:
    """The exact expected update E[-grad_logits loss] ``(P, V+1)`` of one group of G (mu = 1):
    sum_o pi(o) W(o) grad log pi(o) with W from :func:`sequence_weights` (same keywords),
    differentiated by autograd on the enumeration. Chapter 13."""
    W = torch.from_numpy(sequence_weights(world, logits, G, loss_type, **kwargs))
    theta = logits.detach().clone().requires_grad_(True)
    logp = token_logps(world, theta).sum(-1)  # (N,) log pi(o)
    (grad,) = torch.autograd.grad((logp.exp().detach() * W * logp).sum(), theta)
    return grad


def kl_gradients(world: SequenceWorld, logits: torch.Tensor) -> dict:
    """Three exact gradients ``(P, V+1)``: of the sequence KL(pi || pi_ref) ("forward"), of
    KL(pi_ref || pi) ("reverse"), and E[grad sum_t k3_t] with the sampled prefixes held fixed
    ("k3_tokens", what the per-token k3 in the loss gives: at each prefix h its visit
    probability times pi(.|h) - pi_ref(.|h)), which is neither. Chapter 13."""
    theta = logits.detach().clone().requires_grad_(True)
    lp, lr = token_logps(world, theta), token_logps(world, world.ref_logits)
    p, pr = lp.sum(-1).exp(), lr.sum(-1).exp()
    k3 = (kl_estimate(lp, lr, "k3") * world.mask).sum(-1)  # (N,) summed per-token k3
    objectives = {"forward": (p * (lp - lr).sum(-1)).sum(),
                  "reverse": (pr * (lr - lp).sum(-1)).sum(), "k3_tokens": (p.detach() * k3).sum()}
    return {k: torch.autograd.grad(v, theta, retain_graph=True)[0] for k, v in objectives.items()}


@dataclass
class Batch:
    """A sampled batch, ready for :func:`grpo_core.grpo_loss`. idx ``(..., B)`` completion
    numbers; logp, mask ``(..., B, L)`` (a masked truncated row is all 0); rewards, lengths,
    truncated ``(..., B)`` NumPy. Chapter 13."""

    idx: torch.Tensor
    logp: torch.Tensor
    mask: torch.Tensor
    rewards: np.ndarray
    lengths: np.ndarray
    truncated: np.ndarray


def sample_batch(world: SequenceWorld, logits: torch.Tensor, B: int,
                 generators: torch.Generator | Sequence[torch.Generator],
                 *, mask_truncated_completions: bool = False, soft_punish_cache: int = 0) -> Batch:
    """Draw B completions per run from pi (logits ``(P, V+1)`` with one ``torch.Generator``,
    or ``(R, P, V+1)`` with a list of R), token by token until EOS or max_len tokens.
    ``logp`` keeps logits' gradient. TRL's ``mask_truncated_completions`` zeroes a truncated
    row's mask. Chapter 13."""
    B = check_int(B, "B", 1)
    gens = list(generators) if isinstance(generators, list | tuple) else [generators]
    R = logits.shape[0] if logits.ndim == 3 else 1
    if logits.ndim not in (2, 3) or len(gens) != R or not all(
            isinstance(g, torch.Generator) for g in gens):
        raise ValueError("generators must be one torch.Generator for logits (P, V+1), or a "
                         "list of R for logits (R, P, V+1)")
    with torch.no_grad():
        idx = _draw(world, logits, gens, B)
    trunc = world.truncated[idx.numpy()]
    mask = world.mask[idx]
    if mask_truncated_completions:
        mask = mask * torch.from_numpy(~trunc).unsqueeze(-1)
    return Batch(idx, token_logps(world, logits, idx), mask,
                 rewards(world, soft_punish_cache)[idx.numpy()], world.length[idx.numpy()], trunc)


def _draw(world: SequenceWorld, logits: torch.Tensor, gens: list, B: int,
          u: torch.Tensor | None = None) -> torch.Tensor:
    """B completions per run, token by token from ``logits (..., P, V+1)`` (uniforms ``u (R, B,
    L)``, default: drawn from ``gens``): their numbers ``(..., B)``. A prefix's number is that
    of the completion "prefix + EOS", so the walk needs no lookup: appending token y to a prefix
    of t tokens numbered h gives V (h - offset_t) + y + offset_{t+1}, offset_t = sum_{k<t} V^k."""
    V = world.n_tokens
    table = logits.reshape(len(gens), -1, V + 1)  # (R, P, V+1)
    if u is None:
        u = torch.stack([torch.rand(B, world.max_len, generator=g, dtype=torch.float64)
                         for g in gens])  # (R, B, L) one uniform per token
    h = torch.zeros(u.shape[:2], dtype=torch.long)  # (R, B) the current prefix: empty
    done = torch.zeros(u.shape[:2], dtype=torch.bool)
    rows = torch.arange(len(gens)).unsqueeze(-1)
    offset = 0
    for t in range(world.max_len):
        cdf = torch.softmax(table[rows, h], -1).cumsum(-1)  # (R, B, V+1)
        y = torch.searchsorted(cdf, u[..., t:t + 1] * cdf[..., -1:]).squeeze(-1).clamp(max=V)
        stop = done | (y == V)  # EOS ends a completion, which then keeps its number h
        nxt = V * (h - offset) + y + offset + V**t
        h, done, offset = torch.where(stop, h, nxt), stop, offset + V**t
    return h.reshape(*logits.shape[:-2], B)  # after max_len tokens without EOS: truncated


def prefix_entropy(world: SequenceWorld, theta: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """TRL's ``entropies``: the entropy of pi(. | prefix) at each token of the completions
    ``idx (R, B)``, ``(R, B, L)``, 0 on padding, differentiable in ``theta (R, P, V+1)``.
    Chapter 17."""
    R, B = idx.shape
    pre = world.prefix[idx].reshape(R, -1)  # (R, B * L) the prefix each token is drawn at
    logpi = torch.log_softmax(theta[torch.arange(R).unsqueeze(-1), pre], -1)  # only these rows
    return -(logpi.exp() * logpi).sum(-1).view(R, B, -1) * world.mask[idx]


def train_sequences(world: SequenceWorld, seeds: Iterable[int], *,
                    soft_punish_cache: int | Sequence[int] = 0, record_every: int = 1,
                    **knobs) -> dict:
    """GRPO in the sequence world, R = len(seeds) independent runs at once: per step, sample a
    generation batch per run (``per_device_train_batch_size`` x ``steps_per_generation``
    completions, whole groups of ``num_generations``; None: one group), with
    ``torch.Generator().manual_seed(seed)``, TRL's advantages, then
    :func:`grpo_core.grpo_update` (``num_iterations`` passes through ``grpo_loss``, one Adam step
    per mini-batch).

    ``knobs``: fields of :class:`grpo_core.GRPOConfig` over the preset
    (``config.LOOPS["train_sequences"]``, which lists the fields this loop reads; any other is
    refused). ``loss_type``, ``importance_sampling_level``, ``mask_truncated_completions`` and
    ``soft_punish_cache`` (DAPO's overlong punishment, an argument of TRL's reward function) take
    one value, or a list with one per seed (many experiments in one call; run b is the same as a
    lone run with its values).

    Returns the :func:`exact_stats` (without ``k3_sum``) of every run at steps 0,
    ``record_every``, ..., ``max_steps``: ``(R, S)`` each, and those ``steps`` ``(S,)``; TRL's
    metrics of the loss type (``clip_ratio/low_mean``, ``high_mean``, ``region_mean`` for the
    clip family, ...) ``(R, max_steps)`` (mean over the steps on a batch); the final ``logits``
    ``(R, P, V+1)``. Chapter 13.
    """
    from .config import loop_config
    from .optim import Adam
    from .update import grpo_update

    seeds = [int(s) for s in seeds]
    R = len(seeds)
    one_run = {"loss_type": "dapo", "importance_sampling_level": "token",
               "mask_truncated_completions": False}  # TRL's defaults
    per_seed = {"soft_punish_cache": soft_punish_cache} | {k: knobs.pop(k, v)
                                                           for k, v in one_run.items()}
    for name, value in per_seed.items():
        per_seed[name] = list(value) if isinstance(value, list | tuple) else [value] * R
        if len(per_seed[name]) != R:
            raise ValueError(f"{name} needs one value, or one per seed ({R}); got {len(value)}")
    cfg = loop_config("train_sequences", knobs | {k: tuple(v) for k, v in per_seed.items()
                                                  if k in one_run})
    steps, mu = cfg.max_steps, cfg.num_iterations
    G, spg = check_int(cfg.num_generations, "num_generations", 2), cfg.generation_steps
    B = cfg.per_device_train_batch_size * spg if cfg.per_device_train_batch_size else G
    every = check_int(record_every, "record_every", 1)
    if cfg.kl_estimator == "exact":
        raise ValueError("kl_estimator='exact': the sequence world trains with the KL in the "
                         "loss (k1, k2, k3)")
    blocks = {}  # (loss_type, level) -> the runs that use it: one grpo_loss call each
    for b, key in enumerate(zip(per_seed["loss_type"], per_seed["importance_sampling_level"],
                                strict=True)):
        blocks.setdefault(key, []).append(b)
    loss_kwargs = cfg.run(0).loss_kwargs()
    blocks = [(torch.tensor(runs), loss_kwargs | {"loss_type": lt, "importance_sampling_level": lv})
              for (lt, lv), runs in blocks.items()]
    if len(blocks) == 1:
        blocks = blocks[0][1]  # all runs share the loss: one call, no index
    entropies = cfg.top_entropy_quantile < 1 or cfg.entropy_coef != 0  # grpo_loss needs them
    gens = [torch.Generator().manual_seed(s) for s in seeds]
    theta = world.ref_logits.expand(R, -1, -1).clone().requires_grad_(True)  # (R, P, V+1)
    opt = Adam([theta], lr=cfg.learning_rate, betas=(0.9, cfg.adam_beta2))
    ref_lp = token_logps(world, world.ref_logits)  # (N, L)
    r_all = np.stack([rewards(world, c) for c in per_seed["soft_punish_cache"]])  # (R, N)
    keep = torch.from_numpy(np.stack([~(world.truncated & m)
                                      for m in per_seed["mask_truncated_completions"]])).double()
    rows = torch.arange(R).unsqueeze(-1)
    uniforms = torch.stack([torch.rand(steps, B, world.max_len, generator=g,
                                       dtype=torch.float64) for g in gens], 1)  # (steps, R, B, L)

    def forward(idx):  # (R, B, L) log pi of the sampled tokens, and their entropies if needed
        logp = token_logps(world, theta, idx)
        return logp, {"entropies": prefix_entropy(world, theta, idx)} if entropies else None

    history, logged = [], {}
    for step in range(steps + 1):
        if step % every == 0 or step == steps:
            with torch.no_grad():
                history.append((step, _stats(world, theta, token_logps(world, theta),
                                             ref_lp.sum(-1), r_all)))
        if step == steps:
            break
        with torch.no_grad():
            idx = _draw(world, theta, gens, B, uniforms[step])  # (R, B)
            mask = world.mask[idx] * keep[rows, idx].unsqueeze(-1)  # (R, B, L)
        adv = torch.from_numpy(trl_advantages(r_all[rows.numpy(), idx.numpy()], G,
                                              cfg.scale_rewards))  # (R, B)
        if cfg.float32_advantages:
            adv = adv.float()
        if spg > 1:  # TRL shuffles the batch before cutting it (shuffle_sequence_dict)
            order = torch.stack([torch.randperm(B, generator=g) for g in gens])  # (R, B)
            idx, adv, mask = idx.gather(1, order), adv.gather(1, order), mask[rows, order]
        metrics, _, _ = grpo_update(lambda i=idx: forward(i), adv, mask, opt, num_iterations=mu,
                                    loss_kwargs=blocks, ref_logp=ref_lp[idx],
                                    steps_per_generation=spg)
        for name, value in metrics.items():
            logged.setdefault(name, np.full((R, steps), np.nan))[:, step] = value
    out = {k: np.stack([h[k] for _, h in history], -1) for k in history[0][1]}
    return {**out, "steps": np.array([t for t, _ in history]), **logged, "logits": theta.detach()}
