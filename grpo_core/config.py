"""One configuration for every training loop of the book: :class:`GRPOConfig`.

TRL 1.16's field names and defaults wherever ``trl.GRPOConfig`` has the knob (so a config moves
to TRL with :meth:`GRPOConfig.trl_kwargs`), then the book's own knobs in a section marked as such.
Each field's metadata says what it does (``help``), TRL's default and where TRL defines it
(``trl``, ``source``, ``line``; "book only" for the book's knobs) and which chapters teach it
(``chapters``): chapter 9's and chapter 15's knob tables are generated from
``dataclasses.fields(GRPOConfig)``.

Paper symbols stay in the math functions (``G`` in ``sample_group``); the training API speaks
TRL (``num_generations``). The toy's values that differ from TRL's defaults (a learning rate for
logits, not for a billion weights) are each loop's ``DEFAULTS``, stated where the loop is defined.
Taught in chapter 9 (the knob table) and chapter 15 (the bridge to TRL).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import numpy as np

from ._validate import check_choice, check_float, check_int
from .loss import ALL_LOSS_TYPES, IMPORTANCE_SAMPLING_LEVELS, KL_ESTIMATORS, SCALE_REWARDS

ADV_KINDS = ("none", "group", "group_norm", "loo", "batch", "batch_norm")  # the book's kinds
KL_PLACEMENTS = ("loss", "reward")
TRAIN_KL_ESTIMATORS = ("exact", *KL_ESTIMATORS)
# knobs that may hold one value per run (a tuple) in the batched loops
PER_RUN = ("num_generations", "beta", "kind", "kl_in", "kl_estimator", "use_bias_correction_kl",
           "critic_seed", "loss_type", "importance_sampling_level", "mask_truncated_completions")

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

    Knobs in :data:`PER_RUN` may be tuples, one value per run, in the batched loops
    (``train_batch``, ``train_sequences``). Chapters 9 (the table) and 15 (TRL).
    """

    # --- TRL 1.16 knobs: trl.GRPOConfig's names and defaults ------------------------------------
    num_generations: int | tuple[int, ...] = _trl(
        8, 480, "G, answers per prompt. Raise it when `frac_reward_zero_std` is high: more groups "
        "with both right and wrong answers", (3, 5, 11))
    per_device_train_batch_size: int | None = _trl(
        8, 777, "completions per optimiser step, whole groups (prompts x num_generations); the "
        "toy draws one group for every prompt (None)", (9, 15), _TA)
    max_steps: int = _trl(-1, 779, "optimiser steps, one sampled batch each (TRL's -1: "
                          "as many as num_train_epochs gives)", (4,), _TA)
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
    num_iterations: int = _trl(1, 689, "mu, Adam steps per sampled batch. 2-4 when generation "
                               "dominates the cost; watch `clip_ratio/*`", (10,))
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
    # loss.vllm_importance_sampling_ratio the last three. Checked by _check_loss_knobs.
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
    vllm_importance_sampling_mode: str = _trl(
        "sequence_mask", 934, "vLLM's weight pi_old / pi_vLLM: per token or sequence, clipped "
        "(truncate) or zeroed (mask) outside the bounds", (17,))
    vllm_importance_sampling_clip_max: float | None = _trl(
        3.0, 947, "vLLM's weight: upper bound", (17,))
    vllm_importance_sampling_clip_min: float | None = _trl(
        None, 955, "vLLM's weight: lower bound", (17,))

    def _check_loss_knobs(self) -> None:
        """The checks of the chapter-17 block, as grpo_loss and trl_rewards make them."""
        from .loss import AGGREGATIONS, VLLM_IS_MODES

        if self.delta is not None:
            check_float(self.delta, "delta", strict=True)
        for name in ("sapo_temperature_neg", "sapo_temperature_pos"):
            check_float(getattr(self, name), name, strict=True)
        for name in ("vespo_k_pos", "vespo_lambda_pos", "vespo_k_neg", "vespo_lambda_neg"):
            check_float(getattr(self, name), name)
        if not 0 <= check_float(self.top_entropy_quantile, "top_entropy_quantile") <= 1:
            raise ValueError(f"top_entropy_quantile must be in [0, 1], got "
                             f"{self.top_entropy_quantile}")
        check_float(self.entropy_coef, "entropy_coef", minimum=-float("inf"))
        if self.off_policy_mask_threshold is not None:
            check_float(self.off_policy_mask_threshold, "off_policy_mask_threshold",
                        minimum=-float("inf"))
        if self.reward_weights is not None:
            for w in self.reward_weights:
                check_float(w, "reward_weights", minimum=-float("inf"))
        check_choice(self.multi_objective_aggregation, "multi_objective_aggregation",
                     AGGREGATIONS)
        check_choice(self.vllm_importance_sampling_mode, "vllm_importance_sampling_mode",
                     VLLM_IS_MODES)
        for name in ("vllm_importance_sampling_clip_max", "vllm_importance_sampling_clip_min"):
            if getattr(self, name) is not None:
                check_float(getattr(self, name), name)

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
        per_run_checks = {
            "num_generations": lambda v, n: check_int(v, n, 1),
            "beta": lambda v, n: check_float(v, n),
            "kind": lambda v, n: v is None or check_choice(v, n, ADV_KINDS),
            "kl_in": lambda v, n: check_choice(v, n, KL_PLACEMENTS),
            "kl_estimator": lambda v, n: check_choice(v, n, TRAIN_KL_ESTIMATORS),
            "use_bias_correction_kl": lambda v, n: check_choice(v, n, (True, False)),
            "critic_seed": lambda v, n: check_int(v, n, 0),
            "loss_type": lambda v, n: check_choice(v, n, ALL_LOSS_TYPES),
            "importance_sampling_level": lambda v, n: check_choice(v, n,
                                                                   IMPORTANCE_SAMPLING_LEVELS),
            "mask_truncated_completions": lambda v, n: check_choice(v, n, (True, False)),
        }
        for name, check in per_run_checks.items():
            for value in self.values(name):
                check(value, name)
        check_int(self.max_steps, "max_steps", -1)
        check_float(self.learning_rate, "learning_rate", strict=True)
        if not 0 <= self.adam_beta2 < 1:
            raise ValueError(f"adam_beta2 must be in [0, 1), got {self.adam_beta2}")
        check_int(self.seed, "seed", 0)
        check_int(self.num_iterations, "num_iterations", 1)
        check_float(self.epsilon, "epsilon", strict=True)
        if self.epsilon_high is not None:
            check_float(self.epsilon_high, "epsilon_high", strict=True)
        if self.max_completion_length is not None:
            check_int(self.max_completion_length, "max_completion_length", 1)
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
            for g in self.values("num_generations"):
                if self.per_device_train_batch_size % g:
                    raise ValueError(f"num_generations ({g}) must divide "
                                     f"per_device_train_batch_size "
                                     f"({self.per_device_train_batch_size}): whole groups")
        if self.use_critic and "reward" in self.values("kl_in"):
            raise ValueError('use_critic=True supports only kl_in="loss"')
        self._check_loss_knobs()  # the chapter-17 block

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
        otherwise change silently (:data:`TRL_OVERRIDES`). Raises ValueError for a book-only
        knob away from TRL's behaviour, and for per-run tuples. Chapter 15."""
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
        return out | TRL_OVERRIDES

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
# and a generation batch reused over several optimiser steps.
TRL_OVERRIDES = {"lr_scheduler_type": "constant", "max_grad_norm": 0.0, "weight_decay": 0.0,
                 "bf16": False, "use_cpu": True, "activation_checkpointing": False,
                 "save_strategy": "no", "logging_steps": 1, "report_to": "none",
                 "steps_per_generation": 1, "gradient_accumulation_steps": 1,
                 "optim": "adamw_torch"}


def field_table(defaults: dict | None = None) -> list[dict]:
    """One row per field of :class:`GRPOConfig`: name, the loop's value (``defaults`` over the
    config's), TRL's default (or "book only"), where TRL defines it (source, line), the
    chapters, what it does. Chapters 9 and 15 print it."""
    defaults = defaults or {}
    return [{"name": f.name, "value": defaults.get(f.name, f.default),
             "trl": f.metadata["trl"] or "book only", "source": f.metadata["source"],
             "line": f.metadata["line"], "chapters": f.metadata["chapters"],
             "help": f.metadata["help"]} for f in fields(GRPOConfig)]
