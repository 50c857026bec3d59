"""Chapter 15's three GRPO runs, stored for chapter 16: grpo_core/data/capstone_runs.json.

    python tools/capstone_runs.py

Chapter 16 compares TRL's GRPOTrainer with the book's loop on chapter 15's task; training the
book's loop there again would repeat chapter 15's result and cost ~25 s of the test suite. The
runs are ``tiny_lm.train_grpo`` from ``tiny_lm.warm_start`` with the settings in
``tiny_lm.CAPSTONE_*``, under the tests' CPU conditions (run_notebooks.DETERMINISTIC_ENV, set
before numpy and torch load). Chapter 15 checks this record against its own three runs each
time it runs, so the record cannot drift from what the chapter computes. About 35 s on one core.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "grpo_core" / "data"  # shipped with the package (Colab)


def main() -> None:
    sys.path.insert(0, str(ROOT / "tools"))
    from run_notebooks import DETERMINISTIC_ENV

    os.environ.update(DETERMINISTIC_ENV)
    sys.path.insert(0, str(ROOT))
    import torch

    from grpo_core import tiny_lm as T

    torch.set_num_threads(1)
    train_prompts, held_out = T.split_prompts(0)
    runs = {}
    for seed in T.CAPSTONE_SEEDS:
        start = time.perf_counter()
        warm = T.warm_start(seed, train_prompts=train_prompts, noise=T.CAPSTONE_NOISE)
        run = T.train_grpo(warm, train_prompts, held_out, **(T.CAPSTONE_KNOBS | {"seed": seed}))
        runs[str(seed)] = T.run_record(run)
        print(f"seed {seed}: held-out pass@1 {run.held_out[0]:.3f} -> {run.held_out[-1]:.3f} "
              f"({time.perf_counter() - start:.0f} s)", file=sys.stderr, flush=True)
    record = {"settings": {"split_prompts": 0, "seeds": list(T.CAPSTONE_SEEDS),
                           "warm_start_noise": T.CAPSTONE_NOISE,
                           "knobs": T.DEFAULTS | T.CAPSTONE_KNOBS},
              "runs": runs}
    path = OUT / T.CAPSTONE_RECORD
    # (not sort_keys: the metrics keep gc.METRICS's order, as train_grpo logs them)
    path.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {path.relative_to(ROOT)}", file=sys.stderr)


if __name__ == "__main__":
    main()
