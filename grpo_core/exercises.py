"""Checkers for the book's "implement it" exercises.

Each chapter's exercise asks the reader to write one function; the chapter calls the checker
below with the reader's function, and the checker compares it with the package's reference on
random inputs (seeded) and prints what differs. Usage in a chapter::

    def my_k2(logp, ref_logp):
        ...                       # the reader's code

    gc.exercises.check_k2(my_k2)  # prints "correct" or the first input where it differs

A checker returns True when every trial agrees, so a solution cell can ``assert`` it.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import torch


def _as_array(x: Any) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().double().numpy()
    return np.asarray(x, dtype=np.float64)


def _describe(args: tuple, kwargs: dict) -> str:
    parts = [f"{type(a).__name__} shape {tuple(np.shape(_as_array(a)))}" if hasattr(a, "shape")
             else repr(a) for a in args]
    parts += [f"{k}={v!r}" for k, v in kwargs.items()]
    return ", ".join(parts)


_FAILURES: dict[str, int] = {}  # checker name -> failures so far in this session (two-step hints)


def _sizes(args: tuple) -> set[int]:
    """Every axis length > 1 of the array-like arguments: the candidates for an "off by a
    factor" diagnosis (a sum over that axis where a mean was meant, or the reverse)."""
    return {int(n) for a in args if hasattr(a, "shape") for n in np.shape(_as_array(a)) if n > 1}


def diagnose(got: np.ndarray, expected: np.ndarray, args: tuple = ()) -> str:
    """Name the likely mistake when ``got`` differs from ``expected`` in a recognisable way:
    NaN where the reference is finite, the sign, a constant factor (an axis size: sum instead of
    mean; 2: a missing 1/2), the transpose. Empty when nothing is recognised. Shapes must agree."""
    if np.isnan(got).any() and not np.isnan(expected).any():
        return ("NaN where the reference is finite: a division by zero? (an all-padding row has "
                "no tokens: clamp a count to at least 1; an all-equal group has std 0)")
    if np.allclose(got, -expected, rtol=1e-6, atol=1e-12) and np.abs(expected).max() > 0:
        return "the sign is flipped (the loss is minimised: negate the objective)"
    big = np.abs(expected) > 1e-12
    if big.any() and np.allclose(got[~big], 0, atol=1e-12):
        factors = got[big] / expected[big]
        c = float(np.median(factors))
        if np.allclose(factors, c, rtol=1e-6) and not np.isclose(c, 1):
            for n in sorted(_sizes(args)):
                if np.isclose(c, n):
                    return f"off by a factor {n}, an axis length: a sum where a mean belongs?"
                if np.isclose(c, 1 / n):
                    return f"off by a factor 1/{n}, an axis length: a mean where a sum belongs?"
            if np.isclose(c, 2) or np.isclose(c, 0.5):
                return f"off by a factor {c:g}: a missing or extra 1/2?"
            return f"off by a constant factor {c:.4g}"
    if got.ndim == 2 and got.shape[0] == got.shape[1] and np.allclose(got, expected.T):
        return "rows and columns swapped: the wrong axis?"
    return ""


def _report(name: str, message: str, nudge: str, hint: str) -> bool:
    """Print a failure with a hint in two steps: the nudge first, the method from the second
    failure of the same checker on."""
    _FAILURES[name] = _FAILURES.get(name, 0) + 1
    step = nudge if _FAILURES[name] == 1 and nudge else hint
    text = message + (f"\n  hint: {step}" if step else "")
    if _FAILURES[name] == 1 and nudge and hint:
        text += "\n  (check again after a change; a second failure shows how to compute it)"
    print("\n".join(_wrap(line) for line in text.splitlines()))
    return False


def _wrap(line: str, width: int = 80) -> str:
    """A long message line wrapped to the notebook's output column, its continuation indented."""
    if len(line) <= width:
        return line
    indent = " " * (len(line) - len(line.lstrip()) + 4)
    return textwrap.fill(line, width, subsequent_indent=indent, break_long_words=False)


def _row(x: np.ndarray, where: tuple) -> str:
    """The row of ``x`` that holds index ``where``, for the failure message."""
    if x.ndim < 2:
        return np.array2string(x, precision=5, max_line_width=90)
    return np.array2string(x[where[:-1]], precision=5, max_line_width=90)


