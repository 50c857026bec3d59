"""The training loop: GRPO on the toy world, many independent runs in one tensor.

Torch is here only because Adam and ``.backward()`` are not the idea. The loss, with the KL as a
term IN THE LOSS (DeepSeekMath, arXiv 2402.03300, section 4.1; PPO/RLHF fold it into the reward):

    loss = -mean_{p,i}( A_{p,i} * log pi(a_{p,i}) ) + beta * KL(pi || pi_ref)

The toy is on-policy REINFORCE with a group baseline: one update per batch of samples, so the
paper's probability ratio is 1 and its clip never binds; the KL is exact, not estimated.

:func:`train_batch` trains B runs at once: logits ``(B, P, A)``, one generator per run, the sum
of the runs' losses. Adam is element-wise, so every run follows exactly the trajectory it would
follow alone; :func:`train` is the one-run case and keeps the seed script's signature.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ._validate import check_array, check_choice, check_float, check_int, check_rng
from .advantages import batch_advantages, group_advantages
from .critic import Critic
from .optim import Adam
from .policy import log_softmax, sample_from_uniforms, softmax
from .world import BETA, D_EMB

BASELINES = ("group", "batch", "none")
KL_PLACEMENTS = ("loss", "reward")


@dataclass(frozen=True)
class TrainConfig:
    """Every knob of a training run, with the seed script's defaults. Taught in chapter 4;
    chapter 9 compares each with TRL's default and DeepSeekMath's setting."""

    steps: int = 300  # Adam steps; one fresh group per prompt per step (on-policy)
    G: int | tuple[int, ...] = 8  # group size: answers per prompt per step (a tuple: per run)
    beta: float | tuple[float, ...] = BETA  # KL coefficient (seed: 0.02; TRL's default: 0.0)
    lr: float = 0.05  # Adam learning rate on the policy logits
    baseline: str | tuple[str, ...] = "group"  # "group" (GRPO), "batch" (one mean), "none"
    normalise: bool | tuple[bool, ...] = True  # divide by the group (or batch) std
    use_critic: bool = False  # PPO-style: a learned value V(prompt) replaces the baseline
    train_critic: bool = True  # fit the critic to each group's mean reward as we go
    critic_lr: float = 0.05  # Adam learning rate of the critic
    critic_seed: int | tuple[int, ...] = 0  # the critic's initialisation, seeded explicitly
    kl_in: str | tuple[str, ...] = "loss"  # "loss" (GRPO) or "reward" (RLHF/PPO placement)


@dataclass(frozen=True)
class TrainResult:
    """What :func:`train_batch` returns; axis 0 is the run.

    logits ``(B, P, A)`` final policy logits; reward ``(B, steps + 1)`` expected true reward
    before step 0 (the reference) and after every step; kl ``(B, steps + 1)`` exact
    KL(pi || pi_ref); critic_value ``(B, P)`` final critic values (None without a critic);
    G, beta ``(B,)`` the per-run settings; critics, the trained critic modules (or None).
    Taught in chapter 4.
    """

    logits: np.ndarray
    reward: np.ndarray
    kl: np.ndarray
    critic_value: np.ndarray | None
    G: np.ndarray
    beta: np.ndarray
    config: TrainConfig
    critics: list[Critic] | None = None  # the trained critic modules, one per run

    @property
    def samples_drawn(self) -> np.ndarray:
        """``(B, steps + 1)``: answers drawn per prompt before each entry of ``reward``."""
        return self.G[:, None] * np.arange(self.reward.shape[1])[None, :]


class _BatchedCritic:
    """B independent :class:`Critic` networks as stacked tensors (one bmm instead of B calls)."""

    def __init__(self, seeds: np.ndarray, lr: float) -> None:
        nets = [Critic(int(s)).net for s in seeds]
        stack = [torch.stack([n[i].weight for n in nets]) for i in (0, 2)]
        bias = [torch.stack([n[i].bias for n in nets]) for i in (0, 2)]
        self.params = [t.detach().clone().requires_grad_(True) for t in (*stack, *bias)]
        self.opt = Adam(self.params, lr=lr)

    def __call__(self, emb: torch.Tensor) -> torch.Tensor:
        """``emb (P, D) -> (B, P)``."""
        w1, w2, b1, b2 = self.params  # (B, H, D), (B, 1, H), (B, H), (B, 1)
        h = torch.tanh(emb @ w1.transpose(1, 2) + b1[:, None, :])  # (B, P, H)
        return (h @ w2.transpose(1, 2)).squeeze(-1) + b2  # (B, P)

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


def _run_groups(G: np.ndarray, *settings: np.ndarray) -> list[tuple[np.ndarray, tuple]]:
    """Runs that share a group size and settings: ``(mask (B,), (G, *settings))`` pairs."""
    keys = list(zip(G.tolist(), *(s.tolist() for s in settings), strict=True))
    return [(np.array([k == key for k in keys]), key) for key in dict.fromkeys(keys)]


def _per_run(fn, x: np.ndarray, groups: list[tuple[np.ndarray, tuple]]) -> np.ndarray:
    """Apply ``fn(x_runs, *settings)`` to the first G columns of each group of runs (one
    vectorised call per group, see :func:`_run_groups`); 0 in the padding."""
    out = np.zeros_like(x)
    for sel, (g, *settings) in groups:
        out[sel, :, :g] = fn(x[sel, :, :g], *settings)
    return out


def _advantages(r: np.ndarray, baseline: str, normalise: bool) -> np.ndarray:
    """``(n, P, G)`` advantages of runs that share a baseline and normalisation."""
    if baseline == "group":
        return group_advantages(r, normalise)
    if baseline == "batch":
        return batch_advantages(r, normalise)
    return r  # no baseline: A = r


def _one_or_all(values: np.ndarray):
    """A per-run setting for :class:`TrainConfig`: the value if all runs share it, else a tuple."""
    items = values.tolist()
    return items[0] if len(set(items)) == 1 else tuple(items)


def _broadcast_runs(**values) -> dict[str, np.ndarray]:
    arrays = {k: np.atleast_1d(np.asarray(v, dtype=object)) for k, v in values.items()}
    for k, a in arrays.items():
        if a.ndim != 1:
            raise ValueError(f"{k} must be a scalar or a 1-D sequence, got shape {a.shape}")
    try:
        shape = np.broadcast_shapes(*(a.shape for a in arrays.values()))
    except ValueError:
        lengths = {k: len(a) for k, a in arrays.items()}
        raise ValueError(f"per-run settings must have equal lengths (or length 1): {lengths}") \
            from None
    return {k: np.broadcast_to(a, shape) for k, a in arrays.items()}


def train_batch(
    rewards: np.ndarray,
    emb: np.ndarray | None,
    ref_logits: np.ndarray,
    seeds: int | np.random.Generator | Sequence[int | np.random.Generator],
    *,
    G: int | Sequence[int] = 8,
    beta: float | Sequence[float] = BETA,
    critic_seed: int | Sequence[int] = 0,
    steps: int = 300,
    lr: float = 0.05,
    baseline: str | Sequence[str] = "group",
    normalise: bool | Sequence[bool] = True,
    use_critic: bool = False,
    train_critic: bool = True,
    critic_lr: float = 0.05,
    kl_in: str | Sequence[str] = "loss",
) -> TrainResult:
    """Train B independent runs at once; run b equals a lone :func:`train` with its settings.

    Args:
        rewards: ``(P, A)`` verifier rewards; ref_logits: ``(P, A)`` the frozen reference.
        emb: ``(P, D)`` prompt embeddings (read only by the critic; may be None without one).
        seeds: per-run sampling seeds (ints) or generators; G, beta, critic_seed, baseline,
            normalise, kl_in: scalars or per-run sequences, broadcast together to B runs.
        The rest: see :class:`TrainConfig`.

    Returns:
        :class:`TrainResult` with final logits ``(B, P, A)`` and reward/KL curves ``(B, T+1)``.

    Taught in chapter 4 (and used by every chapter that shows many seeds).
    """
    rewards = check_array(rewards, "rewards", min_ndim=2)
    ref_logits = check_array(ref_logits, "ref_logits", min_ndim=2)
    if rewards.ndim != 2 or ref_logits.shape != rewards.shape:
        raise ValueError(f"rewards {rewards.shape} and ref_logits {ref_logits.shape} must both "
                         "have shape (P, A)")
    P, A = rewards.shape
    runs = _broadcast_runs(seeds=seeds, G=G, beta=beta, critic_seed=critic_seed,
                           baseline=baseline, normalise=normalise, kl_in=kl_in)
    Gs = np.array([check_int(g, "G", 1) for g in runs["G"]], dtype=np.int64)
    betas = np.array([check_float(b, "beta") for b in runs["beta"]])
    critic_seeds = np.array([check_int(c, "critic_seed", 0) for c in runs["critic_seed"]])
    baselines = np.array([check_choice(b, "baseline", BASELINES) for b in runs["baseline"]])
    normalises = np.array([bool(n) for n in runs["normalise"]])
    kl_ins = np.array([check_choice(k, "kl_in", KL_PLACEMENTS) for k in runs["kl_in"]])
    config = TrainConfig(
        G=_one_or_all(Gs), beta=_one_or_all(betas), critic_seed=_one_or_all(critic_seeds),
        baseline=_one_or_all(baselines), normalise=_one_or_all(normalises),
        kl_in=_one_or_all(kl_ins), steps=check_int(steps, "steps", 0),
        lr=check_float(lr, "lr", strict=True), use_critic=bool(use_critic),
        train_critic=bool(train_critic),
        critic_lr=check_float(critic_lr, "critic_lr", strict=True),
    )
    if use_critic and (kl_ins != "loss").any():
        raise ValueError('use_critic=True supports only kl_in="loss"')
    if use_critic:
        emb = check_array(emb, "emb", min_ndim=2)
        if emb.shape != (P, D_EMB):
            raise ValueError(f"emb must have shape (P, D) = {(P, D_EMB)}, got {emb.shape}")
    rngs = [s if isinstance(s, np.random.Generator)
            else np.random.default_rng(check_int(s, "seeds", 0)) for s in runs["seeds"]]
    B, G_max, T = len(Gs), int(Gs.max()), config.steps

    logits = torch.tensor(np.broadcast_to(ref_logits, (B, P, A)).copy(), requires_grad=True)
    opt = Adam([logits], lr=config.lr)
    ref_lp_t = torch.log_softmax(torch.tensor(ref_logits), dim=-1)  # (P, A)
    ref_lp = log_softmax(ref_logits)
    # each run's beta goes either into its loss or into its rewards; the other gets 0, which
    # leaves that run's numbers bit-identical (x - 0 * pen == x, g + 0 * dkl == g)
    beta_loss = torch.tensor(np.where(kl_ins == "loss", betas, 0.0))  # (B,)
    beta_reward = np.where(kl_ins == "reward", betas, 0.0)[:, None, None]  # (B, 1, 1)
    n_terms = torch.tensor((P * Gs).astype(np.float64))  # (B,) samples per run per step
    rows = np.arange(P)[:, None]
    by_size = _run_groups(Gs)  # runs grouped once: the groups do not change during training
    by_settings = _run_groups(Gs, baselines, normalises)
    critic = _BatchedCritic(critic_seeds, config.critic_lr) if use_critic else None
    emb_t = torch.tensor(emb, dtype=torch.float32) if use_critic else None
    reward_curve = np.empty((B, T + 1))
    kl_curve = np.empty((B, T + 1))
    CHUNK = 32  # uniforms are drawn for 32 steps at a time: one rng call per run per chunk

    for t in range(T + 1):
        logits_np = logits.detach().numpy()  # (B, P, A), a view: read before opt.step()
        probs, lp_np = softmax(logits_np), log_softmax(logits_np)
        reward_curve[:, t] = (probs * rewards).sum(axis=-1).mean(axis=-1)  # as in evaluate()
        kl_curve[:, t] = (probs * (lp_np - ref_lp)).sum(axis=-1).mean(axis=-1)
        if t == T:
            break
        if t % CHUNK == 0:  # the same stream as one rng.random((P, G)) call per step
            u = np.zeros((B, min(CHUNK, T - t), P, G_max))
            for b, rng in enumerate(rngs):
                u[b, :, :, : Gs[b]] = rng.random((u.shape[1], P, Gs[b]))
        samples = sample_from_uniforms(probs, u[:, t % CHUNK])  # (B, P, G_max)
        r = rewards[rows, samples]  # (B, P, G_max) rewards of the sampled answers
        if beta_reward.any():  # RLHF/PPO placement: penalise before the baseline
            pen = np.take_along_axis(lp_np - ref_lp, samples, axis=-1)
            r = r - beta_reward * pen

        if critic is not None:
            v = critic(emb_t)  # (B, P)
            # float32 as in the seed script (its advantages become float32 tensors)
            adv_t = torch.tensor(r, dtype=torch.float32) - v.detach()[..., None]
            adv_t = adv_t * torch.from_numpy(np.arange(G_max) < Gs[:, None, None])
            if config.train_critic:  # regress V(prompt) on the group's mean reward
                target = _per_run(lambda x: x.mean(axis=-1, keepdims=True), r, by_size)
                target = target[..., 0]  # (B, P) each group's mean reward
                loss_v = ((v - torch.tensor(target, dtype=torch.float32)) ** 2).mean(-1).sum()
                critic.opt.zero_grad()
                loss_v.backward()
                critic.opt.step()
        else:
            adv = _per_run(_advantages, r, by_settings)
            adv_t = torch.tensor(adv, dtype=torch.float32)  # float32, as in the seed script

        lp = torch.log_softmax(logits, dim=-1)  # (B, P, A)
        chosen = lp.gather(-1, torch.from_numpy(samples))  # (B, P, G_max) log pi(a_i)
        pg = -(adv_t * chosen).sum(dim=(-2, -1)) / n_terms  # (B,); padding has adv = 0
        loss = pg
        if beta_loss.any():
            kl = (lp.exp() * (lp - ref_lp_t)).sum(-1).mean(-1)  # (B,) exact KL(pi || pi_ref)
            loss = pg + beta_loss * kl
        opt.zero_grad()
        loss.sum().backward()  # runs are independent: each gets its own gradient
        opt.step()

    critic_value = critic(emb_t).detach().numpy().astype(np.float64) if critic else None
    return TrainResult(
        logits=logits.detach().numpy().copy(), reward=reward_curve, kl=kl_curve,
        critic_value=critic_value, G=Gs, beta=betas, config=config,
        critics=critic.critics() if critic else None,
    )


def train(
    rewards: np.ndarray,
    emb: np.ndarray | None,
    ref_logits: np.ndarray,
    rng: np.random.Generator,
    steps: int = 300,
    G: int = 8,
    beta: float = BETA,
    baseline: str = "group",
    normalise: bool = True,
    use_critic: bool = False,
    train_critic: bool = True,
    lr: float = 0.05,
    *,
    critic_seed: int = 0,
    critic_lr: float = 0.05,
) -> tuple[np.ndarray, Critic]:
    """One GRPO run, the seed script's ``train``: returns final logits ``(P, A)`` and the critic.

    ``rng`` is consumed as in the seed (one ``(P, G)`` uniform draw per step). The critic is
    initialised from ``critic_seed`` (never from torch's global RNG) and returned trained when
    ``use_critic`` (else untrained). Taught in chapter 4.
    """
    rng = check_rng(rng)
    res = train_batch(rewards, emb, ref_logits, [rng], G=G, beta=beta, critic_seed=critic_seed,
                      steps=steps, lr=lr, baseline=baseline, normalise=normalise,
                      use_critic=use_critic, train_critic=train_critic, critic_lr=critic_lr)
    return res.logits[0], res.critics[0] if res.critics else Critic(critic_seed)


def train_kl_in_reward(
    rewards: np.ndarray,
    ref_logits: np.ndarray,
    rng: np.random.Generator,
    steps: int = 300,
    G: int = 8,
    beta: float = 0.1,
    lr: float = 0.05,
) -> np.ndarray:
    """The RLHF/PPO placement of the leash: ``r - beta * (log pi(a) - log pi_ref(a))`` per
    sample, BEFORE the group baseline and std touch it; no KL term in the loss.

    Returns final logits ``(P, A)``. Taught in chapter 6.
    """
    rng = check_rng(rng)
    res = train_batch(rewards, None, ref_logits, [rng], G=G, beta=beta, steps=steps, lr=lr,
                      kl_in="reward")
    return res.logits[0]
