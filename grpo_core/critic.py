"""The critic that GRPO deletes: a small MLP from a prompt's embedding to a value (PPO's baseline).

In a real run the critic is a second network the size of the policy, with its own optimiser
state, and it predicts a value per *token*, V(q, o_<t), combined by GAE; with one-token answers
that reduces to one value per prompt. Here it is 8 -> 16 -> 1 with a tanh: 161 parameters against
the policy's 72 logits. DeepSeekMath (arXiv 2402.03300, section 4.1) drops it for its memory and
compute, and because a reward given only at the last token makes a per-token value hard to train.
"""

from __future__ import annotations

import torch
from torch import nn

from ._validate import check_int
from .world import D_EMB

HIDDEN = 16


def _init_linear(layer: nn.Linear, gen: torch.Generator) -> None:
    """PyTorch's default ``nn.Linear`` initialisation, U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for
    weight and bias (kaiming_uniform with a = sqrt(5)), drawn from ``gen``, not the global RNG."""
    bound = 1.0 / layer.in_features**0.5
    with torch.no_grad():
        layer.weight.uniform_(-bound, bound, generator=gen)
        layer.bias.uniform_(-bound, bound, generator=gen)


class Critic(nn.Module):
    """Value network ``emb (P, D) -> V (P,)``: Linear(8, 16), tanh, Linear(16, 1).

    Args:
        seed: seeds the initialisation through its own ``torch.Generator``; torch's global
            RNG is neither read nor advanced, so the result does not depend on cell order.

    Taught in chapter 4 (``04_critic_vs_group``).
    """

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        seed = check_int(seed, "seed", 0)
        # nn.Linear initialises itself from torch's global RNG: let it, inside fork_rng (which
        # puts the global state back), then overwrite every weight from our own generator
        with torch.random.fork_rng(devices=[]):
            first, last = nn.Linear(D_EMB, HIDDEN), nn.Linear(HIDDEN, 1)
        gen = torch.Generator().manual_seed(seed)
        _init_linear(first, gen)
        _init_linear(last, gen)
        self.net = nn.Sequential(first, nn.Tanh(), last)

    def forward(self, emb: torch.Tensor) -> torch.Tensor:
        """``(..., D) -> (...)``: one value per prompt."""
        if emb.shape[-1] != D_EMB:
            raise ValueError(f"emb must have shape (..., {D_EMB}), got {tuple(emb.shape)}")
        return self.net(emb).squeeze(-1)


def n_params(module: nn.Module) -> int:
    """Number of trainable scalars in ``module`` (161 for :class:`Critic`). Taught in chapter 4."""
    if not isinstance(module, nn.Module):
        raise TypeError(f"module must be a torch.nn.Module, got {type(module).__name__}")
    return sum(p.numel() for p in module.parameters())