def _gradients(fn: Callable, args: tuple, kwargs: dict, grad_args: Sequence[int],
               weight_seed: int) -> tuple[np.ndarray | None, list[np.ndarray] | None, str]:
    """``fn``'s output and the gradients of a fixed random weighting of it with respect to the
    arguments ``grad_args`` (fresh leaf copies); an error message instead when it has none."""
    leaves = list(args)
    for i in grad_args:
        leaves[i] = args[i].detach().clone().requires_grad_(True)
    out = fn(*leaves, **kwargs)
    if out is None:
        return None, None, "returned None: did you forget `return`?"
    if not isinstance(out, torch.Tensor) or not out.requires_grad:
        return _as_array(out), None, ("the value is right but carries no gradient: compute it "
                                      "with torch operations on the inputs (no .item(), .numpy(), "
                                      "float() or .detach() on the way), so the loss can backprop")
    w = torch.tensor(np.random.default_rng(weight_seed).normal(size=tuple(out.shape)),
                     dtype=out.dtype)
    grads = torch.autograd.grad((out * w).sum(), [leaves[i] for i in grad_args],
                                allow_unused=True)
    return _as_array(out), [np.zeros(np.shape(_as_array(args[i]))) if g is None else _as_array(g)
                            for i, g in zip(grad_args, grads, strict=True)], ""


def check(user_fn: Callable, reference_fn: Callable, trials: Iterable[tuple[tuple, dict]], *,
          name: str, rtol: float = 1e-6, atol: float = 1e-9, hint: str = "", nudge: str = "",
          grad_args: Sequence[int] = ()) -> bool:
    """Compare ``user_fn(*args, **kwargs)`` with ``reference_fn`` on every trial.

    Prints "correct" (and returns True) when all agree to ``rtol``/``atol``; otherwise prints
    the first disagreeing trial (the inputs' shapes, the row where they differ most, expected
    and returned), the likely mistake when :func:`diagnose` recognises it, and a hint in two
    steps (``nudge`` on the first failure, ``hint``, the method, from the second on); returns
    False. With ``grad_args`` (indices of tensor arguments) the gradients of the output with
    respect to those arguments are compared too: a loss computed outside autograd, or whose
    gradient differs (a clip applied to the wrong factor), fails. An exception in the reader's
    code is reported, not raised. Used by every chapter's exercise checkers.
    """
    for i, (args, kwargs) in enumerate(trials):
        where_trial = f"trial {i} ({_describe(args, kwargs)})"
        if grad_args:
            expected, exp_grads, _ = _gradients(reference_fn, args, kwargs, grad_args, i)
        else:
            expected, exp_grads = _as_array(reference_fn(*args, **kwargs)), None
        try:
            if grad_args:
                got, got_grads, problem = _gradients(user_fn, args, kwargs, grad_args, i)
            else:
                raw = user_fn(*args, **kwargs)
                got, got_grads = (None, None) if raw is None else (_as_array(raw), None)
                problem = "returned None: did you forget `return`?" if raw is None else ""
        except Exception as e:  # the reader's code: report, do not crash the notebook
            why = ("\n  (the inputs carry gradients: stay in torch, no .numpy() or .item())"
                   if "requires grad" in str(e) else "")
            return _report(name, f"{name}: your function raised {type(e).__name__}: {e}\n"
                                 f"  on {where_trial}{why}", nudge, hint)
        if got is None:
            return _report(name, f"{name}: your function {problem}\n  on {where_trial}",
                           nudge, hint)
        if got.shape != expected.shape:
            guess = (" (one axis too few: a reduction over an axis that should stay?)"
                     if got.ndim == expected.ndim - 1 else
                     " (a scalar: did you reduce everything?)" if got.ndim == 0 else "")
            return _report(name, f"{name}: wrong shape on {where_trial}: expected "
                                 f"{expected.shape}, got {got.shape}{guess}", nudge, hint)
        if not np.allclose(got, expected, rtol=rtol, atol=atol, equal_nan=True):
            where = np.unravel_index(np.nanargmax(np.abs(got - expected)), got.shape) \
                if got.ndim else ()
            mistake = diagnose(got, expected, args)
            return _report(name, f"{name}: differs on {where_trial}\n"
                                 f"  largest difference at index {tuple(int(w) for w in where)}"
                                 f": expected {expected[where]:.6g}, got {got[where]:.6g}\n"
                                 f"  that row, expected: {_row(expected, where)}\n"
                                 f"  that row, yours:    {_row(got, where)}"
                                 + (f"\n  likely mistake: {mistake}" if mistake else ""),
                           nudge, hint)
        if problem:
            return _report(name, f"{name}: {problem}\n  on {where_trial}", nudge, hint)
        for j, (g, e) in zip(grad_args, zip(got_grads or [], exp_grads or [], strict=True),
                             strict=False):
            if not np.allclose(g, e, rtol=rtol, atol=atol):
                mistake = diagnose(g, e, args)
                return _report(name, f"{name}: the values agree but the gradient with respect "
                                     f"to argument {j} differs on {where_trial}"
                                     + (f"\n  likely mistake: {mistake}" if mistake else
                                        "\n  (a value computed partly outside autograd, or a "
                                        "clip or min applied to the wrong term)"), nudge, hint)
    print(f"{name}: correct")
    return True


