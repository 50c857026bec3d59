"""grpo_loss's eight loss types and every knob against a transcription of TRL 1.16's code.

The reference is ``tests/trl_reference.py``: ``GRPOTrainer._compute_loss`` (``trl/trainer/
grpo_trainer.py`` lines 3020-3245) with ``get_high_entropy_mask`` (1380-1416),
``get_off_policy_mask`` (2945-2970) and ``get_gamma_weights`` (2972-3018), copied statement
for statement from trl==1.16.0. Values and gradients (with respect to the log-probs and the
entropies) must agree to rounding for every combination of loss type, ratio level, KL, clip
bounds, delta, entropy mask, entropy bonus, off-policy mask, vLLM weight and normalisers.
"""

import inspect
import itertools

import numpy as np
import pytest
import torch
import trl_reference as trl

import grpo_core as gc
from grpo_core import loss as L

TOL = dict(rtol=1e-12, atol=1e-14)


def make_batch(seed, B=6, T=5, empty_row=False):
    """Random float64 log-probs (leaf), pi_old, pi_ref, vLLM's, advantages, lengths 1..T (one
    row may be empty), entropies (leaf)."""
    g = torch.Generator().manual_seed(seed)
    d = torch.float64
    logp = (-torch.rand(B, T, generator=g, dtype=d) * 3).requires_grad_(True)
    old = logp.detach() + 0.4 * torch.randn(B, T, generator=g, dtype=d)
    ref = logp.detach() + 0.3 * torch.randn(B, T, generator=g, dtype=d)
    sampling = old + 0.3 * torch.randn(B, T, generator=g, dtype=d)
    adv = torch.randn(B, generator=g, dtype=d)
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    lengths[0] = 1  # a one-token answer: clamp(min=1) must not change its count
    if empty_row:
        lengths[1] = 0
    mask = (torch.arange(T)[None, :] < lengths[:, None]).double()
    ent = (torch.rand(B, T, generator=g, dtype=d) * 2).requires_grad_(True)
    return dict(logp=logp, old=old, ref=ref, sampling=sampling, adv=adv, mask=mask, ent=ent)


NORMS = [  # (gradient_accumulation_steps, num_processes, steps_per_generation, items factor)
    (1, 1, None, None),
    (4, 2, 2, 5.0),
    (3, 1, None, 3.0),
]


def ours_and_theirs(b, loss_type, *, level="token", beta=0.0, epsilon_high=None, delta=None,
                    top_entropy_quantile=1.0, entropy_coef=0.0, off_policy_mask_threshold=None,
                    is_mode=None, norm=NORMS[0], sampling=True, knobs=None):
    """Value and gradients of grpo_loss and of TRL's code on batch ``b``."""
    knobs = dict(knobs or {})
    gas, n_proc, spg, factor = norm
    isr = None
    if is_mode is not None:
        isr = L.vllm_importance_sampling_ratio(b["old"], b["sampling"], b["mask"], is_mode,
                                               clip_max=1.5)
    n_items = None if factor is None else b["mask"].sum() * factor
    common = dict(beta=beta, epsilon=0.2, epsilon_high=epsilon_high, delta=delta,
                  loss_type=loss_type, importance_sampling_level=level, max_completion_length=7,
                  top_entropy_quantile=top_entropy_quantile, entropy_coef=entropy_coef,
                  off_policy_mask_threshold=off_policy_mask_threshold,
                  gradient_accumulation_steps=gas, num_processes=n_proc,
                  steps_per_generation=spg, **knobs)
    ours = gc.grpo_loss(b["logp"], b["old"], b["ref"], b["adv"], b["mask"], entropies=b["ent"],
                        sampling_per_token_logps=b["sampling"] if sampling else None,
                        importance_sampling_ratio=isr, num_items_in_batch=n_items, **common)
    common.pop("kl_estimator", None)
    ref = trl.TRLGRPOLoss(use_vllm=isr is not None, **common)
    inputs = dict(completion_mask=b["mask"], advantages=b["adv"], old_per_token_logps=b["old"],
                  ref_per_token_logps=b["ref"],
                  num_items_in_batch=b["mask"].sum() if n_items is None else n_items)
    if sampling:
        inputs["sampling_per_token_logps"] = b["sampling"]
    if isr is not None:
        inputs["importance_sampling_ratio"] = isr
    theirs = ref._compute_loss(b["logp"], b["ent"], inputs)
    g_ours = torch.autograd.grad(ours, (b["logp"], b["ent"]), allow_unused=True)
    g_theirs = torch.autograd.grad(theirs, (b["logp"], b["ent"]), allow_unused=True)
    return ours, theirs, g_ours, g_theirs


def assert_same(ours, theirs, g_ours, g_theirs):
    torch.testing.assert_close(ours, theirs, **TOL)
    for a, t in zip(g_ours, g_theirs, strict=True):
        if a is None or t is None:
            assert a is None and t is None or float((a if t is None else t).abs().max()) == 0
        else:
            torch.testing.assert_close(a, t, **TOL)


KNOB_GRID = list(itertools.product(
    ("token", "sequence"), (0.0, 0.04), (False, True), (None, 1.3), (1.0, 0.4), (0.0, 0.05),
    (None, 0.05), (None, "token_truncate", "sequence_mask")))


def check_combinations(loss_type, combos, batches):
    for b in batches:
        for i, (level, beta, high, delta, q, coef, opm, is_mode) in combos:
            eps_high = (5.0 if loss_type == "cispo" else 0.28) if high else None
            out = ours_and_theirs(b, loss_type, level=level, beta=beta, epsilon_high=eps_high,
                                  delta=delta, top_entropy_quantile=q, entropy_coef=coef,
                                  off_policy_mask_threshold=opm, is_mode=is_mode,
                                  norm=NORMS[i % len(NORMS)], sampling=bool(i % 2))
            assert_same(*out)


@pytest.mark.parametrize("loss_type", L.ALL_LOSS_TYPES)
def test_combinations_match_trl(loss_type):
    """Every 7th of the 768 combinations (the full grid: tests/test_loss_trl_grid.py)."""
    combos = list(enumerate(KNOB_GRID))[::7]
    check_combinations(loss_type, combos, [make_batch(1, empty_row=True)])


