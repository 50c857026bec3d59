"""Chapter 15's sorter trained by Hugging Face TRL 1.16's real ``GRPOTrainer`` (chapter 16).

The bridge between the book and TRL, nothing more: the book's ``TinyLM`` ported exactly into a
``transformers.GPT2LMHeadModel``, a 12-token tokenizer built in-process (nothing comes from the
Hub), the checker as a reward function with TRL's signature, the book's knobs turned into TRL's
``GRPOConfig``, and two hooks: held-out pass@1 during a run, and ``grpo_core.grpo_loss``
recomputed on the very tensors of TRL's ``_compute_loss`` (DeepSeekMath, arXiv 2402.03300 §4.1,
as TRL implements it in ``trl/trainer/grpo_trainer.py``).

Only this module needs ``trl`` and ``transformers``, and it imports them inside the functions that
use them: ``import grpo_core`` (and this module) works without them, and the reward function and
the batch arithmetic are plain Python. Taught in chapter 16.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from . import loss as _loss
from . import tiny_lm as T
from .config import LOSS_FIELDS, GRPOConfig

if TYPE_CHECKING:  # annotations only: importing this module never imports them
    from datasets import Dataset
    from transformers import GPT2LMHeadModel, PreTrainedTokenizerFast
    from trl import GRPOConfig as TRLConfig
    from trl import GRPOTrainer

TEXT = {**{d: str(d) for d in range(10)}, T.SEP: "=", T.EOS: "<eos>"}  # token id -> text


def _require() -> None:
    """Raise a helpful ImportError when TRL is missing (``grpo_core`` itself does not need it)."""
    try:
        import transformers  # noqa: F401
        import trl  # noqa: F401
    except ImportError as e:
        raise ImportError("chapter 16 needs TRL: pip install trl==1.16.0 (it brings transformers, "
                          "accelerate and datasets)") from e


# --- the tokenizer and the model ----------------------------------------------------------------

def make_tokenizer() -> PreTrainedTokenizerFast:
    """The book's 12 tokens as a Hugging Face tokenizer, built in-process: ``"3 1 2 ="`` ->
    ``[3, 1, 2, 10]``; ``<eos>`` is 11 and also pads (the book pads a finished completion with
    EOS). No BOS, no unknown token, no chat template."""
    _require()
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(vocab={text: i for i, text in TEXT.items()}))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", pad_token="<eos>")


def to_gpt2(tiny: T.TinyLM) -> GPT2LMHeadModel:
    """A float64 ``GPT2LMHeadModel`` computing exactly ``tiny``'s function.

    GPT-2 has the same architecture (pre-LayerNorm blocks, learned positions, causal attention)
    and its ``Conv1D`` computes ``x @ W`` as ``TinyLM`` does, so the weights copy over unchanged;
    ReLU replaces GELU, dropout is 0, the unembedding is untied. ``TinyLM`` has no biases and no
    LayerNorm gains: GPT-2's are fixed at 0 and 1 and frozen, so the same 17,440 numbers train.
    Chapter 16."""
    _require()
    from transformers import GPT2Config, GPT2LMHeadModel

    d_model, d_mlp = tiny.tok.shape[1], tiny.blocks[0]["up"].shape[1]
    config = GPT2Config(
        vocab_size=T.VOCAB, n_positions=T.CONTEXT, n_embd=d_model, n_layer=len(tiny.blocks),
        n_head=tiny.n_heads, n_inner=d_mlp, activation_function="relu", resid_pdrop=0.0,
        embd_pdrop=0.0, attn_pdrop=0.0, layer_norm_epsilon=1e-5,  # F.layer_norm's eps
        bos_token_id=T.EOS, eos_token_id=T.EOS, pad_token_id=T.EOS, tie_word_embeddings=False)
    model = GPT2LMHeadModel(config).to(T.DTYPE)
    with torch.no_grad():
        model.transformer.wte.weight.copy_(tiny.tok)
        model.transformer.wpe.weight.copy_(tiny.pos)
        for block, b in zip(model.transformer.h, tiny.blocks, strict=True):
            block.attn.c_attn.weight.copy_(b["qkv"])
            block.attn.c_proj.weight.copy_(b["out"])
            block.mlp.c_fc.weight.copy_(b["up"])
            block.mlp.c_proj.weight.copy_(b["down"])
        model.lm_head.weight.copy_(tiny.unembed.T)
        for name, p in model.named_parameters():
            if name.endswith(".bias") or ".ln_" in name:  # TinyLM has neither: fix them, freeze
                p.fill_(1.0) if name.endswith("weight") else p.zero_()
                p.requires_grad_(False)
    return model


def to_tiny(model: GPT2LMHeadModel) -> T.TinyLM:
    """The inverse of :func:`to_gpt2`: the trained weights back in a ``TinyLM``, to score with the
    book's exact ``tiny_lm.pass_at_1``. Chapter 16."""
    tiny = T.TinyLM(0, d_model=model.config.n_embd, n_layers=model.config.n_layer,
                    n_heads=model.config.n_head, d_mlp=model.config.n_inner)
    with torch.no_grad():
        tiny.tok.copy_(model.transformer.wte.weight)
        tiny.pos.copy_(model.transformer.wpe.weight)
        for block, b in zip(model.transformer.h, tiny.blocks, strict=True):
            b["qkv"].copy_(block.attn.c_attn.weight)
            b["out"].copy_(block.attn.c_proj.weight)
            b["up"].copy_(block.mlp.c_fc.weight)
            b["down"].copy_(block.mlp.c_proj.weight)
        tiny.unembed.copy_(model.lm_head.weight.T)
    return tiny


