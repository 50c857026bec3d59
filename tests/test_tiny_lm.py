"""The capstone's tiny transformer (chapter 15): task, model, sampler, and that GRPO trains it."""

import copy
from pathlib import Path

import numpy as np
import pytest
import torch

import grpo_core as gc
from grpo_core import tiny_lm as T
from grpo_core.optim import Adam

TRAIN, HELD_OUT = T.split_prompts(0)


@pytest.fixture(scope="module")
def warm():
    return T.warm_start(0, train_prompts=TRAIN)


def test_task_split_and_answers():
    assert TRAIN.shape == (800, 4) and HELD_OUT.shape == (200, 4)
    together = torch.cat([TRAIN, HELD_OUT])
    assert len(torch.unique(together, dim=0)) == 1000  # a partition of all 1,000 prompts
    prompts = torch.tensor([[3, 1, 2, T.SEP], [0, 0, 9, T.SEP], [9, 5, 5, T.SEP]])
    assert T.answers(prompts).tolist() == [[1, 2, 3, T.EOS], [0, 0, 9, T.EOS], [5, 5, 9, T.EOS]]


def test_checker_reads_up_to_eos_only():
    prompts = torch.tensor([[3, 1, 2, T.SEP]] * 4)
    completions = torch.tensor([[1, 2, 3, T.EOS, 7],  # right; the padding is never read
                                [1, 2, 3, 4, T.EOS],  # an extra digit
                                [3, 1, 2, T.EOS, T.EOS],  # copied, unsorted
                                [1, 2, 3, 3, 3]])  # no EOS: truncated
    assert T.sort_reward(prompts, completions).tolist() == [1.0, 0.0, 0.0, 0.0]


def test_completion_mask_matches_trl_rule():
    # TRL 1.16 grpo_trainer.py 1881-1885: positions <= the first EOS (all if none).
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, T.VOCAB, (500, T.MAX_COMPLETION_LENGTH), generator=g)
    is_eos = tokens == T.EOS
    eos_idx = torch.full((len(tokens),), tokens.shape[1])
    eos_idx[is_eos.any(1)] = is_eos.int().argmax(1)[is_eos.any(1)]
    expected = (torch.arange(tokens.shape[1]) <= eos_idx[:, None]).double()
    assert torch.equal(T.completion_mask(tokens), expected)


def test_sft_targets_noise_fraction():
    g = torch.Generator().manual_seed(1)
    targets = T.sft_targets(TRAIN, 0.3, g)
    copied = (targets[:, :3] == TRAIN[:, :3]).all(1)
    right = (targets == T.answers(TRAIN)).all(1)
    assert bool((copied | right).all())
    unsorted = ~(T.answers(TRAIN)[:, :3] == TRAIN[:, :3]).all(1)
    frac_wrong = (~right[unsorted]).double().mean().item()
    assert abs(frac_wrong - 0.3) < 4 * np.sqrt(0.3 * 0.7 / int(unsorted.sum()))


def test_model_is_causal_seeded_and_tens_of_thousands():
    a, b = T.TinyLM(3), T.TinyLM(3)
    x = torch.randint(0, T.VOCAB, (5, T.CONTEXT), generator=torch.Generator().manual_seed(0))
    assert torch.equal(a(x), b(x))
    assert not torch.equal(T.TinyLM(4)(x), a(x))
    y = x.clone()
    y[:, 6:] = (y[:, 6:] + 1) % T.VOCAB  # change the future: the first six outputs must not move
    assert torch.allclose(a(x)[:, :6], a(y)[:, :6], rtol=0, atol=1e-12)
    assert 10_000 <= gc.n_params(a) < 100_000
    state = torch.get_rng_state()
    T.TinyLM(5)
    assert torch.equal(state, torch.get_rng_state())  # the global RNG is never used


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_token_logps_score_what_generate_samples(warm, temperature):
    gen = torch.Generator().manual_seed(0)
    batch = T.generate(warm, HELD_OUT[:64], gen, temperature)
    logp, entropy = T.logps_and_entropies(warm, batch.prompts, batch.tokens, temperature)
    assert logp.shape == entropy.shape == batch.tokens.shape
    assert torch.equal(T.token_logps(warm, batch.prompts, batch.tokens, temperature), logp)
    # Recompute each sampled token's probability step by step from the model's own next-token
    # distribution at the temperature, as the sampler saw it (TRL trains on tempered log-probs).
    seq = batch.prompts
    for t in range(batch.tokens.shape[1]):
        probs = torch.softmax(warm(seq)[:, -1] / temperature, -1)
        tok = batch.tokens[:, t]
        expected = probs.gather(1, tok[:, None]).squeeze(1).log()
        keep = batch.mask[:, t] == 1
        assert torch.allclose(logp[keep, t], expected[keep], rtol=0, atol=1e-10)
        seq = torch.cat([seq, tok[:, None]], 1)
    assert bool((entropy >= 0).all()) and bool((entropy <= np.log(T.VOCAB) + 1e-12).all())


