"""Chapter 16's run, TRL's GRPOTrainer on the sort task, over several CPU processes.

    OMP_NUM_THREADS=1 torchrun --standalone --nproc_per_node 2 grpo_two_processes.py --out run.json

torchrun starts this file once per process (a *rank*); every rank runs all of it, builds the same
trainer and trains its share of each batch. Each run is checked as it trains
(grpo_core.distributed.DistributedChecks): what each rank generated, each rank's loss against
grpo_core.grpo_loss, and the gradient after DDP's all-reduce against the whole batch's in one
process. Rank 0 alone writes: it adds its records to the JSON file --out. With plain `python` it
runs in one process. Chapter 19 of "GRPO, for programmers".
"""

import argparse
import copy
import json
import os
import tempfile
import time
import warnings
from pathlib import Path

import torch
import transformers
from accelerate import PartialState
from accelerate.utils import gather_object
from peft import LoraConfig
from transformers import TrainerCallback
from transformers.trainer_callback import PrinterCallback
from trl import GRPOTrainer

import grpo_core as gc
from grpo_core import distributed, trl_bridge
from grpo_core import tiny_lm as T

# name -> changes to chapter 16's run (tiny_lm.DEFAULTS, mu = 2, dapo, temperature 1).
# generation_batch: completions per generation batch, on all ranks together.
RUNS = {
    "chapter16": dict(generation_batch=64),
    # the same generation batch in two micro-batches a step, one optimizer step per batch
    "accumulate": dict(generation_batch=64, gradient_accumulation_steps=2,
                       steps_per_generation=2),
    # 7 prompts on 2 ranks: one prompt's group has completions on both. Temperature 2 varies
    # the lengths (at 1 nearly every completion has 4 tokens: every normaliser agrees)
    "split": dict(generation_batch=56, temperature=2.0),
    # two generation batches in one optimizer step (mu = 1, steps_per_generation = 1)
    "two_batches": dict(generation_batch=32, gradient_accumulation_steps=2,
                        steps_per_generation=1, num_iterations=1, temperature=2.0),
    # LoRA adapters on the blocks' four weight matrices, and a KL term (beta > 0)
    "lora": dict(generation_batch=64, beta=0.04, learning_rate=1e-2, lora=True),
}
LORA = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["c_attn", "c_proj", "c_fc"],
                  fan_in_fan_out=True)  # GPT-2's Conv1D layers store W as (in, out)


# Seed 0's warm start as the book stores it (tests/test_tiny_lm.py checks it is T.warm_start's)
CHECKPOINT = Path(__file__).resolve().parents[1] / "book" / "data" / "warm_start_seed0.pt"


def warm_start(seed: int) -> T.TinyLM:
    """Chapter 15's warm start of `seed`, the same on every rank: loaded, as a run loads its
    starting checkpoint, where the book stores it (seed 0), else computed (seeded)."""
    if seed == 0 and CHECKPOINT.exists():
        model = T.TinyLM(0)
        model.load_state_dict(torch.load(CHECKPOINT, weights_only=True))
        return model
    return T.warm_start(seed, train_prompts=T.split_prompts(0)[0], noise=0.3)


def trainer_for(name: str, warm: T.TinyLM, train_prompts: torch.Tensor, optimizer_steps: int,
                seed: int) -> GRPOTrainer:
    """The GRPOTrainer of RUNS[name] on this rank: chapter 16's model, data, reward and knobs."""
    changes = dict(RUNS[name])
    lora = changes.pop("lora", False)
    world = int(os.environ.get("WORLD_SIZE", "1"))  # set by torchrun
    spg = changes.get("steps_per_generation", 1)
    per_device = changes.pop("generation_batch") // (world * spg)
    book = gc.GRPOConfig(**(T.DEFAULTS | {"num_iterations": changes.pop("num_iterations", 2),
                                          "seed": seed}))
    args = trl_bridge.trl_config(
        book, output_dir=os.path.join(tempfile.gettempdir(), "grpo-two-processes"),
        per_device_train_batch_size=per_device, max_steps=optimizer_steps,
        ddp_find_unused_parameters=False, **changes)
    trainer = GRPOTrainer(model=trl_bridge.to_gpt2(warm), reward_funcs=trl_bridge.sort_reward,
                          args=args, train_dataset=trl_bridge.make_dataset(train_prompts),
                          processing_class=trl_bridge.make_tokenizer(),
                          peft_config=LORA if lora else None)
    trainer.remove_callback(PrinterCallback)  # the log stays in trainer.state.log_history
    if trainer.accelerator.num_processes != world:  # e.g. use_cpu=False on a machine without GPUs
        raise RuntimeError(f"{world} processes started, but each trains alone")
    return trainer


