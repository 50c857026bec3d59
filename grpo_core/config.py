"""One configuration for every training loop of the book: :class:`GRPOConfig`.

TRL 1.16's field names and defaults wherever ``trl.GRPOConfig`` has the knob (so a config moves
to TRL with :meth:`GRPOConfig.trl_kwargs`), then the book's own knobs in a section marked as such.
Each field's metadata says what it does (``help``), TRL's default and where TRL defines it
(``trl``, ``source``, ``line``; "book only" for the book's knobs) and which chapters teach it
(``chapters``): chapter 9's and chapter 15's knob tables are generated from
``dataclasses.fields(GRPOConfig)``.

Paper symbols stay in the math functions (``G`` in ``sample_group``); the training API speaks
TRL (``num_generations``). Each training loop has a contract here (:data:`LOOPS`): the fields it
reads, its preset (its values where TRL's defaults are for billion-weight models: a learning rate
for logits) and the fields that may hold one value per run. :func:`loop_config` builds a loop's
config and refuses, by name, any other field set away from its default: a knob a loop accepts is
a knob it reads. Taught in chapter 9 (the knob table) and chapter 15 (the bridge to TRL).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields, replace

import numpy as np

from ._validate import check_choice, check_float, check_int
from .loss import KL_ESTIMATORS, KNOB_CHECKS, SCALE_REWARDS
from .world import BETA

ADV_KINDS = ("none", "group", "group_norm", "loo", "batch", "batch_norm")  # the book's kinds
KL_PLACEMENTS = ("loss", "reward")
TRAIN_KL_ESTIMATORS = ("exact", *KL_ESTIMATORS)

_GRPO = "trl/trainer/grpo_config.py"
_TA = "transformers TrainingArguments (training_args.py)"


def _trl(default, line: int, help: str, chapters: tuple[int, ...], where: str = _GRPO):
    """A TRL knob: its default here is TRL 1.16's, defined at ``where`` line ``line``."""
    return field(default=default, metadata={"help": help, "trl": repr(default), "line": line,
                                            "source": f"{where} line {line}",
                                            "chapters": chapters})


def _book(default, help: str, chapters: tuple[int, ...]):
    """A knob of the book only: ``trl.GRPOConfig`` has no such field."""
    return field(default=default, metadata={"help": help, "trl": None, "line": None,
                                            "source": "book only", "chapters": chapters})


