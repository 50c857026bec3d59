"""KL estimators, exactly: the expected value and the expected gradient of k1, k2 and k3.

DeepSeekMath (arXiv 2402.03300, section 4.1, eq. 4) puts a per-token estimate of
KL(pi || pi_ref) in the loss, k3 = pi_ref/pi - log(pi_ref/pi) - 1 (Schulman's k3; k1 = -log r,
k2 = (log r)^2 / 2 with r = pi_ref/pi). On the tabular toy every answer can be enumerated, so
each estimator's expectation under pi, and the expectation of its gradient with respect to the
logits (the samples held fixed, as a loss does), are finite sums. With l(a) = log pi(a) -
log pi_ref(a), an estimator k(l) at a sampled answer a has gradient k'(l(a)) (onehot(a) - pi),
so its expected gradient is ``pi * (k' - E_pi[k'])``:

- E[grad k1] = 0 on-policy: k1 in the loss is no leash;
- E[grad k2] = grad KL(pi || pi_ref);
- E[grad k3] = pi - pi_ref = grad KL(pi_ref || pi), the KL with its arguments swapped.

TRL 1.16's ``use_bias_correction_kl=True`` multiplies the estimate by the ratio pi/pi_old (value
1, gradient not 0), which adds ``pi * (k - E_pi[k])``: the expected gradient becomes
grad E_pi[k], i.e. grad KL(pi || pi_ref) for k1 and k3 (ratio * k3 even has k2's gradient
l(a) (onehot(a) - pi) at every sample). With plain k3 in the loss, training heads
for the maximiser of E[r] - beta KL(pi_ref || pi) (:func:`k3_optimal_logits`), which keeps every
answer above a floor (:func:`k3_floor`). Training with each KL term (in the loss through
:func:`grpo_core.grpo_loss`, or k1 in the reward as RLOO does) is :func:`grpo_core.train_batch`
with per-run ``kl_estimator``, ``kl_in`` and ``use_bias_correction_kl``. Taught in chapter 12.
"""

from __future__ import annotations

import numpy as np

from ._validate import check_array, check_choice, check_float, check_same_shape
from .exact import evaluate, kl_optimal_logits
from .loss import KL_ESTIMATORS, kl_estimate
from .policy import log_softmax, softmax


def _inputs(logits, ref_logits) -> tuple[np.ndarray, np.ndarray]:
    logits = check_array(logits, "logits", min_ndim=2)
    ref_logits = check_array(ref_logits, "ref_logits", min_ndim=2)
    check_same_shape(logits.shape[-2:], "logits (P, A)", ref_logits.shape, "ref_logits")
    return logits, ref_logits


def _centred(probs: np.ndarray, f: np.ndarray) -> np.ndarray:
    """``E_pi[f(a) (onehot(a) - pi)] = pi * (f - E_pi[f])``, per prompt: ``(..., P, A)``."""
    return probs * (f - (probs * f).sum(axis=-1, keepdims=True))


def kl_estimate_table(logits: np.ndarray, ref_logits: np.ndarray, estimator: str) -> np.ndarray:
    """Each estimator's value at every answer, ``(..., P, A)``: :func:`grpo_core.kl_estimate`
    (TRL's per-token formulas) applied to every answer as if it had been sampled.

    With ``l = log pi - log pi_ref``: k1 = l, k2 = l**2 / 2, k3 = exp(-l) + l - 1 (never
    negative). ``logits (..., P, A), ref_logits (P, A)``. Taught in chapter 12.
    """
    import torch

    logits, ref_logits = _inputs(logits, ref_logits)
    check_choice(estimator, "estimator", KL_ESTIMATORS)
    logp = torch.from_numpy(log_softmax(logits))  # (..., P, A)
    return kl_estimate(logp, torch.from_numpy(log_softmax(ref_logits)), estimator).numpy()


def expected_kl_estimate(logits: np.ndarray, ref_logits: np.ndarray,
                         estimator: str) -> np.ndarray:
    """Exact ``E_{a ~ pi}[k(a)]`` per prompt, ``(..., P, A) -> (..., P)``.

    k1 and k3 give exactly KL(pi || pi_ref) (for k3 because E_pi[pi_ref / pi] = 1); k2 gives
    E_pi[l**2] / 2, which only approximates it near pi_ref. Taught in chapter 12.
    """
    table = kl_estimate_table(logits, ref_logits, estimator)
    return (softmax(check_array(logits, "logits", min_ndim=2)) * table).sum(axis=-1)


def expected_kl_estimate_grad(logits: np.ndarray, ref_logits: np.ndarray, estimator: str, *,
                              ratio: bool = False) -> np.ndarray:
    """Exact expected gradient of the estimator w.r.t. the logits, ``(..., P, A)``.

    ``E_{a ~ pi}[grad_z k(a)]`` with the sample held fixed (the estimate as a loss term). With
    ``ratio`` (TRL's ``use_bias_correction_kl=True``), of ``(pi(a) / pi_old(a)) k(a)`` at
    pi_old = pi, which equals ``grad_z E_pi[k]``. Taught in chapter 12.
    """
    logits, ref_logits = _inputs(logits, ref_logits)
    check_choice(estimator, "estimator", KL_ESTIMATORS)
    probs = softmax(logits)
    ell = log_softmax(logits) - log_softmax(ref_logits)
    slope = {"k1": np.ones_like(ell), "k2": ell, "k3": -np.expm1(-ell)}[estimator]  # dk/dl
    grad = _centred(probs, slope)
    if ratio:  # d(pi / pi_old)/dz = onehot(a) - pi at pi_old = pi, times the value k(a)
        grad = grad + _centred(probs, kl_estimate_table(logits, ref_logits, estimator))
    return grad


