"""Speed of chapter 15's tiny transformer: GRPO steps per second, and where a step's time goes.

    OMP_NUM_THREADS=1 python benchmarks/bench_capstone.py

One thread, as the notebooks run under pytest. A GRPO step is 8 prompts x G = 8 completions:
sampling (5 forward passes without gradient), pi_ref's log-probs, then ``num_iterations`` forward
and backward passes through ``grpo_loss`` and Adam. All figures come from this one run.
"""

from __future__ import annotations

import copy

import torch
from bench_core import best_of  # the same timing rule: the least disturbed of n runs

import grpo_core as gc
from grpo_core import tiny_lm as T
from grpo_core.optim import Adam


def main() -> None:
    torch.set_num_threads(1)
    train, held_out = T.split_prompts(0)
    warm = T.warm_start(0, train_prompts=train, steps=20)
    print(f"model: {gc.n_params(warm):,} parameters, float64, one thread")

    sft_steps = 50
    t_sft = best_of(lambda: T.warm_start(0, train_prompts=train, steps=sft_steps), 3)
    print(f"supervised warm start: {sft_steps / t_sft:6.1f} steps/s (batch 64)")

    for mu in (1, 2):
        cfg = gc.GRPOConfig(**(T.DEFAULTS | {"num_iterations": mu}))
        model, ref = copy.deepcopy(warm), copy.deepcopy(warm)
        opt = Adam(model.parameters(), lr=cfg.learning_rate)
        n_prompts = cfg.per_device_train_batch_size // cfg.num_generations
        gen = torch.Generator().manual_seed(0)
        prompts = train[:n_prompts]
        n = 20

        def steps(model=model, ref=ref, opt=opt, prompts=prompts, gen=gen, cfg=cfg, n=n):
            for _ in range(n):
                T.grpo_step(model, ref, opt, prompts, gen, cfg)

        t = best_of(steps, 3)
        print(f"GRPO, num_iterations = {mu}: {n / t:6.1f} steps/s "
              f"({1e3 * t / n:.1f} ms per step of {cfg.per_device_train_batch_size} "
              "completions)")

    batch = T.generate(warm, train[:8].repeat_interleave(8, 0), torch.Generator().manual_seed(0))
    t_gen = best_of(lambda: T.generate(warm, batch.prompts, torch.Generator().manual_seed(0)), 20)

    def forward_backward():
        logp = T.token_logps(warm, batch.prompts, batch.tokens)
        logp.sum().backward()

    t_fb = best_of(forward_backward, 20)
    print(f"  of which: sampling {1e3 * t_gen:.1f} ms, one forward + backward {1e3 * t_fb:.1f} ms")
    t_run = best_of(lambda: T.train_grpo(warm, train, held_out, max_steps=60, num_iterations=2), 1)
    print(f"the chapter's run (60 steps, num_iterations = 2, 4 evaluations): {t_run:.2f} s")


if __name__ == "__main__":
    main()
