"""grpo_core.trl_bridge against TRL 1.16 itself (chapter 16).

Oracles: the book's TinyLM (the port's logits), tiny_lm.sort_reward (the reward with TRL's
signature), TRL's GRPOConfig (the batch arithmetic) and TRL's own _compute_loss (grpo_loss on the
tensors of a real GRPOTrainer run, value and gradient). Plus: grpo_core imports without TRL.
"""

import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch

import grpo_core as gc
from grpo_core import tiny_lm as T
from grpo_core import trl_bridge as B

pytest.importorskip("trl")
import transformers  # noqa: E402

torch.set_num_threads(1)
transformers.logging.set_verbosity_error()
KNOBS = dict(num_iterations=2)  # chapter 15's run: tiny_lm.DEFAULTS and mu = 2


def book_config(**changes) -> gc.GRPOConfig:
    return gc.GRPOConfig(**(T.DEFAULTS | KNOBS | changes))


def test_grpo_core_imports_without_trl():
    """Only trl_bridge's functions need TRL; grpo_core and the bridge import with it blocked."""
    code = """
import sys
BLOCKED = ("trl", "transformers", "datasets", "accelerate", "tokenizers")
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"blocked: {name}")
sys.meta_path.insert(0, Block())
import grpo_core, grpo_core.exercises, grpo_core.tiny_lm
from grpo_core import trl_bridge
assert not any(m.split(".")[0] in BLOCKED for m in sys.modules), "imported a TRL package"
assert trl_bridge.sort_reward(["1 2 3 ="], ["1 2 3"], [[1, 2, 3, 11]], [[1, 2, 3, 11]]) == [1.0]
try:
    trl_bridge.make_tokenizer()
except ImportError as e:
    assert "pip install trl==1.16.0" in str(e), e
else:
    raise AssertionError("make_tokenizer() ran without transformers")
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


@pytest.mark.parametrize("kwargs", [{}, dict(d_model=16, n_layers=1, n_heads=2, d_mlp=24)])
@pytest.mark.parametrize("seed", [0, 3])
def test_port_computes_tinylm_exactly(seed, kwargs):
    tiny = T.TinyLM(seed, **kwargs)
    model = B.to_gpt2(tiny)
    x = torch.randint(12, (16, T.CONTEXT), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        ours, theirs = tiny(x), model(input_ids=x).logits
    assert theirs.dtype == torch.float64
    # Same float64 function, summed in another order (GPT-2's fused qkv split, its attention
    # kernel): measured <= 1e-14 here.
    torch.testing.assert_close(theirs, ours, rtol=0, atol=1e-12)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert trainable == gc.n_params(tiny)
    back = B.to_tiny(model)
    for a, b in zip(back.parameters(), tiny.parameters(), strict=True):
        assert torch.equal(a, b)


def test_tokenizer_has_the_books_ids_and_drops_eos_when_decoding():
    tok = B.make_tokenizer()
    assert tok("3 1 2 =")["input_ids"] == [3, 1, 2, T.SEP]
    assert tok.eos_token_id == tok.pad_token_id == T.EOS and tok.bos_token is None
    assert tok.decode([1, 2, 3, T.EOS], skip_special_tokens=True) == "1 2 3"  # TRL's completions
    assert B.prompt_text(T.all_prompts()[[312]]) == ["3 1 2 ="]


def test_reward_equals_the_books_checker():
    """On sampled completions (right, wrong, early EOS, truncated), given as TRL gives them: ids up
    to and including the first EOS (TRL 1.16 grpo_trainer.py, completion_ids_list)."""
    train, _ = T.split_prompts(0)
    prompts = train[:64].repeat_interleave(4, 0)
    for temperature in (0.5, 1.0, 3.0):
        batch = T.generate(T.warm_start(0, train_prompts=train, steps=40), prompts,
                           torch.Generator().manual_seed(1), temperature)
        ids = [t[m == 1].tolist() for t, m in zip(batch.tokens, batch.mask, strict=True)]
        ours = B.sort_reward(B.prompt_text(prompts), ["?"] * len(ids), ids,
                             T.answers(prompts).tolist(), trainer_state=None)
        expected = T.sort_reward(batch.prompts, batch.tokens)
        assert ours == expected.tolist()
        assert 0 < sum(ours) < len(ours)
    assert B.sort_reward(["1 2 3 ="], ["1 2 3"], [[1, 2, 3]], [[1, 2, 3, 11]]) == [0.0]
    # like tiny_lm.sort_reward, it reads the first 4 tokens only (TRL cuts ids after <eos>)
    assert B.sort_reward(["1 2 3 ="], ["1 2 3"], [[1, 2, 3, 11, 11]], [[1, 2, 3, 11]]) == [1.0]


@pytest.mark.parametrize("per_device", [4, 8, 12, 16, 64])
@pytest.mark.parametrize("steps_per_generation", [1, 2, 3])
@pytest.mark.parametrize("num_generations", [2, 8])
def test_batch_arithmetic_is_trls(per_device, steps_per_generation, num_generations, tmp_path):
    from trl import GRPOConfig

    def trl():
        args = GRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to="none",
                          activation_checkpointing=False,
                          per_device_train_batch_size=per_device, num_generations=num_generations,
                          steps_per_generation=steps_per_generation)
        return args.generation_batch_size, args.generation_batch_size // num_generations

    if steps_per_generation == 1:  # the default
        assert B.generation_batch(per_device, 2) == (per_device, per_device // 2)
    try:
        expected = trl()
    except ValueError:
        with pytest.raises(ValueError, match="divisible by num_generations"):
            B.generation_batch(per_device, num_generations,
                               steps_per_generation=steps_per_generation)
    else:
        assert B.generation_batch(per_device, num_generations,
                                  steps_per_generation=steps_per_generation) == expected


def test_batch_arithmetic_across_processes():
    # TRL reads the number of processes from accelerate's launch, not from the config: by hand
    size, prompts = B.generation_batch(8, 16, steps_per_generation=4, num_processes=4)
    assert (size, prompts) == (128, 8) and isinstance(prompts, int)
    assert B.generation_batch(6, 4, num_processes=2) == (12, 3)
    with pytest.raises(ValueError, match="divisible"):
        B.generation_batch(6, 4, num_processes=3)


def test_config_carries_the_books_knobs_and_counts_optimizer_steps(tmp_path):
    cfg = book_config(max_steps=30, seed=5)
    args = B.trl_config(cfg, output_dir=str(tmp_path))
    for name, value in cfg.trl_kwargs().items():
        ours = getattr(args, name)
        if name not in ("report_to", "steps_per_generation"):  # "none" is stored as []; None:
            assert str(getattr(ours, "value", ours)) == str(value), name  # TRL sets gas, 1
    assert args.per_device_train_batch_size == 64 and args.max_steps == 60  # 30 batches x mu 2
    spg = B.trl_config(book_config(max_steps=30, per_device_train_batch_size=16,
                                   steps_per_generation=4), output_dir=str(tmp_path))
    assert spg.max_steps == 30 * 2 * 4 and spg.generation_batch_size == 64  # 4 steps a batch
    assert args.generation_batch_size == 64 and args.steps_per_generation == 1
    assert args.max_completion_length == T.MAX_COMPLETION_LENGTH and args.seed == 5
    assert (args.use_cpu, args.bf16, args.max_grad_norm) == (True, False, 0.0)
    assert B.trl_config(cfg, output_dir=str(tmp_path), epsilon_high=0.28).epsilon_high == 0.28


@pytest.fixture(scope="module")
def warm():
    train, held_out = T.split_prompts(0)
    return T.warm_start(0, train_prompts=train), train, held_out


# The loss check. grpo_loss gets the very float32 tensors TRL's _compute_loss used (log-probs
# with their autograd graph, pi_old, pi_ref, advantages, mask), so the formula is all that can
# differ. Measured on this machine (TRL 1.16, torch 2.13 CPU): |loss diff| = 0.0 and max |grad
# diff| = 0.0 on every step of every configuration below except beta > 0, where the gradients
# differ by <= 1.5e-8 (TRL computes ref - logp twice, the book once: the float32 graphs differ).
# Tolerances: loss 1e-8, a few float32 ulps at |loss| <= 0.1, for another CPU's summation order;
# gradient 1e-7 (entries up to ~0.2). A wrong formula misses by ~1e-3 or more.
CONFIGS = {
    "the chapter's run (mu=2, dapo)": {},
    "mu=1 (pi_old = logp.detach())": dict(num_iterations=1),
    "grpo, hot sampling": dict(loss_type="grpo", temperature=2.5),
    "bnpo, hot sampling": dict(loss_type="bnpo", temperature=2.5),
    "dr_grpo, hot sampling": dict(loss_type="dr_grpo", temperature=2.5),
    "sequence-level ratio, clip-higher, lr x10": dict(
        importance_sampling_level="sequence", loss_type="grpo", epsilon_high=0.28,
        learning_rate=1e-2, temperature=2.5, num_iterations=4),
    "beta 0.04 (a reference model)": dict(beta=0.04, temperature=2.5),
    # TRL's other loss types and chapter 17's knobs (the entropies of TRL's forward pass too)
    "cispo, ScaleRL's cap": dict(loss_type="cispo", epsilon_high=5.0, temperature=2.5),
    "sapo": dict(loss_type="sapo", temperature=2.5, learning_rate=1e-2),
    "luspo, sequence-level ratio": dict(loss_type="luspo", importance_sampling_level="sequence",
                                        temperature=2.5),
    "vespo": dict(loss_type="vespo", temperature=2.5, learning_rate=1e-2),
    "delta, entropy mask and bonus, off-policy mask": dict(
        delta=1.05, top_entropy_quantile=0.5, entropy_coef=0.01, off_policy_mask_threshold=0.0,
        temperature=2.5, learning_rate=1e-2),
}


@pytest.mark.parametrize("changes", list(CONFIGS.values()), ids=list(CONFIGS))
def test_grpo_loss_gives_trls_loss_and_gradient(changes, warm, tmp_path):
    start, train, _ = warm
    args = B.trl_config(book_config(max_steps=3, **changes), output_dir=str(tmp_path))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        trainer = B.make_trainer(start, train, args, loss_checks=args.max_steps - 1)
        trainer.train()
    checks = trainer.loss_checks
    assert len(checks) == args.max_steps - 1
    assert all(c.pi_old_given == (args.num_iterations > 1) for c in checks)
    assert all(1 <= c.lengths[0] <= c.lengths[1] <= T.MAX_COMPLETION_LENGTH for c in checks)
    # the ratio to pi_old is 1 on a batch's first optimizer step (to float32), moved after it
    mu = args.num_iterations
    assert all(c.ratio_dev < 1e-6 for c in checks[::mu])
    if mu > 1:
        assert min(c.ratio_dev for i, c in enumerate(checks) if i % mu) > 1e-4
    assert max(c.grad_max for c in checks) > 1e-3  # a real gradient, not a dead batch
    if args.beta:  # pi_ref: the warm start, saved for TRL's from_pretrained, in float64
        assert trainer.ref_model.dtype == torch.float64 and (tmp_path / "pi_ref").is_dir()
    assert max(c.loss_diff for c in checks) <= 1e-8
    assert max(c.grad_diff for c in checks) <= 1e-7
    if "temperature" in changes:  # lengths differ, so the four loss types differ (chapter 13)
        assert min(c.lengths[0] for c in checks) < max(c.lengths[1] for c in checks)


def test_per_generation_log_and_held_out(warm, tmp_path):
    start, train, held_out = warm
    args = B.trl_config(book_config(max_steps=20), output_dir=str(tmp_path))
    trainer = B.make_trainer(start, train, args, held_out=held_out, eval_every=10)
    trainer.train()
    assert trainer.loss_checks == [] and not (tmp_path / "pi_ref").exists()  # beta = 0
    log = B.per_generation(trainer.state.log_history, 2)
    assert all(v.shape == (20,) for v in log.values())
    rows = [r for r in trainer.state.log_history if "loss" in r]
    assert log["reward"][1] == rows[2]["reward"] and "reward" not in rows[1]
    assert log["entropy"][0] == rows[1]["entropy"]  # the batch's last optimizer step
    clip = np.array([r["clip_ratio/region_mean"] for r in rows]).reshape(20, 2)
    np.testing.assert_allclose(log["clip_ratio/region_mean"], clip.mean(1), rtol=1e-12)
    assert clip[:, 1].max() > 0  # the second step on a batch clips now and then
    assert [s for s, _ in trainer.held_out] == [0, 10, 20]
    assert all(isinstance(s, int) for s, _ in trainer.held_out)
    assert trainer.held_out[0][1] == pytest.approx(T.pass_at_1(start, held_out), abs=1e-12)
    with pytest.raises(ValueError, match="whole batches"):
        B.per_generation(trainer.state.log_history, 3)


def test_exercise_checker_accepts_an_ids_reward_and_rejects_a_text_one(capsys):
    from grpo_core import exercises

    def by_ids(prompts, completions, completion_ids, **kwargs):
        digits = [sorted(int(d) for d in p.split()[:3]) for p in prompts]
        return [float(list(ids[:4]) == d + [T.EOS]) for ids, d in zip(completion_ids, digits,
                                                                       strict=True)]

    def by_text(prompts, completions, completion_ids, **kwargs):  # blind to <eos>
        return [float(c.startswith(" ".join(sorted(p.split()[:3]))))
                for p, c in zip(prompts, completions, strict=True)]

    assert exercises.check_trl_reward(by_ids)
    assert not exercises.check_trl_reward(by_text)
    assert "hint" in capsys.readouterr().out