def random_logps(rng: np.random.Generator, shape: tuple[int, ...]) -> torch.Tensor:
    """Log-probabilities in (-4, 0) of the given shape, float64: inputs for the checkers."""
    return torch.tensor(-4 * rng.random(shape))


# Chapter checkers are added below, one section per chapter, each a few lines calling `check`.


# --- chapters 1-9 ---
# Each checker draws small random worlds (seeded) and compares the reader's function with the
# package's own on every one of them.

def _worlds(n: int = 4, seed: int = 0, G: int = 5):
    """``n`` random ``(logits (P, A), rewards (P, A), samples (P, G))`` triples, P = 3, A = 6."""
    from .policy import sample_group

    rng = np.random.default_rng(seed)
    for _ in range(n):
        logits, rewards = rng.normal(0, 1, (3, 6)), 10 * rng.random((3, 6))
        yield logits, rewards, sample_group(logits, G, rng)


def check_policy_gradient(user_fn: Callable) -> bool:
    """Chapter 1: ``user_fn(logits (P, A), samples (P, G), adv (P, G)) -> (P, A)``."""
    from .policy import policy_gradient

    trials = [((lg, s, np.take_along_axis(r, s, axis=1)), {}) for lg, r, s in _worlds()]
    return check(user_fn, policy_gradient, trials, name="policy_gradient",
                 nudge="each sampled answer pushes its own logit up and every logit down by pi, "
                       "weighted by its advantage",
                 hint="(1/G) sum_i A_i (onehot(a_i) - softmax(logits)), one row per prompt")


def check_loo_advantages(user_fn: Callable) -> bool:
    """Chapter 2: ``user_fn(r (P, G)) -> (P, G)``, r_i minus the mean of the other G - 1."""
    from .baselines import loo_advantages

    rng = np.random.default_rng(1)
    trials = [((10 * rng.random((3, G)),), {}) for G in (2, 3, 8)]
    return check(user_fn, loo_advantages, trials, name="loo_advantages",
                 nudge="the baseline of answer i leaves answer i out",
                 hint="the others' mean is (sum of the group - r_i) / (G - 1)")


def check_group_advantages(user_fn: Callable) -> bool:
    """Chapter 3: ``user_fn(r (P, G), ddof) -> (P, G)``: (r - mean) / (std + 1e-8)."""
    from .baselines import group_advantages

    rng = np.random.default_rng(2)
    trials = [((10 * rng.random((3, G)), ddof), {}) for G in (2, 4, 8) for ddof in (0, 1)]
    trials.append(((np.array([[1.0, 1.0, 1.0, 1.0], [0.0, 1.0, 0.0, 0.0]]), 1), {}))
    trials.append(((np.array([[0.3, 0.3, 0.3, 0.3], [0.1, 0.7, 0.1, 0.1]]), 0), {}))  # equal floats
    return check(user_fn, lambda r, ddof: group_advantages(r, ddof=ddof), trials,
                 name="group_advantages", rtol=1e-6, atol=1e-6,
                 nudge="each group is one row: its mean and std run along the last axis",
                 hint="np.std(..., ddof=ddof) over the group axis, plus 1e-8; a group whose "
                      "rewards are all equal gets advantage 0")