@dataclass(frozen=True)
class GRPOConfig:
    """Every knob of a GRPO run, TRL 1.16's names and defaults first, the book's own after.

    Knobs in :data:`PER_RUN` may be tuples, one value per run, in the batched loops that say
    so (:data:`LOOPS`). Chapters 9 (the table) and 15 (TRL).
    """

    # --- TRL 1.16 knobs: trl.GRPOConfig's names and defaults ------------------------------------
    num_generations: int | tuple[int, ...] = _trl(
        8, 480, "G, answers per prompt. Raise it when `frac_reward_zero_std` is high: more groups "
        "with both right and wrong answers", (3, 5, 11))
    per_device_train_batch_size: int | None = _trl(
        8, 777, "completions per device and micro-batch; only the generation batch (this x "
        "steps_per_generation x processes) must hold whole groups of num_generations; the toy "
        "draws one group for every prompt (None)", (9, 15), _TA)
    max_steps: int = _trl(-1, 779, "optimizer steps (TRL's -1: num_train_epochs); a generation "
                          "batch serves num_iterations x steps_per_generation / "
                          "gradient_accumulation_steps of them. The book's loops count "
                          "generation batches; trl_kwargs() converts", (4,), _TA)
    learning_rate: float = _trl(1e-6, 423, "the first knob to lower when `kl` or `entropy` run "
                                "away (the toy's 72 logits take 0.05)", (4, 10, 15))
    adam_beta2: float = _trl(0.999, 834, "how slowly Adam's per-parameter scale follows the "
                             "gradients; it decides how much a reward scale change matters",
                             (4, 14), _TA)
    seed: int = _trl(42, 1293, "the run's random seed (the batched loops take one seed per run)",
                     (15,), _TA)
    beta: float | tuple[float, ...] = _trl(
        0.0, 681, "KL coefficient; 0 loads no reference model. Try 0.001-0.04 when the policy "
        "drifts (`kl`, `entropy`)", (6, 12))
    num_iterations: int = _trl(1, 689, "mu, passes over each sampled batch. 2-4 when generation "
                               "dominates the cost; watch `clip_ratio/*`", (10,))
    steps_per_generation: int | None = _trl(
        None, 528, "cut each generation batch into this many disjoint mini-batches, one optimizer "
        "step each, all against the sampler's pi_old (GSPO's recipe: 4); None: "
        "gradient_accumulation_steps (1 here)", (13, 16, 17))
    epsilon: float = _trl(0.2, 693, "the clip's lower bound 1 - epsilon (and the upper one if "
                          "`epsilon_high` is None)", (10,))
    epsilon_high: float | None = _trl(None, 705, "the upper bound; DAPO's 0.28 lets rare good "
                                      "tokens grow faster; try it when `entropy` collapses",
                                      (10,))
    loss_type: str | tuple[str, ...] = _trl(
        "dapo", 801, "how token losses are averaged: \"grpo\" (per sequence, length-biased), "
        "\"bnpo\", \"dapo\", \"dr_grpo\"; TRL 1.16 also has cispo, sapo, luspo, vespo (chapter 17)",
        (13,))
    importance_sampling_level: str | tuple[str, ...] = _trl(
        "token", 760, "\"sequence\" is GSPO's one ratio per sequence (GSPO's recipe: loss_type "
        "\"grpo\", epsilon 3e-4 / epsilon_high 4e-4)", (13,))
    scale_rewards: str | None = _trl(
        "group", 789, "divide by the group's std, the batch's or not at all (\"none\": half of "
        "Dr. GRPO, with loss_type \"dr_grpo\"); "
        "None: the book's `kind` instead", (7, 11, 14))
    use_bias_correction_kl: bool | tuple[bool, ...] = _trl(
        True, 972, "multiplies the KL estimate by the ratio; on-policy and per token k3's "
        "gradient is then k2's, off-policy the ratio times k2's", (12,))
    max_completion_length: int | None = _trl(
        512, 494, "the length limit; raise it when `completions/clipped_ratio` is high (None: "
        "the world's own)", (13,))
    mask_truncated_completions: bool | tuple[bool, ...] = _trl(
        False, 836, "True leaves truncated completions out of the loss (DAPO's overlong "
        "filtering)", (13,))
    temperature: float = _trl(1.0, 532, "sampling temperature, also of the trained log-probs; "
                              "lower gives more dead groups, higher more noise", (15,))
    sync_ref_model: bool = _trl(False, 844, "refresh pi_ref from the policy during training "
                                "(a mix with alpha = ref_model_mixup_alpha; 1 is chapter 9's "
                                "reset)", (6, 9))
    ref_model_sync_steps: int = _trl(512, 859, "steps between two refreshes of pi_ref", (6, 9))
    ref_model_mixup_alpha: float = _trl(0.6, 851, "pi_ref <- alpha pi + (1 - alpha) pi_ref at a "
                                        "refresh (1: a reset)", (6, 9))

    # --- chapter 17: TRL 1.16's other loss knobs, several rewards, vLLM's weight ---
    # grpo_loss takes the first ten (loss_kwargs), trl_rewards the next two, and
    # loss.vllm_importance_sampling_ratio the last three (with use_vllm).
    delta: float | None = _trl(None, 697, "INTELLECT-2's two-sided clip: cap the unclipped "
                               "ratio at delta (None: off; > 1 + epsilon)", (17,))
    sapo_temperature_neg: float = _trl(1.05, 714, "SAPO's gate temperature where A <= 0", (17,))
    sapo_temperature_pos: float = _trl(1.0, 722, "SAPO's gate temperature where A > 0", (17,))
    vespo_k_pos: float = _trl(2.0, 730, "VESPO's power k of the sequence ratio, A >= 0", (17,))
    vespo_lambda_pos: float = _trl(3.0, 737, "VESPO's decay lambda, A >= 0", (17,))
    vespo_k_neg: float = _trl(3.0, 745, "VESPO's power k, A < 0", (17,))
    vespo_lambda_neg: float = _trl(2.0, 752, "VESPO's decay lambda, A < 0", (17,))
    top_entropy_quantile: float = _trl(1.0, 866, "keep in the loss only this top fraction of "
                                       "tokens by entropy (1: all; the 80/20 paper: 0.2)", (17,))
    entropy_coef: float = _trl(0.0, 876, "subtract this times the mean token entropy from the "
                               "loss (an exploration bonus; 0: off)", (17,))
    off_policy_mask_threshold: float | None = _trl(
        None, 963, "DeepSeek-V3.2: drop a sequence with A < 0 whose mean log(pi_sampler / pi) "
        "exceeds this (None: off)", (17,))
    reward_weights: tuple[float, ...] | None = _trl(
        None, 770, "one weight per reward function (None: all 1)", (17,))
    multi_objective_aggregation: str = _trl(
        "sum_then_normalize", 777, "several rewards: sum then normalise, or GDPO's normalise "
        "each then sum", (17,))
    use_vllm: bool = _trl(False, 587, "sample with vLLM, whose log-probs differ from the "
                          "trainer's, and correct with vLLM's weight (chapter 17's stand-in: a "
                          "stale sampler)", (16, 17))
    vllm_importance_sampling_mode: str = _trl(
        "sequence_mask", 934, "vLLM's weight pi_old / pi_vLLM: per token or sequence, clipped "
        "(truncate) or zeroed (mask) outside the bounds", (17,))
    vllm_importance_sampling_clip_max: float | None = _trl(
        3.0, 947, "vLLM's weight: upper bound", (17,))
    vllm_importance_sampling_clip_min: float | None = _trl(
        None, 955, "vLLM's weight: lower bound", (17,))

    def _loss_knob_kwargs(self) -> dict:
        """The chapter-17 block's grpo_loss keywords (TRL's names)."""
        return {name: getattr(self, name) for name in LOSS_KNOBS}

    # --- end of the chapter-17 block --------------------------------------------------------

    # --- the book's own knobs: trl.GRPOConfig has no such field ---------------------------------
    # Each default is TRL's behaviour; trl_kwargs() refuses any other value.
    kind: str | None | tuple[str, ...] = _book(
        None, "the book's advantage (chapters 1-9: population std, no epsilon); None: TRL's "
        "(scale_rewards)", (2, 3, 7))
    kl_estimator: str | tuple[str, ...] = _book(
        "k3", "the KL term: TRL's k3, k1, k2, or the toy's exact KL summed over answers", (6, 12))
    kl_in: str | tuple[str, ...] = _book(
        "loss", "where the KL goes: GRPO's loss, or RLHF/PPO's reward (before the baseline)",
        (6, 9))
    dynamic_sampling: bool = _book(False, "DAPO: redraw a group while its rewards are all equal",
                                   (11,))
    max_redraws: int = _book(8, "... at most this many times per prompt and step", (11,))
    use_critic: bool = _book(False, "PPO's learned value V(prompt) replaces the group baseline",
                             (4, 8))
    train_critic: bool = _book(True, "fit the critic to each group's mean reward as we go", (4, 8))
    critic_lr: float = _book(0.05, "Adam's step size for the critic", (4,))
    critic_seed: int | tuple[int, ...] = _book(0, "the critic's initialisation, seeded", (4,))
    float32_advantages: bool = _book(
        False, "round advantages to float32, as the book's reference runs did: a residue of "
        "~1e-7 that Adam turns into steps of undrawn answers", (3, 12))

    def __post_init__(self) -> None:
        checks = KNOB_CHECKS | {  # the loss's knobs: the checks grpo_loss makes, and the book's
            "num_generations": lambda v, n: check_int(v, n, 1),
            "kind": lambda v, n: v is None or check_choice(v, n, ADV_KINDS),
            "kl_in": lambda v, n: check_choice(v, n, KL_PLACEMENTS),
            "kl_estimator": lambda v, n: check_choice(v, n, TRAIN_KL_ESTIMATORS),
            "critic_seed": lambda v, n: check_int(v, n, 0),
            "mask_truncated_completions": lambda v, n: check_choice(v, n, (True, False)),
            "use_vllm": lambda v, n: check_choice(v, n, (True, False)),
        }
        for name, check in checks.items():
            for value in self.values(name) if name in PER_RUN else [getattr(self, name)]:
                check(value, name)
        check_int(self.max_steps, "max_steps", -1)
        check_float(self.learning_rate, "learning_rate", strict=True)
        if not 0 <= self.adam_beta2 < 1:
            raise ValueError(f"adam_beta2 must be in [0, 1), got {self.adam_beta2}")
        check_int(self.seed, "seed", 0)
        check_int(self.num_iterations, "num_iterations", 1)
        spg = 1 if self.steps_per_generation is None else self.steps_per_generation
        check_int(spg, "steps_per_generation", 1)
        check_float(self.temperature, "temperature", strict=True)
        check_int(self.ref_model_sync_steps, "ref_model_sync_steps", 1)
        check_float(self.ref_model_mixup_alpha, "ref_model_mixup_alpha")
        if self.ref_model_mixup_alpha > 1:
            raise ValueError(f"ref_model_mixup_alpha must be in [0, 1], got "
                             f"{self.ref_model_mixup_alpha}")
        check_int(self.max_redraws, "max_redraws", 1)
        check_float(self.critic_lr, "critic_lr", strict=True)
        # the advantage: TRL's (scale_rewards) or the book's (kind), exactly one of them
        kinds = [k for k in self.values("kind") if k is not None]
        if kinds and self.scale_rewards is not None:
            raise ValueError(f"kind={self.kind!r} and scale_rewards={self.scale_rewards!r} are "
                             "exclusive: the book's advantage or TRL's, pass the other as None")
        if not kinds and self.scale_rewards is None:
            raise ValueError("one of kind and scale_rewards must be set (the advantage)")
        if kinds and len(kinds) != len(self.values("kind")):
            raise ValueError("kind must be set for every run, or for none")
        if self.scale_rewards is not None:
            check_choice(self.scale_rewards, "scale_rewards", SCALE_REWARDS)
            if min(self.values("num_generations")) < 2:
                raise ValueError("scale_rewards needs num_generations >= 2 (as TRL requires)")
        if self.per_device_train_batch_size is not None:
            check_int(self.per_device_train_batch_size, "per_device_train_batch_size", 1)
            for g in self.values("num_generations"):  # TRL's grpo_config.py lines 1131-1135
                if self.per_device_train_batch_size * spg % g:
                    raise ValueError(f"num_generations ({g}) must divide the generation batch, "
                                     f"per_device_train_batch_size x steps_per_generation "
                                     f"({self.per_device_train_batch_size} x {spg}): whole "
                                     "groups")
        if self.use_critic and "reward" in self.values("kl_in"):
            raise ValueError('use_critic=True supports only kl_in="loss"')
        if "vespo" in self.values("loss_type") and self.use_vllm and \
                not self.vllm_importance_sampling_mode.startswith("token"):  # TRL's 936-941
            raise ValueError('loss_type="vespo" with use_vllm needs a token-level '
                             "vllm_importance_sampling_mode (token_truncate or token_mask)")

    def values(self, name: str) -> list:
        """The knob ``name`` as a list: one entry per run for a per-run tuple, else one."""
        value = getattr(self, name)
        return list(value) if isinstance(value, tuple | list | np.ndarray) else [value]

    def loss_kwargs(self) -> dict:
        """The keyword arguments of :func:`grpo_core.grpo_loss` (one run's knobs: no tuples).

        The KL term goes in only where the loss carries it with an estimator ``grpo_loss``
        has: ``kl_in="reward"`` and ``kl_estimator="exact"`` are the world's business."""
        self._one_run("loss_kwargs")
        in_loss = self.kl_in == "loss" and self.kl_estimator != "exact"
        return {"beta": self.beta if in_loss else 0.0, "epsilon": self.epsilon,
                "epsilon_high": self.epsilon_high, "loss_type": self.loss_type,
                "importance_sampling_level": self.importance_sampling_level,
                "max_completion_length": self.max_completion_length,
                "kl_estimator": self.kl_estimator if in_loss else "k3",
                "use_bias_correction_kl": self.use_bias_correction_kl,
                **self._loss_knob_kwargs()}

    def trl_kwargs(self) -> dict:
        """Keyword arguments for ``trl.GRPOConfig`` (add ``output_dir``) that train as the book's
        loop does: TRL's knobs as set here, plus the ``TrainingArguments`` values TRL would
        otherwise change silently (:data:`TRL_OVERRIDES`), and ``max_steps`` in TRL's count:
        the book's loops count generation batches, TRL optimizer steps, ``num_iterations`` x
        ``steps_per_generation`` per batch here (``gradient_accumulation_steps`` is 1; TRL 1.16
        ``grpo_trainer.py`` lines 1538-1539), so TRL samples as many batches. Raises ValueError
        for a book-only knob away from TRL's behaviour, and for per-run tuples. Chapter 15."""
        self._one_run("trl_kwargs")
        for f in fields(self):
            if f.metadata["trl"] is None and f.name in BOOK_ONLY_BEHAVIOUR \
                    and getattr(self, f.name) != f.default:
                raise ValueError(f"{f.name}={getattr(self, f.name)!r} has no TRL 1.16 "
                                 f"equivalent (TRL behaves as {f.name}={f.default!r})")
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.metadata["trl"]}
        if out["per_device_train_batch_size"] is None:
            raise ValueError("per_device_train_batch_size=None (every prompt once per step) "
                             "has no TRL equivalent: give the number of completions per step")
        if out["max_completion_length"] is None:
            raise ValueError("max_completion_length=None (the world's length) has no TRL "
                             "equivalent: give the number of tokens")
        if self.max_steps > 0:  # -1 (TRL's default) is an epoch count in TRL
            out["max_steps"] = self.max_steps * self.num_iterations * self.generation_steps
        return out | TRL_OVERRIDES

    @property
    def generation_steps(self) -> int:
        """``steps_per_generation`` with None read as TRL does here (1: no accumulation)."""
        return 1 if self.steps_per_generation is None else self.steps_per_generation

    def run(self, i: int) -> GRPOConfig:
        """The config of run ``i``: each per-run tuple replaced by its ``i``-th value."""
        return replace(self, **{n: getattr(self, n)[i] for n in PER_RUN
                                if isinstance(getattr(self, n), tuple | list)})

    def _one_run(self, what: str) -> None:
        tuples = [n for n in PER_RUN if isinstance(getattr(self, n), tuple | list)]
        if tuples:
            raise ValueError(f"{what}() describes one run; per-run values given for "
                             f"{', '.join(tuples)}")


