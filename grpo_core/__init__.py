"""grpo_core: GRPO (Group Relative Policy Optimization) from scratch, on a toy world.

The mechanism of DeepSeekMath (Shao et al., 2024, arXiv 2402.03300), section 4, small enough to
read in one sitting: NumPy for the mechanism (advantages, the policy gradient, variances, exact
expectations), torch for the training loops (Adam, ``.backward()``) and the critic GRPO deletes.

Modules, one concept each:
    world       the 6 x 12 toy world and the reference policy        (chapter 1)
    policy      softmax, the group sampler, the policy gradient       (chapter 1)
    baselines   advantages: group / leave-one-out / batch / critic baselines (chapters 2, 3, 7)
    binary      0/1 verifier rewards: dead groups, GRPO's weight      (chapter 11)
    critic      the value network GRPO deletes                        (chapter 4)
    loss        the GRPO loss as practised (TRL 1.16), one registry entry per loss type,
                TRL's advantages and metrics                         (chapters 10-13, 17)
    update      grpo_update: the optimiser steps on one batch, shared by every loop (chapter 10)
    config      GRPOConfig: every knob, TRL's names; each loop's contract (chapters 9, 15)
    optim       Adam, written out (torch's, without importing torch._dynamo) (chapter 4)
    sequences   token sequences: length, the loss_types' weights, overlong (chapter 13)
    shared      prompts sharing weights: per-prompt weights, pass@k    (chapter 14)
    training    batched GRPO training, KL in the loss or the reward   (chapters 4-9)
    variance    Monte-Carlo gradient variance and direction           (chapters 2, 5)
    exact       true gradient, expected reward, exact KL, exact moments (chapters 1, 2, 6)
    kl          k1/k2/k3: exact expected values and gradients, the k3 optimum (chapter 12)
    tiny_lm     a tiny transformer trained with grpo_loss: sort three digits (chapter 15)
    trl_bridge  the transformer in TRL's GRPOTrainer, checked against the book (chapter 16)
    beyond      TRL's other loss types and knobs, several rewards (chapter 17)
    own_task    a task of your own in TRL: warm start, positions check and fix, evaluation (ch. 18)
    add_one     chapter 18's task: add one to a number (tokenizer, data, reward)
    distributed one TRL run on several processes: what each rank sees, checked (chapter 19)
    exercises   checkers for the readers' "implement it" exercises  (every chapter)
    viz         the book's two-form sliders and plotting helpers      (every chapter)

Shapes: every docstring names its axes with these letters (leading ``...`` or ``R``: independent
runs trained in one tensor):
    P  prompts                      A  answers of the toy (a one-token answer)
    G  completions per prompt: a group (TRL's num_generations)
    R  runs in one batched call     B  completions in a batch (P x G, TRL's batch)
    T  tokens per completion (padded; only ever tokens)   L  the sequence world's max_len
    V  token vocabulary             N  every completion of the sequence world, enumerated
    M  multisets of a group         K  (reward, length) types of the sequence world
    D  prompt-embedding width

Training knobs carry TRL 1.16's names (:class:`GRPOConfig`); the math keeps the paper's symbols.

``python -m grpo_core`` prints the seven demos and the summary.
"""

from . import (
    exercises,  # noqa: F401  (gc.exercises.check_...)
    kl,  # noqa: F401  (gc.kl.expected_kl_estimate_grad, ...)
    sequences,  # noqa: F401  (gc.sequences.exact_stats, ...)
    tiny_lm,  # noqa: F401  (gc.tiny_lm.TinyLM, gc.tiny_lm.train_grpo, ...)
)
from .baselines import (
    KINDS,
    advantages,
    batch_advantages,
    group_advantages,
    loo_advantages,
)
from .binary import (
    FACTOR_KINDS,
    binary_world,
    correct_count_pmf,
    correct_entropy,
    dead_group_prob,
    expected_binary_update,
    pass_rate,
    policy_entropy,
    update_factor,
)
from .config import GRPOConfig
from .critic import Critic, n_params
from .exact import (
    Moments,
    best_reward,
    evaluate,
    exact_kl,
    exact_moments,
    expected_reward,
    expected_scale,
    k3_kl,
    kl_optimal_logits,
    multisets,
    reward_std,
    true_gradient,
)
from .kl import (
    expected_kl_estimate,
    expected_kl_estimate_grad,
    grad_kl_pi_ref,
    grad_kl_ref_pi,
    k3_floor,
    k3_lambda,
    k3_optimal_logits,
    kl_estimate_table,
    kl_frontier,
    kl_ref_pi,
)
from .loss import (
    IMPORTANCE_SAMPLING_LEVELS,
    KL_ESTIMATORS,
    LOSS_TYPES,
    SCALE_REWARDS,
    aggregate,
    clip_metrics,
    grpo_loss,
    importance_ratio,
    kl_estimate,
    reward_metrics,
    trl_advantages,
)
from .policy import log_softmax, policy_gradient, sample_from_uniforms, sample_group, softmax
from .sequences import (
    SequenceWorld,
    exact_update,
    make_sequence_world,
    sample_batch,
    sequence_probs,
    sequence_weights,
    train_sequences,
)
from .shared import (
    SharedPolicy,
    SharedWorld,
    pass_at_k,
    pass_rate_grad,
    shared_logits,
    shared_update,
    shared_world,
    update_cosine,
)
from .training import TrainResult, train_batch, train_simple
from .update import METRICS, grpo_update
from .variance import alignment, cos_mean_grad, grad_variance, gradient_estimates
from .world import BETA, D_EMB, N_ANSWERS, N_PROMPTS, World, make_world, reference_logits, toy_world

__all__ = [
    "FACTOR_KINDS", "binary_world", "correct_count_pmf", "correct_entropy",
    "dead_group_prob", "expected_binary_update", "pass_rate", "policy_entropy", "update_factor",
    "IMPORTANCE_SAMPLING_LEVELS", "KL_ESTIMATORS", "LOSS_TYPES", "SCALE_REWARDS", "aggregate",
    "clip_metrics", "grpo_loss", "importance_ratio", "kl_estimate", "reward_metrics",
    "trl_advantages",
    "GRPOConfig",
    "BETA", "D_EMB", "KINDS", "N_ANSWERS", "N_PROMPTS", "Critic", "METRICS", "Moments",
    "TrainResult", "World", "advantages", "batch_advantages", "best_reward", "cos_mean_grad",
    "evaluate", "exact_kl", "exact_moments", "expected_reward", "expected_scale", "grad_variance",
    "gradient_estimates", "group_advantages", "k3_kl", "kl_optimal_logits", "log_softmax",
    "loo_advantages", "make_world", "multisets", "n_params", "policy_gradient", "reference_logits",
    "sample_from_uniforms", "sample_group", "softmax", "toy_world", "train_batch",
    "true_gradient", "train_simple", "grpo_update",
    "SequenceWorld", "exact_update", "make_sequence_world", "sample_batch", "sequence_probs",
    "sequence_weights", "train_sequences",
    "alignment", "reward_std",
    "expected_kl_estimate", "expected_kl_estimate_grad", "grad_kl_pi_ref", "grad_kl_ref_pi",
    "k3_floor", "k3_lambda", "k3_optimal_logits", "kl_estimate_table", "kl_frontier", "kl_ref_pi",
    "SharedPolicy", "SharedWorld", "pass_at_k", "pass_rate_grad", "shared_logits",
    "shared_update", "shared_world", "update_cosine",
]