# --- data and reward ----------------------------------------------------------------------------

def prompt_text(prompts: torch.Tensor) -> list[str]:
    """Prompts ``(B, 4)`` as the plain text TRL tokenises: ``"3 1 2 ="`` (no chat template)."""
    return [" ".join(TEXT[int(t)] for t in p) for p in prompts]


def make_dataset(prompts: torch.Tensor) -> Dataset:
    """TRL's training data: a ``"prompt"`` column of text, and an ``"answer"`` column (the token
    ids of the correct completion, ``"1 2 3 <eos>"`` -> ``[1, 2, 3, 11]``), which TRL hands to
    every reward function as a keyword argument. Chapter 16."""
    _require()
    from datasets import Dataset

    return Dataset.from_dict({"prompt": prompt_text(prompts),
                              "answer": T.answers(prompts).tolist()})


def sort_reward(prompts: Sequence[str], completions: Sequence[str],
                completion_ids: Sequence[Sequence[int]], answer: Sequence[Sequence[int]],
                **kwargs: Any) -> list[float]:
    """The book's checker (``tiny_lm.sort_reward``) with TRL's reward-function signature: 1.0 where
    a completion's token ids start with the answer's (the sorted digits, then ``<eos>``), else 0.0.

    It reads ``completion_ids``, not the text: TRL decodes ``completions`` with
    ``skip_special_tokens=True``, which drops ``<eos>`` (so ``"1 2 3"`` could be a right answer or
    a truncated ``1 2 3 4 5``). ``answer`` is the dataset's column of that name; ``kwargs`` holds
    TRL's others (``trainer_state``, ``log_extra``, ``log_metric``). Chapter 16."""
    return [float(list(ids[:4]) == list(a)) for ids, a in zip(completion_ids, answer, strict=True)]


# --- the book's config as TRL's GRPOConfig -------------------------------------------------------

def trl_config(cfg: GRPOConfig, *, output_dir: str, **overrides: Any) -> TRLConfig:
    """TRL's ``GRPOConfig`` for the run the book's loop makes of ``cfg``: every knob under the same
    name (:meth:`grpo_core.GRPOConfig.trl_kwargs`, which adds the ``TrainingArguments`` values
    that would otherwise change the loop: a constant learning rate, no clipping, no bf16 on a
    CPU, a log every step, no checkpoints, and counts ``max_steps`` in optimizer steps, TRL's
    count). The weights stay float64, but TRL's fused LM head returns float32 log-probs.
    ``overrides`` replace any value. Chapter 16."""
    _require()
    from trl import GRPOConfig as TRLGRPOConfig

    return TRLGRPOConfig(**{
        **cfg.trl_kwargs(),
        "disable_tqdm": True,  # no progress bar (TRL's default follows the log level)
        "output_dir": output_dir,  # required; nothing is saved there (save_strategy="no")
        **overrides,
    })


