"""grpo_core.kl: exact expectations of k1/k2/k3 values and gradients, the k3 optimum.

Oracles: torch autograd through grpo_core.kl_estimate (TRL's per-token formulas), Monte Carlo
within 4 standard errors, and the KL identities of chapter 12."""

import numpy as np
import pytest
import torch

import grpo_core as gc
from grpo_core import kl

WORLD = gc.toy_world(0)
R, REF = WORLD.rewards, WORLD.ref_logits
E_VALUE, E_GRAD = kl.expected_kl_estimate, kl.expected_kl_estimate_grad


def _policies():
    rng = np.random.default_rng(12)
    return [REF + rng.normal(0, s, REF.shape) for s in (0.3, 1.0, 2.5)]


def _autograd(logits, estimator, ratio):
    """Autograd of sum_a pi_old(a) [ratio] k(a) at pi_old = pi: the expectation over fixed
    samples, written with TRL's per-token estimate (grpo_core.kl_estimate)."""
    z = torch.tensor(logits, requires_grad=True)
    logp = torch.log_softmax(z, -1)
    ref_logp = torch.log_softmax(torch.tensor(REF), -1)
    k = gc.kl_estimate(logp, ref_logp, estimator)
    if ratio:
        k = k * torch.exp(logp - logp.detach())
    value = (logp.detach().exp() * k).sum(-1)  # (P,)
    value.sum().backward()
    return value.detach().numpy(), z.grad.numpy()


@pytest.mark.parametrize("estimator", gc.KL_ESTIMATORS)
@pytest.mark.parametrize("ratio", [False, True])
def test_expectations_match_autograd(estimator, ratio):
    for z in _policies():
        value, grad = _autograd(z, estimator, ratio)
        np.testing.assert_allclose(E_VALUE(z, REF, estimator), value, atol=1e-12)
        np.testing.assert_allclose(E_GRAD(z, REF, estimator, ratio=ratio), grad,
                                   atol=1e-12)


def test_table_matches_kl_estimate():
    z = _policies()[1]
    lp, ref_lp = torch.log_softmax(torch.tensor(z), -1), torch.log_softmax(torch.tensor(REF), -1)
    for est in gc.KL_ESTIMATORS:
        np.testing.assert_allclose(kl.kl_estimate_table(z, REF, est),
                                   gc.kl_estimate(lp, ref_lp, est).numpy(), atol=1e-12)


@pytest.mark.parametrize("estimator", gc.KL_ESTIMATORS)
def test_monte_carlo_within_4_standard_errors(estimator):
    z = _policies()[1]
    probs = gc.softmax(z)
    rng = np.random.default_rng(5)
    n = 20_000
    samples = gc.sample_from_uniforms(probs, rng.random((REF.shape[0], n)))  # (P, n)
    table = kl.kl_estimate_table(z, REF, estimator)  # (P, A)
    # per-answer gradient by autograd of one token's estimate, then one row per sample
    per_answer = np.empty(REF.shape + (REF.shape[1],))  # (P, a, A)
    for a in range(REF.shape[1]):
        zt = torch.tensor(z, requires_grad=True)
        lp = torch.log_softmax(zt, -1)[:, a]
        ref_lp = torch.log_softmax(torch.tensor(REF), -1)[:, a]
        gc.kl_estimate(lp, ref_lp, estimator).sum().backward()
        per_answer[:, a] = zt.grad.numpy()
    rows = np.arange(REF.shape[0])[:, None]
    vals, grads = table[rows, samples], per_answer[rows, samples]  # (P, n), (P, n, A)
    for mc, exact in ((vals, E_VALUE(z, REF, estimator)),
                      (grads, E_GRAD(z, REF, estimator))):
        se = mc.std(axis=1) / np.sqrt(n)
        assert np.all(np.abs(mc.mean(axis=1) - exact) <= 4 * se + 1e-15)