def check_critic_advantages(user_fn: Callable) -> bool:
    """Chapter 4: ``user_fn(r (P, G), values (P,)) -> (P, G)``: each reward minus its prompt's V."""
    from .baselines import advantages

    rng = np.random.default_rng(3)
    trials = [((10 * rng.random((3, G)), 5 * rng.random(3)), {}) for G in (1, 4, 8)]
    return check(user_fn, lambda r, v: advantages(r, "critic", v), trials,
                 name="critic_advantages",
                 nudge="one value per prompt, subtracted from each of its G rewards",
                 hint="broadcast V over the group axis: v[:, None]")


def check_variance_none(user_fn: Callable) -> bool:
    """Chapter 5: ``user_fn(logits, rewards, G) -> float``: exact no-baseline variance at G."""
    from .exact import exact_moments

    trials = [((lg, r, G), {}) for (lg, r, _), G in zip(_worlds(3, seed=4), (2, 3, 4), strict=True)]
    return check(user_fn, lambda lg, r, G: exact_moments(lg, r, G, "none").variance, trials,
                 name="variance_none",
                 nudge="start from one sample (G = 1), then ask what averaging G independent "
                       "samples does",
                 rtol=1e-9,
                 hint="the G terms are independent: Var(G) = Var(G = 1) / G, and Var(G = 1) is "
                      "sum_a pi(a) r_a^2 |onehot(a) - pi|^2 - |E g|^2 per prompt, summed")


def check_exact_kl(user_fn: Callable) -> bool:
    """Chapter 6: ``user_fn(logits (P, A), ref_logits (P, A)) -> (P,)``: KL per prompt."""
    from .exact import exact_kl

    rng = np.random.default_rng(5)
    trials = [((rng.normal(0, s, (3, 6)), rng.normal(0, 1, (3, 6))), {}) for s in (0.1, 1, 3)]
    return check(user_fn, lambda lg, ref: exact_kl(lg, ref, per_prompt=True), trials,
                 name="exact_kl",
                 nudge="an expectation under pi of the log-ratio, one number per prompt", rtol=1e-9,
                 hint="sum over answers of pi * (log pi - log pi_ref), with log-softmax")


def check_batch_advantages(user_fn: Callable) -> bool:
    """Chapter 7: ``user_fn(r (P, G)) -> (P, G)``: r minus ONE mean over the whole batch."""
    from .baselines import batch_advantages

    rng = np.random.default_rng(6)
    trials = [((10 * rng.random((P, 4)),), {}) for P in (1, 3, 6)]
    return check(user_fn, lambda r: batch_advantages(r, normalise=False), trials,
                 name="batch_advantages",
                 nudge="one baseline for the whole batch, not one per prompt",
                 hint="the mean runs over both axes, prompts and group")


def check_kl_optimal_policy(user_fn: Callable) -> bool:
    """Chapter 8: ``user_fn(rewards, ref_logits, beta) -> (P, A)`` probabilities of pi*_beta."""
    from .exact import kl_optimal_logits
    from .policy import softmax

    trials = [((r, lg, beta), {}) for (lg, r, _), beta in
              zip(_worlds(3, seed=7), (0.1, 1.0, 10.0), strict=True)]
    return check(user_fn, lambda r, lg, b: softmax(kl_optimal_logits(r, lg, b)), trials,
                 name="kl_optimal_policy",
                 nudge="the optimum tilts pi_ref by the rewards, more strongly for a small beta",
                 rtol=1e-9, atol=1e-12,
                 hint="pi*(a) is proportional to pi_ref(a) exp(r(a) / beta): softmax of "
                      "ref_logits + rewards / beta")


def check_k3(user_fn: Callable) -> bool:
    """Chapter 9: ``user_fn(logits, ref_logits, samples (P, G)) -> (P, G)``: k3 at each sample."""
    from .exact import k3_kl

    rng = np.random.default_rng(8)
    trials = [((lg, rng.normal(0, 1, lg.shape), s), {}) for lg, _, s in _worlds(3, seed=8)]
    return check(user_fn, k3_kl, trials, name="k3",
                 nudge="k3 needs only the two log-probabilities of the sampled answer",
                 rtol=1e-7, atol=1e-12,
                 hint="with ratio = pi_ref(a) / pi(a): ratio - log(ratio) - 1")