def generation_batch(per_device_train_batch_size: int, num_generations: int, *,
                     steps_per_generation: int = 1, num_processes: int = 1) -> tuple[int, int]:
    """TRL's batch arithmetic (``GRPOConfig.__post_init__``, TRL 1.16 ``grpo_config.py`` lines
    1096-1135): the generation batch is ``per_device_train_batch_size x num_processes x
    steps_per_generation`` completions, which must be whole groups of ``num_generations``.
    Returns ``(generation_batch_size, prompts)``; raises ValueError as TRL does. Chapter 16."""
    size = per_device_train_batch_size * num_processes * steps_per_generation
    if size % num_generations:
        raise ValueError(f"generation_batch_size ({size}) must be divisible by num_generations "
                         f"({num_generations}).")
    if num_generations < 2:
        raise ValueError("GRPO requires at least 2 generations per prompt")
    return size, size // num_generations


# --- a run, and what it logged ------------------------------------------------------------------

def make_trainer(start: T.TinyLM, train_prompts: torch.Tensor, args: TRLConfig, *,
                 held_out: torch.Tensor | None = None, eval_every: int = 20,
                 loss_checks: int = 0) -> GRPOTrainer:
    """A ``GRPOTrainer`` for the sort task, from the warm start ``start`` (ported by
    :func:`to_gpt2`). With ``held_out (N, 4)`` it scores the book's exact pass@1 before training
    and every ``eval_every`` generation steps (``trainer.held_out``: a list of (generation step,
    pass@1)); with ``loss_checks`` it records :func:`loss_check` on that many loss calls
    (``trainer.loss_checks``). With ``args.beta != 0`` it saves the warm start in
    ``args.output_dir`` for TRL to load as pi_ref. Call ``.train()`` on it. Chapter 16."""
    _require()
    from transformers.trainer_callback import PrinterCallback
    from trl import GRPOTrainer

    model = to_gpt2(start)
    if args.beta != 0.0:  # TRL builds pi_ref with from_pretrained(the model's name): save a copy
        ref_dir = os.path.join(args.output_dir, "pi_ref")
        model.save_pretrained(ref_dir)
        model.config._name_or_path = ref_dir
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=sort_reward,
        args=args,
        train_dataset=make_dataset(train_prompts),
        processing_class=make_tokenizer(),  # TRL would otherwise fetch one from the Hub
    )
    trainer.remove_callback(PrinterCallback)  # the log stays in trainer.state.log_history
    if held_out is not None:  # optimizer steps per generation batch (grpo_trainer.py 1538-1539)
        per_batch = (args.num_iterations * args.steps_per_generation
                     // args.gradient_accumulation_steps)
        trainer.add_callback(_held_out_callback(held_out, eval_every * per_batch, per_batch,
                                                trainer))
    trainer.loss_checks = []
    if loss_checks:
        _hook_loss_checks(trainer, loss_checks)
    return trainer


def _held_out_callback(held_out: torch.Tensor, every: int, mu: int, trainer: GRPOTrainer):
    from transformers import TrainerCallback

    class HeldOut(TrainerCallback):
        def on_train_begin(self, args, state, control, model=None, **kwargs):
            trainer.held_out = [(0, T.pass_at_1(to_tiny(model), held_out))]

        def on_step_end(self, args, state, control, model=None, **kwargs):
            if state.global_step % every == 0 or state.global_step == state.max_steps:
                trainer.held_out.append((state.global_step // mu,
                                         T.pass_at_1(to_tiny(model), held_out)))

    return HeldOut()


@dataclass
class LossCheck:
    """One loss call of TRL compared with the book: TRL's ``loss`` and ``grpo_loss``'s on the same
    tensors, the largest gradient differences and TRL's largest gradient entry; whether TRL passed
    pi_old's log-probs, and how far the ratio pi_theta / pi_old strays from 1 (max over tokens)."""

    loss: float
    loss_diff: float
    grad_diff: float
    grad_max: float
    pi_old_given: bool
    ratio_dev: float
    lengths: tuple[int, int]  # the shortest and longest completion of the batch, in tokens


def book_loss(logp: torch.Tensor, inputs: Mapping[str, Any], args: TRLConfig,
              entropies: torch.Tensor | None = None) -> torch.Tensor:
    """``grpo_core.grpo_loss`` on what TRL's ``_compute_loss`` used (TRL 1.16
    ``grpo_trainer.py`` lines 3020-3190): the per-token log-probs ``logp (B, T)`` with their
    graph and ``entropies``, and from TRL's batch ``inputs`` pi_old's and pi_ref's log-probs
    (absent -> ``None``, as TRL then uses ``logp.detach()``), the advantages ``(B,)``, the
    completion mask and the normaliser. The loss knobs are read from ``args`` by their names,
    which are the book's: ``GRPOConfig.loss_kwargs()`` maps them, as in every loop. Chapter 16."""
    knobs = GRPOConfig(**{name: getattr(args, name) for name in LOSS_FIELDS if hasattr(args, name)})
    return _loss.grpo_loss(
        logp, inputs.get("old_per_token_logps"), inputs.get("ref_per_token_logps"),
        inputs["advantages"], inputs["completion_mask"].to(logp.dtype), entropies=entropies,
        sampling_per_token_logps=inputs.get("sampling_per_token_logps"),
        importance_sampling_ratio=inputs.get("importance_sampling_ratio"),
        num_items_in_batch=inputs["num_items_in_batch"],
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        steps_per_generation=args.steps_per_generation, **knobs.loss_kwargs())


def loss_check(loss: torch.Tensor, logp: torch.Tensor, inputs: Mapping[str, Any],
               args: TRLConfig, params: Sequence[torch.Tensor],
               entropies: torch.Tensor | None = None) -> LossCheck:
    """TRL's ``loss`` against :func:`book_loss` on the same tensors: value, and gradient with
    respect to ``params`` (both through the same autograd graph, which is kept). Chapter 16."""
    book = book_loss(logp, inputs, args, entropies)
    mask = inputs["completion_mask"].bool()
    old = inputs.get("old_per_token_logps")
    ratio = torch.ones_like(logp) if old is None else (logp.detach() - old).exp()
    lengths = mask.sum(-1)
    g_trl = torch.autograd.grad(loss, params, retain_graph=True)
    g_book = torch.autograd.grad(book, params, retain_graph=True)
    return LossCheck(
        loss=loss.item(), loss_diff=abs(loss.item() - book.item()),
        grad_diff=max((a - b).abs().max().item() for a, b in zip(g_trl, g_book, strict=True)),
        grad_max=max(a.abs().max().item() for a in g_trl),
        pi_old_given=old is not None, ratio_dev=(ratio[mask] - 1).abs().max().item(),
        lengths=(int(lengths.min()), int(lengths.max())))


def _hook_loss_checks(trainer: GRPOTrainer, n: int) -> None:
    """Wrap two of TRL 1.16's private methods on this trainer: keep the log-probs of the call made
    with ``compute_entropy=True`` (the one ``_compute_loss`` makes, with gradient), and after
    ``_compute_loss`` run :func:`loss_check` before TRL's backward pass and optimizer step."""
    get_logps, compute_loss = trainer._get_per_token_logps_and_entropies, trainer._compute_loss
    kept = {}

    def logps_hook(*args, **kwargs):
        out = get_logps(*args, **kwargs)
        if kwargs.get("compute_entropy"):
            kept["logp"], kept["entropies"] = out[0], out[1]
        return out

    def loss_hook(model, inputs):
        loss = compute_loss(model, inputs)
        if len(trainer.loss_checks) < n:
            params = [p for p in model.parameters() if p.requires_grad]
            trainer.loss_checks.append(loss_check(loss, kept["logp"], inputs, trainer.args,
                                                  params, kept["entropies"]))
        return loss

    trainer._get_per_token_logps_and_entropies = logps_hook
    trainer._compute_loss = loss_hook


METRICS = ("reward", "reward_std", "frac_reward_zero_std", "completions/mean_length",
           "completions/clipped_ratio", "entropy", "clip_ratio/region_mean")


def per_generation(log_history: Sequence[Mapping[str, Any]], mu: int) -> dict[str, np.ndarray]:
    """TRL's log as the book's loop logs it, one value per generation step ``(steps,)``: the
    reward and length metrics (logged on a batch's first optimizer step), ``entropy`` of its last
    optimizer step, ``clip_ratio/region_mean`` averaged over its ``mu`` steps. Chapter 16."""
    steps = [row for row in log_history if "loss" in row]  # the last row is the run's summary
    if len(steps) % mu:
        raise ValueError(f"{len(steps)} optimizer steps are not whole batches of {mu}")
    out: dict[str, list[float]] = {name: [] for name in METRICS}
    for g in range(0, len(steps), mu):
        rows = steps[g:g + mu]
        for name in METRICS[:5]:
            out[name].append(rows[0][name])
        out["entropy"].append(rows[-1]["entropy"])
        out["clip_ratio/region_mean"].append(
            math.fsum(r["clip_ratio/region_mean"] for r in rows) / mu)
    return {name: np.array(values) for name, values in out.items()}