def test_identities():
    for z in _policies():
        kl_pr = gc.exact_kl(z, REF, per_prompt=True)
        np.testing.assert_allclose(E_VALUE(z, REF, "k1"), kl_pr, atol=1e-13)
        np.testing.assert_allclose(E_VALUE(z, REF, "k3"), kl_pr, atol=1e-13)
        assert np.all(E_VALUE(z, REF, "k2") > 0)
        np.testing.assert_allclose(E_GRAD(z, REF, "k1"), 0, atol=1e-15)
        np.testing.assert_allclose(E_GRAD(z, REF, "k2"), kl.grad_kl_pi_ref(z, REF),
                                   atol=1e-14)
        np.testing.assert_allclose(E_GRAD(z, REF, "k3"), kl.grad_kl_ref_pi(z, REF),
                                   atol=1e-14)
        np.testing.assert_allclose(kl.grad_kl_ref_pi(z, REF), gc.softmax(z) - gc.softmax(REF))
        for est in ("k1", "k3"):  # TRL's bias correction: grad KL(pi || pi_ref) for both
            np.testing.assert_allclose(E_GRAD(z, REF, est, ratio=True),
                                       kl.grad_kl_pi_ref(z, REF), atol=1e-14)


def test_kl_gradients_and_kl_ref_pi_match_autograd():
    for z in _policies():
        zt = torch.tensor(z, requires_grad=True)
        lp, ref_lp = torch.log_softmax(zt, -1), torch.log_softmax(torch.tensor(REF), -1)
        (lp.exp() * (lp - ref_lp)).sum().backward(retain_graph=True)
        np.testing.assert_allclose(kl.grad_kl_pi_ref(z, REF), zt.grad.numpy(), atol=1e-13)
        zt.grad = None
        kl_rp = (ref_lp.exp() * (ref_lp - lp)).sum(-1)
        kl_rp.sum().backward()
        np.testing.assert_allclose(kl.grad_kl_ref_pi(z, REF), zt.grad.numpy(), atol=1e-13)
        np.testing.assert_allclose(kl.kl_ref_pi(z, REF, per_prompt=True), kl_rp.detach().numpy())
        assert kl.kl_ref_pi(z, REF) == pytest.approx(kl_rp.mean().item())
    batch = np.stack(_policies())  # leading run axis
    assert E_GRAD(batch, REF, "k3").shape == batch.shape
    assert kl.kl_ref_pi(batch, REF).shape == (3,)


@pytest.mark.parametrize("beta", [0.05, 0.5, 2.0, 20.0])
def test_k3_optimum_is_the_stationary_point(beta):
    logits = kl.k3_optimal_logits(R, REF, beta)
    probs = np.exp(logits)
    np.testing.assert_allclose(probs.sum(-1), 1, atol=1e-14)
    z = torch.tensor(logits, requires_grad=True)  # autograd of E[r] - beta KL(pi_ref || pi)
    lp, ref_lp = torch.log_softmax(z, -1), torch.log_softmax(torch.tensor(REF), -1)
    obj = (lp.exp() * torch.tensor(R)).sum() - beta * (ref_lp.exp() * (ref_lp - lp)).sum()
    obj.backward()
    assert np.abs(z.grad.numpy()).max() < 1e-10 * max(1, beta)
    floor = kl.k3_floor(R, REF, beta)
    assert np.all(probs >= floor * (1 - 1e-12))
    np.testing.assert_allclose(probs[np.arange(6), R.argmin(-1)],
                               floor[np.arange(6), R.argmin(-1)], rtol=1e-10)
    spread = R.max(-1) - R.min(-1)  # the lambda-free bound: lambda <= max r + beta
    assert np.all(floor >= beta * gc.softmax(REF) / (spread + beta)[:, None] * (1 - 1e-12))
    lam = kl.k3_lambda(R, REF, beta)
    assert np.all(lam > R.max(-1)) and np.all(lam <= R.max(-1) + beta)