def grad_kl_pi_ref(logits: np.ndarray, ref_logits: np.ndarray) -> np.ndarray:
    """``grad_z KL(pi || pi_ref) = pi * (l - KL)``, ``(..., P, A)``. Taught in chapter 12."""
    logits, ref_logits = _inputs(logits, ref_logits)
    return _centred(softmax(logits), log_softmax(logits) - log_softmax(ref_logits))


def grad_kl_ref_pi(logits: np.ndarray, ref_logits: np.ndarray) -> np.ndarray:
    """``grad_z KL(pi_ref || pi) = pi - pi_ref``, ``(..., P, A)``. Taught in chapter 12."""
    logits, ref_logits = _inputs(logits, ref_logits)
    return softmax(logits) - softmax(ref_logits)


def kl_ref_pi(logits: np.ndarray, ref_logits: np.ndarray, *, per_prompt: bool = False):
    """Exact ``KL(pi_ref || pi) = sum_a pi_ref(a) (log pi_ref(a) - log pi(a))``, averaged over
    prompts: ``(..., P, A) -> (...)`` (``(..., P)`` with ``per_prompt``). Taught in chapter 12."""
    logits, ref_logits = _inputs(logits, ref_logits)
    ref_lp = log_softmax(ref_logits)
    per = (np.exp(ref_lp) * (ref_lp - log_softmax(logits))).sum(axis=-1)
    return per if per_prompt else per.mean(axis=-1)


def k3_lambda(rewards: np.ndarray, ref_logits: np.ndarray, beta: float) -> np.ndarray:
    """The multiplier ``lambda (P,)`` of the k3 optimum: the root, above max r, of
    ``sum_a beta pi_ref(a) / (lambda - r(a)) = 1`` (decreasing in lambda, so unique).

    The root lies in ``(max r + beta min pi_ref, max r + beta]``; bisection halves it to float64
    resolution. ``rewards, ref_logits (P, A)``, beta > 0. Taught in chapter 12.
    """
    rewards, ref_logits = _inputs(rewards, ref_logits)
    beta = check_float(beta, "beta", strict=True)
    ref = softmax(ref_logits)
    top = rewards.max(axis=-1)  # (P,)
    lo, hi = top + beta * ref.min(axis=-1) / 2, top + beta  # sum > 1 at lo, <= 1 at hi
    for _ in range(200):
        mid = (lo + hi) / 2
        big = (beta * ref / (mid[..., None] - rewards)).sum(axis=-1) > 1
        lo, hi = np.where(big, mid, lo), np.where(big, hi, mid)
        if np.all(hi - lo <= 4 * np.finfo(float).eps * np.abs(hi)):
            break
    return (lo + hi) / 2


def k3_optimal_logits(rewards: np.ndarray, ref_logits: np.ndarray, beta: float) -> np.ndarray:
    """Log-probabilities ``(P, A)`` of the maximiser of ``E_pi[r] - beta KL(pi_ref || pi)``:
    ``pi(a) = beta pi_ref(a) / (lambda - r(a))`` (setting the gradient r + beta pi_ref / pi -
    lambda to 0), where plain k3 in the loss sends training. Taught in chapter 12."""
    lam = k3_lambda(rewards, ref_logits, beta)
    probs = beta * softmax(ref_logits) / (lam[..., None] - rewards)
    return np.log(probs / probs.sum(axis=-1, keepdims=True))  # renormalise the last ulp


def k3_floor(rewards: np.ndarray, ref_logits: np.ndarray, beta: float) -> np.ndarray:
    """``beta pi_ref(a) / (lambda - min r)``, ``(P, A)``: no answer of the k3 optimum has less
    probability (lambda - r(a) <= lambda - min r). Taught in chapter 12."""
    lam = k3_lambda(rewards, ref_logits, beta)
    rewards = check_array(rewards, "rewards", min_ndim=2)
    return beta * softmax(ref_logits) / (lam - rewards.min(axis=-1))[..., None]


def kl_frontier(rewards: np.ndarray, ref_logits: np.ndarray, betas, kind: str = "kl_pi_ref"):
    """``(reward, KL(pi || pi_ref))`` of each beta's optimum, two ``(len(betas),)`` arrays.

    ``kind="kl_pi_ref"``: chapter 6's exact frontier (the optimum of E[r] - beta KL(pi ||
    pi_ref)); ``"kl_ref_pi"``: the optima plain k3 in the loss heads for. Taught in chapter 12.
    """
    check_choice(kind, "kind", ("kl_pi_ref", "kl_ref_pi"))
    optimum = kl_optimal_logits if kind == "kl_pi_ref" else k3_optimal_logits
    logits = np.stack([optimum(rewards, ref_logits, float(b)) for b in np.atleast_1d(betas)])
    return evaluate(logits, rewards, ref_logits)