@pytest.mark.parametrize("knobs", [
    dict(sapo_temperature_pos=0.5, sapo_temperature_neg=2.0),
    dict(sapo_temperature_pos=3.0, sapo_temperature_neg=0.7),
    dict(vespo_k_pos=1.0, vespo_lambda_pos=0.5, vespo_k_neg=4.0, vespo_lambda_neg=5.0),
    dict(vespo_k_pos=0.0, vespo_lambda_pos=0.0, vespo_k_neg=2.5, vespo_lambda_neg=1.0),
])
def test_sapo_and_vespo_knobs_match_trl(knobs):
    loss_type = "sapo" if "sapo_temperature_pos" in knobs else "vespo"
    for seed in range(3):
        for is_mode in (None, "token_mask"):
            assert_same(*ours_and_theirs(make_batch(seed), loss_type, is_mode=is_mode,
                                         knobs=knobs))


@pytest.mark.parametrize("loss_type", L.ALL_LOSS_TYPES)
def test_defaults_match_trl(loss_type):
    """grpo_loss with no knob equals TRL's code built from GRPOConfig's defaults."""
    b = make_batch(5)
    ours = gc.grpo_loss(b["logp"], b["old"], None, b["adv"], b["mask"], loss_type=loss_type,
                        max_completion_length=5)
    theirs = trl.TRLGRPOLoss(loss_type=loss_type, max_completion_length=5)._compute_loss(
        b["logp"], b["ent"], dict(completion_mask=b["mask"], advantages=b["adv"],
                                  old_per_token_logps=b["old"],
                                  num_items_in_batch=b["mask"].sum()))
    torch.testing.assert_close(ours, theirs, **TOL)


# TRL 1.16 trl/trainer/grpo_config.py: field defaults (line of each field)
TRL_DEFAULTS = {
    "beta": 0.0,  # 681
    "epsilon": 0.2,  # 693
    "delta": None,  # 697
    "epsilon_high": None,  # 705
    "sapo_temperature_neg": 1.05,  # 714
    "sapo_temperature_pos": 1.0,  # 722
    "vespo_k_pos": 2.0,  # 730
    "vespo_lambda_pos": 3.0,  # 737
    "vespo_k_neg": 3.0,  # 745
    "vespo_lambda_neg": 2.0,  # 752
    "importance_sampling_level": "token",  # 760
    "loss_type": "dapo",  # 801
    "top_entropy_quantile": 1.0,  # 866
    "entropy_coef": 0.0,  # 876
    "off_policy_mask_threshold": None,  # 963
    "use_bias_correction_kl": True,  # 972
}


def test_signature_defaults_are_trls():
    params = inspect.signature(gc.grpo_loss).parameters
    for name, default in TRL_DEFAULTS.items():
        assert params[name].default == default, name
    assert params["gradient_accumulation_steps"].default == 1
    assert params["num_processes"].default == 1
    vllm = inspect.signature(L.vllm_importance_sampling_ratio).parameters
    assert vllm["mode"].default == "sequence_mask"  # grpo_config.py 934
    assert vllm["clip_max"].default == 3.0 and vllm["clip_min"].default is None  # 947, 955
    try:
        from trl.trainer.grpo_config import GRPOConfig
    except ImportError:  # pragma: no cover - trl is in requirements
        return
    fields = GRPOConfig.__dataclass_fields__
    for name, default in TRL_DEFAULTS.items():
        assert fields[name].default == default, name


@pytest.mark.parametrize("mode", L.VLLM_IS_MODES)
def test_vllm_weight_matches_trl(mode):
    b = make_batch(2)
    sampling = b["sampling"].clone()
    sampling[2, 0] = float("nan")  # a token vLLM could not score
    for lo, hi in ((None, 3.0), (0.5, 1.5), (0.8, None)):
        ours = L.vllm_importance_sampling_ratio(b["old"], sampling, b["mask"], mode, lo, hi)
        theirs = trl.vllm_importance_sampling_ratio(b["old"], sampling, b["mask"], mode, lo, hi)
        torch.testing.assert_close(ours, theirs, rtol=0, atol=0)
        assert ours.shape == ((6, 1) if mode.startswith("sequence") else (6, 5))


def test_vllm_weight_needs_a_bound_to_truncate():
    b = make_batch(2)
    with pytest.raises(ValueError, match="clip_min"):
        L.vllm_importance_sampling_ratio(b["old"], b["sampling"], b["mask"], "token_truncate",
                                         None, None)
    with pytest.raises(ValueError, match="vllm_importance_sampling_mode"):
        L.vllm_importance_sampling_ratio(b["old"], b["sampling"], b["mask"], "token")


def test_knobs_with_leading_run_dimensions():
    """(R, B, T) inputs give R losses, each the loss of its run alone (quantile per run)."""
    runs = [make_batch(s, empty_row=s == 1) for s in range(3)]
    keys = ("logp", "old", "ref", "adv", "mask", "ent", "sampling")
    st = {k: torch.stack([r[k].detach() for r in runs]) for k in keys}
    for loss_type in L.ALL_LOSS_TYPES:
        kw = dict(beta=0.04, loss_type=loss_type, top_entropy_quantile=0.3, entropy_coef=0.02,
                  off_policy_mask_threshold=0.05, delta=1.3)
        isr = L.vllm_importance_sampling_ratio(st["old"], st["sampling"], st["mask"],
                                               "token_truncate", 0.5, 1.5)
        losses = gc.grpo_loss(st["logp"], st["old"], st["ref"], st["adv"], st["mask"],
                              entropies=st["ent"], sampling_per_token_logps=st["sampling"],
                              importance_sampling_ratio=isr, **kw)
        assert losses.shape == (3,)
        for i, r in enumerate(runs):
            lone = gc.grpo_loss(r["logp"].detach(), r["old"], r["ref"], r["adv"], r["mask"],
                                entropies=r["ent"].detach(), sampling_per_token_logps=r["sampling"],
                                importance_sampling_ratio=isr[i], **kw)
            torch.testing.assert_close(losses[i], lone, **TOL)


# ---- behaviour at the boundaries (ties the random batches never hit) ----