# Chapter 17: the GRPOConfig fields that loss_kwargs() passes to grpo_loss beyond chapter 10's
LOSS_KNOBS = ("delta", "sapo_temperature_neg", "sapo_temperature_pos", "vespo_k_pos",
              "vespo_lambda_pos", "vespo_k_neg", "vespo_lambda_neg", "top_entropy_quantile",
              "entropy_coef", "off_policy_mask_threshold")

# book-only knobs whose value changes what is trained (the others only tune those)
BOOK_ONLY_BEHAVIOUR = ("kind", "kl_estimator", "kl_in", "dynamic_sampling", "use_critic")

# TrainingArguments defaults (transformers 5 / TRL 1.16 base_config.py) under which TRL's trainer
# would silently run another loop than the book's: a linearly decaying learning rate, gradient
# clipping at norm 1, bf16, activation checkpointing (``gradient_checkpointing`` is its deprecated
# alias; setting the new name sets both), a log every 10 steps, checkpoints, fused AdamW, a GPU,
# and gradient accumulation (the book's loops make one optimizer step per mini-batch).
TRL_OVERRIDES = {"lr_scheduler_type": "constant", "max_grad_norm": 0.0, "weight_decay": 0.0,
                 "bf16": False, "use_cpu": True, "activation_checkpointing": False,
                 "save_strategy": "no", "logging_steps": 1, "report_to": "none",
                 "gradient_accumulation_steps": 1, "optim": "adamw_torch"}


