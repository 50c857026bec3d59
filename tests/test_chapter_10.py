"""The chapter 10 exercise checker accepts the clipped term and rejects a near miss."""

import torch

import grpo_core as gc


def test_check_clipped_term_accepts_the_solution_and_rejects_a_symmetric_clip():
    def right(ratio, adv, epsilon, epsilon_high):
        clipped = torch.clamp(ratio, 1 - epsilon, 1 + epsilon_high)
        return -torch.min(ratio * adv, clipped * adv)

    def no_min(ratio, adv, epsilon, epsilon_high):  # the clipped product alone: a classic slip
        return -torch.clamp(ratio, 1 - epsilon, 1 + epsilon_high) * adv

    assert gc.exercises.check_clipped_term(right)
    assert not gc.exercises.check_clipped_term(no_min)
