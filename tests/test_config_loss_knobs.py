"""Issue 22's block of GRPOConfig: TRL 1.16's other loss knobs reach grpo_loss through
loss_kwargs(), with TRL's defaults, and bad values raise a ValueError naming the field."""

import dataclasses

import pytest
import torch

import grpo_core as gc
from grpo_core import config as C
from grpo_core import loss as L

BLOCK = ("delta", "sapo_temperature_neg", "sapo_temperature_pos", "vespo_k_pos",
         "vespo_lambda_pos", "vespo_k_neg", "vespo_lambda_neg", "top_entropy_quantile",
         "entropy_coef", "off_policy_mask_threshold", "reward_weights",
         "multi_objective_aggregation", "vllm_importance_sampling_mode",
         "vllm_importance_sampling_clip_max", "vllm_importance_sampling_clip_min")


def test_block_defaults_are_trls_and_chapter_17():
    trl = pytest.importorskip("trl")
    theirs = {f.name: f.default for f in dataclasses.fields(trl.GRPOConfig)}
    ours = {f.name: f for f in dataclasses.fields(gc.GRPOConfig)}
    for name in BLOCK:
        assert ours[name].default == theirs[name], name
        assert ours[name].metadata["chapters"] == (17,)
    # grpo_loss's keyword defaults are the same values (max_completion_length: None is the
    # batch's own length there; GRPOConfig has TRL's 512)
    import inspect
    params = inspect.signature(gc.grpo_loss).parameters
    for name in C.LOSS_FIELDS - {"max_completion_length"}:
        assert params[name].default == ours[name].default, name


def test_loss_kwargs_reach_grpo_loss():
    cfg = gc.GRPOConfig(loss_type="sapo", sapo_temperature_pos=0.5, sapo_temperature_neg=2.0,
                        top_entropy_quantile=0.5, entropy_coef=0.01, delta=1.5,
                        off_policy_mask_threshold=0.2, vespo_k_pos=1.0, max_completion_length=5)
    kw = cfg.loss_kwargs()
    for name in C.LOSS_KNOBS:
        assert kw[name] == getattr(cfg, name), name
    g = torch.Generator().manual_seed(0)
    logp = -torch.rand(4, 5, generator=g, dtype=torch.float64)
    old = logp + 0.3 * torch.randn(4, 5, generator=g, dtype=torch.float64)
    adv = torch.randn(4, generator=g, dtype=torch.float64)
    mask = torch.ones(4, 5, dtype=torch.float64)
    ent = torch.rand(4, 5, generator=g, dtype=torch.float64)
    via_cfg = gc.grpo_loss(logp, old, None, adv, mask, entropies=ent, **kw)
    direct = gc.grpo_loss(logp, old, None, adv, mask, entropies=ent, loss_type="sapo",
                          sapo_temperature_pos=0.5, sapo_temperature_neg=2.0,
                          top_entropy_quantile=0.5, entropy_coef=0.01, delta=1.5,
                          off_policy_mask_threshold=0.2, max_completion_length=5)
    assert torch.equal(via_cfg, direct)
    assert via_cfg != gc.grpo_loss(logp, old, None, adv, mask, loss_type="sapo")


def test_trl_kwargs_carry_the_block():
    trl = pytest.importorskip("trl")
    import tempfile
    cfg = gc.GRPOConfig(loss_type="cispo", epsilon_high=5.0, entropy_coef=0.01,
                        multi_objective_aggregation="normalize_then_sum",
                        reward_weights=(1.0, 0.5), per_device_train_batch_size=8)
    t = trl.GRPOConfig(output_dir=tempfile.mkdtemp(), **cfg.trl_kwargs())
    assert t.loss_type == "cispo" and t.entropy_coef == 0.01
    assert t.multi_objective_aggregation == "normalize_then_sum"
    assert list(t.reward_weights) == [1.0, 0.5]


@pytest.mark.parametrize("knobs", [
    {"delta": 0.0}, {"sapo_temperature_neg": 0.0}, {"sapo_temperature_pos": -1.0},
    {"vespo_k_pos": -1.0}, {"vespo_lambda_pos": -0.5}, {"vespo_k_neg": float("nan")},
    {"vespo_lambda_neg": -2.0}, {"top_entropy_quantile": 1.5}, {"top_entropy_quantile": -0.1},
    {"entropy_coef": float("inf")}, {"off_policy_mask_threshold": float("nan")},
    {"reward_weights": (1.0, float("nan"))}, {"multi_objective_aggregation": "sum"},
    {"vllm_importance_sampling_mode": "token"}, {"vllm_importance_sampling_clip_max": -1.0},
    {"vllm_importance_sampling_clip_min": -1.0}, {"loss_type": "ppo"},
])
def test_block_rejects_bad_values(knobs):
    name = next(iter(knobs))
    with pytest.raises((ValueError, TypeError), match=name):
        gc.GRPOConfig(**knobs)


def test_every_loss_type_is_accepted():
    for lt in L.ALL_LOSS_TYPES:
        assert gc.GRPOConfig(loss_type=lt).loss_kwargs()["loss_type"] == lt