def field_table(defaults: dict | None = None) -> list[dict]:
    """One row per field of :class:`GRPOConfig`: name, the loop's value (``defaults`` over the
    config's), TRL's default (or "book only"), where TRL defines it (source, line), the
    chapters, what it does. Chapters 9 and 15 print it."""
    defaults = defaults or {}
    return [{"name": f.name, "value": defaults.get(f.name, f.default),
             "trl": f.metadata["trl"] or "book only", "source": f.metadata["source"],
             "line": f.metadata["line"], "chapters": f.metadata["chapters"],
             "help": f.metadata["help"]} for f in fields(GRPOConfig)]


# --- the training loops' contracts ----------------------------------------------------------------

@dataclass(frozen=True)
class Loop:
    """A training loop's contract with :class:`GRPOConfig`: the fields it ``reads`` (any other
    set away from its default is refused), its ``preset`` (its values where TRL's defaults do not
    fit: a learning rate for a table of logits), and the fields that may hold one value per run
    (``per_run``)."""

    reads: frozenset[str]
    preset: Mapping
    per_run: tuple[str, ...] = ()


# the fields loss_kwargs() passes to grpo_loss: every loop that computes a loss reads them
LOSS_FIELDS = frozenset(("beta", "epsilon", "epsilon_high", "loss_type",
                         "importance_sampling_level", "max_completion_length", "kl_estimator",
                         "use_bias_correction_kl", *LOSS_KNOBS))