def test_high_entropy_mask_keeps_ties_and_counts_real_tokens_only():
    # 11 real tokens with entropies 0, 1/8, ..., 10/8 (exact in float32); q = 0.2 puts the
    # 0.8 quantile exactly on the 9th smallest, 1.0, which is kept (>=), padding never.
    ent = torch.zeros(3, 5, dtype=torch.float64)
    mask = torch.zeros(3, 5, dtype=torch.float64)
    vals = torch.arange(11, dtype=torch.float64) / 8
    ent.view(-1)[:11] = vals
    mask.view(-1)[:11] = 1
    ent.view(-1)[11:] = 9.0  # padding with a large entropy: must not count nor be kept
    keep = L.high_entropy_mask(ent, mask, 0.2)
    assert keep.view(-1)[:11].tolist() == [False] * 8 + [True] * 3
    assert not keep.view(-1)[11:].any()
    assert keep.dtype == torch.bool
    assert not L.high_entropy_mask(ent, torch.zeros_like(mask), 0.2).any()  # no real token
    assert L.high_entropy_mask(ent, mask, 0.0).sum() == 1  # q = 0: only the highest
    assert L.high_entropy_mask(ent, mask, 1.0).sum() == 11  # q = 1: every real token


def test_off_policy_mask_boundaries():
    # keep when A >= 0 (A = 0 kept) or mean KL <= threshold (equality kept)
    logp = torch.zeros(4, 2, dtype=torch.float64)
    sampling = torch.tensor([[0.5, 0.5], [0.5, 0.5], [0.25, 0.25], [0.5, float("nan")]],
                            dtype=torch.float64)
    mask = torch.tensor([[1.0, 1.0], [1.0, 1.0], [1.0, 1.0], [1.0, 1.0]], dtype=torch.float64)
    A = torch.tensor([[0.0], [-1.0], [-1.0], [-1.0]], dtype=torch.float64)
    keep = L.off_policy_mask(A, logp, sampling, mask, 0.25)
    # row 3: NaN counts 0, mean 0.25 over both tokens -> kept
    assert keep.view(-1).tolist() == [1.0, 0.0, 1.0, 1.0]
    assert keep.dtype == mask.dtype and keep.shape == (4, 1)
    empty = L.off_policy_mask(A, logp, sampling, torch.zeros_like(mask), 0.0)
    assert empty.view(-1).tolist() == [1.0, 1.0, 1.0, 1.0]  # no tokens: KL 0 <= 0


def test_gamma_weight_is_one_at_ratio_one_and_picks_k_lambda_by_sign():
    mask = torch.ones(4, 3, dtype=torch.float64)
    A = torch.tensor([[0.0], [1.0], [-1.0], [-1.0]], dtype=torch.float64)
    zero = torch.zeros(4, 3, dtype=torch.float64)
    one = torch.ones(4, 1, dtype=torch.float64)
    torch.testing.assert_close(L.gamma_weights(A, zero, mask), one)
    log_r = torch.full((4, 3), 0.1, dtype=torch.float64)  # w = exp(0.3): a product over tokens
    w = torch.tensor(0.3, dtype=torch.float64).exp()
    phi = L.gamma_weights(A, log_r, mask, None, 2.0, 3.0, 3.0, 2.0)
    pos = torch.exp(3.0 + 2.0 * torch.log(w) - 3.0 * w)
    neg = torch.exp(2.0 + 3.0 * torch.log(w) - 2.0 * w)
    torch.testing.assert_close(phi.view(-1), torch.stack([pos, pos, neg, neg]), rtol=1e-6, atol=0)
    # the vLLM weight multiplies w (a sum in log space); lambda is floored at 1e-4
    isr = torch.full((4, 1), 0.5, dtype=torch.float64)
    with_is = L.gamma_weights(A, log_r, mask, isr, 2.0, 0.0, 3.0, 2.0)
    w2 = w * 0.5
    torch.testing.assert_close(with_is[1, 0], torch.exp(1e-4 + 2.0 * torch.log(w2) - 1e-4 * w2),
                               rtol=1e-6, atol=0)
    huge = L.gamma_weights(A, torch.full((4, 3), 30.0, dtype=torch.float64), mask)
    assert bool(torch.isfinite(huge).all())  # the clamps at 20 (per token and per sequence)
    # clamps: log w per token at +-20, the sum at [log 1e-8, 20]
    tiny = L.gamma_weights(A, torch.full((4, 3), -30.0, dtype=torch.float64), mask)
    torch.testing.assert_close(tiny[1, 0], torch.exp(3.0 + 2.0 * torch.log(torch.tensor(
        1e-8, dtype=torch.float64)) - 3.0 * 1e-8), rtol=1e-6, atol=0)
    # a NaN log-ratio (a token the sampler could not score) weighs its sequence 0, as TRL's
    nan_r = log_r.clone()
    nan_r[1, 2] = torch.nan
    phi_nan = L.gamma_weights(A, nan_r, mask)
    assert phi_nan[1, 0] == 0.0 and bool(torch.isfinite(phi_nan).all())
    torch.testing.assert_close(phi_nan, trl.TRLGRPOLoss.get_gamma_weights(A, nan_r, mask, None),
                               rtol=0, atol=0)


def test_each_surrogate_at_a_hand_computed_point():
    # one token, ratio 1.5 (A > 0) and 0.5 (A < 0)
    logp = torch.log(torch.tensor([[0.6], [0.2]], dtype=torch.float64)).requires_grad_(True)
    old = torch.log(torch.tensor([[0.4], [0.4]], dtype=torch.float64))
    A = torch.tensor([2.0, -1.0], dtype=torch.float64)
    mask = torch.ones(2, 1, dtype=torch.float64)

    def value(loss_type, **kw):
        return float(gc.grpo_loss(logp, old, None, A, mask, loss_type=loss_type, **kw).detach())

    # clip: -min(1.5*2, 1.2*2) = -2.4 ; -min(0.5*-1, 0.8*-1) = 0.8 ; dapo: mean
    assert value("dapo") == pytest.approx((-2.4 + 0.8) / 2, abs=1e-12)
    assert value("dapo", epsilon_high=0.28) == pytest.approx((-2.56 + 0.8) / 2, abs=1e-12)
    # delta caps the ratio of the unclipped term: -min(1.1*2, 1.2*2) = -2.2
    assert value("dapo", delta=1.1) == pytest.approx((-2.2 + 0.8) / 2, abs=1e-12)
    # cispo: -min(ratio, eps_high) * A * logp
    cis = (-1.5 * 2 * torch.log(torch.tensor(0.6)) - 0.5 * -1 * torch.log(torch.tensor(0.2))) / 2
    assert value("cispo", epsilon_high=5.0) == pytest.approx(float(cis), rel=1e-6)
    cap = (-1.2 * 2 * torch.log(torch.tensor(0.6)) - 0.5 * -1 * torch.log(torch.tensor(0.2))) / 2
    assert value("cispo", epsilon_high=1.2) == pytest.approx(float(cap), rel=1e-6)
    # sapo: -4/tau sigmoid(tau (r - 1)) A, tau 1.0 for A > 0, 1.05 for A <= 0; grpo's mean
    sig = torch.sigmoid

    def sapo(r, a, t):
        return float(-sig(torch.tensor(t * (r - 1))) * 4 / t * a)

    expected = (sapo(1.5, 2.0, 1.0) + sapo(0.5, -1.0, 1.05)) / 2
    assert value("sapo") == pytest.approx(expected, rel=1e-6)
    # luspo: the sum over a sequence's tokens, mean over sequences (one token each here)
    assert value("luspo") == pytest.approx((-2.4 + 0.8) / 2, abs=1e-12)


