"""Chapter 18's runs, precomputed: every configuration x seed of examples/train_own_task.py.

    python tools/own_task_runs.py            # all, into grpo_core/data/
    python tools/own_task_runs.py --only short --seeds 0

Each run is ``examples/train_own_task.run(...)``, the function the script runs; the chapter loads
the records, and re-runs the start of one of them live (its warm start and first GRPO steps) to
check that it computes the same numbers. About 40 s a run on one quiet core; 12 runs.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "grpo_core" / "data" / "own_task.json"  # shipped with the package (Colab)

# name -> the script's run() arguments; every run: 60 GRPO generation steps, seeds 0-2
CONFIGS = {
    "broken": dict(kind="gpt2", sft_steps=150, noise=0.3, fix=False),  # chapter 15's warm start
    "fixed": dict(kind="gpt2", sft_steps=150, noise=0.3, fix=True),
    "rotary": dict(kind="llama", sft_steps=150, noise=0.3, fix=False),
    "short": dict(kind="gpt2", sft_steps=40, noise=0.0, fix=True),  # a short clean warm start
}
SEEDS = (0, 1, 2)
STEPS = 60


def load_script():
    spec = importlib.util.spec_from_file_location("train_own_task",
                                                  ROOT / "examples" / "train_own_task.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", nargs="*", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--seeds", nargs="*", type=int, default=list(SEEDS))
    parser.add_argument("--out", type=Path, default=DATA)
    a = parser.parse_args()
    # the tests' conditions (one thread, the pinned CPU code paths), before numpy or torch loads
    sys.path.insert(0, str(ROOT / "tools"))
    from run_notebooks import DETERMINISTIC_ENV

    os.environ.update(DETERMINISTIC_ENV)
    script = load_script()
    import datasets
    import torch
    import transformers

    torch.set_num_threads(1)
    transformers.logging.set_verbosity_error()
    datasets.disable_progress_bars()
    warnings.filterwarnings("ignore", category=FutureWarning)
    records = json.loads(a.out.read_text(encoding="utf-8")) if a.out.exists() else {}
    for name in a.only:
        for seed in a.seeds:
            start = time.perf_counter()
            records.setdefault(name, {})[str(seed)] = script.run(seed=seed, steps=STEPS,
                                                                 **CONFIGS[name])
            held = records[name][str(seed)]["held_out"]
            print(f"{name} seed {seed}: {held[0][1]} -> {held[-1][1]} "
                  f"({time.perf_counter() - start:.0f} s)", file=sys.stderr, flush=True)
            a.out.parent.mkdir(parents=True, exist_ok=True)
            a.out.write_text(json.dumps(records, indent=1, sort_keys=True) + "\n",
                             encoding="utf-8")


if __name__ == "__main__":
    main()
