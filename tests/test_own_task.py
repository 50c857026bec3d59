"""grpo_core.own_task and grpo_core.add_one (chapter 18), against transformers and TRL 1.16.

Oracles: model.generate's own log-probabilities (the sampler side of check_positions), TRL's own
``_get_per_token_logps_and_entropies`` (its training side), exact zeros where the two are one
policy (unpadded prompts, the position fix), rotary positions (shift-invariant up to rounding),
the exact pass probability against sampling, and a TRL run with and without the evaluation
callback (the same run).
"""

import copy
import warnings

import numpy as np
import pytest
import torch

import grpo_core as gc
from grpo_core import add_one, own_task

pytest.importorskip("trl")
import transformers  # noqa: E402

torch.set_num_threads(1)
transformers.logging.set_verbosity_error()


def test_the_modules_import_without_trl():
    """Only the functions import transformers, trl, datasets and tokenizers (inside them), so
    ``import grpo_core`` works without TRL: no module-level import of them (read from the
    source, as tests/test_trl_bridge.py runs it for the bridge)."""
    import ast
    import inspect

    for module in (add_one, own_task):
        tree = ast.parse(inspect.getsource(module))
        top = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]
        names = {a.name.split(".")[0] for n in top if isinstance(n, ast.Import) for a in n.names}
        names |= {n.module.split(".")[0] for n in top if isinstance(n, ast.ImportFrom) and n.module}
        assert not names & {"trl", "transformers", "datasets", "accelerate", "tokenizers"}, names
    assert add_one.exact_match(["9 ="], ["1 0"], [[1, 0, 11]], [[1, 0, 11]]) == [1.0]


@pytest.fixture(scope="module")
def tok():
    return add_one.make_tokenizer()


@pytest.fixture(scope="module")
def prompts():
    """Held-out prompts of all three lengths, mixed: TRL left-pads them to 5 tokens."""
    _, held_out = add_one.split(0)
    return [add_one.prompt(n) for c in add_one.CLASSES for n in held_out[c][:4]]


def model(kind, tok, seed=0, **kwargs):
    return own_task.tiny_model(kind, tok, seed=seed, **kwargs)


# --- the task -----------------------------------------------------------------------------------

def test_tokenizer_reads_the_vocabulary_and_splits_eos_glued_to_a_digit(tok):
    assert tok("4 0 9 =")["input_ids"] == [4, 0, 9, 10]
    assert (tok.eos_token_id, tok.pad_token_id, len(tok)) == (11, 12, 13)
    # SFTTrainer appends eos_token to the completion text with no space: "4 1 0<eos>"
    assert tok("4 0 9 = 4 1 0<eos>")["input_ids"] == [4, 0, 9, 10, 4, 1, 0, 11]
    assert tok.decode([4, 1, 0, 11, 12], skip_special_tokens=True) == "4 1 0"
    enc = tok(["9 9 =", "1 2 3 4 ="], padding=True, padding_side="left")
    assert enc["input_ids"][0] == [12, 12, 9, 9, 10] and enc["attention_mask"][0] == [0, 0, 1, 1, 1]


def test_prompts_answers_and_the_split(tok):
    assert (add_one.prompt(409), add_one.answer(409)) == ("4 0 9 =", "4 1 0")
    assert add_one.answer_ids([99, 9999], tok) == [[1, 0, 0, 11], [1, 0, 0, 0, 0, 11]]
    assert max(len(a) for a in add_one.answer_ids([9999], tok)) == add_one.MAX_COMPLETION_LENGTH
    train, held_out = add_one.split(0)
    for c in add_one.CLASSES:
        assert len(held_out[c]) == 40 and not set(train[c]) & set(held_out[c])
        assert sorted(train[c] + held_out[c]) == list(range(10 ** (c - 1), 10**c))
    assert add_one.split(0) == (train, held_out) and add_one.split(1)[1] != held_out
    drawn = add_one.balanced(train, 50, seed=0)
    assert [sum(len(str(n)) == c for n in drawn) for c in add_one.CLASSES] == [50, 50, 50]
    assert set(drawn) <= {n for c in add_one.CLASSES for n in train[c]}