def test_luspo_weights_a_sequence_by_its_length():
    logp = torch.zeros(2, 4, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[1.0, 0, 0, 0], [1.0, 1, 1, 1]], dtype=torch.float64)
    A = torch.tensor([1.0, 1.0], dtype=torch.float64)
    loss = gc.grpo_loss(logp, None, None, A, mask, loss_type="luspo",
                        importance_sampling_level="sequence")
    assert float(loss.detach()) == pytest.approx(-(1 + 4) / 2)
    (g,) = torch.autograd.grad(loss, logp)
    # sequence ratio: d/dlogp_t of exp(mean log-ratio) = 1/|o|; times |o| tokens, / 2 sequences
    torch.testing.assert_close(g, -mask / 2)


def test_sapo_gate_has_slope_one_at_ratio_one_and_vanishes_far_off():
    logp = torch.zeros(1, 1, dtype=torch.float64, requires_grad=True)
    A = torch.ones(1, dtype=torch.float64)
    mask = torch.ones(1, 1, dtype=torch.float64)
    for old, expect in ((0.0, -1.0), (-8.0, 0.0)):  # ratio 1 and ratio e^8
        loss = gc.grpo_loss(logp, torch.full((1, 1), old, dtype=torch.float64), None, A, mask,
                            loss_type="sapo")
        (g,) = torch.autograd.grad(loss, logp)
        # d/dlogp [-4 sigmoid(r - 1)] = -4 sigmoid' r: -1 at r = 1
        assert float(g) == pytest.approx(expect, abs=2e-7 if expect else 1e-12)


def test_normalisers():
    b = make_batch(3)
    args = (b["logp"].detach(), b["old"], None, b["adv"], b["mask"])
    n = b["mask"].sum()
    base = {lt: gc.grpo_loss(*args, loss_type=lt) for lt in L.ALL_LOSS_TYPES}
    for lt in ("grpo", "sapo", "bnpo", "dr_grpo", "luspo"):  # / gradient_accumulation_steps
        torch.testing.assert_close(
            gc.grpo_loss(*args, loss_type=lt, gradient_accumulation_steps=4,
                         num_items_in_batch=n), base[lt] / 4, **TOL)
    for lt in ("dapo", "cispo", "vespo"):  # tokens / processes * accumulation / steps per gen
        got = gc.grpo_loss(*args, loss_type=lt, num_items_in_batch=3 * n, num_processes=2,
                           gradient_accumulation_steps=4, steps_per_generation=8)
        torch.testing.assert_close(got, base[lt] / (3 / 2 * 4 / 8), **TOL)
        default_spg = gc.grpo_loss(*args, loss_type=lt, num_items_in_batch=3 * n,
                                   gradient_accumulation_steps=4)  # spg = gas: / 3
        torch.testing.assert_close(default_spg, base[lt] / 3, **TOL)
    # dr_grpo: B * max_completion_length (default T)
    torch.testing.assert_close(gc.grpo_loss(*args, loss_type="dr_grpo", max_completion_length=10),
                               base["dr_grpo"] * 5 / 10, **TOL)


def test_entropy_bonus_is_a_token_mean_whatever_the_loss_type():
    b = make_batch(4)
    ent = b["ent"].detach()
    mean = (ent * b["mask"]).sum() / b["mask"].sum()
    for lt in L.ALL_LOSS_TYPES:
        args = (b["logp"].detach(), b["old"], None, b["adv"], b["mask"])
        diff = (gc.grpo_loss(*args, loss_type=lt)
                - gc.grpo_loss(*args, loss_type=lt, entropy_coef=0.1, entropies=ent))
        torch.testing.assert_close(diff, 0.1 * mean, **TOL)
    assert float(L.entropy_bonus(ent, torch.zeros_like(ent))) == 0.0  # clamp(min=1): no 0/0


@pytest.mark.parametrize("change,match", [
    (dict(loss_type="ppo"), "loss_type"),
    (dict(top_entropy_quantile=0.5, entropies=None), "entropies"),
    (dict(entropy_coef=0.1, entropies=None), "entropies"),
    (dict(entropies=torch.ones(6, 4)), "entropies"),
    (dict(entropies=torch.full((6, 5), float("nan"))), "entropies"),
    (dict(sampling_per_token_logps=torch.zeros(6, 4)), "sampling_per_token_logps"),
    (dict(importance_sampling_ratio=torch.ones(6, 2)), "importance_sampling_ratio"),
    (dict(importance_sampling_ratio=-torch.ones(6, 1)), "importance_sampling_ratio"),
    (dict(importance_sampling_ratio=torch.full((6, 5), float("nan"))),
     "importance_sampling_ratio"),
    (dict(importance_sampling_ratio=[1.0]), "importance_sampling_ratio"),
    (dict(top_entropy_quantile=1.5), "top_entropy_quantile"),
    (dict(top_entropy_quantile=-0.1), "top_entropy_quantile"),
    (dict(delta=0.0), "delta"),
    (dict(sapo_temperature_pos=0.0), "sapo_temperature_pos"),
    (dict(sapo_temperature_neg=-1.0), "sapo_temperature_neg"),
    (dict(vespo_k_pos=-1.0), "vespo_k_pos"),
    (dict(vespo_lambda_pos=-1.0), "vespo_lambda_pos"),
    (dict(vespo_k_neg=float("nan")), "vespo_k_neg"),
    (dict(vespo_lambda_neg=-2.0), "vespo_lambda_neg"),
    (dict(entropy_coef=float("inf")), "entropy_coef"),
    (dict(off_policy_mask_threshold=float("nan")), "off_policy_mask_threshold"),
    (dict(gradient_accumulation_steps=0), "gradient_accumulation_steps"),
    (dict(num_processes=0), "num_processes"),
    (dict(steps_per_generation=0), "steps_per_generation"),
    (dict(gradient_accumulation_steps=2), "num_items_in_batch"),
    (dict(num_processes=2), "num_items_in_batch"),
    (dict(steps_per_generation=2), "num_items_in_batch"),
    (dict(num_items_in_batch=0), "num_items_in_batch"),
])
def test_new_knobs_reject_bad_input(change, match):
    b = make_batch(0)
    kw = dict(entropies=b["ent"].detach())
    kw.update(change)
    with pytest.raises((ValueError, TypeError), match=match):
        gc.grpo_loss(b["logp"].detach(), b["old"], b["ref"], b["adv"], b["mask"], **kw)


