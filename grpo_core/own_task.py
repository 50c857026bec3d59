"""Training a task of your own with TRL 1.16's ``SFTTrainer`` and ``GRPOTrainer`` (chapter 18).

Task-agnostic helpers for the steps chapter 16 did not need, because its prompts all had the same
length: a tiny ``transformers`` model built from a config, a supervised warm start with TRL's own
``SFTTrainer``, a check that the policy TRL trains is the policy that sampled (positions and
dropout), its fix for a model with learned absolute positions, held-out exact match by sampling
with ``model.generate`` (and as a ``TrainerCallback``), and rewards split by prompt class.

Why positions: TRL left-pads prompts of different lengths. ``generate()`` numbers the tokens from
the attention mask (``cumsum - 1``: transformers 5.25 ``generation/utils.py`` lines 911-933),
while TRL's log-probability forward passes only ``input_ids`` and ``attention_mask``
(``trl/trainer/grpo_trainer.py`` lines 1487-1498), so the model numbers them ``0, 1, ...`` from
the first pad (``modeling_gpt2.py`` lines 571-574). A model with learned absolute positions
(GPT-2) then trains another policy than the one that sampled (DeepSeekMath, arXiv 2402.03300
§4.1, assumes they are one). Rotary positions (Llama, Qwen) see only differences of positions,
which a constant shift leaves unchanged.

Like ``trl_bridge``, this module imports ``transformers`` and ``trl`` inside the functions that
use them. Taught in chapter 18.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from .binary import dead_group_prob

if TYPE_CHECKING:  # annotations only
    from datasets import Dataset
    from transformers import PreTrainedModel, PreTrainedTokenizerFast, TrainerCallback

DTYPE = torch.float64  # the book's models run in float64: a run is a function of its seeds
KINDS = ("gpt2", "llama")  # learned absolute positions; rotary positions


def _require() -> None:
    try:
        import transformers  # noqa: F401
        import trl  # noqa: F401
    except ImportError as e:
        raise ImportError("chapter 18 needs TRL: pip install trl==1.16.0 (it brings transformers, "
                          "accelerate and datasets)") from e


# --- a model from a config ----------------------------------------------------------------------

def tiny_model(kind: str, tokenizer: PreTrainedTokenizerFast, *, seed: int, dropout: float = 0.0,
               d_model: int = 32, n_layers: int = 2, n_heads: int = 4, d_mlp: int = 64,
               n_positions: int = 16) -> PreTrainedModel:
    """A float64 causal LM built from a config, nothing downloaded: ``"gpt2"`` (learned absolute
    positions, ``GPT2LMHeadModel``) or ``"llama"`` (rotary positions, ``LlamaForCausalLM``), sized
    like chapter 15's transformer, with the tokenizer's vocabulary and special tokens. Its weights
    depend on ``seed`` alone (drawn under a forked torch RNG, which is left as it was).
    ``dropout`` is GPT-2's three dropouts (``GPT2Config``'s default is 0.1) and Llama's attention
    dropout. Chapter 18."""
    _require()
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    ids = dict(vocab_size=len(tokenizer), bos_token_id=tokenizer.eos_token_id,
               eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    if kind == "gpt2":
        config = GPT2Config(n_positions=n_positions, n_embd=d_model, n_layer=n_layers,
                            n_head=n_heads, n_inner=d_mlp, resid_pdrop=dropout,
                            embd_pdrop=dropout, attn_pdrop=dropout, **ids)
        cls = GPT2LMHeadModel
    elif kind == "llama":
        config = LlamaConfig(hidden_size=d_model, num_hidden_layers=n_layers,
                             num_attention_heads=n_heads, num_key_value_heads=n_heads,
                             intermediate_size=d_mlp, max_position_embeddings=n_positions,
                             attention_dropout=dropout, tie_word_embeddings=False, **ids)
        cls = LlamaForCausalLM
    else:
        raise ValueError(f"kind={kind!r}: one of {KINDS}")
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return cls(config).to(DTYPE)


def with_weights(kind: str, tokenizer: PreTrainedTokenizerFast, state_dict: Mapping[str, Any],
                 **model_kwargs: Any) -> PreTrainedModel:
    """A fresh :func:`tiny_model` carrying ``state_dict``: how to start several runs from one warm
    start. (Not ``copy.deepcopy``: a trainer replaces ``model.forward`` by a wrapper that calls
    the original model's, and a deep copy keeps calling it.) Chapter 18."""
    model = tiny_model(kind, tokenizer, seed=0, **model_kwargs)
    model.load_state_dict(state_dict)
    return model


# --- the warm start: TRL's SFTTrainer -----------------------------------------------------------

def sft_config(*, steps: int, seed: int, output_dir: str, lr: float = 1e-2,
               batch: int = 64, **overrides: Any):
    """TRL's ``SFTConfig`` for chapter 15's warm start on a CPU: ``steps`` Adam steps of ``batch``
    examples at a constant learning rate ``lr``, no gradient clipping or weight decay, float64,
    no checkpoints or progress bars. ``overrides`` replace any value. Chapter 18."""
    _require()
    from trl import SFTConfig

    return SFTConfig(**{
        "output_dir": output_dir, "max_steps": steps, "per_device_train_batch_size": batch,
        "learning_rate": lr, "seed": seed, "lr_scheduler_type": "constant", "max_grad_norm": 0.0,
        "weight_decay": 0.0, "bf16": False, "use_cpu": True, "save_strategy": "no",
        "report_to": "none", "logging_steps": max(steps, 1), "disable_tqdm": True, **overrides})


def warm_start(model: PreTrainedModel, tokenizer: PreTrainedTokenizerFast, dataset: Dataset, *,
               steps: int, seed: int, lr: float = 1e-2, batch: int = 64,
               callbacks: Sequence[TrainerCallback] = ()) -> dict[str, torch.Tensor]:
    """Supervised fine-tuning with TRL's ``SFTTrainer`` on a prompt-completion ``dataset``: the
    loss is the cross-entropy of the completion tokens only (``completion_only_loss``, TRL's
    default for such data), and TRL appends ``tokenizer.eos_token`` to each completion
    (``sft_trainer.py`` lines 1286-1296). Returns a copy of the trained weights (build models
    from them with :func:`with_weights`). Chapter 18."""
    _require()
    from transformers.trainer_callback import PrinterCallback
    from trl import SFTTrainer

    with tempfile.TemporaryDirectory(prefix="grpo-book-sft-") as out:
        args = sft_config(steps=steps, seed=seed, output_dir=out, lr=lr, batch=batch)
        trainer = SFTTrainer(model=model, args=args, train_dataset=dataset,
                             processing_class=tokenizer, callbacks=list(callbacks))
        trainer.remove_callback(PrinterCallback)
        trainer.train()
    return {name: t.detach().clone() for name, t in model.state_dict().items()}


# --- positions: what generate() does, what TRL's training pass does ------------------------------

def generate_positions(attention_mask: torch.Tensor) -> torch.Tensor:
    """The ``position_ids`` ``model.generate`` gives a left-padded batch ``(B, L)``: each real
    token numbered from 0 by the mask (``cumsum - 1``), pads at 0 (transformers 5.25
    ``generation/utils.py`` lines 922-925). Chapter 18."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def _batch(tokenizer, prompts: Sequence[str], completion_ids: Sequence[Sequence[int]]):
    """TRL's training batch (``grpo_trainer.py`` lines 2440-2461, 3024-3026): prompts left-padded,
    completions right-padded, one attention mask over both."""
    from torch.nn.utils.rnn import pad_sequence

    enc = tokenizer(list(prompts), padding=True, padding_side="left", return_tensors="pt")
    comp = [torch.tensor(list(c), dtype=torch.long) for c in completion_ids]
    ids = pad_sequence(comp, batch_first=True, padding_value=tokenizer.pad_token_id)
    mask = pad_sequence([torch.ones_like(c) for c in comp], batch_first=True, padding_value=0)
    return (torch.cat([enc["input_ids"], ids], 1), torch.cat([enc["attention_mask"], mask], 1),
            mask)


def completion_logps(model: PreTrainedModel, input_ids: torch.Tensor,
                     attention_mask: torch.Tensor, n_completion: int, *,
                     position_ids: torch.Tensor | None = None) -> torch.Tensor:
    """log pi(token) of the last ``n_completion`` tokens of ``input_ids (B, L)``, teacher-forced,
    ``(B, n_completion)``; with ``position_ids=None`` the model numbers the tokens itself, as in
    TRL's training pass. Chapter 18."""
    logits = model(input_ids=input_ids, attention_mask=attention_mask,
                   position_ids=position_ids).logits[:, -n_completion - 1:-1]
    logp = torch.log_softmax(logits.double(), -1)
    return logp.gather(-1, input_ids[:, -n_completion:, None]).squeeze(-1)


@torch.no_grad()
def greedy_completions(model: PreTrainedModel, tokenizer: PreTrainedTokenizerFast,
                       prompts: Sequence[str], max_new_tokens: int) -> list[list[int]]:
    """The greedy completion of each prompt, with ``model.generate`` on the left-padded batch,
    cut after its first EOS (as TRL cuts a sampled one). Chapter 18."""
    enc = tokenizer(list(prompts), padding=True, padding_side="left", return_tensors="pt")
    was_training = model.training
    model.eval()
    out = model.generate(**enc, do_sample=False, max_new_tokens=max_new_tokens,
                         pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    model.train(was_training)
    return [_cut(row.tolist(), tokenizer.eos_token_id)
            for row in out[:, enc["input_ids"].shape[1]:]]


def _cut(ids: list[int], eos: int) -> list[int]:
    return ids[:ids.index(eos) + 1] if eos in ids else ids


@torch.no_grad()
def check_positions(model: PreTrainedModel, tokenizer: PreTrainedTokenizerFast,
                    prompts: Sequence[str], completion_ids: Sequence[Sequence[int]] | None = None,
                    *, max_new_tokens: int = 8, disable_dropout: bool = False,
                    seed: int = 0) -> float:
    """Run before training: is the policy TRL trains the policy that sampled?

    Teacher-forces the same completions (``completion_ids``, default: the model's greedy ones)
    twice on TRL's batch (prompts left-padded, completions right-padded): as the sampler sees
    them (eval mode, ``position_ids`` from the mask as ``generate`` makes them) and as TRL's
    training pass does (no ``position_ids``; train mode, so dropout is on, unless
    ``disable_dropout``, TRL's ``GRPOConfig`` knob of that name, default False). Returns the
    largest absolute difference of a completion token's log-probability: 0 when the two are one
    policy. Dropout masks are drawn under a forked RNG seeded with ``seed``. Chapter 18."""
    if completion_ids is None:
        completion_ids = greedy_completions(model, tokenizer, prompts, max_new_tokens)
    input_ids, attention_mask, mask = _batch(tokenizer, prompts, completion_ids)
    n = mask.shape[1]
    was_training = model.training
    try:
        model.eval()
        sampler = completion_logps(model, input_ids, attention_mask, n,
                                   position_ids=generate_positions(attention_mask))
        model.train(not disable_dropout)
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            trained = completion_logps(model, input_ids, attention_mask, n)
    finally:
        model.train(was_training)
    return (sampler - trained).abs()[mask.bool()].max().item()


def fix_positions(model: PreTrainedModel):
    """Make ``model`` number tokens from the attention mask whenever no ``position_ids`` are
    given, as ``generate`` does. The hook sits on the backbone (``model.base_model``, GPT-2's
    ``model.transformer``), not on ``model.forward``: TRL's fused LM head calls the backbone
    directly and skips the model's own forward (TRL 1.16 ``trainer/utils.py`` lines 1593,
    1616). Apply it to TRL's reference model too when ``beta > 0`` (:func:`fix_trainer`).
    Returns the hook's handle (``.remove()`` undoes it). Chapter 18."""

    def from_mask(module, args, kwargs):
        mask = kwargs.get("attention_mask")
        if kwargs.get("position_ids") is None and mask is not None and mask.dim() == 2:
            ids = args[0] if args else kwargs.get("input_ids")
            n = ids.shape[1] if ids is not None else kwargs["inputs_embeds"].shape[1]
            kwargs["position_ids"] = generate_positions(mask)[:, -n:]  # the last n tokens
        return args, kwargs

    return model.base_model.register_forward_pre_hook(from_mask, with_kwargs=True)


def fix_trainer(trainer) -> list:
    """:func:`fix_positions` on a ``GRPOTrainer``'s policy and, when it has one (``beta > 0``),
    its reference model. Returns the handles. Chapter 18."""
    return [fix_positions(m) for m in (trainer.model, trainer.ref_model) if m is not None]


# --- evaluation by sampling ---------------------------------------------------------------------

@torch.no_grad()
def pass_probability(model: PreTrainedModel, tokenizer: PreTrainedTokenizerFast,
                     prompts: Sequence[str], answer_ids: Sequence[Sequence[int]]) -> np.ndarray:
    """The exact probability that one sampled completion (temperature 1) is the answer
    ``answer_ids`` (EOS included), per prompt ``(B,)``: the product of its tokens' probabilities
    under the sampler (eval mode, generate's positions). Chapter 18."""
    input_ids, attention_mask, mask = _batch(tokenizer, prompts, answer_ids)
    was_training = model.training
    model.eval()
    logp = completion_logps(model, input_ids, attention_mask, mask.shape[1],
                            position_ids=generate_positions(attention_mask))
    model.train(was_training)
    return (logp * mask).sum(1).exp().numpy()


@torch.no_grad()
def sampled_exact_match(model: PreTrainedModel, tokenizer: PreTrainedTokenizerFast,
                        prompts: Sequence[str], answer_ids: Sequence[Sequence[int]], *, k: int,
                        seed: int, max_new_tokens: int) -> np.ndarray:
    """Held-out exact match by sampling: ``k`` completions per prompt from ``model.generate``
    (left padding, temperature 1, no top-k or top-p: TRL's sampling), each 1.0 if its ids are
    the answer's up to and including EOS. Returns the fraction right per prompt ``(B,)``.
    Sampling draws from torch's global RNG, so it runs under a forked RNG seeded with ``seed``:
    the caller's random stream (TRL's, during training) is left as it was. Chapter 18."""
    enc = tokenizer(list(prompts), padding=True, padding_side="left", return_tensors="pt")
    was_training = model.training
    model.eval()
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        out = model.generate(**enc, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                             max_new_tokens=max_new_tokens, num_return_sequences=k,
                             pad_token_id=tokenizer.pad_token_id,
                             eos_token_id=tokenizer.eos_token_id)
    model.train(was_training)
    completions = out[:, enc["input_ids"].shape[1]:].tolist()
    right = [float(c[:len(a)] == list(a)) for c, a in
             zip(completions, [a for a in answer_ids for _ in range(k)], strict=True)]
    return np.array(right).reshape(len(prompts), k).mean(1)


def held_out_callback(held_out: Mapping[Any, tuple[Sequence[str], Sequence[Sequence[int]]]], *,
                      tokenizer: PreTrainedTokenizerFast, every: int, k: int, seed: int,
                      max_new_tokens: int, num_iterations: int = 1) -> TrainerCallback:
    """A ``TrainerCallback`` that scores :func:`sampled_exact_match` per prompt class before
    training and every ``every`` generation steps (and at the end): ``held_out`` maps a class
    to its ``(prompts, answer_ids)``; ``callback.history`` is a list of ``(generation step,
    {class: mean exact match})``. TRL counts optimizer steps, ``num_iterations`` per generation
    step. Each evaluation samples with the same seed, and under a forked RNG, so the run it
    watches is the run it would be without it. Chapter 18."""
    _require()
    from transformers import TrainerCallback

    def score(model) -> dict:
        return {c: float(sampled_exact_match(model, tokenizer, p, a, k=k, seed=seed,
                                             max_new_tokens=max_new_tokens).mean())
                for c, (p, a) in held_out.items()}

    class HeldOut(TrainerCallback):
        def __init__(self):
            self.history: list[tuple[int, dict]] = []

        def on_train_begin(self, args, state, control, model=None, **kwargs):
            self.history = [(0, score(model))]

        def on_step_end(self, args, state, control, model=None, **kwargs):
            done = state.global_step == state.max_steps
            if state.global_step % (every * num_iterations) == 0 or done:
                step = state.global_step // num_iterations
                if step != self.history[-1][0]:
                    self.history.append((step, score(model)))

    return HeldOut()


# --- rewards split by prompt class -------------------------------------------------------------

def per_class_rewards(reward: Callable[..., list[float]], classes: Sequence[Any], *,
                      column: str, num_generations: int) -> list[Callable[..., list]]:
    """One reward function per prompt class, for TRL's ``reward_funcs``: each scores the
    completions of its class with ``reward`` and returns ``None`` for the others, so TRL sums
    them into the same reward and logs ``rewards/<reward>_<class>/mean`` per class (TRL averages
    a function's non-None values, ``grpo_trainer.py`` lines 2819-2825). Each also logs its
    class's dead groups (all ``num_generations`` rewards equal) as
    ``frac_reward_zero_std/<class>`` through TRL's ``log_metric``. ``column``: the dataset
    column holding a prompt's class. Chapter 18."""

    def for_class(c):
        def class_reward(prompts, completions, completion_ids, **kwargs):
            mine = [x == c for x in kwargs[column]]
            scored = reward(prompts, completions, completion_ids, **kwargs)
            out = [r if m else None for r, m in zip(scored, mine, strict=True)]
            groups = [out[i:i + num_generations] for i in range(0, len(out), num_generations)]
            ours = [g for g in groups if g[0] is not None]
            if ours and "log_metric" in kwargs:
                dead = sum(len(set(g)) == 1 for g in ours) / len(ours)
                kwargs["log_metric"](f"frac_reward_zero_std/{c}", dead)
            return out

        class_reward.__name__ = f"{reward.__name__}_{c}"
        return class_reward

    return [for_class(c) for c in classes]


def dead_fraction(pass_probs: np.ndarray, G: int) -> float:
    """The expected fraction of dead groups (all G rewards equal) over prompts whose pass
    probabilities are ``pass_probs (P,)``: the mean of chapter 11's ``p^G + (1 - p)^G``.
    Chapter 18."""
    return float(np.mean(dead_group_prob(np.asarray(pass_probs, dtype=float), G)))


def per_generation(log_history: Sequence[Mapping[str, Any]], names: Sequence[str],
                   num_iterations: int) -> dict[str, list[float | None]]:
    """TRL's log, one value per generation step ``(steps,)`` for each of ``names``: the value
    logged on the batch's first optimizer step (the reward metrics are logged there only), except
    ``clip_ratio/*``, averaged over the batch's ``num_iterations`` steps (0 on the first: the
    ratio is 1). ``None`` where a step logged no value (a class absent from that batch).
    Chapter 18."""
    rows = [row for row in log_history if "loss" in row]  # the last row is the run's summary
    batches = [rows[i:i + num_iterations] for i in range(0, len(rows), num_iterations)]

    def value(batch, name):
        if name.startswith("clip_ratio/"):
            return math.fsum(r[name] for r in batch) / len(batch)
        v = batch[0].get(name)
        return None if v is None or (isinstance(v, float) and math.isnan(v)) else v

    return {name: [value(b, name) for b in batches] for name in names}