def test_exact_pass_at_1_matches_sampling(warm):
    prompts = HELD_OUT[:20]
    exact = T.pass_at_1(warm, prompts)
    n = 200
    batch = T.generate(warm, prompts.repeat_interleave(n, 0), torch.Generator().manual_seed(2))
    sampled = T.sort_reward(batch.prompts, batch.tokens)
    se = sampled.std() / np.sqrt(len(sampled))
    assert abs(sampled.mean() - exact) < 4 * se


def test_warm_start_is_imperfect_but_learns(warm):
    start, after = T.pass_at_1(T.TinyLM(0), HELD_OUT), T.pass_at_1(warm, HELD_OUT)
    assert start < 0.01 and 0.4 < after < 0.766  # 0.766: the best the 30 %-wrong data allows


def test_token_logps_change_with_the_temperature(warm):
    batch = T.generate(warm, HELD_OUT[:8], torch.Generator().manual_seed(0))
    one = T.token_logps(warm, batch.prompts, batch.tokens)
    assert not torch.allclose(one, T.token_logps(warm, batch.prompts, batch.tokens, 0.5))


@pytest.mark.parametrize("temperature, beta, drop", [(1.0, 0.0, False), (0.7, 0.04, False),
                                                     (2.0, 0.04, True)])
def test_one_step_is_a_hand_written_adam_step_on_the_grpo_loss(warm, temperature, beta, drop):
    """The oracle of grpo_step: G completions per prompt at the temperature, TRL's advantages,
    then one Adam step on -A ratio + beta k3 ratio (ratio = pi / pi_old = 1 with its gradient),
    averaged over the completion tokens ("dapo"), all on tempered log-probs; Adam's first step
    is lr g / (|g| + eps). Fails for a negated advantage, a swapped reference, an untempered
    log-prob, a wrong normaliser or a missing KL term. ``drop``: TRL's
    mask_truncated_completions, truncated completions out of the loss."""
    lr, ref, prompts = 1e-2, T.TinyLM(1), TRAIN[:4]
    cfg = gc.GRPOConfig(**(T.DEFAULTS | dict(temperature=temperature, beta=beta,
                                             learning_rate=lr, mask_truncated_completions=drop)))
    model = copy.deepcopy(warm)
    metrics = T.grpo_step(model, ref, Adam(model.parameters(), lr=lr), prompts,
                          torch.Generator().manual_seed(0), cfg)
    hand = copy.deepcopy(warm)
    batch = T.generate(hand, prompts.repeat_interleave(8, 0), torch.Generator().manual_seed(0),
                       temperature)
    r = T.sort_reward(batch.prompts, batch.tokens).reshape(4, 8)
    adv = (r - r.mean(1, keepdims=True)) / (r.std(1, ddof=1, keepdims=True) + 1e-4)
    adv[np.ptp(r, 1) == 0] = 0.0
    assert np.abs(adv).sum() > 0
    A = torch.tensor(adv.reshape(-1, 1))

    def tempered(m):  # log pi(token) of the completion, the sampler's distribution
        seq = torch.cat([batch.prompts, batch.tokens], 1)
        logits = m(seq[:, :-1])[:, T.PROMPT_LEN - 1:] / temperature
        return torch.log_softmax(logits, -1).gather(-1, batch.tokens[..., None]).squeeze(-1)

    logp = tempered(hand)
    with torch.no_grad():
        ref_logp = tempered(ref)
    ratio = torch.exp(logp - logp.detach())
    log_r = ref_logp - logp
    per_token = -ratio * A + beta * (torch.exp(log_r) - log_r - 1) * ratio
    mask = batch.mask * ~batch.truncated[:, None] if drop else batch.mask
    assert batch.truncated.any() or not drop
    loss = (per_token * mask).sum() / mask.sum()
    grads = torch.autograd.grad(loss, list(hand.parameters()))
    for p, q, g in zip(model.parameters(), hand.parameters(), grads, strict=True):
        torch.testing.assert_close(p, q - lr * g / (g.abs() + 1e-8), rtol=0, atol=1e-12)
    m = batch.mask
    k3 = torch.exp(ref_logp - logp.detach()) - (ref_logp - logp.detach()) - 1
    assert metrics["kl"] == pytest.approx(float((k3 * m).sum() / m.sum()), rel=1e-12)
    assert metrics["reward"] == pytest.approx(r.mean(), rel=1e-12)
    assert metrics["completions/mean_length"] == pytest.approx(float(m.sum(1).mean()))