def test_good_edge_values_are_accepted():
    b = make_batch(0)
    args = (b["logp"].detach(), b["old"], b["ref"], b["adv"], b["mask"])
    ent = b["ent"].detach()
    for kw in (dict(top_entropy_quantile=0.0, entropies=ent),
               dict(entropy_coef=-0.1, entropies=ent),
               dict(off_policy_mask_threshold=-0.5), dict(vespo_k_pos=0.0, loss_type="vespo"),
               dict(gradient_accumulation_steps=2, loss_type="grpo"),
               dict(num_processes=3, num_items_in_batch=torch.tensor(40.0)),
               dict(importance_sampling_ratio=torch.zeros(6, 1)),
               dict(max_completion_length=1, loss_type="dr_grpo"),
               dict(steps_per_generation=1), dict(num_items_in_batch=1),
               dict(num_items_in_batch=0.5, loss_type="cispo")):
        assert torch.isfinite(gc.grpo_loss(*args, **kw))


# ---- the reward and advantage block (grpo_trainer.py 2755-2810) ----

def reward_table(seed, G=4, P=5, F=3):
    """(P*G, F) rewards of F functions, with None (NaN): one row all None, one group where
    function 0 returned None for all but one completion, and a dead group."""
    rng = np.random.default_rng(seed)
    r = np.round(rng.random((P * G, F)) * 4) / 4  # quarter steps: exact in float32
    r[rng.random((P * G, F)) < 0.15] = np.nan
    r[1] = np.nan  # every function returned None
    r[G:2 * G, 0] = np.nan
    r[G + 1, 0] = 1.0
    r[2 * G:3 * G] = 0.5  # a dead group
    return r


@pytest.mark.parametrize("agg", L.AGGREGATIONS)
@pytest.mark.parametrize("scale", gc.SCALE_REWARDS)
@pytest.mark.parametrize("weights", [None, [1.0, 0.5, 2.0], [0.3, 1.0, 0.0]])
def test_rewards_and_advantages_match_trl(agg, scale, weights):
    for seed in range(4):
        r = reward_table(seed)
        adv_t, rew_t, _ = trl.rewards_and_advantages(torch.tensor(r, dtype=torch.float32), 4,
                                                     weights, agg, scale)
        rew = L.trl_rewards(r, weights, agg, num_generations=4)
        adv = gc.trl_advantages(rew, 4, scale, agg)
        np.testing.assert_allclose(adv, adv_t.numpy(), rtol=2e-6, atol=2e-6)
        assert adv[1] == 0.0  # the unscorable completion
        assert not np.isnan(adv).any()
        if agg == "sum_then_normalize":  # TRL's logged reward is the same weighted nansum
            np.testing.assert_allclose(rew, rew_t.numpy(), rtol=1e-6, equal_nan=True)
            assert (adv[8:12] == 0).all()  # the dead group


def test_none_rewards_leave_the_baseline():
    # group of 4, one unscorable: the baseline is the mean of the other three
    r = np.array([[1.0], [np.nan], [0.0], [0.0]])
    rew = L.trl_rewards(r)
    assert np.isnan(rew[1]) and rew[0] == 1.0
    for scale in gc.SCALE_REWARDS:
        adv = gc.trl_advantages(rew, 4, scale)
        assert adv[1] == 0.0
        assert adv[0] > 0 > adv[2] == adv[3]
    none = gc.trl_advantages(rew, 4, "none")
    np.testing.assert_allclose(none, [2 / 3, 0, -1 / 3, -1 / 3])
    group = gc.trl_advantages(rew, 4, "group")
    np.testing.assert_allclose(group, np.array([2 / 3, 0, -1 / 3, -1 / 3]) / (
        np.std([1.0, 0, 0], ddof=1) + 1e-4))
    # a partly-None row counts the functions that answered (nansum), not 0 for all
    np.testing.assert_array_equal(L.trl_rewards([[1.0, np.nan], [np.nan, np.nan]], [2.0, 1.0]),
                                  [2.0, np.nan])
    # normalize_then_sum: mean 0 per function and group, then a batch z-score
    two = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.0, 0.0]])
    r2 = L.trl_rewards(two, None, "normalize_then_sum", num_generations=2)
    z = 0.5 / (np.std([1.0, 0.0], ddof=1) + 1e-4)  # (1 - 0.5) / (std + 1e-4)
    np.testing.assert_allclose(r2, [0, 0, 2 * z, -2 * z], atol=1e-12)
    for scale in gc.SCALE_REWARDS:  # a batch z-score whatever scale_rewards, as TRL
        a2 = gc.trl_advantages(r2, 2, scale, "normalize_then_sum")
        np.testing.assert_allclose(a2, r2 / (np.std(r2, ddof=1) + 1e-4), atol=1e-12)


def test_a_group_with_one_scored_completion_gets_zero():
    rew = np.array([np.nan, np.nan, 3.0, np.nan, 1.0, 0.0, 1.0, 0.0])
    for scale in gc.SCALE_REWARDS:
        adv = gc.trl_advantages(rew, 4, scale)
        assert (adv[:4] == 0).all() and adv[4] > 0
    assert (gc.trl_advantages(np.full(4, np.nan), 2) == 0).all()