def test_k3_optimum_limits_and_frontiers():
    # beta large: the optimum is the reference; the exact-KL optimum is far below the k3 floor
    np.testing.assert_allclose(np.exp(kl.k3_optimal_logits(R, REF, 1e4)), gc.softmax(REF),
                               atol=1e-3)
    exact_opt = gc.softmax(gc.kl_optimal_logits(R, REF, 0.5))
    assert exact_opt.min() < 1e-3 * kl.k3_floor(R, REF, 0.5).min()
    betas = np.geomspace(0.01, 50, 60)
    reward, kl_pr = kl.kl_frontier(R, REF, betas)
    ref_opt = np.stack([gc.kl_optimal_logits(R, REF, b) for b in betas])
    np.testing.assert_allclose(reward, gc.expected_reward(ref_opt, R))
    np.testing.assert_allclose(kl_pr, gc.exact_kl(ref_opt, REF))
    k3_reward, k3_kl = kl.kl_frontier(R, REF, betas, kind="kl_ref_pi")
    # no policy beats the frontier: E[r] <= max_pi (E[r] - b KL) + b KL for every b
    best = reward - betas * kl_pr  # (b,) the optimum's objective at its own beta
    bound = (best[:, None] + betas[:, None] * k3_kl[None, :]).min(axis=0)
    assert np.all(k3_reward <= bound + 1e-9)


def test_bad_inputs():
    z = _policies()[0]
    with pytest.raises(ValueError, match="estimator"):
        E_GRAD(z, REF, "k4")
    with pytest.raises(ValueError, match="estimator"):
        E_VALUE(z, REF, "k1 ")
    with pytest.raises(ValueError, match="ref_logits"):
        E_VALUE(z, REF[:, :5], "k1")
    with pytest.raises(ValueError, match="logits"):
        kl.grad_kl_pi_ref(np.full_like(z, np.nan), REF)
    with pytest.raises(ValueError, match="logits"):
        kl.grad_kl_ref_pi(z[0], REF)
    for bad in (0.0, -1.0, float("inf")):
        with pytest.raises(ValueError, match="beta"):
            kl.k3_optimal_logits(R, REF, bad)
    with pytest.raises(ValueError, match="ref_logits"):
        kl.k3_floor(R, REF[:3], 0.5)
    with pytest.raises(ValueError, match="kind"):
        kl.kl_frontier(R, REF, [0.5], kind="forward")


def test_check_k2(capsys):
    assert gc.exercises.check_k2(lambda lp, ref: (ref - lp) ** 2 / 2)
    assert not gc.exercises.check_k2(lambda lp, ref: (ref - lp) ** 2)
    assert not gc.exercises.check_k2(lambda lp, ref: torch.exp(ref - lp) - (ref - lp) - 1)
    out = capsys.readouterr().out
    assert "k2: correct" in out and "hint" in out


def test_ratio_times_k3_has_k2s_gradient_at_every_sample():
    # d/dz [ratio * k3] = (k3 + 1 - e^-l) (e_a - pi) = l (e_a - pi) = d/dz k2: sample by sample
    z = torch.tensor(_policies()[2], requires_grad=True)
    ref_logp = torch.log_softmax(torch.tensor(REF), -1)
    grads = []
    for est, ratio in (("k2", False), ("k3", True)):
        logp = torch.log_softmax(z, -1)
        k = gc.kl_estimate(logp, ref_logp, est)
        k = k * torch.exp(logp - logp.detach()) if ratio else k
        rows = [torch.autograd.grad(k[:, a].sum(), z, retain_graph=True)[0]
                for a in range(REF.shape[1])]
        grads.append(torch.stack(rows).numpy())  # (a, P, A): the gradient of answer a's term
    np.testing.assert_allclose(grads[0], grads[1], atol=1e-12)


def _train(seeds, steps, **knobs):
    return gc.train_batch(R, None, REF, seeds, max_steps=steps, float32_advantages=False,
                          **knobs)


def test_ratio_k3_in_training_is_k2():
    # TRL's k3 x ratio has k2's gradient at every sample (above): the same runs, to rounding
    seeds = np.arange(4)
    k2 = _train(seeds, 40, beta=1.0, kind="group", kl_estimator="k2",
                use_bias_correction_kl=False).logits
    k3r = _train(seeds, 40, beta=1.0, kind="group", kl_estimator="k3",
                 use_bias_correction_kl=True).logits
    np.testing.assert_allclose(k2, k3r, atol=1e-9)
    plain = _train(seeds, 40, beta=1.0, kind="group", kl_estimator="k3",
                   use_bias_correction_kl=False).logits
    assert np.abs(plain - k2).max() > 1e-3  # without the ratio, k3 trains differently


