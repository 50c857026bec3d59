"""How fast does every slider of the book respond? Measured in the notebooks' own kernels.

    python benchmarks/bench_sliders.py [book/NN_name.ipynb ...]

Each chapter runs in a fresh kernel (nothing is written back) with ``GRPO_SLIDER_LOG`` set, so
``grpo_core.viz.slider`` logs, for every slider: the time of each frame's ``draw`` (reading the
precomputed data and building the matplotlib figure) and of rasterising it to PNG — paid once,
when the cell runs — and of a real live move: the ipywidgets slider set to every other value,
its observer showing that value's frame, as a reader in Jupyter or Binder drags it. Targets
(issue 4): a move costs at most ~50 ms of computation and ~250 ms with the redraw; a live move
here is all of that. The static page swaps precomputed frames in the browser: no kernel at all.

    python benchmarks/bench_sliders.py --raster

measures the cost of turning a finished figure into the PNG a notebook stores, in one process,
the old and the new way interleaved on the same figures (book-like: 1-3 axes of seed bands,
bars, a legend, drawn with grpo_core.viz at the book's figure sizes): a slider frame
(``viz._png`` against its previous version, kept below as ``_png_before``) and an inline figure
(IPython's ``print_figure`` with the tight box, what the inline backend did, against
``viz._inline_png``, what ``viz.book_style`` now installs). Ratios are of best-of-N times.
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


def _png_before(fig, dpi: int) -> bytes:
    """grpo_core.viz._png as it was before the single-draw pixel crop (commit fdbe239)."""
    import io

    import matplotlib as mpl
    import numpy as np
    from PIL import Image

    fig.set_dpi(dpi)
    fig.canvas.draw()
    w, h = fig.canvas.get_width_height(physical=True)
    image = Image.frombuffer("RGBA", (w, h), fig.canvas.buffer_rgba(), "raw", "RGBA", 0, 1)
    if mpl.rcParams["savefig.bbox"] == "tight":
        box = fig.get_tightbbox(fig.canvas.get_renderer())
        box = box.padded(mpl.rcParams["savefig.pad_inches"])
        image = image.crop((max(0, int(box.x0 * dpi)), max(0, int(h - box.y1 * dpi)),
                            min(w, int(np.ceil(box.x1 * dpi))),
                            min(h, int(np.ceil(h - box.y0 * dpi)))))
    out = io.BytesIO()
    image.convert("RGB").quantize(256).save(out, "PNG", optimize=True)
    return out.getvalue()


def _book_figure(kind: int):
    """A figure like the book's: seed bands with a legend, grey curves, bars."""
    import matplotlib.pyplot as plt
    import numpy as np

    from grpo_core import viz

    rng = np.random.default_rng(kind)
    n_axes = 1 + kind % 3
    fig, axes = plt.subplots(1, n_axes, figsize=(3.6 * n_axes, 3.4), squeeze=False)
    x = np.arange(300)
    for j, ax in enumerate(axes[0]):
        curves = {k: rng.standard_normal((16, 300)).cumsum(axis=1) * 0.01 + k for k in range(4)}
        if (kind + j) % 2 == 0:
            viz.band_among(ax, x, curves, 2, label="group", color=viz.PALETTE["group"])
            viz.reference(ax, 3.0, "ceiling")
        else:
            viz.bars(ax, np.arange(12), rng.random(12), 0.8, facecolor="C0", label="policy")
            ax.plot(np.arange(12), rng.random(12), "k.", label="reference")
        ax.set(xlabel="step", ylabel="expected reward", title=f"panel {j + 1}")
        ax.legend()
    fig.tight_layout()
    return fig


def raster_benchmark(rounds: int = 5) -> int:
    import base64

    import matplotlib
    matplotlib.use("agg")
    import matplotlib.pyplot as plt
    from IPython.core.pylabtools import print_figure

    from grpo_core import viz

    viz.book_style()
    ways = {
        "slider frame, 72 dpi": (lambda f: _png_before(f, 72), lambda f: viz._png(f, 72)),
        "inline figure, 80 dpi": (lambda f: base64.b64decode(print_figure(f, "png", base64=True)),
                                  lambda f: base64.b64decode(viz._inline_png(f))),
    }
    print(f"{'':24s} {'before ms':>9s} {'after ms':>9s} {'ratio':>6s} {'before kB':>9s} "
          f"{'after kB':>9s}   (best of {rounds} per figure, summed over 6 figures)")
    for what, (before, after) in ways.items():
        best = {"before": [float("inf")] * 6, "after": [float("inf")] * 6}
        size = {"before": [0] * 6, "after": [0] * 6}
        for _ in range(rounds):
            for kind in range(6):
                for name, fn in (("before", before), ("after", after)):  # interleaved
                    fig = _book_figure(kind)
                    t0 = time.perf_counter()
                    png = fn(fig)
                    best[name][kind] = min(best[name][kind], time.perf_counter() - t0)
                    size[name][kind] = len(png)
                    plt.close(fig)
        b, a = sum(best["before"]), sum(best["after"])
        print(f"{what:24s} {1e3 * b:9.0f} {1e3 * a:9.0f} {b / a:5.2f}x "
              f"{sum(size['before']) / 1e3:9.1f} {sum(size['after']) / 1e3:9.1f}")
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["--raster"]:
        return raster_benchmark()
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