def test_sft_data_is_wrong_where_the_noise_says(tok):
    numbers = list(range(100, 1100))
    clean = add_one.sft_dataset(numbers, noise=0.0, seed=0)
    assert clean[0] == {"prompt": "1 0 0 =", "completion": " 1 0 1"}
    noisy = add_one.sft_dataset(numbers, noise=0.3, seed=0)
    wrong = [r["completion"] != c["completion"] for r, c in zip(noisy, clean, strict=True)]
    assert 0.25 < np.mean(wrong) < 0.35
    assert all(r["completion"] == " " + " ".join(str(n)) for r, n, w
               in zip(noisy, numbers, wrong, strict=True) if w)


def test_reward_reads_ids_and_needs_eos(tok):
    a = add_one.answer_ids([409], tok)
    f = add_one.exact_match
    assert f(["4 0 9 ="], ["4 1 0"], [[4, 1, 0, 11]], a) == [1.0]
    assert f(["4 0 9 ="], ["4 1 0 0"], [[4, 1, 0, 0, 11]], a) == [0.0]  # text starts alike
    assert f(["4 0 9 ="], ["4 1 0"], [[4, 1, 0]], a) == [0.0]  # no EOS: cut at the length limit
    assert f(["4 0 9 ="], ["4 1 1"], [[4, 1, 1, 11]], a) == [0.0]


# --- positions ----------------------------------------------------------------------------------

def test_the_sampler_side_is_what_generate_computed(tok, prompts):
    """check_positions' sampler log-probs: the log-softmax of the logits generate() used for each
    token it chose (KV cache and all), on left-padded prompts, for both kinds of model."""
    for kind in own_task.KINDS:
        m = model(kind, tok).eval()
        enc = tok(prompts, padding=True, padding_side="left", return_tensors="pt")
        with torch.no_grad():
            out = m.generate(**enc, do_sample=False, max_new_tokens=4, output_logits=True,
                             return_dict_in_generate=True, pad_token_id=12, eos_token_id=None)
        chosen = out.sequences[:, enc["input_ids"].shape[1]:]
        theirs = torch.stack([torch.log_softmax(x.double(), -1) for x in out.logits], 1)
        theirs = theirs.gather(-1, chosen[..., None]).squeeze(-1)
        ids, mask, _ = own_task._batch(tok, prompts, chosen.tolist())
        with torch.no_grad():
            ours = own_task.completion_logps(m, ids, mask, 4,
                                             position_ids=own_task.generate_positions(mask))
        # generate() keeps its logits in float32 (transformers 5.25 generation/utils.py): the
        # two agree to float32 rounding; the wrong positions move them by ~0.1
        torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-6)


def test_the_training_side_is_trls_own_forward(tok, prompts, tmp_path):
    """check_positions' training log-probs equal TRL's _get_per_token_logps_and_entropies on
    the same batch; with fix_trainer, TRL's equal the sampler's."""
    from trl import GRPOTrainer

    m = model("gpt2", tok)
    args = gc.GRPOConfig(learning_rate=1e-3, per_device_train_batch_size=8, max_steps=1,
                         max_completion_length=6)
    from grpo_core import trl_bridge

    trainer = GRPOTrainer(model=m, reward_funcs=add_one.exact_match, processing_class=tok,
                          args=trl_bridge.trl_config(args, output_dir=str(tmp_path)),
                          train_dataset=add_one.grpo_dataset([409, 12, 9999, 55], tok))
    completions = own_task.greedy_completions(m, tok, prompts, 6)
    ids, mask, cmask = own_task._batch(tok, prompts, completions)
    n = cmask.shape[1]
    m.eval()
    with torch.no_grad():
        trl_logp = trainer._get_per_token_logps_and_entropies(m, ids, mask, n)[0]
        ours = own_task.completion_logps(m, ids, mask, n)
        sampler = own_task.completion_logps(m, ids, mask, n,
                                            position_ids=own_task.generate_positions(mask))
    on = cmask.bool()
    # TRL's fused LM head returns float32 log-probs: equal to float32 rounding
    assert trl_logp.dtype == torch.float32
    torch.testing.assert_close(trl_logp[on].double(), ours[on], rtol=0, atol=1e-6)
    assert (trl_logp - sampler)[on].abs().max() > 0.05  # padded rows: another policy
    handles = own_task.fix_trainer(trainer)
    assert len(handles) == 1  # beta = 0: no reference model
    with torch.no_grad():
        fixed = trainer._get_per_token_logps_and_entropies(m, ids, mask, n)[0]
    torch.testing.assert_close(fixed[on].double(), sampler[on], rtol=0, atol=1e-6)


