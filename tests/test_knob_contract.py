"""One knob contract: every GRPOConfig field, set away from its default, either changes the run of
every training loop or is refused by that loop with a ValueError that names it (issue 30).

Tiny runs (two batches, mu = 2, a large learning rate so that the ratio moves) of the five loops
of config.LOOPS; a field whose effect needs another knob (a loss type's own knobs, a switch) is
set together with it, and compared with the run that sets only the enabler, as TRL's own
dependencies go. Two equivalences are the toy's own and are asserted as such: answers of one
token make the sequence-level ratio the token-level one.
"""

import dataclasses

import numpy as np
import pytest
import torch

import grpo_core as gc
from grpo_core import beyond as bd
from grpo_core import config as C
from grpo_core import tiny_lm as T

FIELDS = [f.name for f in dataclasses.fields(gc.GRPOConfig)]
BASE = {"max_steps": 2, "num_iterations": 2, "learning_rate": 0.3}
BW = gc.binary_world()  # 0/1 rewards: dead groups, for dynamic sampling
SEQ = gc.make_sequence_world(2, 3)  # 15 completions, pass rate 0.17: live groups
RPF = np.array([[[1, 0], [0, 1], [0, 0], [1, 1]],  # (P, A, F) = (2, 4, 2): two reward functions
                [[0, 1], [1, 1], [0, 0], [1, 0]]], dtype=float)
PROMPTS = T.all_prompts()[:64]
TINY = T.TinyLM(0, d_model=8, n_layers=1, n_heads=2, d_mlp=8)


def FIRST_LOW(prompts, completions):  # noqa: N802  a reward an untrained model earns half the time
    return (completions[:, 0] < 6).double().numpy()


def _train_batch(**kw):
    res = gc.train_batch(BW.rewards, BW.emb, BW.ref_logits, [0], **kw)
    return res.logits


def _train_sequences(**kw):
    return gc.train_sequences(SEQ, [0, 1, 2], **kw)["logits"].numpy()


def _train_grpo(**kw):
    kw = {"per_device_train_batch_size": 16, "learning_rate": 0.03} | kw
    run = T.train_grpo(TINY, PROMPTS, PROMPTS[:4], eval_every=100, reward_fn=FIRST_LOW, **kw)
    return torch.cat([p.detach().flatten() for p in run.model.parameters()]).numpy()


def _train_knobs(**kw):
    own = {k: kw.pop(k) for k in list(kw) if k in bd._PER_RUN}  # a run's own settings
    return bd.train_knobs(SEQ, [0, 1, 2], [own], sampler_lag=1, **kw)["logits"].numpy()


def _train_two_rewards(**kw):
    return bd.train_two_rewards(RPF, BW.ref_logits[:2, :4], [0], **kw)["curve"]


LOOPS = {"train_batch": _train_batch, "train_sequences": _train_sequences,
         "train_grpo": _train_grpo, "train_knobs": _train_knobs,
         "train_two_rewards": _train_two_rewards}
assert set(LOOPS) == set(C.LOOPS)

# a value away from the default for each field, and the knobs it needs to act (TRL's own
# dependencies: a loss type's knobs act with that loss type, the KL's with beta > 0, ...)
PROBES = {
    "num_generations": (4, {}), "per_device_train_batch_size": (16, {}), "max_steps": (3, {}),
    "learning_rate": (0.01, {}), "adam_beta2": (0.9, {}), "seed": (3, {}), "beta": (0.1, {}),
    "num_iterations": (3, {}), "epsilon": (0.01, {}), "epsilon_high": (0.01, {}),
    "loss_type": ("sapo", {}), "importance_sampling_level": ("sequence", {}),
    "scale_rewards": ("batch", {}), "use_bias_correction_kl": (False, {"beta": 0.1}),
    "max_completion_length": (7, {"loss_type": "dr_grpo"}),
    "mask_truncated_completions": (True, {}), "temperature": (0.5, {}),
    "sync_ref_model": (True, {"beta": 0.1, "ref_model_sync_steps": 1}),
    "ref_model_sync_steps": (1, {"beta": 0.1, "sync_ref_model": True}),
    "ref_model_mixup_alpha": (1.0, {"beta": 0.1, "sync_ref_model": True,
                                    "ref_model_sync_steps": 1}),
    "steps_per_generation": (2, {}), "delta": (0.5, {}),
    "sapo_temperature_neg": (5.0, {"loss_type": "sapo"}),
    "sapo_temperature_pos": (5.0, {"loss_type": "sapo"}),
    "vespo_k_pos": (5.0, {"loss_type": "vespo"}), "vespo_lambda_pos": (0.5, {"loss_type": "vespo"}),
    "vespo_k_neg": (0.5, {"loss_type": "vespo"}), "vespo_lambda_neg": (5.0, {"loss_type": "vespo"}),
    "top_entropy_quantile": (0.5, {}), "entropy_coef": (0.5, {}),
    "off_policy_mask_threshold": (-1.0, {}), "reward_weights": ((2.0, 0.5), {}),
    "multi_objective_aggregation": ("normalize_then_sum", {}), "use_vllm": (True, {}),
    "vllm_importance_sampling_mode": ("token_truncate", {"use_vllm": True}),
    "vllm_importance_sampling_clip_max": (1.01, {"use_vllm": True}),
    "vllm_importance_sampling_clip_min": (0.99, {"use_vllm": True}),
    "kind": ("group", {}), "kl_estimator": ("k2", {"beta": 0.1}), "kl_in": ("reward", {}),
    "dynamic_sampling": (True, {}), "max_redraws": (1, {"dynamic_sampling": True}),
    "use_critic": (True, {}), "train_critic": (False, {"use_critic": True}),
    "critic_lr": (0.5, {"use_critic": True}), "critic_seed": (3, {"use_critic": True}),
    "float32_advantages": (True, {}),
}
# the toy's preset differs from TRL's default here: probe the other value
LOOP_PROBES = {("train_batch", "float32_advantages"): (False, {}),
               ("train_grpo", "per_device_train_batch_size"): (32, {}),  # 16 in _train_grpo
               ("train_two_rewards", "per_device_train_batch_size"): (8, {}),  # P x G is 16
               # one group per batch: the batch's std is the group's; two groups then
               ("train_sequences", "scale_rewards"): ("batch", {"per_device_train_batch_size": 16}),
               ("train_knobs", "scale_rewards"): ("batch", {"per_device_train_batch_size": 16}),
               ("train_batch", "kl_estimator"): ("k2", {}),
               ("train_batch", "use_bias_correction_kl"): (False, {"kl_estimator": "k3"})}