# ... and these: the batch, Adam, the advantages
_EVERY = LOSS_FIELDS | {"num_generations", "per_device_train_batch_size", "max_steps",
                        "learning_rate", "adam_beta2", "num_iterations", "scale_rewards",
                        "float32_advantages"}
_SYNC = ("sync_ref_model", "ref_model_sync_steps", "ref_model_mixup_alpha")
_CRITIC = ("use_critic", "train_critic", "critic_lr", "critic_seed")
_VLLM = ("use_vllm", "vllm_importance_sampling_mode", "vllm_importance_sampling_clip_max",
         "vllm_importance_sampling_clip_min")

LOOPS: dict[str, Loop] = {
    # the tabular toy (chapters 3-12, 14): one-token answers, one group for every prompt
    "train_batch": Loop(
        _EVERY | {"kind", "kl_in", "dynamic_sampling", "max_redraws", *_CRITIC, *_SYNC},
        {"max_steps": 300, "learning_rate": 0.05, "beta": BETA, "kind": "group_norm",
         "scale_rewards": None, "kl_estimator": "exact", "float32_advantages": True,
         "per_device_train_batch_size": None, "max_completion_length": None},
        ("num_generations", "beta", "kind", "kl_in", "kl_estimator", "use_bias_correction_kl",
         "critic_seed")),
    # chapter 13's token world
    "train_sequences": Loop(
        _EVERY | {"mask_truncated_completions", "steps_per_generation"},
        {"max_steps": 300, "learning_rate": 0.02, "per_device_train_batch_size": None,
         "max_completion_length": None},
        ("loss_type", "importance_sampling_level", "mask_truncated_completions")),
    # chapter 15's transformer (max_completion_length: tiny_lm.MAX_COMPLETION_LENGTH)
    "train_grpo": Loop(
        _EVERY | {"seed", "temperature", "mask_truncated_completions", "steps_per_generation"},
        {"learning_rate": 1e-3, "per_device_train_batch_size": 64, "max_steps": 100, "seed": 0,
         "max_completion_length": 5}),
    # chapter 17's token world: TRL's other knobs, a stale sampler standing in for vLLM
    "train_knobs": Loop(
        _EVERY | {"mask_truncated_completions", "steps_per_generation", *_VLLM},
        {"max_steps": 100, "learning_rate": 0.1, "per_device_train_batch_size": None,
         "max_completion_length": None}),
    # chapter 17's tabular policy with several reward functions
    "train_two_rewards": Loop(
        _EVERY | {"steps_per_generation", "reward_weights", "multi_objective_aggregation"},
        {"max_steps": 60, "learning_rate": 0.05, "per_device_train_batch_size": None,
         "max_completion_length": None}),
}
# the knobs that may hold one value per run (a tuple) in some loop
PER_RUN = tuple(dict.fromkeys(n for loop in LOOPS.values() for n in loop.per_run))