# --- chapter 13 ---

def check_aggregation(user_fn: Callable) -> bool:
    """Chapter 13: ``user_fn(per_token (B, T), mask (B, T), loss_type, max_completion_length)
    -> ()`` for loss_type "grpo" and "dr_grpo", as :func:`grpo_core.aggregate`."""
    from .loss import aggregate

    rng = np.random.default_rng(13)
    trials = []
    for B, T in ((4, 6), (8, 5), (3, 9)):
        lengths = rng.integers(1, T + 1, B)
        lengths[-1] = 0 if B == 3 else lengths[-1]  # an all-padding row (a masked truncation)
        mask = torch.tensor((np.arange(T) < lengths[:, None]).astype(float))
        for loss_type in ("grpo", "dr_grpo"):
            trials.append(((random_logps(rng, (B, T)), mask, loss_type, T + 2), {}))
    return check(user_fn, aggregate, trials, name="aggregation", rtol=1e-9, atol=1e-12,
                 grad_args=(0,),
                 nudge="multiply by the mask first; which count divides the sum differs: a "
                       "row's own tokens, or a constant",
                 hint='"grpo": each row\'s masked mean over its own tokens, then the mean over '
                      'rows; "dr_grpo": the masked sum / (B * max_completion_length)')


# --- chapter 11 ---

def check_dead_group_prob(user_fn: Callable) -> bool:
    """Chapter 11: ``user_fn(p (n,), G) -> (n,)``: P(all G binary rewards equal)."""
    from .binary import dead_group_prob

    p = np.array([0.0, 0.02, 0.1, 0.3, 0.5, 0.77, 0.9, 1.0])
    trials = [((p, G), {}) for G in (1, 2, 8, 16)]
    return check(user_fn, dead_group_prob, trials, name="dead_group_prob",
                 nudge="two ways for a group to be dead", rtol=1e-9,
                 hint="a group is dead when all G answers are right or all are wrong; the "
                      "answers are independent")


def check_grpo_factor(user_fn: Callable) -> bool:
    """Chapter 11: ``user_fn(p (n,), G) -> (n,)``: E[population std] / (p (1 - p))."""
    from .binary import update_factor

    p = np.array([0.02, 0.1, 0.3, 0.5, 0.7, 0.95])
    trials = [((p, G), {}) for G in (2, 3, 8, 16)]
    return check(user_fn, lambda q, G: update_factor(q, G, "grpo"), trials, name="grpo_factor",
                 nudge="condition on k, the number of correct answers in the group (binomial)",
                 rtol=1e-6, hint="sum over k = 0..G of comb(G, k) p^k (1-p)^(G-k) "
                                 "sqrt(k/G (1 - k/G)), then divide by p (1 - p)")


# --- chapter 12 ---

def check_k2(user_fn: Callable) -> bool:
    """Chapter 12: ``user_fn(logp (B, T), ref_logp (B, T)) -> (B, T)``: k2 per token, as
    :func:`grpo_core.kl_estimate` with ``"k2"``; torch tensors in and out (it must backprop)."""
    from .loss import kl_estimate

    rng = np.random.default_rng(12)
    trials = [((random_logps(rng, shape), random_logps(rng, shape)), {})
              for shape in ((4, 6), (2, 3, 5), (1, 1))]
    return check(user_fn, lambda lp, ref: kl_estimate(lp, ref, "k2"), trials, name="k2",
                 rtol=1e-9, atol=1e-12, grad_args=(0, 1),
                 nudge="k2 is a function of the log-ratio alone, per token",
                 hint="with log_r = ref_logp - logp: k2 = log_r ** 2 / 2 (the same for -log_r)")


# --- chapter 14 ---

def check_pass_at_k(user_fn: Callable) -> bool:
    """Chapter 14: ``user_fn(p (n,), k) -> (n,)``: P(at least one of k answers is correct)."""
    from .shared import pass_at_k

    p = np.array([0.0, 0.02, 0.25, 0.5, 0.9, 1.0])
    trials = [((p, k), {}) for k in (1, 2, 8, 64)]
    return check(user_fn, pass_at_k, trials, name="pass_at_k",
                 nudge="easier through the complement: the probability that all k fail",
                 rtol=1e-9, atol=1e-12,
                 hint="the k answers are independent: all k are wrong with probability (1 - p)^k")


