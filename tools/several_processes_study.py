"""Chapter 19's stored study, made again: the warm-start checkpoint and the 21 runs of 60 steps.

    python tools/several_processes_study.py         # about 20 min on two loaded cores

1. ``book/data/warm_start_seed0.pt``: ``tiny_lm.warm_start(0, train_prompts=split_prompts(0)[0])``,
   the checkpoint ``examples/grpo_two_processes.py`` loads for seed 0 on every rank (as
   tests/test_tiny_lm.py::test_the_stored_warm_start_is_warm_start_0 says).
2. ``book/data/several_processes.json``: that script's runs at 60 generation steps (120 optimizer
   steps at mu = 2), held-out pass@1 every 20, no per-step checks: chapter16 and accumulate in
   one process (plain ``python``) and in two (``torchrun --standalone --nproc_per_node 2``, one
   thread a rank, through ``grpo_core.distributed.launch`` as chapter 19's launch cell), from the
   warm starts of seeds 0, 1, 2 (TRL's seed the same); chapter16 also from warm start 1 with
   TRL's seeds 101-103; lora in two processes, seeds 0, 1, 2. The records go to a file beside
   the stored one, which replaces it only when all 21 are there.

Everything runs under the tests' conditions (tools/run_notebooks.py's DETERMINISTIC_ENV, set here
before numpy and torch load, and inherited by every process), so a reader who re-runs the
script gets the stored numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "book" / "data"
SCRIPT = ROOT / "examples" / "grpo_two_processes.py"
STEPS, EVAL_EVERY = 120, 20  # optimizer steps (60 generation steps at mu = 2), pass@1 every 20
THREE = "0,1,2"  # warm-start seeds, TRL's seed the same
SIX = "0,1,2,1:101,1:102,1:103"  # and three more TRL seeds from warm start 1
# (processes, runs, seeds), in the order of the stored file's records
STUDY = [(1, "chapter16", SIX), (1, "accumulate", THREE),
         (2, "chapter16", SIX), (2, "accumulate", THREE), (2, "lora", THREE)]


def save_warm_start(path: Path) -> None:
    """Seed 0's warm start, as tests/test_tiny_lm.py computes it, to ``path``."""
    import torch

    from grpo_core import tiny_lm as T

    torch.set_num_threads(1)
    torch.save(T.warm_start(0, train_prompts=T.split_prompts(0)[0]).state_dict(), path)


def run_study(out: Path) -> dict:
    """Every (processes, runs, seeds) of STUDY, each launch adding its records to ``out``."""
    from grpo_core import distributed

    out.unlink(missing_ok=True)
    for processes, runs, seeds in STUDY:
        start = time.perf_counter()
        args = ["--runs", runs, "--seeds", seeds, "--steps", STEPS, "--checks", 0,
                "--eval-every", EVAL_EVERY, "--out", out]
        if processes == 1:
            done = subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], check=True,
                                  env={**os.environ, "OMP_NUM_THREADS": "1"},
                                  stdout=subprocess.PIPE, text=True)
            said = done.stdout
        else:
            said = distributed.launch(SCRIPT, *args, nproc=processes, timeout=3 * 3600)
        print(f"W={processes} {runs} seeds {seeds}: {time.perf_counter() - start:.0f} s; "
              f"{said.strip()}", file=sys.stderr, flush=True)
    return json.loads(out.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--study-only", action="store_true",
                        help="keep the stored warm-start checkpoint")
    a = parser.parse_args()
    sys.path.insert(0, str(ROOT / "tools"))
    from run_notebooks import DETERMINISTIC_ENV

    os.environ.update(DETERMINISTIC_ENV)  # before numpy or torch loads, here and in every rank
    os.environ["PYTHONPATH"] = os.pathsep.join(  # the ranks import this tree's grpo_core
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    start = time.perf_counter()
    if not a.study_only:
        save_warm_start(DATA / "warm_start_seed0.pt")
    partial = DATA / "several_processes.json.partial"
    records = run_study(partial)
    expected = {f"{runs} W={processes} seed={s if ':' in s else s + ':' + s}"
                for processes, runs, seeds in STUDY for s in seeds.split(",")}
    if set(records) != expected:
        raise SystemExit(f"{partial} holds {sorted(records)}, not {sorted(expected)}")
    partial.replace(DATA / "several_processes.json")
    print(f"{len(records)} runs in {time.perf_counter() - start:.0f} s, load "
          f"{os.getloadavg()[0]:.1f}: book/data/several_processes.json", file=sys.stderr)


if __name__ == "__main__":
    main()