def test_reward_metrics_skip_none():
    rew = np.array([1.0, np.nan, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0])
    m = gc.reward_metrics(rew, 4)
    assert m["reward"] == pytest.approx(5 / 7)
    assert m["reward_std"] == pytest.approx(np.std([1, 0, 0, 1, 1, 1, 1.0], ddof=1))
    assert m["frac_reward_zero_std"] == 0.5


def test_zero_std_with_two_scored_rewards():
    """TRL's Bessel std (ddof 1) of two equal rewards is 0, so a group of G = 2 that agrees, and a
    batch with two scored rewards that agree, count as zero-std (ddof 2 would divide by 0)."""
    assert gc.reward_metrics(np.array([1.0, 1.0, 0.0, 1.0]), 2)["frac_reward_zero_std"] == 0.5
    two = np.array([1.0, np.nan, np.nan, 1.0])  # two groups of 2, one scored reward each
    assert gc.reward_metrics(two, 2, "batch")["frac_reward_zero_std"] == 1.0


@pytest.mark.parametrize("call,match", [
    (lambda: L.trl_rewards(np.zeros(8)), "rewards_per_func"),
    (lambda: L.trl_rewards(np.full((8, 2), np.inf)), "rewards_per_func"),
    (lambda: L.trl_rewards(np.zeros((8, 2)), [1.0]), "reward_weights"),
    (lambda: L.trl_rewards(np.zeros((8, 2)), [1.0, np.nan]), "reward_weights"),
    (lambda: L.trl_rewards(np.zeros((8, 2)), None, "sum"), "multi_objective_aggregation"),
    (lambda: L.trl_rewards(np.zeros((8, 2)), None, "normalize_then_sum"), "num_generations"),
    (lambda: L.trl_rewards(np.zeros((8, 2)), None, "normalize_then_sum", 3), "num_generations"),
    (lambda: gc.trl_advantages(np.array([1.0, np.inf]), 2), "rewards"),
    (lambda: gc.trl_advantages(np.zeros(8), 4, "group", "sum"), "multi_objective_aggregation"),
    (lambda: gc.trl_advantages(np.float64(1.0), 2), "rewards"),
    (lambda: gc.trl_advantages(np.zeros(8), 1), "num_generations"),
])
def test_reward_block_rejects_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_gamma_weight_defaults_and_clamps():
    """VESPO's defaults (k, lambda) = (2, 3) for A >= 0 and (3, 2) for A < 0 (grpo_config.py
    730-752), and its clamps: each token's log-ratio to [-20, 20], vLLM's log-weight to
    [log 1e-8, 20], the sequence's log w to [log 1e-8, 20] (grpo_trainer.py 2997-3008)."""
    d = torch.float64
    A = torch.tensor([[1.0], [-1.0]], dtype=d)
    mask = torch.ones(2, 2, dtype=d)
    log_r = torch.tensor([[0.3, -0.1], [0.3, -0.1]], dtype=d)
    torch.testing.assert_close(L.gamma_weights(A, log_r, mask),
                               L.gamma_weights(A, log_r, mask, None, 2.0, 3.0, 3.0, 2.0),
                               rtol=0, atol=0)
    w = torch.tensor(0.2, dtype=d).exp()
    neg = torch.exp(2.0 + 3.0 * w.log() - 2.0 * w)
    torch.testing.assert_close(L.gamma_weights(A, log_r, mask)[1, 0], neg, rtol=1e-6, atol=0)

    # lambda 0 is floored at 1e-4 (a float32 1e-4, hence rtol 1e-6,
    # 1e-4 where lambda w is 327): exp(-lambda w) stays
    def phi(log_ratio, isr=None, k=2.0):
        return L.gamma_weights(A[:1], torch.tensor([log_ratio], dtype=d), mask[:1], isr, k, 0.0)

    def expected(log_w, k=2.0):
        return torch.exp(torch.tensor(1e-4 + k * log_w - 1e-4 * np.exp(log_w), dtype=d))

    torch.testing.assert_close(phi([25.0, -10.0])[0, 0], expected(10.0), rtol=1e-6, atol=0)
    torch.testing.assert_close(phi([-25.0, 10.0])[0, 0], expected(-10.0), rtol=1e-6, atol=0)
    # log w clamped at 20: lambda e^20 = 48516 needs k = 2424 for a phi that is not 0 (1e-16;
    # the float32 lambda moves the exponent by 1e-3, hence rtol 1e-2; at 21 phi would be 0)
    torch.testing.assert_close(phi([15.0, 15.0], k=2424.0)[0, 0], expected(20.0, k=2424.0),
                               rtol=1e-2, atol=0)
    isr = torch.tensor([[np.exp(25.0), 1.0]], dtype=d)
    torch.testing.assert_close(phi([-2.5, -2.5], isr)[0, 0], expected(15.0), rtol=1e-4, atol=0)
    zero = torch.tensor([[0.0, 1.0]], dtype=d)  # a zeroed vLLM weight: log 1e-8
    torch.testing.assert_close(phi([3.0, 3.0], zero, k=1.0)[0, 0],
                               expected(6.0 + np.log(1e-8), k=1.0), rtol=1e-6, atol=0)


def test_one_real_token_in_the_batch():
    """The token-count normalisers clamp at 1, not more: one real token is divided by 1."""
    logp = torch.log(torch.tensor([[0.5, 0.5], [0.5, 0.5]], dtype=torch.float64))
    mask = torch.tensor([[1.0, 0.0], [0.0, 0.0]], dtype=torch.float64)
    A = torch.tensor([2.0, -1.0], dtype=torch.float64)
    for lt in ("bnpo", "dapo", "cispo", "vespo"):
        loss = gc.grpo_loss(logp, None, None, A, mask, loss_type=lt, epsilon_high=5.0)
        expect = -2.0 * (float(np.log(0.5)) if lt in ("cispo", "vespo") else 1.0)
        assert float(loss) == pytest.approx(expect, abs=1e-12), lt
    grpo = gc.grpo_loss(logp, None, None, A, mask, loss_type="grpo")
    assert float(grpo) == pytest.approx(-2.0 / 2, abs=1e-12)  # empty row: 0 / clamp(0, 1)
    ent = torch.tensor([[0.7, 5.0], [5.0, 5.0]], dtype=torch.float64)
    bonus = L.entropy_bonus(ent, mask)
    assert float(bonus) == pytest.approx(0.7, abs=1e-12)


