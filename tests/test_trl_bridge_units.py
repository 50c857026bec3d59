"""grpo_core.trl_bridge's pure parts without TRL installed or imported (chapter 16): the loss
check on tensors shaped as TRL's ``_compute_loss`` receives them (oracle: the transcription of
TRL's ``_compute_loss`` in tests/trl_reference.py, checked against the installed TRL by
test_trl_reference), its hooks on a stand-in trainer, and ``per_generation`` on a hand-made log.
The same functions on a real GRPOTrainer run: tests/test_trl_bridge.py."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch
import trl_reference as trl

import grpo_core as gc
from grpo_core import trl_bridge as B

KNOBS = dict(top_entropy_quantile=0.5, entropy_coef=0.01, epsilon_high=0.28)


def _args(**knobs):
    """TRL's GRPOConfig as far as book_loss reads it: the book's names and TRL's batch knobs."""
    return SimpleNamespace(**(gc.GRPOConfig(**knobs).trl_kwargs() | dict(steps_per_generation=1)))


def _batch(seed=0, B_=3, T=5, V=4):
    g = torch.Generator().manual_seed(seed)
    theta = torch.randn(B_, T, V, generator=g, dtype=torch.float32).requires_grad_(True)
    tok = torch.randint(0, V, (B_, T), generator=g)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0]])[:B_, :T]
    adv = torch.tensor([1.0, -0.5, 0.3])[:B_]
    return theta, tok, mask, adv


def _logps(theta, tok):
    lp = torch.log_softmax(theta, -1)
    return lp.gather(-1, tok[..., None]).squeeze(-1), -(lp.exp() * lp).sum(-1)


def test_loss_check_against_trls_loss_and_a_wrong_one():
    theta, tok, mask, adv = _batch()
    logp, ent = _logps(theta, tok)
    old = logp.detach() + torch.tensor([[0.0, 0.1, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0, 9.0],
                                        [0.0, 0.0, -0.3, 0.0, 0.0]])  # 9.0: padding
    inputs = {"old_per_token_logps": old, "advantages": adv, "completion_mask": mask,
              "num_items_in_batch": mask.sum()}
    theirs = trl.TRLGRPOLoss(max_completion_length=5, **KNOBS)._compute_loss(logp, ent, inputs)
    c = B.loss_check(theirs, logp, inputs, _args(**KNOBS), [theta], ent)
    assert c.loss == theirs.item() and c.loss_diff < 1e-7 and c.grad_diff < 1e-7
    g, = torch.autograd.grad(theirs, theta, retain_graph=True)
    assert c.grad_max == g.abs().max().item() > 1e-3
    assert c.pi_old_given and c.lengths == (2, 5)
    assert c.ratio_dev == pytest.approx(np.exp(0.3) - 1, rel=1e-5)  # the padding's 9 unseen
    wrong = B.loss_check(2 * theirs, logp, inputs, _args(**KNOBS), [theta], ent)
    assert wrong.loss_diff == pytest.approx(abs(theirs.item()), rel=1e-6)
    assert wrong.grad_diff == pytest.approx(c.grad_max, rel=1e-6)
    assert wrong.grad_max == pytest.approx(2 * c.grad_max, rel=1e-6)
    on_policy = {k: v for k, v in inputs.items() if k != "old_per_token_logps"}
    theirs = trl.TRLGRPOLoss(max_completion_length=5, **KNOBS)._compute_loss(logp, ent, on_policy)
    c = B.loss_check(theirs, logp, on_policy, _args(**KNOBS), [theta], ent)
    assert not c.pi_old_given and c.ratio_dev == 0.0 and c.loss_diff < 1e-7


def test_hooks_check_the_first_n_loss_calls_with_the_log_probs_that_have_entropies():
    """A stand-in for GRPOTrainer: _compute_loss asks for pi_old's log-probs (no entropies,
    another tensor) then for the log-probs with entropies, as TRL 1.16's does."""
    theta, tok, mask, adv = _batch(1)
    inputs = {"advantages": adv, "completion_mask": mask, "num_items_in_batch": mask.sum()}
    ref = trl.TRLGRPOLoss(max_completion_length=5, **KNOBS)

    def get_logps(model, compute_entropy=False):
        logp, ent = _logps(theta, tok)
        return (logp, ent) if compute_entropy else (logp.detach() - 1.0, None)

    def compute_loss(model, inputs):
        trainer._get_per_token_logps_and_entropies(model)  # pi_old's pass: not the one checked
        logp, ent = trainer._get_per_token_logps_and_entropies(model, compute_entropy=True)
        return ref._compute_loss(logp, ent, inputs)

    model = SimpleNamespace(parameters=lambda: [theta])
    trainer = SimpleNamespace(_get_per_token_logps_and_entropies=get_logps,
                              _compute_loss=compute_loss, args=_args(**KNOBS), loss_checks=[])
    B._hook_loss_checks(trainer, 2)
    losses = [trainer._compute_loss(model, inputs) for _ in range(3)]
    assert len(trainer.loss_checks) == 2  # the first n calls only
    assert all(c.loss == losses[0].item() and c.loss_diff < 1e-7 and c.grad_diff < 1e-7
               for c in trainer.loss_checks)


def test_per_generation_reads_trls_log_as_the_books_loop_logs():
    """Two optimizer steps per batch: the reward metrics of the first, the entropy of the last,
    the clip ratio's mean; TRL's final summary row (no "loss") is skipped."""
    rows = [{"loss": 0.0, "entropy": 10.0 * i, "clip_ratio/region_mean": 0.01 * i ** 2,
             **({name: i + 0.5 + k for k, name in enumerate(B.METRICS[:5])} if i % 2 == 0
                else {})} for i in range(6)]
    log = B.per_generation([*rows, {"train_loss": 1.0}], 2)
    assert set(log) == set(B.METRICS) and all(v.shape == (3,) for v in log.values())
    for k, name in enumerate(B.METRICS[:5]):
        np.testing.assert_array_equal(log[name], [0.5 + k, 2.5 + k, 4.5 + k])
    np.testing.assert_array_equal(log["entropy"], [10.0, 30.0, 50.0])
    np.testing.assert_allclose(log["clip_ratio/region_mean"], [0.005, 0.065, 0.205], rtol=1e-15)
    with pytest.raises(ValueError, match="whole batches of 4"):
        B.per_generation(rows, 4)