def loop_config(loop: str, knobs: Mapping) -> GRPOConfig:
    """The :class:`GRPOConfig` of a run of ``loop`` (a key of :data:`LOOPS`): ``knobs`` over the
    loop's preset. Raises TypeError for a name that is no field, and ValueError, naming the
    field and the loop, for a field the loop does not read set away from its default, for
    per-run values it does not take, and for ``max_steps`` < 0 (the book's loops count
    generation batches; 0 returns the start). Chapter 9."""
    contract = LOOPS[loop]
    unknown = set(knobs) - set(_DEFAULTS)
    if unknown:
        raise TypeError(f"unknown training knob(s) for {loop}: {', '.join(sorted(unknown))}")
    check_reads(knobs, loop, contract.reads)
    cfg = GRPOConfig(**{**contract.preset, **knobs})
    for name in PER_RUN:
        if name not in contract.per_run and isinstance(getattr(cfg, name), tuple | list):
            raise ValueError(f"{name}: one value for all runs of {loop}")
    check_int(cfg.max_steps, "max_steps", 0)
    return cfg


def check_reads(knobs: Mapping, loop: str, reads: Iterable[str]) -> None:
    """Refuse, naming it and ``loop``, any field in ``knobs`` outside ``reads`` that is set away
    from its default: a knob a loop accepts is a knob it reads."""
    for name, value in knobs.items():
        if name not in reads and not np.array_equal(value, _DEFAULTS[name]):
            raise ValueError(f"{name}={value!r}: {loop} does not read {name}; leave it at its "
                             f"default ({_DEFAULTS[name]!r})")


_DEFAULTS = {f.name: f.default for f in fields(GRPOConfig)}
