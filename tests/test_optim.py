"""grpo_core's written-out Adam is bit-for-bit torch.optim.Adam."""

import pytest
import torch

from grpo_core.optim import Adam


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("lr", [0.05, 1e-3])
def test_adam_is_bit_identical_to_torch(dtype, lr):
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(3, 6, 12, dtype=dtype, generator=gen)
    b = a.clone()
    a.requires_grad_()
    b.requires_grad_()
    ours, theirs = Adam([a], lr=lr), torch.optim.Adam([b], lr=lr)
    for i in range(300):
        g = torch.randn(3, 6, 12, dtype=dtype, generator=gen) * 10.0 ** (i % 7 - 4)
        a.grad, b.grad = g.clone(), g.clone()
        ours.step()
        theirs.step()
    assert torch.equal(a, b)


def test_adam_skips_parameters_without_gradient():
    x = torch.ones(3, requires_grad=True)
    opt = Adam([x], lr=0.1)
    opt.zero_grad()
    opt.step()
    assert torch.equal(x, torch.ones(3))


def test_adam_rejects_bad_learning_rate():
    with pytest.raises(ValueError, match="lr"):
        Adam([torch.ones(1)], lr=0.0)