def test_grpo_raises_reward_and_held_out_accuracy(warm):
    run = T.train_grpo(warm, TRAIN, HELD_OUT, seed=0, max_steps=60)
    r = run.metrics["reward"]
    assert r[-15:].mean() > r[:15].mean() + 0.1
    assert run.held_out[-1] > run.held_out[0] + 0.15
    assert list(run.metrics) == list(gc.METRICS)
    assert all(v.shape == (60,) for v in run.metrics.values())


def test_off_policy_steps_clip_and_runs_are_reproducible(warm):
    a = T.train_grpo(warm, TRAIN, HELD_OUT, seed=1, max_steps=10, num_iterations=2)
    b = T.train_grpo(warm, TRAIN, HELD_OUT, seed=1, max_steps=10, num_iterations=2)
    assert a.metrics["clip_ratio/region_mean"].max() > 0
    for name in gc.METRICS:
        np.testing.assert_array_equal(a.metrics[name], b.metrics[name])
    np.testing.assert_array_equal(a.held_out, b.held_out)


def test_a_checker_that_never_passes_leaves_every_group_dead(warm):
    run = T.train_grpo(warm, TRAIN, HELD_OUT, max_steps=5,
                       reward_fn=lambda p, c: np.zeros(len(p)))
    assert (run.metrics["frac_reward_zero_std"] == 1).all()
    assert (run.held_out == run.held_out[0]).all()  # the advantages are 0: nothing moves


@pytest.mark.parametrize("knobs, name", [
    ({"num_generations": 1}, "num_generations"), ({"num_iterations": 0}, "num_iterations"),
    ({"loss_type": "mean"}, "loss_type"), ({"scale_rewards": "std"}, "scale_rewards"),
    ({"learning_rate": 0.0}, "learning_rate"), ({"temperature": -1.0}, "temperature"),
    ({"kl_estimator": "exact"}, "KL in the loss"), ({"max_completion_length": 9}, "max_compl"),
    ({"per_device_train_batch_size": 12}, "must divide")])
def test_bad_knobs_name_themselves(knobs, name):
    with pytest.raises(ValueError, match=name):
        T.train_grpo(T.TinyLM(0), TRAIN, HELD_OUT, max_steps=1, **knobs)


def test_bad_model_shape():
    with pytest.raises(ValueError, match="n_heads"):
        T.TinyLM(0, d_model=30, n_heads=4)


def test_completion_mask_checker_accepts_the_solution_and_rejects_off_by_one(capsys):
    def right(tokens, eos):
        is_eos = (tokens == eos).long()
        return (is_eos.cumsum(1) - is_eos == 0).double()

    def drops_eos(tokens, eos):  # the EOS itself left out of the mask
        return ((tokens == eos).long().cumsum(1) == 0).double()

    from grpo_core.exercises import check_completion_mask
    assert check_completion_mask(right)
    assert not check_completion_mask(drops_eos)
    assert "differs on trial" in capsys.readouterr().out


def test_decode():
    assert T.decode(torch.tensor([3, 1, 2, T.SEP, 1, 2, 3, T.EOS])) == "3 1 2 = 1 2 3 <eos>"


def test_the_stored_warm_start_is_warm_start_0(warm):
    """book/data/warm_start_seed0.pt, the starting checkpoint chapter 19's script loads on every
    rank, is this function's warm start of seed 0 (regenerate it with torch.save(
    T.warm_start(0, train_prompts=TRAIN).state_dict(), path) if warm_start changes)."""
    path = Path(__file__).resolve().parent.parent / "book" / "data" / "warm_start_seed0.pt"
    stored = torch.load(path, weights_only=True)
    assert stored.keys() == warm.state_dict().keys()
    assert all(torch.equal(stored[name], p) for name, p in warm.state_dict().items())


def test_a_run_record_round_trips_through_json(warm):
    import json

    run = T.train_grpo(warm, TRAIN, HELD_OUT, seed=1, max_steps=3, eval_every=2)
    back = json.loads(json.dumps(T.run_record(run)))
    assert back["eval_steps"] == [0, 2, 3] and back["held_out"] == run.held_out.tolist()
    assert list(back["metrics"]) == list(gc.METRICS)
    for name, values in run.metrics.items():
        assert back["metrics"][name] == values.tolist(), name  # exact: json keeps every bit


def test_the_stored_capstone_runs_are_chapter_15s_settings():
    # chapter 15 checks the logs against its own runs; here: their shape and what they show
    runs = T.capstone_runs()
    assert list(runs) == list(T.CAPSTONE_SEEDS) == [0, 1, 2]
    steps = T.CAPSTONE_KNOBS["max_steps"]
    for run in runs.values():
        assert run.model is None and run.eval_steps.tolist() == [0, 20, 40, steps]
        assert list(run.metrics) == list(gc.METRICS)
        assert all(v.shape == (steps,) for v in run.metrics.values())
        assert run.held_out[-1] > run.held_out[0] + 0.15  # GRPO raised held-out pass@1
