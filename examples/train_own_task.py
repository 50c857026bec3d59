"""Train a small task of your own with TRL: a warm start with ``SFTTrainer``, then GRPO.

Chapter 18 of "GRPO, for programmers", as one script: the task "add one to a number"
(``grpo_core/add_one.py``: tokenizer, data, reward), a tiny model built from a config, a
supervised warm start with TRL's ``SFTTrainer``, a check of positions before training, and
``GRPOTrainer`` with held-out exact match by sampling and the reward split by prompt class.

    OMP_NUM_THREADS=1 python examples/train_own_task.py                 # GPT-2, positions fixed
    OMP_NUM_THREADS=1 python examples/train_own_task.py --no-fix        # the silent failure
    OMP_NUM_THREADS=1 python examples/train_own_task.py --model llama   # rotary positions

For your own task: copy ``grpo_core/add_one.py`` and this file, change the task module's
functions (vocabulary, prompts, answers, reward) and the import below. Nothing is downloaded.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
import warnings

import torch

import grpo_core as gc
from grpo_core import add_one as task  # your task: a module like grpo_core/add_one.py
from grpo_core import own_task, trl_bridge

G = 8  # completions per prompt (num_generations)
EVAL_K = 8  # samples per held-out prompt


def warm_start(kind: str, seed: int, *, steps: int, noise: float, tokenizer, train) -> dict:
    """TRL's SFTTrainer on ``steps`` batches of 64 examples, ``noise`` of them wrong."""
    model = own_task.tiny_model(kind, tokenizer, seed=seed)
    data = task.sft_dataset(task.balanced(train, 400, seed), noise=noise, seed=seed)
    return own_task.warm_start(model, tokenizer, data, steps=steps, seed=seed)


def grpo(kind: str, weights: dict, *, seed: int, steps: int, fix: bool, tokenizer, train,
         held_out, eval_every: int = 20, output_dir: str):
    """GRPOTrainer from the warm start ``weights``, chapter 15's knobs; returns the trainer,
    its held-out evaluation in ``trainer.held_out.history``."""
    from transformers.trainer_callback import PrinterCallback
    from trl import GRPOTrainer

    knobs = gc.GRPOConfig(learning_rate=1e-3, per_device_train_batch_size=64, num_generations=G,
                          num_iterations=2, max_steps=steps, seed=seed,
                          max_completion_length=task.MAX_COMPLETION_LENGTH)
    args = trl_bridge.trl_config(knobs, output_dir=output_dir)
    model = own_task.with_weights(kind, tokenizer, weights)
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=own_task.per_class_rewards(task.exact_match, task.CLASSES,
                                                column="digits", num_generations=G),
        args=args,
        train_dataset=task.grpo_dataset(task.balanced(train, 400, seed), tokenizer),
        processing_class=tokenizer,
    )
    if fix:
        own_task.fix_trainer(trainer)  # position_ids from the mask, as generate() makes them
    trainer.remove_callback(PrinterCallback)
    trainer.held_out = own_task.held_out_callback(
        held_out_sets(held_out, tokenizer), tokenizer=tokenizer, every=eval_every, k=EVAL_K,
        seed=seed, max_new_tokens=task.MAX_COMPLETION_LENGTH, num_iterations=args.num_iterations)
    trainer.add_callback(trainer.held_out)
    return trainer


def held_out_sets(held_out: dict, tokenizer) -> dict:
    """Class -> (prompts, answer ids) of the held-out numbers."""
    return {c: ([task.prompt(n) for n in numbers], task.answer_ids(numbers, tokenizer))
            for c, numbers in held_out.items()}


