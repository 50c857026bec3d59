"""A plain-loop implementation of the mechanism, the way a textbook writes it.

It is the oracle of the tests (``grpo_core`` must agree with it) and the baseline of
``benchmarks/bench_core.py`` (``grpo_core`` must be much faster). One sample at a time, one
prompt at a time, ``Generator.choice`` for sampling and ``torch.optim.Adam`` for training.
"""

from __future__ import annotations

import numpy as np
import torch


def softmax(x):
    z = np.exp(x - x.max(axis=-1, keepdims=True))
    return z / z.sum(axis=-1, keepdims=True)


def sample_group(logits, G, rng):
    probs = softmax(logits)
    return np.stack([rng.choice(logits.shape[1], size=G, p=probs[p])
                     for p in range(logits.shape[0])])


def policy_gradient(logits, samples, adv):
    probs = softmax(logits)
    grad = np.zeros_like(logits)
    P, G = samples.shape
    for p in range(P):
        for i in range(G):
            onehot = np.zeros(logits.shape[1])
            onehot[samples[p, i]] = 1.0
            grad[p] += adv[p, i] * (onehot - probs[p]) / G
    return grad


def group_advantages(r, normalise=True):
    out = np.zeros_like(r)
    for p in range(r.shape[0]):
        mean = sum(r[p]) / len(r[p])
        std = (sum((x - mean) ** 2 for x in r[p]) / len(r[p])) ** 0.5
        for i in range(r.shape[1]):
            out[p, i] = (r[p, i] - mean) / (std + 1e-8 if normalise else 1.0)
    return out


def grad_variance(logits, rewards, rng, G=8, kind="group", repeats=400, critic_value=None):
    grads = []
    for _ in range(repeats):
        s = sample_group(logits, G, rng)
        r = np.take_along_axis(rewards, s, axis=1)
        if kind == "none":
            a = r
        elif kind == "group":
            a = group_advantages(r, normalise=False)
        elif kind == "group_norm":
            a = group_advantages(r, normalise=True)
        elif kind == "critic":
            a = r - critic_value[:, None]
        else:
            raise ValueError(kind)
        grads.append(policy_gradient(logits, s, a))
    g = np.stack(grads)
    return float(((g - g.mean(0)) ** 2).sum(axis=(1, 2)).mean())


def train(rewards, ref_logits, rng, steps=300, G=8, beta=0.02, lr=0.05, normalise=True,
          kl_in="loss"):
    """GRPO with the KL in the loss (or, kl_in="reward", RLHF's penalty r - beta (log pi(a) -
    log pi_ref(a)) before the baseline): one Adam step on a fresh group per prompt per step."""
    logits = torch.tensor(ref_logits.copy(), requires_grad=True)
    opt = torch.optim.Adam([logits], lr=lr)
    ref_lp = torch.log_softmax(torch.tensor(ref_logits), dim=-1)
    for _ in range(steps):
        s = sample_group(logits.detach().numpy(), G, rng)
        r = np.take_along_axis(rewards, s, axis=1)
        if kl_in == "reward":
            lp_now = torch.log_softmax(logits.detach(), dim=-1).numpy()
            r = r - beta * np.take_along_axis(lp_now - ref_lp.numpy(), s, axis=1)
        r_mean = r.mean(axis=1, keepdims=True)
        adv = r - r_mean
        if normalise:
            adv = adv / (r.std(axis=1, keepdims=True) + 1e-8)
        adv[(r == r[:, :1]).all(axis=1)] = 0.0  # an all-equal group carries no signal
        lp = torch.log_softmax(logits, dim=-1)
        chosen = lp.gather(1, torch.tensor(s))
        pg = -(torch.tensor(adv, dtype=torch.float32) * chosen).mean()
        kl = (lp.exp() * (lp - ref_lp)).sum(-1).mean()
        opt.zero_grad()
        (pg + (beta if kl_in == "loss" else 0.0) * kl).backward()
        opt.step()
    return logits.detach().numpy()
