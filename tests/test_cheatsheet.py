"""book/cheatsheet.md states code and numbers: its 15-line loss must equal grpo_core.grpo_loss, and
its table of defaults must equal TRL 1.16's GRPOConfig (read from trl itself)."""

import ast
import dataclasses
import re
from pathlib import Path

import pytest
import torch

import grpo_core as gc

PAGE = Path(__file__).resolve().parent.parent / "book" / "cheatsheet.md"


def _loss_block() -> str:
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.S)
    assert len(blocks) == 1, "the cheat-sheet has exactly one python block: the loss"
    return blocks[0]


def _defaults_table() -> dict[str, object]:
    text = PAGE.read_text().split("## TRL 1.16's defaults", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(\w+)` \| `([^`]+)` \|", text, flags=re.M)
    return {name: ast.literal_eval(value) for name, value in rows}


def test_loss_block_is_at_most_15_lines():
    assert len(_loss_block().strip().splitlines()) <= 15


@pytest.mark.parametrize("beta", [0.0, 0.04])
@pytest.mark.parametrize("eps_high", [None, 0.28])
@pytest.mark.parametrize("on_policy", [True, False])
def test_loss_block_equals_grpo_loss(beta, eps_high, on_policy):
    namespace = {"torch": torch}
    exec(_loss_block(), namespace)
    page_loss = namespace["grpo_loss"]
    g = torch.Generator().manual_seed(0)
    B, T = 6, 5
    logp = (-torch.rand(B, T, generator=g, dtype=torch.float64) * 2).requires_grad_()
    old = logp.detach() if on_policy else logp.detach() + 0.3 * torch.randn(B, T, generator=g,
                                                                           dtype=torch.float64)
    ref = logp.detach() + 0.5 * torch.randn(B, T, generator=g, dtype=torch.float64)
    adv = torch.randn(B, generator=g, dtype=torch.float64)
    mask = (torch.arange(T) < torch.tensor([5, 3, 1, 4, 2, 5])[:, None]).double()
    mine = page_loss(logp, old, ref, adv, mask, beta=beta, eps=0.2, eps_high=eps_high)
    theirs = gc.grpo_loss(logp, old, ref, adv, mask, beta=beta, epsilon=0.2,
                          epsilon_high=eps_high, loss_type="dapo")
    assert abs(mine.item() - theirs.item()) < 1e-12 and mine.item() != 0.0
    g1, = torch.autograd.grad(mine, logp)
    g2, = torch.autograd.grad(theirs, logp)
    assert torch.allclose(g1, g2, rtol=0, atol=1e-12)


def test_defaults_table_equals_trl():
    trl = pytest.importorskip("trl")
    stated = _defaults_table()
    assert len(stated) >= 18
    fields = {f.name: f.default for f in dataclasses.fields(trl.GRPOConfig)}
    for name, value in stated.items():
        assert name in fields, name
        actual = fields[name]
        actual = getattr(actual, "value", actual)  # enums (lr_scheduler_type) hold a str
        assert actual == value, (name, actual, value)
