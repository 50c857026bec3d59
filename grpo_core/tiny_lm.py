"""A tiny decoder-only transformer trained with GRPO on a verifiable task (chapter 15).

The task: sort three digits. A prompt is ``d1 d2 d3 =``; the one correct completion is the three
digits in ascending order, then EOS (``3 1 2 =`` -> ``1 2 3 <eos>``). The checker is exact, the
reward binary, as in DeepSeek-R1's rule-based rewards (DeepSeekMath itself, arXiv 2402.03300 §4,
scored answers with a learned reward model). Everything TRL's ``GRPOTrainer`` does to a batch is
here at toy scale: sample G completions per prompt from pi_old, score them, TRL's advantages,
``num_iterations`` Adam steps on :func:`grpo_core.grpo_loss`, TRL's logged metrics.

Everything runs in float64 with explicit ``torch.Generator``s, so a run is a function of its seeds.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from ._validate import check_float, check_int
from .config import LOOPS, GRPOConfig, loop_config
from .loss import kl_estimate, reward_metrics, trl_advantages
from .optim import Adam
from .update import grpo_update

SEP, EOS = 10, 11  # tokens 0-9 are the digits
VOCAB = 12
PROMPT_LEN = 4  # d1 d2 d3 =
MAX_COMPLETION_LENGTH = 5  # the correct completion has 4 tokens; one spare lets a run ramble
CONTEXT = PROMPT_LEN + MAX_COMPLETION_LENGTH
DTYPE = torch.float64


# --- the task -----------------------------------------------------------------------------------

def all_prompts() -> torch.Tensor:
    """Every prompt, ``(1000, 4)`` long: the 1,000 triples of digits, then ``=``."""
    digits = torch.cartesian_prod(*[torch.arange(10)] * 3)
    return torch.cat([digits, torch.full((1000, 1), SEP)], dim=1)


def split_prompts(seed: int = 0, n_held_out: int = 200) -> tuple[torch.Tensor, torch.Tensor]:
    """A seeded split of :func:`all_prompts`: train ``(1000 - n, 4)``, held-out ``(n, 4)``."""
    order = torch.randperm(1000, generator=torch.Generator().manual_seed(seed))
    prompts = all_prompts()
    return prompts[order[n_held_out:]], prompts[order[:n_held_out]]


def answers(prompts: torch.Tensor) -> torch.Tensor:
    """The correct completion of each prompt ``(B, 4)``: the digits sorted, then EOS; ``(B, 4)``."""
    return torch.cat([prompts[:, :3].sort(dim=1).values, torch.full_like(prompts[:, :1], EOS)], 1)


def decode(tokens: torch.Tensor) -> str:
    """A row of tokens ``(T,)`` as text: ``3 1 2 = 1 2 3 <eos>``."""
    return " ".join({SEP: "=", EOS: "<eos>"}.get(int(t), str(int(t))) for t in tokens)


def sort_reward(prompts: torch.Tensor, completions: torch.Tensor) -> np.ndarray:
    """The checker: 1.0 where a completion ``(B, T)`` starts with the prompt's answer, else 0.0.

    Tokens after the first EOS are padding and never read. Returns ``(B,)`` float64."""
    target = answers(prompts)
    return (completions[:, :4] == target).all(dim=1).double().numpy()


def sft_targets(prompts: torch.Tensor, noise: float, gen: torch.Generator) -> torch.Tensor:
    """Imperfect supervised data ``(B, 4)``: the answer, except that a fraction ``noise`` of the
    prompts (drawn with ``gen``) are answered by copying the digits unsorted."""
    copied = torch.cat([prompts[:, :3], torch.full_like(prompts[:, :1], EOS)], 1)
    wrong = torch.rand(len(prompts), generator=gen, dtype=DTYPE) < noise
    return torch.where(wrong[:, None], copied, answers(prompts))


# --- the model ----------------------------------------------------------------------------------

class TinyLM(torch.nn.Module):
    """A decoder-only transformer: token + position embeddings, ``n_layers`` pre-LayerNorm blocks
    (causal self-attention, a ReLU MLP), a final LayerNorm and an unembedding. Call it on tokens
    ``(B, L)`` (L <= 9) for next-token logits ``(B, L, 12)``. Initialised from ``seed`` alone."""

    def __init__(self, seed: int = 0, d_model: int = 32, n_layers: int = 2, n_heads: int = 4,
                 d_mlp: int = 64):
        super().__init__()
        check_int(d_model, "d_model", 1)
        if d_model % check_int(n_heads, "n_heads", 1):
            raise ValueError(f"n_heads ({n_heads}) must divide d_model ({d_model})")
        g = torch.Generator().manual_seed(check_int(seed, "seed", 0))

        def weight(fan_in: int, fan_out: int, scale: float = 1.0) -> torch.nn.Parameter:
            w = torch.randn(fan_in, fan_out, generator=g, dtype=DTYPE)
            return torch.nn.Parameter(w * scale / math.sqrt(fan_in))

        self.n_heads = n_heads
        self.tok = torch.nn.Parameter(torch.randn(VOCAB, d_model, generator=g, dtype=DTYPE))
        self.pos = torch.nn.Parameter(torch.randn(CONTEXT, d_model, generator=g, dtype=DTYPE) * 0.1)
        self.blocks = torch.nn.ModuleList()
        residual = 1 / math.sqrt(2 * check_int(n_layers, "n_layers", 1))  # GPT-2's scaled init
        for _ in range(n_layers):
            self.blocks.append(torch.nn.ParameterDict({
                "qkv": weight(d_model, 3 * d_model), "out": weight(d_model, d_model, residual),
                "up": weight(d_model, d_mlp), "down": weight(d_mlp, d_model, residual)}))
        self.unembed = weight(d_model, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        B, L = tokens.shape
        x = self.tok[tokens] + self.pos[:L]  # (B, L, d)
        for block in self.blocks:
            x = x + self._attention(_norm(x), block)
            x = x + torch.relu(_norm(x) @ block["up"]) @ block["down"]
        return _norm(x) @ self.unembed  # (B, L, VOCAB)

    def _attention(self, x: torch.Tensor, block) -> torch.Tensor:
        B, L, d = x.shape
        h = d // self.n_heads
        q, k, v = (x @ block["qkv"]).view(B, L, 3, self.n_heads, h).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-1, -2) / math.sqrt(h)  # (B, heads, L, L)
        causal = torch.ones(L, L, dtype=torch.bool).tril()  # a position sees itself and the past
        y = torch.softmax(scores.masked_fill(~causal, -math.inf), dim=-1) @ v
        return y.transpose(1, 2).reshape(B, L, d) @ block["out"]


def _norm(x: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(x, x.shape[-1:])


# --- sampling and scoring -----------------------------------------------------------------------

@dataclass
class Completions:
    """G sampled completions per prompt, padded: ``prompts (B, 4)``, ``tokens (B, T)`` with
    ``mask (B, T)`` 1 up to and including the first EOS (TRL's completion mask), ``truncated (B,)``
    True where no EOS came within ``MAX_COMPLETION_LENGTH`` tokens."""

    prompts: torch.Tensor
    tokens: torch.Tensor
    mask: torch.Tensor
    truncated: torch.Tensor

    def rows(self, order: torch.Tensor) -> Completions:
        """The completions in the order ``order (B,)``."""
        return Completions(self.prompts[order], self.tokens[order], self.mask[order],
                           self.truncated[order])


@torch.no_grad()
def generate(model: TinyLM, prompts: torch.Tensor, gen: torch.Generator,
             temperature: float = 1.0) -> Completions:
    """Sample one completion per row of ``prompts (B, 4)`` by inverse-CDF draws from ``gen``."""
    seq, done = prompts, torch.zeros(len(prompts), dtype=torch.bool)
    for _ in range(MAX_COMPLETION_LENGTH):
        probs = torch.softmax(model(seq)[:, -1] / temperature, dim=-1)  # (B, VOCAB)
        u = torch.rand(len(seq), 1, generator=gen, dtype=DTYPE)
        token = (probs.cumsum(-1) < u).sum(-1).clamp(max=VOCAB - 1)
        token = torch.where(done, EOS, token)  # EOS pads a finished completion
        seq, done = torch.cat([seq, token[:, None]], 1), done | (token == EOS)
    tokens = seq[:, PROMPT_LEN:]
    return Completions(prompts, tokens, completion_mask(tokens), ~done)


def completion_mask(tokens: torch.Tensor, eos: int = EOS) -> torch.Tensor:
    """TRL's completion mask of ``tokens (B, T)``: 1.0 up to and including the first ``eos``,
    0.0 after it; a row with no ``eos`` (truncated) is all ones. Returns ``(B, T)`` float64."""
    is_eos = (tokens == eos).long()
    return ((is_eos.cumsum(1) - is_eos) == 0).double()  # no EOS strictly before this position


def logps_and_entropies(model: TinyLM, prompts: torch.Tensor, tokens: torch.Tensor,
                        temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """log pi(token) and the entropy of pi at each completion position, both ``(B, T)``, of the
    policy that samples: logits / ``temperature``, as TRL trains on tempered log-probs (TRL 1.16
    ``grpo_trainer.py`` lines 1068-1077 give both models' LM heads the temperature;
    ``trl/trainer/utils.py`` lines 576-577 divide the logits by it). TRL's
    ``_get_per_token_logps_and_entropies``."""
    seq = torch.cat([prompts, tokens], 1)
    logits = model(seq[:, :-1])[:, PROMPT_LEN - 1:]  # the positions that predict the completion
    if temperature != 1.0:
        logits = logits / temperature
    logp_all = torch.log_softmax(logits, dim=-1)
    logp = logp_all.gather(-1, tokens[..., None]).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp, entropy


def token_logps(model: TinyLM, prompts: torch.Tensor, tokens: torch.Tensor,
                temperature: float = 1.0) -> torch.Tensor:
    """log pi(token) at each completion position ``(B, T)`` (see :func:`logps_and_entropies`)."""
    return logps_and_entropies(model, prompts, tokens, temperature)[0]


@torch.no_grad()
def pass_at_1(model: TinyLM, prompts: torch.Tensor) -> float:
    """The exact probability that one sampled completion is correct, averaged over ``prompts``:
    the product of the answer's token probabilities (teacher forcing), no sampling."""
    return float(token_logps(model, prompts, answers(prompts)).sum(1).exp().mean())


# --- training -----------------------------------------------------------------------------------

def warm_start(seed: int = 0, *, train_prompts: torch.Tensor, steps: int = 150, noise: float = 0.3,
               batch: int = 64, lr: float = 1e-2, **model_kwargs) -> TinyLM:
    """Supervised fine-tuning on imperfect data (:func:`sft_targets`): cross-entropy on the
    completion tokens, Adam, ``steps`` batches of ``batch`` prompts. Returns the trained model."""
    model = TinyLM(seed, **model_kwargs)
    gen = torch.Generator().manual_seed(10_000 + seed)
    opt = Adam(model.parameters(), lr=lr)
    for _ in range(check_int(steps, "steps", 0)):
        prompts = train_prompts[torch.randint(len(train_prompts), (batch,), generator=gen)]
        targets = sft_targets(prompts, check_float(noise, "noise"), gen)
        logp = token_logps(model, prompts, targets)
        opt.zero_grad()
        (-logp.mean()).backward()
        opt.step()
    return model


# the capstone's values where TRL's defaults are for billion-weight models (config.LOOPS)
DEFAULTS = LOOPS["train_grpo"].preset


def grpo_step(model: TinyLM, ref: TinyLM, opt: Adam, prompts: torch.Tensor,
              gen: torch.Generator, cfg: GRPOConfig,
              reward_fn: Callable = sort_reward) -> dict[str, float]:
    """One GRPO step on ``prompts (P, 4)``, TRL's stages: G completions each from pi_old
    (the model now), rewards, TRL's advantages, :func:`grpo_core.grpo_update`. Returns
    TRL's metrics of the step (``kl``: k3 against ``ref``, logged even at beta = 0)."""
    G, temp = cfg.num_generations, cfg.temperature
    batch = generate(model, prompts.repeat_interleave(G, 0), gen, temp)  # 1. sample
    rewards = reward_fn(batch.prompts, batch.tokens)  # 2. score, (P * G,)
    adv = torch.from_numpy(trl_advantages(rewards, G, cfg.scale_rewards))  # 3.
    if cfg.float32_advantages:
        adv = adv.float()
    if cfg.generation_steps > 1:  # TRL shuffles the batch, then cuts it into mini-batches
        order = torch.randperm(len(adv), generator=gen)
        batch, adv = batch.rows(order), adv[order]
    mask = batch.mask
    if cfg.mask_truncated_completions:
        mask = mask * ~batch.truncated[:, None]
    with torch.no_grad():
        ref_logp = token_logps(ref, batch.prompts, batch.tokens, temp)
    metrics, old_logp, extras = grpo_update(  # 4. mu x (grpo_loss -> Adam step)
        lambda: _logps_and_entropies(model, batch, temp), adv, mask, opt,
        num_iterations=cfg.num_iterations, loss_kwargs=cfg.loss_kwargs(), ref_logp=ref_logp,
        steps_per_generation=cfg.generation_steps)
    return {**reward_metrics(rewards, G, cfg.scale_rewards),  # 5. TRL's metrics
            "completions/mean_length": float(batch.mask.sum(1).mean()),
            "completions/clipped_ratio": float(batch.truncated.double().mean()),
            "kl": _masked_mean(kl_estimate(old_logp, ref_logp), batch.mask),
            "entropy": _masked_mean(extras["entropies"].detach(), batch.mask), **metrics}


def _logps_and_entropies(model: TinyLM, batch: Completions, temperature: float):
    """:func:`logps_and_entropies` of ``batch``, the entropies for ``grpo_loss``."""
    logp, entropies = logps_and_entropies(model, batch.prompts, batch.tokens, temperature)
    return logp, {"entropies": entropies}


def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> float:
    return float((x * mask).sum() / mask.sum())


@dataclass
class Run:
    """What :func:`train_grpo` returns: the trained ``model``, ``metrics`` (TRL's names, each an
    array ``(steps,)``) and held-out pass@1 ``(n_evals,)`` at ``eval_steps``."""

    model: TinyLM | None  # None for a stored run (:func:`capstone_runs`)
    metrics: dict[str, np.ndarray]
    eval_steps: np.ndarray
    held_out: np.ndarray


def train_grpo(start: TinyLM, train_prompts: torch.Tensor, held_out: torch.Tensor, *,
               eval_every: int = 20, reward_fn: Callable = sort_reward, **knobs) -> Run:
    """GRPO from the warm start ``start`` (left unchanged; it is also pi_ref): ``max_steps``
    calls of :func:`grpo_step` on ``per_device_train_batch_size / num_generations`` prompts drawn
    from ``train_prompts (N, 4)`` with a generator seeded by ``seed``; held-out exact pass@1
    every ``eval_every`` steps. ``knobs``: fields of :class:`grpo_core.GRPOConfig` over
    ``config.LOOPS["train_grpo"]`` (:data:`DEFAULTS`), which lists the fields it reads; any
    other is refused."""
    cfg = loop_config("train_grpo", knobs)
    steps = cfg.max_steps
    if cfg.kl_estimator == "exact" or cfg.max_completion_length != MAX_COMPLETION_LENGTH:
        raise ValueError("the capstone trains with the KL in the loss (k1, k2, k3) and "
                         f"max_completion_length={MAX_COMPLETION_LENGTH}")
    model, ref = copy.deepcopy(start), copy.deepcopy(start).requires_grad_(False)
    opt = Adam(model.parameters(), lr=cfg.learning_rate, betas=(0.9, cfg.adam_beta2))
    gen = torch.Generator().manual_seed(cfg.seed)
    logs: dict[str, list[float]] = {}
    eval_steps, scores = [], []
    for t in range(steps):
        if t % eval_every == 0:
            eval_steps.append(t)
            scores.append(pass_at_1(model, held_out))
        n_prompts = cfg.per_device_train_batch_size * cfg.generation_steps // cfg.num_generations
        pick = torch.randint(len(train_prompts), (n_prompts,), generator=gen)
        prompts = train_prompts[pick]
        for name, value in grpo_step(model, ref, opt, prompts, gen, cfg, reward_fn).items():
            logs.setdefault(name, []).append(value)
    eval_steps.append(steps)
    scores.append(pass_at_1(model, held_out))
    metrics = {name: np.array(values) for name, values in logs.items()}
    return Run(model, metrics, np.array(eval_steps), np.array(scores))


# Chapter 15's three GRPO runs (seeds 0-2 from their warm starts, 60 generation steps, mu = 2),
# stored so that chapter 16 compares TRL with them without training them again. Written by
# tools/capstone_runs.py with exactly these settings; chapter 15 checks the record against its
# own runs every time it runs (under pytest too), so a record that drifts fails there.
CAPSTONE_SEEDS = (0, 1, 2)
CAPSTONE_NOISE = 0.3  # warm_start's noise
CAPSTONE_KNOBS = {"num_iterations": 2, "max_steps": 60}  # over DEFAULTS
CAPSTONE_RECORD = "capstone_runs.json"  # in grpo_core/data/


def run_record(run: Run) -> dict:
    """``run`` as JSON-ready lists (floats as Python floats: ``json`` writes them exactly)."""
    return {"eval_steps": [int(t) for t in run.eval_steps],
            "held_out": [float(x) for x in run.held_out],
            "metrics": {name: [float(x) for x in v] for name, v in run.metrics.items()}}


def capstone_runs() -> dict[int, Run]:
    """Chapter 15's runs as stored in ``grpo_core/data/capstone_runs.json``: seed -> :class:`Run`
    with ``model`` None (the record keeps the logs, not the weights)."""
    from importlib import resources

    text = (resources.files("grpo_core") / "data" / CAPSTONE_RECORD).read_text()
    runs = {}
    for seed, rec in json.loads(text)["runs"].items():
        runs[int(seed)] = Run(None, {k: np.array(v) for k, v in rec["metrics"].items()},
                              np.array(rec["eval_steps"]), np.array(rec["held_out"]))
    return runs
