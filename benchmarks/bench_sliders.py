"""How fast does every slider of the book respond? Measured in the notebooks' own kernels.

    python benchmarks/bench_sliders.py [book/NN_name.ipynb ...]

Each chapter runs in a fresh kernel (nothing is written back) with ``GRPO_SLIDER_LOG`` set, so
``grpo_core.viz.slider`` logs, for every slider: the time of each frame's ``draw`` (reading the
precomputed data and building the matplotlib figure) and of rasterising it to PNG — paid once,
when the cell runs — and of a real live move: the ipywidgets slider set to every other value,
its observer showing that value's frame, as a reader in Jupyter or Binder drags it. Targets
(issue 4): a move costs at most ~50 ms of computation and ~250 ms with the redraw; a live move
here is all of that. The static page swaps precomputed frames in the browser: no kernel at all.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
COMPUTE_MS, MOVE_MS = 50.0, 250.0


def run(path: Path, log: Path) -> float:
    os.environ.update({"GRPO_SLIDER_LOG": str(log), "OMP_NUM_THREADS": "1",
                       "MKL_NUM_THREADS": "1", "PYTHONHASHSEED": "0"})
    nb = nbformat.read(path, as_version=4)
    t0 = time.perf_counter()
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    return time.perf_counter() - t0


def main(argv: list[str]) -> int:
    paths = [Path(p) for p in argv] or sorted((ROOT / "book").glob("*.ipynb"))
    ok, n_sliders = True, 0
    print(f"{'chapter / slider':44s} {'frames':>6s} {'draw ms':>13s} {'raster ms':>9s} "
          f"{'live move ms':>14s}")
    print(f"{'':44s} {'':6s} {'median   max':>13s} {'median':>9s} {'median    max':>14s}"
          "   (draw and raster: once per frame, when the cell runs)")
    for path in paths:
        with tempfile.TemporaryDirectory() as tmp:
            log = Path(tmp) / "sliders.jsonl"
            seconds = run(path, log)
            rows = [json.loads(line) for line in log.read_text().splitlines()] \
                if log.exists() else []
        print(f"{path.name} (executed in {seconds:.1f} s)")
        for row in rows:
            n_sliders += 1
            draw = [1e3 * t for t in row["draw_s"]]
            raster = [1e3 * t for t in row["raster_s"]]
            move = [1e3 * t for t in row["move_s"]]
            good = max(move) <= COMPUTE_MS  # a move computes and redraws nothing else
            ok &= good
            print(f"  {row['name']:42s} {row['frames']:6d} {statistics.median(draw):6.1f} "
                  f"{max(draw):6.1f} {statistics.median(raster):9.1f} "
                  f"{statistics.median(move):6.1f} {max(move):7.1f}  {'ok' if good else 'SLOW'}")
    print(f"{n_sliders} sliders; target: a live move (compute + redraw) <= {COMPUTE_MS:.0f} ms "
          f"(issue: <= 50 ms compute, <= {MOVE_MS:.0f} ms with the redraw): "
          f"{'MET' if ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