def test_check_positions_reads_zero_where_there_is_one_policy(tok, prompts):
    gpt2, llama = model("gpt2", tok), model("llama", tok).eval()
    same_length = [p for p in prompts if len(p.split()) == 5]
    assert own_task.check_positions(gpt2, tok, same_length) == 0.0  # nothing padded
    gap = own_task.check_positions(gpt2, tok, prompts)
    assert gap > 0.1
    handle = own_task.fix_positions(gpt2)
    assert own_task.check_positions(gpt2, tok, prompts) == 0.0
    handle.remove()
    assert own_task.check_positions(gpt2, tok, prompts) == gap
    # rotary: a constant shift of every position changes nothing but rounding (the rotation
    # angles are computed in float32 even in a float64 model: measured 3e-8 here)
    assert 0 < own_task.check_positions(llama, tok, prompts) < 1e-6
    assert gpt2.training and not llama.training  # each model's mode is restored


def test_check_positions_catches_dropout_left_on(tok, prompts):
    assert transformers.GPT2Config().resid_pdrop == 0.1  # a default config has dropout
    m = model("gpt2", tok, dropout=0.1)
    own_task.fix_positions(m)
    state = torch.get_rng_state()
    gap = own_task.check_positions(m, tok, prompts)
    assert gap > 0.01 and torch.equal(torch.get_rng_state(), state)
    assert own_task.check_positions(m, tok, prompts) == gap  # its own seeded dropout masks
    assert own_task.check_positions(m, tok, prompts, disable_dropout=True) == 0.0


def test_a_deep_copy_of_a_patched_model_runs_the_original(tok):
    """Why with_weights builds a fresh model: TRL's trainers replace model.forward (trl
    trainer/utils.py add_fused_lm_head), and a deep copy's forward is still the original's."""
    from trl.trainer.utils import add_fused_lm_head

    m = model("gpt2", tok)
    add_fused_lm_head(m)
    twin = copy.deepcopy(m)
    with torch.no_grad():
        for p in twin.parameters():
            p.add_(1.0)
        x = torch.tensor([[4, 0, 9, 10]])
        assert torch.equal(twin(input_ids=x).logits, m(input_ids=x).logits)  # the trap
        fresh = own_task.with_weights("gpt2", tok, twin.state_dict())
        assert not torch.equal(fresh(input_ids=x).logits, m(input_ids=x).logits)


# --- evaluation by sampling ---------------------------------------------------------------------

def test_sampled_exact_match_estimates_the_pass_probability(tok):
    m = model("gpt2", tok, seed=3)
    with torch.no_grad():
        m.lm_head.weight *= 6  # sharper: the greedy completions become likely enough to count
    prompts = ["9 9 =", "1 2 3 4 =", "5 0 ="]
    answers = own_task.greedy_completions(m, tok, prompts, 6)
    p = own_task.pass_probability(m, tok, prompts, answers)
    state = torch.get_rng_state()
    k = 1000
    got = own_task.sampled_exact_match(m, tok, prompts, answers, k=k, seed=0, max_new_tokens=6)
    assert torch.equal(torch.get_rng_state(), state)  # the caller's stream is untouched
    assert (p > 1e-3).all()
    assert (np.abs(got - p) < 4 * np.sqrt(p * (1 - p) / k) + 1e-9).all()
    again = own_task.sampled_exact_match(m, tok, prompts, answers, k=k, seed=0, max_new_tokens=6)
    assert np.array_equal(got, again)