class HeldOut(TrainerCallback):
    """The book's exact held-out pass@1 every `every` generation steps, on rank 0 only (no
    collective in here: the other ranks go on)."""

    def __init__(self, held_out: torch.Tensor, every: int, mu: int):
        self.held_out, self.every, self.mu, self.scores = held_out, every, mu, []

    def score(self, step: int, model) -> None:
        if PartialState().is_main_process:
            if hasattr(model, "merge_and_unload"):  # LoRA: the adapters merged, in a copy
                model = copy.deepcopy(model).merge_and_unload()
            self.scores.append((step, T.pass_at_1(trl_bridge.to_tiny(model), self.held_out)))

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.score(0, model)

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if state.global_step % (self.every * self.mu) == 0:
            self.score(state.global_step // self.mu, model)


def run(name: str, warm: T.TinyLM, seed: int, trl_seed: int, a: argparse.Namespace) -> dict:
    train_prompts, held_out = T.split_prompts(0)  # chapter 15's split
    trainer = trainer_for(name, warm, train_prompts, a.steps, trl_seed)
    lora = RUNS[name].get("lora", False)
    checks = distributed.DistributedChecks(
        trainer, a.checks, reference=trl_bridge.to_gpt2(warm) if lora else None)
    if a.eval_every:
        evaluate = HeldOut(held_out, a.eval_every, trainer.args.num_iterations)
        trainer.add_callback(evaluate)
    start = time.time()
    trainer.train()
    seconds = time.time() - start
    params = torch.cat([p.detach().reshape(-1) for p in trainer.model.parameters()])
    spread = max((p - params).abs().max().item() for p in gather_object([params]))
    record = checks.results()  # gathers: every rank calls them
    if record is None:  # not rank 0
        return {}
    acc, args, model = trainer.accelerator, trainer.args, trainer.model
    log = trainer.state.log_history
    record |= {
        "seed": seed, "trl_seed": trl_seed, "processes": acc.num_processes,
        "distributed_type": acc.distributed_type.value, "backend": acc.state.backend,
        "wrapped": type(trainer.model_wrapped).__name__,
        "generation_batch_size": args.generation_batch_size,
        "per_device_train_batch_size": args.per_device_train_batch_size,
        "gradient_accumulation_steps": args.gradient_accumulation_steps,
        "steps_per_generation": args.steps_per_generation, "num_iterations": args.num_iterations,
        "temperature": args.temperature, "beta": args.beta,
        "optimizer_steps": trainer.state.global_step, "params_spread": spread,
        "reward": [row["reward"] for row in log if "reward" in row],
        "loss": [row["loss"] for row in log if "loss" in row][:8],
        "held_out": evaluate.scores if a.eval_every else [],
        "train_seconds": round(seconds, 1), "loadavg": round(os.getloadavg()[0], 1)}
    if lora:
        base = trl_bridge.to_gpt2(warm)
        frozen = {n.replace("base_model.model.", "").replace(".base_layer", ""): p
                  for n, p in model.named_parameters() if not p.requires_grad}
        record |= {
            "trainable": sum(p.numel() for p in model.parameters() if p.requires_grad),
            "total": sum(p.numel() for p in model.parameters()),
            "full_trainable": sum(p.numel() for p in base.parameters() if p.requires_grad),
            "full_total": sum(p.numel() for p in base.parameters()),
            "ref_model": trainer.ref_model is not None,
            "base_unchanged": all(torch.equal(frozen[n], p) for n, p in base.named_parameters()),
            "adapters": {n.replace("base_model.model.", ""): list(p.shape)
                         for n, p in model.named_parameters() if p.requires_grad}}
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", default="split,two_batches,accumulate,lora",
                        help="comma-separated names of RUNS")
    parser.add_argument("--steps", type=int, default=4, help="optimizer steps per run")
    parser.add_argument("--checks", type=int, default=None,
                        help="optimizer steps checked (default: every one)")
    parser.add_argument("--seeds", default="0",
                        help="comma-separated warm-start seeds, each WARM or WARM:TRL (TRL's seed)")
    parser.add_argument("--eval-every", type=int, default=0,
                        help="held-out pass@1 every so many generation steps (0: never)")
    parser.add_argument("--out", required=True, help="rank 0 adds its records to this JSON file")
    a = parser.parse_args()
    a.checks = a.steps if a.checks is None else a.checks
    torch.set_num_threads(1)
    transformers.logging.set_verbosity_error()
    warnings.filterwarnings("ignore", message=".*checkpointing.* is deprecated")
    records, warm = {}, {}
    for name in a.runs.split(","):
        for seeds in a.seeds.split(","):
            seed, trl_seed = map(int, (seeds + ":" + seeds).split(":")[:2])
            if seed not in warm:
                warm[seed] = warm_start(seed)
            record = run(name, warm[seed], seed, trl_seed, a)
            records[f"{name} W={record.get('processes')} seed={seed}:{trl_seed}"] = record
    if PartialState().is_main_process:  # rank 0 alone writes
        old = json.load(open(a.out)) if os.path.exists(a.out) else {}
        with open(a.out, "w") as f:
            json.dump(old | records, f, indent=None, separators=(",", ":"))
        print(f"rank 0 of {record['processes']}: {len(records)} runs of {a.steps} optimizer "
              f"steps, records added to {os.path.basename(a.out)}")


if __name__ == "__main__":
    main()
