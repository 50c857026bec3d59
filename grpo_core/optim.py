"""Adam, written out: the update ``torch.optim.Adam`` makes on CPU, step for step.

Why not ``torch.optim.Adam`` itself? Its constructor imports ``torch._dynamo``, a one-off cost
of about a second per process, paid again in every notebook kernel and by
``python -m grpo_core``. The arithmetic is eight tensor operations, and
``tests/test_optim.py`` checks it is bit-for-bit the same as torch's (the default
single-tensor path: no foreach/fused kernel on CPU). ``.backward()`` still comes from torch.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from ._validate import check_float


class Adam:
    """Adam (Kingma & Ba, 2015) with torch's defaults: betas (0.9, 0.999), eps 1e-8.

    Element-wise, so a parameter tensor that stacks B independent runs is updated exactly as
    B separate optimisers would update them. Taught in chapter 4.
    """

    def __init__(self, params: Iterable[torch.Tensor], lr: float,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8) -> None:
        self.params = list(params)
        self.lr = check_float(lr, "lr", strict=True)
        self.beta1, self.beta2 = betas
        self.eps = eps
        self.steps = 0
        self.exp_avg = [torch.zeros_like(p) for p in self.params]  # first moment m
        self.exp_avg_sq = [torch.zeros_like(p) for p in self.params]  # second moment v

    def zero_grad(self) -> None:
        """Forget the gradients of the last backward pass."""
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        """One update: ``p -= lr * m_hat / (sqrt(v_hat) + eps)``, in torch's operation order."""
        self.steps += 1
        bias_correction1 = 1 - self.beta1**self.steps
        bias_correction2_sqrt = (1 - self.beta2**self.steps) ** 0.5
        step_size = self.lr / bias_correction1
        for p, m, v in zip(self.params, self.exp_avg, self.exp_avg_sq, strict=True):
            if p.grad is None:
                continue
            g = p.grad
            m.lerp_(g, 1 - self.beta1)
            v.mul_(self.beta2).addcmul_(g, g, value=1 - self.beta2)
            denom = (v.sqrt() / bias_correction2_sqrt).add_(self.eps)
            p.addcdiv_(m, denom, value=-step_size)