def test_mixed_kl_terms_in_one_batch_equal_each_run_alone():
    # per-run kl_estimator / kl_in / bias correction / kind: run r of a mixed batch is the
    # run it would be alone, bit for bit (the other kinds' terms enter with beta 0)
    settings = [("exact", "loss", False, "group"), ("k1", "loss", False, "group"),
                ("k2", "loss", False, "group"), ("k3", "loss", True, "group"),
                ("k1", "reward", False, "loo"), ("k3", "reward", False, "loo")]
    est, where, bias, kind = (list(c) for c in zip(*settings, strict=True))
    seeds, betas = [3, 4, 5, 6, 7, 8], [0.5, 1.0, 2.0, 0.5, 1.0, 0.3]
    mixed = _train(seeds, 25, beta=betas, kl_estimator=est, kl_in=where,
                   use_bias_correction_kl=bias, kind=kind)
    for i, (e, w, b, k) in enumerate(settings):
        alone = _train([seeds[i]], 25, beta=betas[i], kl_estimator=e, kl_in=w,
                       use_bias_correction_kl=b, kind=k)
        np.testing.assert_array_equal(mixed.logits[i], alone.logits[0])
        np.testing.assert_array_equal(mixed.reward[i], alone.reward[0])


def test_float64_advantages_leave_undrawn_answers_alone():
    # one step from the reference: an answer no sample drew has gradient -pi(a) sum_i A_i,
    # ~1e-16 in float64 and ~1e-7 in float32 (times pi(a)/(P G)); Adam's first step
    # lr g / (|g| + 1e-8) turns the latter into moves of a few thousandths
    # (GRPOConfig.float32_advantages)
    moved = {}
    for f32 in (True, False):
        run = gc.train_batch(R, None, REF, [0], max_steps=1, beta=0.0, kind="group",
                             float32_advantages=f32)
        moved[f32] = run.logits[0] - REF  # (P, A); logits are shift-invariant per prompt
    drawn = np.abs(moved[False]) > 1e-6  # float64: only drawn answers (and the softmax) move
    assert drawn.any() and (~drawn).any()
    assert np.abs(moved[False][~drawn]).max() < 1e-6
    assert np.abs(moved[True][~drawn]).max() > 1e-3


def test_each_kl_term_leashes_except_k1_in_the_loss():
    seeds = np.tile(np.arange(8), 5)
    est = np.repeat(["exact", "exact", "k1", "k3", "k1"], 8)
    where = np.repeat(["loss", "loss", "loss", "loss", "reward"], 8)
    beta = np.repeat([0.0, 2.0, 2.0, 2.0, 2.0], 8)
    kl_curve = _train(seeds, 150, beta=beta, kl_estimator=est, kl_in=where,
                      use_bias_correction_kl=False,
                      kind=np.repeat(["group"] * 4 + ["loo"], 8)).kl
    final = kl_curve[:, -1].reshape(5, 8).mean(-1)  # no KL, exact, k1, k3, k1 in the reward
    assert final[2] > 0.85 * final[0]  # k1 in the loss: hardly any pull
    assert np.all(final[[1, 3, 4]] < 0.3 * final[0])  # the others leash


def test_per_run_kl_knobs_are_checked():
    with pytest.raises(ValueError, match="kl_estimator"):
        _train([0, 1], 1, beta=0.5, kl_estimator=["k1", "k4"])
    with pytest.raises(ValueError, match="use_bias_correction_kl"):
        _train([0], 1, beta=0.5, kl_estimator="k3", use_bias_correction_kl="yes")
    with pytest.raises(ValueError, match="beta"):
        _train([0, 1], 1, beta=[0.5, -1.0], kl_estimator="k1")
    with pytest.raises(ValueError, match="equal lengths"):
        _train([0, 1, 2], 1, beta=[0.5, 1.0], kl_estimator="k1")