def test_the_callback_does_not_change_the_run(tok, tmp_path):
    """Two short TRL runs from the same weights, one watched by held_out_callback: the same
    logs to the last digit (the callback samples under a forked RNG)."""
    from transformers.trainer_callback import PrinterCallback
    from trl import GRPOTrainer

    from grpo_core import trl_bridge

    train, held_out = add_one.split(0)
    weights = model("gpt2", tok, seed=1).state_dict()
    sets = {c: ([add_one.prompt(n) for n in held_out[c][:3]],
                add_one.answer_ids(held_out[c][:3], tok)) for c in add_one.CLASSES}
    cfg = gc.GRPOConfig(learning_rate=1e-2, per_device_train_batch_size=16, num_generations=4,
                        num_iterations=2, max_steps=3, max_completion_length=6, temperature=3.0)
    logs = []
    for watched in (False, True):
        trainer = GRPOTrainer(
            model=own_task.with_weights("gpt2", tok, weights),
            reward_funcs=own_task.per_class_rewards(
                lambda p, c, ids, **kw: [float(len(i)) for i in ids], add_one.CLASSES,
                column="digits", num_generations=4),
            args=trl_bridge.trl_config(cfg, output_dir=str(tmp_path)),
            train_dataset=add_one.grpo_dataset(add_one.balanced(train, 20, 0), tok),
            processing_class=tok)
        trainer.remove_callback(PrinterCallback)
        if watched:
            cb = own_task.held_out_callback(sets, tokenizer=tok, every=1, k=2, seed=0,
                                            max_new_tokens=6, num_iterations=2)
            trainer.add_callback(cb)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trainer.train()
        logs.append([{k: v for k, v in row.items() if k not in ("step_time", "train_runtime")
                      and "per_second" not in k} for row in trainer.state.log_history])
    assert logs[0] == logs[1]
    assert [step for step, _ in cb.history] == [0, 1, 2, 3]
    assert all(set(acc) == set(add_one.CLASSES) for _, acc in cb.history)
    rows = own_task.per_generation(trainer.state.log_history, ["reward"], 2)["reward"]
    assert len(rows) == 3 and all(r > 0 for r in rows)


def test_per_class_rewards_score_their_class_and_log_its_dead_groups():
    logged = []
    fns = own_task.per_class_rewards(lambda p, c, ids, **kw: [float(i[0]) for i in ids],
                                     ("a", "b"), column="kind", num_generations=2)
    assert [f.__name__ for f in fns] == ["<lambda>_a", "<lambda>_b"]
    ids = [[1], [1], [0], [1], [0], [0]]  # groups: (1, 1) of a, (0, 1) of b, (0, 0) of a
    kinds = ["a", "a", "b", "b", "a", "a"]
    out = [f(["p"] * 6, ["c"] * 6, ids, kind=kinds,
             log_metric=lambda name, v: logged.append((name, v))) for f in fns]
    assert out[0] == [1.0, 1.0, None, None, 0.0, 0.0]
    assert out[1] == [None, None, 0.0, 1.0, None, None]
    assert logged == [("frac_reward_zero_std/a", 1.0), ("frac_reward_zero_std/b", 0.0)]
    assert own_task.dead_fraction(np.array([0.0, 0.5]), 2) == pytest.approx((1 + 0.5) / 2)


def test_per_generation_keeps_each_batchs_first_row_and_averages_the_clip():
    history = [{"loss": 0, "reward": 0.5, "x": 1.0, "clip_ratio/region_mean": 0.0},
               {"loss": 0, "clip_ratio/region_mean": 0.25},
               {"loss": 0, "reward": 0.7, "clip_ratio/region_mean": 0.0},
               {"loss": 0, "clip_ratio/region_mean": 0.5}, {"train_runtime": 1.0}]
    out = own_task.per_generation(history, ["reward", "x", "clip_ratio/region_mean"], 2)
    assert out == {"reward": [0.5, 0.7], "x": [1.0, None], "clip_ratio/region_mean": [0.125, 0.25]}


def test_tiny_models_are_seeded_and_leave_the_global_rng_alone(tok):
    state = torch.get_rng_state()
    a, b = model("gpt2", tok, seed=4), model("gpt2", tok, seed=4)
    assert torch.equal(torch.get_rng_state(), state)
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters(), strict=True))
    assert a.dtype == torch.float64 and a.config.resid_pdrop == 0.0
    sizes = {kind: sum(p.numel() for p in model(kind, tok).parameters()) for kind in own_task.KINDS}
    assert 10_000 < sizes["gpt2"] < 50_000 and 10_000 < sizes["llama"] < 50_000
    with pytest.raises(ValueError, match="kind"):
        model("bert", tok)


def test_the_exercise_checker_accepts_generates_rule_and_rejects_arange(capsys):
    from grpo_core.exercises import check_generate_positions

    assert check_generate_positions(lambda m: (m.cumsum(-1) - 1).clamp(min=0))
    assert not check_generate_positions(lambda m: torch.arange(m.shape[1]).expand_as(m))
    assert not check_generate_positions(lambda m: m.cumsum(-1) - 1)  # pads at -1
    out = capsys.readouterr().out
    assert "generate_positions: correct" in out and "differs on trial" in out
