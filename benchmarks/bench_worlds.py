"""Speed of the exact worlds of chapters 11-14: one 300-step, 32-seed training run in each.

    python benchmarks/bench_worlds.py

Target (issue 10): <= 5 s per world on the 2-core machine, one thread. Each world adds one
entry to ``WORLDS`` below (a name and a function that runs its 300-step, 32-seed training).
"""

from __future__ import annotations

import torch
from bench_core import best_of  # the same timing rule: the least disturbed of n runs


def sequences_run() -> None:
    """Chapter 13: the token-sequence world (1,093 completions), G = 8, loss_type "dapo"."""
    from grpo_core import sequences as sq

    world = sq.make_sequence_world()
    sq.train_sequences(world, range(32), max_steps=300, num_generations=8, loss_type="dapo")


def binary_run(dynamic_sampling: bool = False) -> None:
    """Chapter 11: the binary-reward world (6 x 12, 0/1 rewards), G = 8, TRL's advantages."""
    import numpy as np

    import grpo_core as gc

    world = gc.binary_world(0)
    gc.train_batch(world.rewards, None, world.ref_logits, np.arange(32), max_steps=300,
                   num_generations=8,
                   beta=0.0, scale_rewards="group", dynamic_sampling=dynamic_sampling)


def shared_run() -> None:
    """Chapter 14: shared parameters (logits = features @ theta), G = 8, TRL's advantages."""
    import numpy as np

    import grpo_core as gc

    world = gc.shared_world(0)
    policy = gc.SharedPolicy(world.features, 32)
    gc.train_batch(world.rewards, None, policy.initial_logits(), np.arange(32), max_steps=300,
                   num_generations=8,
                   beta=0.0, scale_rewards="group", policy=policy)


WORLDS = {"shared (ch 14)": shared_run, "sequences (ch 13)": sequences_run,
          "binary (ch 11)": binary_run,
          "binary + dyn. sampling": lambda: binary_run(dynamic_sampling=True)}
TARGET_S = 5.0


def main() -> None:
    torch.set_num_threads(1)
    for name, fn in WORLDS.items():
        seconds = best_of(fn, 3)
        verdict = "ok" if seconds <= TARGET_S else "SLOW"
        print(f"{name:24s} 300 steps x 32 seeds: {seconds:5.2f} s (target <= {TARGET_S:.0f} s) "
              f"{verdict}")


if __name__ == "__main__":
    main()