# --- chapter 10 ---

def check_clipped_term(user_fn: Callable) -> bool:
    """Chapter 10: ``user_fn(ratio (B, T), adv (B, 1), epsilon, epsilon_high) -> (B, T)``, the
    clipped surrogate per token, ``-min(ratio A, clip(ratio, 1 - eps, 1 + eps_high) A)``;
    compared with :func:`grpo_core.grpo_loss` applied token by token."""
    from .loss import grpo_loss

    def reference(ratio, adv, epsilon, epsilon_high):
        logp = torch.log(ratio)[..., None, None]  # (B, T, 1, 1): each token a lone sequence
        A = adv.expand(ratio.shape)[..., None]  # (B, T, 1)
        return grpo_loss(logp, torch.zeros_like(logp), None, A, torch.ones_like(logp),
                         epsilon=epsilon, epsilon_high=epsilon_high)

    rng = np.random.default_rng(10)
    trials = [((torch.tensor(np.exp(rng.normal(0, 0.4, (B, T)))),
                torch.tensor(rng.normal(0, 1, (B, 1))), 0.2, eps_high), {})
              for B, T, eps_high in ((4, 5, 0.2), (6, 3, 0.28), (1, 8, 0.28))]
    far = torch.tensor([[0.05, 0.7, 1.0, 1.1, 1.5, 9.0]] * 3, dtype=torch.float64)
    trials.append(((far, torch.tensor([[1.0], [-1.0], [0.0]]), 0.2, 0.28), {}))  # A > 0, < 0, 0
    return check(user_fn, reference, trials, name="clipped_term", rtol=1e-9, atol=1e-12,
                 grad_args=(0,),
                 nudge="the clip bounds the ratio, not the product; the pessimistic choice is "
                       "the smaller objective, and the loss is its negative",
                 hint="torch.clamp(ratio, 1 - epsilon, 1 + epsilon_high), then the minimum of "
                      "the two products with A, negated (the loss is minimised)")


# --- chapter 15 ---

def check_completion_mask(user_fn: Callable) -> bool:
    """Chapter 15: ``user_fn(tokens (B, T) long, eos: int) -> (B, T)``, TRL's completion mask:
    1 up to and including the first ``eos``, 0 after it, all ones where no ``eos`` came;
    compared with :func:`grpo_core.tiny_lm.completion_mask` on random token batches."""
    from .tiny_lm import completion_mask

    g = torch.Generator().manual_seed(15)
    trials = [((torch.randint(0, vocab, (B, T), generator=g), eos), {})
              for B, T, vocab, eos in ((6, 5, 12, 11), (20, 8, 4, 3), (3, 1, 2, 0))]
    return check(user_fn, completion_mask, trials, name="completion_mask",
                 nudge="what matters at each position is whether an EOS came before it",
                 rtol=0, atol=0,
                 hint="a position is kept when no EOS came strictly before it: a cumulative "
                      "count of EOS tokens, shifted by one")


# --- chapter 17 (TRL's other loss types) ---

def check_sapo_surrogate(user_fn: Callable) -> bool:
    """Chapter 17: ``user_fn(ratio (B, T), adv (B, 1), tau_pos, tau_neg) -> (B, T)``, SAPO's
    per-token loss ``-4 / tau * sigmoid(tau * (ratio - 1)) * A`` with tau = tau_pos where
    A > 0, else tau_neg; compared with :func:`grpo_core.loss.sapo_surrogate` (TRL 1.16
    ``grpo_trainer.py`` lines 3121-3124), in float64 to 1e-6: TRL's ``torch.where`` of two
    Python floats gives float32 temperatures, and either is accepted."""
    from .loss import sapo_surrogate

    def reference(ratio, adv, tau_pos, tau_neg):
        tau = torch.where(adv > 0, torch.tensor(tau_pos, dtype=torch.float64),
                          torch.tensor(tau_neg, dtype=torch.float64))  # float64 temperatures
        return sapo_surrogate(ratio, adv, None, sapo_temperature_pos=tau, sapo_temperature_neg=tau)

    rng = np.random.default_rng(17)
    trials = [((torch.tensor(np.exp(rng.normal(0, 0.5, (B, T)))),
                torch.tensor(rng.normal(0, 1, (B, 1))), tp, tn), {})
              for B, T, tp, tn in ((4, 5, 1.0, 1.05), (6, 3, 0.5, 2.0), (1, 8, 3.0, 0.7))]
    return check(user_fn, reference, trials, name="sapo_surrogate", rtol=1e-6, atol=1e-9,
                 hint="the temperature per sequence is torch.where(A > 0, tau_pos, tau_neg); "
                      "the gate 4 / tau * sigmoid(tau * (ratio - 1)) has slope 1 at ratio 1")