def test_gamma_weight_overflow_and_nan_become_zero():
    d = torch.float64
    A = torch.tensor([[1.0]], dtype=d)
    mask = torch.ones(1, 2, dtype=d)
    big = L.gamma_weights(A, torch.tensor([[10.0, 10.0]], dtype=d), mask, None, 3000.0, 0.0)
    assert float(big) == 0.0  # exp(60000 - 48516) overflows: TRL's nan_to_num(posinf=0)
    nan = L.gamma_weights(A, torch.tensor([[float("nan"), 0.0]], dtype=d), mask)
    assert float(nan) == 0.0


def test_off_policy_mask_uses_sampler_minus_policy_and_one_token_sequences():
    logp = torch.tensor([[-1.0, -1.0], [-1.0, 0.0]], dtype=torch.float64)
    sampling = torch.tensor([[-0.7, -0.7], [-0.7, 5.0]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]], dtype=torch.float64)
    A = -torch.ones(2, 1, dtype=torch.float64)
    # mean log pi_sampler - log pi = 0.3 for both (the second has one token): dropped at 0.25,
    # kept at 0.3; with the sign reversed (-0.3) or a count of 2 (0.15) both would be kept
    assert L.off_policy_mask(A, logp, sampling, mask, 0.25).view(-1).tolist() == [0.0, 0.0]
    assert L.off_policy_mask(A, logp, sampling, mask, 0.3 + 1e-12).view(-1).tolist() == [1, 1]


def test_reduce_loss_defaults_are_one_process_no_accumulation():
    b = make_batch(6)
    per_token = b["logp"].detach() * b["adv"][:, None]
    for lt in L.ALL_LOSS_TYPES:
        torch.testing.assert_close(
            L.reduce_loss(per_token, b["mask"], lt),
            L.reduce_loss(per_token, b["mask"], lt, num_items_in_batch=b["mask"].sum(),
                          gradient_accumulation_steps=1, num_processes=1,
                          steps_per_generation=1), rtol=0, atol=0)
    for lt in L.LOSS_TYPES:
        torch.testing.assert_close(L.reduce_loss(per_token, b["mask"], lt),
                                   L.aggregate(per_token, b["mask"], lt), rtol=0, atol=0)


def test_vllm_weight_keeps_ratios_on_the_bounds():
    old = torch.zeros(2, 3, dtype=torch.float64)
    mask = torch.ones(2, 3, dtype=torch.float64)
    for mode in ("token_mask", "sequence_mask"):
        at_one = L.vllm_importance_sampling_ratio(old, old, mask, mode, 1.0, 1.0)
        assert (at_one == 1).all()  # ratio 1 on both bounds: kept
        above = L.vllm_importance_sampling_ratio(old, old - 0.1, mask, mode, None, 1.0)
        assert (above == 0).all()


def test_trl_rewards_leading_dimensions_are_independent_runs():
    r = np.stack([reward_table(s) for s in range(3)])  # (3, 20, 3)
    for agg in L.AGGREGATIONS:
        both = L.trl_rewards(r, [1.0, 0.5, 2.0], agg, num_generations=4)
        for i in range(3):
            np.testing.assert_array_equal(both[i], L.trl_rewards(r[i], [1.0, 0.5, 2.0], agg,
                                                                 num_generations=4))


# ---- TRL's logged metrics (grpo_trainer.py 3254-3279; 2826-2830) ----

def trl_clip_metrics(coef_1, advantages, mask, epsilon_low, epsilon_high):
    """grpo_trainer.py 3254-3279, one process (``global_masked_mean``)."""
    advantages = advantages.unsqueeze(1)

    def global_masked_mean(x):
        if x.shape[1] == 1:
            local_sum, local_count = x.sum(), torch.tensor(float(x.shape[0]))
        else:
            local_sum, local_count = (x * mask).sum(), mask.sum().float()
        return float(local_sum / local_count.clamp(min=1.0))

    is_low_clipped = (coef_1 < 1 - epsilon_low) & (advantages < 0)
    is_high_clipped = (coef_1 > 1 + epsilon_high) & (advantages > 0)
    is_region_clipped = is_low_clipped | is_high_clipped
    return {"clip_ratio/low_mean": global_masked_mean(is_low_clipped.float()),
            "clip_ratio/high_mean": global_masked_mean(is_high_clipped.float()),
            "clip_ratio/region_mean": global_masked_mean(is_region_clipped.float())}


def test_clip_metrics_match_trl():
    d = torch.float64
    # ratios on the bounds (0.75, 1.25 exact in binary: not clipped), inside, outside; A = 0
    ratio = torch.tensor([[0.75, 0.7, 1.0], [1.25, 1.3, 1.3], [0.5, 2.0, 1.0], [0.7, 1.3, 0.5]],
                         dtype=d)
    A = torch.tensor([-1.0, 1.0, 0.0, -2.0], dtype=d)
    mask = torch.tensor([[1.0, 1, 1], [1, 1, 0], [1, 1, 1], [0, 0, 0]], dtype=d)
    for eps, high in ((0.25, None), (0.25, 0.28), (0.2, 0.25)):
        ours = L.clip_metrics(ratio, A, mask, eps, high)
        theirs = trl_clip_metrics(ratio, A, mask, eps, eps if high is None else high)
        assert ours == pytest.approx(theirs, abs=1e-12), (eps, high)
    assert L.clip_metrics(ratio, A, mask) == pytest.approx(
        trl_clip_metrics(ratio, A, mask, 0.2, 0.2), abs=1e-12)  # TRL's default epsilon
    seq = ratio[:, :1]  # a per-sequence ratio (B, 1): a mean over sequences, empty ones too
    assert L.clip_metrics(seq, A, mask, 0.2) == pytest.approx(
        trl_clip_metrics(seq, A, mask, 0.2, 0.2), abs=1e-12)
    one = torch.tensor([[0.5, 1.0]], dtype=d)  # one real token in the batch
    m1 = L.clip_metrics(one, torch.tensor([-1.0], dtype=d), torch.tensor([[1.0, 0.0]], dtype=d))
    assert m1["clip_ratio/low_mean"] == 1.0