def run(*, kind: str = "gpt2", seed: int = 0, sft_steps: int = 150, noise: float = 0.3,
        steps: int = 60, fix: bool = True, eval_every: int = 20) -> dict:
    """One whole run, as a record of plain numbers: the warm start's pass probabilities and
    predicted dead groups per class, the position check, TRL's logs per generation step and
    the held-out exact match per class during training."""
    tokenizer = task.make_tokenizer()
    train, held_out = task.split(0)  # one split for every seed: the held-out set stays fixed
    sets = held_out_sets(held_out, tokenizer)
    weights = warm_start(kind, seed, steps=sft_steps, noise=noise, tokenizer=tokenizer,
                         train=train)
    start = own_task.with_weights(kind, tokenizer, weights)
    prompts = [p for c in task.CLASSES for p in sets[c][0]]
    p = {c: own_task.pass_probability(start, tokenizer, *sets[c]) for c in task.CLASSES}
    trained_on = held_out_sets({c: train[c][:50] for c in task.CLASSES}, tokenizer)
    p_train = {c: own_task.pass_probability(start, tokenizer, *trained_on[c])
               for c in task.CLASSES}
    record = {
        "config": dict(kind=kind, seed=seed, sft_steps=sft_steps, noise=noise, steps=steps,
                       fix=fix),
        "pass_probability": {c: float(p[c].mean()) for c in task.CLASSES},  # held out
        # GRPO's groups are training prompts: chapter 11's p^G + (1 - p)^G over 50 of each class
        "dead_predicted": {c: own_task.dead_fraction(p_train[c], G) for c in task.CLASSES},
        "position_gap": own_task.check_positions(start, tokenizer, prompts,
                                                 max_new_tokens=task.MAX_COMPLETION_LENGTH),
    }
    if fix and kind == "gpt2":
        own_task.fix_positions(start)
        record["position_gap_fixed"] = own_task.check_positions(
            start, tokenizer, prompts, max_new_tokens=task.MAX_COMPLETION_LENGTH)
    with tempfile.TemporaryDirectory(prefix="grpo-book-own-") as out:
        trainer = grpo(kind, weights, seed=seed, steps=steps, fix=fix, tokenizer=tokenizer,
                       train=train, held_out=held_out, eval_every=eval_every, output_dir=out)
        trainer.train()
    names = ["reward", "frac_reward_zero_std", "clip_ratio/region_mean", "entropy",
             *(f"rewards/exact_match_{c}/mean" for c in task.CLASSES),
             *(f"frac_reward_zero_std/{c}" for c in task.CLASSES)]
    record["logs"] = own_task.per_generation(trainer.state.log_history, names,
                                             trainer.args.num_iterations)
    record["held_out"] = [[step, {c: acc[c] for c in task.CLASSES}]
                          for step, acc in trainer.held_out.history]
    return json.loads(json.dumps(record))  # plain JSON types (class keys become strings)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=60, help="GRPO generation steps")
    parser.add_argument("--sft-steps", type=int, default=150, help="warm-start steps")
    parser.add_argument("--noise", type=float, default=0.3, help="wrong warm-start targets")
    parser.add_argument("--model", choices=own_task.KINDS, default="gpt2")
    parser.add_argument("--no-fix", dest="fix", action="store_false",
                        help="leave TRL's positions as they are (GPT-2 trains the wrong policy)")
    parser.add_argument("--eval-every", type=int, default=20, help="generation steps")
    parser.add_argument("--out", help="write the record as JSON here")
    a = parser.parse_args(argv)

    torch.set_num_threads(1)
    import datasets
    import transformers

    transformers.logging.set_verbosity_error()
    datasets.disable_progress_bars()
    warnings.filterwarnings("ignore", message=".*checkpointing.* is deprecated")
    start = time.perf_counter()
    record = run(kind=a.model, seed=a.seed, sft_steps=a.sft_steps, noise=a.noise,
                 steps=a.steps, fix=a.fix, eval_every=a.eval_every)
    classes = [str(c) for c in task.CLASSES]
    fixed = record.get("position_gap_fixed")
    print(f"{a.model}, seed {a.seed}, position fix {'on' if a.fix else 'off'}; check_positions "
          f"(largest log-prob gap, sampler vs TRL's training pass): "
          f"{record['position_gap']:.3g} as TRL runs it"
          + ("" if fixed is None else f", {fixed:.3g} with the fix"))
    print("digits          " + "".join(f"{c:>8s}" for c in classes))
    print("pass prob.      " + "".join(f"{record['pass_probability'][c]:8.3f}"
                                       for c in classes))
    print("dead predicted  " + "".join(f"{record['dead_predicted'][c]:8.3f}" for c in classes))
    for step, acc in record["held_out"]:
        print(f"exact match {step:3d} " + "".join(f"{acc[c]:8.3f}" for c in classes))
    print(f"{time.perf_counter() - start:.0f} s")
    if a.out:
        with open(a.out, "w", encoding="utf-8") as f:
            json.dump(record, f)
    return record


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