# --- chapter 16 (TRL) ---

def _trl_reward_trials(n: int = 6, seed: int = 16):
    """Batches as TRL hands them to a reward function, for the sort task: prompt texts, decoded
    completions (``<eos>`` dropped, as TRL's skip_special_tokens does) and completion ids up to
    and including the first ``<eos>``: right answers, wrong orders, truncated ones."""
    from . import tiny_lm as T
    from . import trl_bridge

    rng = np.random.default_rng(seed)
    for _ in range(n):
        prompts = torch.as_tensor(rng.integers(0, 10, (8, 3)))
        prompts = torch.cat([prompts, torch.full((8, 1), T.SEP)], 1)
        right = T.answers(prompts).tolist()
        ids = []
        for p, a in zip(prompts.tolist(), right, strict=True):
            kind = rng.integers(4)
            if kind == 0:
                ids.append(a)  # right
            elif kind == 1:
                ids.append(p[:3] + [T.EOS])  # copied unsorted (right if already sorted)
            elif kind == 2:
                ids.append(a[:3] + [int(rng.integers(10)), int(rng.integers(10))])  # no <eos>
            else:
                ids.append(list(rng.permutation(a[:3])) + [T.EOS])
        ids = [[int(t) for t in row] for row in ids]
        texts = [" ".join(trl_bridge.TEXT[t] for t in row if t != T.EOS) for row in ids]
        yield (), {"prompts": trl_bridge.prompt_text(prompts), "completions": texts,
                   "completion_ids": ids, "trainer_state": None}


def check_trl_reward(user_fn: Callable) -> bool:
    """Chapter 16: a reward function with TRL's signature, ``(prompts, completions,
    completion_ids, **kwargs) -> list[float]``, for a dataset with only a ``"prompt"`` column: 1.0
    where the completion's ids are the prompt's digits sorted, then ``<eos>`` (11)."""
    from . import tiny_lm as T
    from . import trl_bridge

    def reference(prompts, completions, completion_ids, **kwargs):
        digits = torch.tensor([[int(d) for d in p.split()[:3]] for p in prompts])
        answer = T.answers(torch.cat([digits, torch.full_like(digits[:, :1], T.SEP)], 1))
        return trl_bridge.sort_reward(prompts, completions, completion_ids, answer.tolist())

    return check(user_fn, reference, _trl_reward_trials(), name="trl reward",
                 hint="compare completion_ids[:4] with the prompt's digits sorted, then 11: "
                      "the decoded text has no <eos>, so a text check also passes '1 2 3 4 5'")


# --- chapter 18 (your own task) ---

def check_generate_positions(user_fn: Callable) -> bool:
    """Chapter 18: ``user_fn(attention_mask (B, L) long) -> (B, L)``, the ``position_ids``
    ``model.generate`` gives a left-padded batch: each real token numbered from 0, pads 0;
    compared with :func:`grpo_core.own_task.generate_positions` on random left-padded masks
    (a row without padding included)."""
    from .own_task import generate_positions

    g = torch.Generator().manual_seed(18)
    trials = []
    for B, L in ((4, 5), (8, 9), (1, 3)):
        pads = torch.randint(0, L, (B,), generator=g)
        pads[0] = 0  # one row is the longest prompt: no padding
        trials.append((((torch.arange(L)[None, :] >= pads[:, None]).long(),), {}))
    return check(user_fn, generate_positions, trials, name="generate_positions", rtol=0, atol=0,
                 nudge="a real token's position counts the real tokens before it",
                 hint="a cumulative sum of the mask along the sequence, minus one, with the "
                      "pads (where that gives -1) set to 0")
