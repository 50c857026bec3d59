"""The exercise checkers teach: they compare gradients as well as values, include the edge cases
the chapters teach, name recognisable mistakes, show the failing row, and give hints in two steps
(a nudge first, the method only from the second failure on)."""

import numpy as np
import pytest
import torch

from grpo_core import exercises as ex


@pytest.fixture(autouse=True)
def fresh_hints():
    ex._FAILURES.clear()  # each test starts at the first failure
    yield
    ex._FAILURES.clear()


def said(capsys) -> str:
    """What the checkers printed, with the wrapping of long lines undone."""
    return " ".join(capsys.readouterr().out.split())


def clipped(ratio, adv, eps, eps_high):
    return -torch.min(ratio * adv, torch.clamp(ratio, 1 - eps, 1 + eps_high) * adv)


def test_a_clipped_term_outside_autograd_fails_on_its_gradient(capsys):
    # right values, but the clipped branch is a constant: half the gradient is lost
    def detached(ratio, adv, eps, eps_high):
        c = torch.clamp(ratio, 1 - eps, 1 + eps_high).detach()
        return -torch.min(ratio * adv, c * adv)

    def numpy_values(ratio, adv, eps, eps_high):  # right numbers, no gradient at all
        return torch.tensor(clipped(ratio, adv, eps, eps_high).detach().numpy())

    assert ex.check_clipped_term(clipped)
    assert not ex.check_clipped_term(detached)
    assert "gradient with respect to argument 0 differs" in said(capsys)
    assert not ex.check_clipped_term(numpy_values)
    assert "carries no gradient" in said(capsys)


def test_the_clip_checker_covers_ratios_at_and_beyond_both_bounds():
    # clamping the product instead of the ratio agrees on small ratios and fails on the far ones
    def clamp_product(ratio, adv, eps, eps_high):
        return -torch.min(ratio * adv, torch.clamp(ratio * adv, 1 - eps, 1 + eps_high))

    assert not ex.check_clipped_term(clamp_product)


def test_mistakes_are_named(capsys):
    assert not ex.check_clipped_term(lambda r, a, e, eh: -clipped(r, a, e, eh))
    assert "sign is flipped" in said(capsys)
    assert not ex.check_k2(lambda lp, ref: (ref - lp) ** 2)
    assert "factor 2" in said(capsys)
    assert not ex.check_k2(lambda lp, ref: None)
    assert "returned None" in said(capsys)
    assert not ex.check_batch_advantages(lambda r: (r - r.mean()).T.copy() if r.shape[0] == 3
                                         else r - r.mean())
    out = said(capsys)
    assert "wrong shape" in out


def test_a_sum_instead_of_a_mean_is_named_as_an_axis_factor(capsys):
    def pg_sum(logits, samples, adv):  # sum over the G answers instead of the mean
        onehot = np.eye(logits.shape[-1])[samples]
        probs = np.exp(logits - logits.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        return (adv[..., None] * (onehot - probs[:, None, :])).sum(axis=1)

    assert not ex.check_policy_gradient(pg_sum)
    out = said(capsys)
    assert "off by a factor 5, an axis length: a sum where a mean belongs?" in out
    assert "that row, expected:" in out and "that row, yours:" in out


def test_hints_come_in_two_steps(capsys):
    wrong = lambda lp, ref: (ref - lp) ** 2  # noqa: E731
    assert not ex.check_k2(wrong)
    first = said(capsys)
    assert "log-ratio alone" in first and "log_r ** 2 / 2" not in first  # the nudge, no method
    assert not ex.check_k2(wrong)
    second = said(capsys)
    assert "log_r ** 2 / 2" in second  # now the method


def test_aggregation_includes_an_all_padding_row(capsys):
    def grpo_no_clamp(per_token, mask, loss_type, L):  # 0/0 on the all-padding row
        if loss_type == "grpo":
            return ((per_token * mask).sum(-1) / mask.sum(-1)).mean()
        return (per_token * mask).sum() / (mask.shape[0] * L)

    def right(per_token, mask, loss_type, L):
        if loss_type == "grpo":
            return ((per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1)).mean()
        return (per_token * mask).sum() / (mask.shape[0] * L)

    assert ex.check_aggregation(right)
    assert not ex.check_aggregation(grpo_no_clamp)
    assert "NaN where the reference is finite" in said(capsys)


def test_group_advantages_include_equal_float_rewards():
    def no_zero_std_guard(r, ddof):  # 0.3 x 4 has a float std of ~1e-17, not 0: fine either way
        return (r - r.mean(-1, keepdims=True)) / (r.std(-1, ddof=ddof, keepdims=True) + 1e-8)

    def divide_by_std_only(r, ddof):  # no epsilon: 0/0 on an all-equal group
        with np.errstate(invalid="ignore", divide="ignore"):
            return (r - r.mean(-1, keepdims=True)) / r.std(-1, ddof=ddof, keepdims=True)

    assert ex.check_group_advantages(no_zero_std_guard)
    assert not ex.check_group_advantages(divide_by_std_only)


def test_diagnose_recognises_a_transpose_and_stays_quiet_otherwise():
    e = np.arange(9.0).reshape(3, 3)
    assert "axis" in ex.diagnose(e.T.copy(), e)
    assert ex.diagnose(e + np.array([0, 0, 1.0]), e) == ""


def test_diagnose_names_each_factor():
    e = np.array([[1.0, -2.0, 0.0], [0.5, 3.0, 0.0]])  # (2, 3): axis lengths 2 and 3
    args = (e,)
    assert ex.diagnose(3 * e, e, args).startswith("off by a factor 3, an axis length: a sum")
    assert ex.diagnose(e / 3, e, args).startswith("off by a factor 1/3, an axis length: a mean")
    assert ex.diagnose(2 * e, e, args).startswith("off by a factor 2, an axis length")
    assert ex.diagnose(0.5 * e, e, ()) == "off by a factor 0.5: a missing or extra 1/2?"
    assert ex.diagnose(3.7 * e, e, args) == "off by a constant factor 3.7"
    assert "sign is flipped" in ex.diagnose(-e, e, args)
    assert ex.diagnose(np.zeros_like(e), np.zeros_like(e)) == ""  # nothing to compare
    nan = e.copy()
    nan[0, 0] = np.nan
    assert ex.diagnose(nan, e).startswith("NaN where the reference is finite")
    off = 3 * e
    off[0, 2] = 1.0  # non-zero where the reference is 0: not a pure factor
    assert ex.diagnose(off, e, args) == ""
    assert ex._sizes((np.zeros((1, 4, 2)), 3.0)) == {2, 4}


def test_the_second_failure_drops_the_retry_note(capsys):
    wrong = lambda lp, ref: (ref - lp) ** 2  # noqa: E731
    ex.check_k2(wrong)
    assert "a second failure shows how to compute it" in said(capsys)
    ex.check_k2(wrong)
    assert "a second failure" not in said(capsys)


def test_long_lines_are_wrapped_under_their_indent():
    line = "  hint: " + " ".join(["word"] * 40)
    wrapped = ex._wrap(line).splitlines()
    assert len(wrapped) > 1 and all(len(w) <= 80 for w in wrapped)
    assert all(w.startswith("      word") for w in wrapped[1:])  # 2 + 4 spaces
    assert ex._wrap("short line") == "short line" and ex._wrap("x" * 80) == "x" * 80