def test_reward_metrics_match_trls_logs():
    rng = np.random.default_rng(3)
    for G in (2, 4):
        r = np.round(rng.random((3, 4 * G)) * 2) / 2
        r[0, :G] = 1.0  # a dead group
        r[1] = 0.5  # a dead batch
        for scale in gc.SCALE_REWARDS:
            m = gc.reward_metrics(r, G, scale)
            for i in range(3):
                t = torch.tensor(r[i])
                std = (trl.nanstd(t.view(-1, G), dim=1).repeat_interleave(G) if scale != "batch"
                       else trl.nanstd(t).expand_as(t))
                zero = torch.isclose(std, torch.zeros_like(std)).float().mean().item()
                assert m["frac_reward_zero_std"][i] == pytest.approx(zero, abs=1e-12)
                assert m["reward"][i] == pytest.approx(torch.nanmean(t).item(), abs=1e-12)
                assert m["reward_std"][i] == pytest.approx(trl.nanstd(t).item(), rel=1e-6)


def test_normalize_then_sum_advantages_are_a_batch_z_score_of_any_rewards():
    r = np.array([3.0, 1.0, np.nan, 2.0, 5.0, 5.0])  # not centred: the mean matters
    ours = gc.trl_advantages(r, 2, "group", "normalize_then_sum")
    t = torch.tensor(r)
    theirs = torch.nan_to_num((t - torch.nanmean(t)) / (trl.nanstd(t) + 1e-4), nan=0.0)
    np.testing.assert_allclose(ours, theirs.numpy(), rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("loss_type", L.ALL_LOSS_TYPES)
def test_metrics_are_what_trl_logs(loss_type):
    """grpo_loss(..., return_info=True) reports what TRL's _compute_loss logs for the loss type
    (lines 3254-3290), from the same ratio: clip_ratio/* for the clip family only,
    cispo_clip_ratio, vespo/phi_seq_mean (vLLM's weight and the knobs included); "sapo", for
    which TRL logs nothing, gets the book's sapo/gate_share. Off-policy, some A = 0, token and
    sequence level, with delta."""
    logged = ("clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean",
              "cispo_clip_ratio", "vespo/phi_seq_mean")
    seen: dict[str, float] = {}
    for seed, level, delta, is_mode in itertools.product(
            range(2), ("token", "sequence"), (None, 1.3), (None, "token_truncate")):
        b = make_batch(seed, empty_row=True)
        b["adv"][2:4] = 0.0  # dead groups: A = 0 counts on neither side
        knobs = dict(loss_type=loss_type, importance_sampling_level=level, delta=delta,
                     epsilon_high=1.1 if loss_type == "cispo" else 0.28, vespo_k_pos=1.5)
        isr = None if is_mode is None else L.vllm_importance_sampling_ratio(
            b["old"], b["sampling"], b["mask"], is_mode, clip_max=1.5)
        _, info = gc.grpo_loss(b["logp"], b["old"], None, b["adv"], b["mask"],
                               importance_sampling_ratio=isr, return_info=True, **knobs)
        ref = trl.TRLGRPOLoss(use_vllm=isr is not None, **knobs)
        ref._compute_loss(b["logp"], b["ent"], dict(
            completion_mask=b["mask"], advantages=b["adv"], old_per_token_logps=b["old"],
            num_items_in_batch=b["mask"].sum(), importance_sampling_ratio=isr))
        theirs = {k: v[-1] for k, v in ref._metrics["train"].items() if k in logged}
        if loss_type == "sapo":
            assert theirs == {} and set(info) == {"sapo/gate_share"}
            assert 0 < info["sapo/gate_share"] < 1
            continue
        assert set(info) == set(theirs), (set(info), set(theirs))
        for k, v in theirs.items():
            assert info[k] == pytest.approx(v, rel=1e-6, abs=1e-12), k
            seen[k] = max(seen.get(k, 0.0), info[k])
    assert all(v > 0 for v in seen.values())  # each metric is not always 0 here


def test_sapo_gate_share_is_one_minus_the_mean_slope():
    """The book's sapo/gate_share: 1 - mean over real tokens of 4 sigma'(tau (ratio - 1)), the
    gate's slope relative to its on-policy 1 (0 at ratio 1); per sequence for a sequence ratio."""
    b = make_batch(3)
    b["adv"][:2] = 0.0  # A = 0 takes sapo_temperature_neg, as TRL's where(A > 0, pos, neg)
    for level in ("token", "sequence"):
        _, info = gc.grpo_loss(b["logp"], b["old"], None, b["adv"], b["mask"], loss_type="sapo",
                               importance_sampling_level=level, sapo_temperature_pos=2.0,
                               return_info=True)
        ratio = L.importance_ratio(b["logp"].detach(), b["old"], b["mask"], level)
        tau = torch.where(b["adv"][:, None] > 0, 2.0, 1.05)
        s = torch.sigmoid(tau * (ratio - 1))
        slope = (4 * s * (1 - s)).expand_as(b["mask"]) if level == "token" else 4 * s * (1 - s)
        w = b["mask"] if level == "token" else torch.ones_like(slope)
        assert info["sapo/gate_share"] == pytest.approx(
            float(1 - (slope * w).sum() / w.sum()), rel=1e-12)
        _, on = gc.grpo_loss(b["logp"], None, None, b["adv"], b["mask"], loss_type="sapo",
                             importance_sampling_level=level, return_info=True)
        assert on["sapo/gate_share"] == 0.0


def test_cispo_clip_ratio_counts_ratios_strictly_above_the_cap():
    """TRL's (coef_1 > epsilon_high) & (A > 0): on-policy the ratio is exactly 1, so a cap of 1
    clips nothing and a cap below 1 clips every token with A > 0."""
    b = make_batch(4)
    for cap, want in ((1.0, 0.0), (0.5, float((b["mask"] * (b["adv"] > 0)[:, None]).sum()
                                             / b["mask"].sum()))):
        _, info = gc.grpo_loss(b["logp"], None, None, b["adv"], b["mask"], loss_type="cispo",
                               epsilon_high=cap, return_info=True)
        assert info["cispo_clip_ratio"] == pytest.approx(want, abs=1e-15) and want < 1