# where a loop reads a field but its world allows one value only (checked, by name)
ONE_VALUE = {("train_batch", "per_device_train_batch_size"): "a group for every prompt: P x G",
             ("train_two_rewards", "per_device_train_batch_size"): "the same",
             ("train_grpo", "max_completion_length"): "the task's answers: 4 tokens and EOS"}
# where a field is read but cannot change the run, by the world's own math
EQUIVALENT = {("train_batch", "importance_sampling_level"): "one-token answers",
              ("train_two_rewards", "importance_sampling_level"): "one-token answers"}


def test_every_field_has_a_probe():
    assert set(PROBES) == set(FIELDS)


_BASELINES: dict = {}


def _run(loop, knobs):
    key = (loop, tuple(sorted(knobs.items())))
    if key not in _BASELINES:
        _BASELINES[key] = LOOPS[loop](**(BASE | knobs))
    return _BASELINES[key]


@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize("loop", list(LOOPS))
def test_each_field_changes_the_run_or_is_refused_by_name(loop, field):
    value, needs = LOOP_PROBES.get((loop, field), PROBES[field])
    try:
        base = _run(loop, needs)
    except ValueError:
        pytest.skip(f"{loop} refuses what {field} needs ({needs}): checked by that field")
    try:
        probed = LOOPS[loop](**(BASE | needs | {field: value}))
    except (ValueError, TypeError) as e:
        assert field in str(e), (loop, field, str(e))
        if field in C.LOOPS[loop].reads:  # read, but this value is not the world's
            assert (loop, field) in ONE_VALUE, (loop, field, str(e))
        else:  # refused by the contract: it names the loop
            assert loop in str(e), (loop, field, str(e))
        return
    assert field in C.LOOPS[loop].reads, f"{loop} accepted {field}={value!r}: not read"
    if (loop, field) in EQUIVALENT:
        np.testing.assert_array_equal(probed, base)
    else:
        assert not np.array_equal(probed, base), f"{loop} ignored {field}={value!r}"


@pytest.mark.parametrize("loop", list(LOOPS))
def test_each_loop_refuses_what_it_does_not_read(loop):
    """The contract's refusals, each naming the field and the loop, are exactly the fields the
    loop does not read (the parametrised test above checks the others change the run)."""
    for field in FIELDS:
        if field in C.LOOPS[loop].reads:
            continue
        value = PROBES[field][0]
        with pytest.raises(ValueError, match=f"{field}=.*{loop} does not read {field}"):
            C.loop_config(loop, {field: value})


def test_loop_config_names_unknown_fields_per_run_values_and_short_runs():
    with pytest.raises(TypeError, match="unknown training knob.*train_grpo: lr"):
        C.loop_config("train_grpo", {"lr": 0.1})
    with pytest.raises(ValueError, match="loss_type: one value for all runs of train_batch"):
        C.loop_config("train_batch", {"loss_type": ("dapo", "grpo")})
    with pytest.raises(ValueError, match="max_steps must be an integer >= 0"):
        C.loop_config("train_sequences", {"max_steps": -1})  # TRL's -1: epochs
    start = gc.train_sequences(SEQ, [0], max_steps=0)  # 0 steps: the start
    assert start["steps"].tolist() == [0] and torch.equal(start["logits"][0], SEQ.ref_logits)
    cfg = C.loop_config("train_sequences", {"loss_type": ("dapo", "grpo")})  # its per-run knob
    assert cfg.values("loss_type") == ["dapo", "grpo"] and cfg.learning_rate == 0.02
    assert C.PER_RUN == tuple(dict.fromkeys(n for loop in C.LOOPS.values() for n in loop.per_run))
    for loop in C.LOOPS.values():  # a preset sets only what its loop reads
        assert set(loop.preset) <= loop.reads and set(loop.per_run) <= loop.reads
