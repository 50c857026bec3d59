"""The book's sliders, in two forms from one definition, and a few plotting helpers.

A chapter describes a slider once: its parameters with their values, and ``draw(**values)``,
which returns a matplotlib figure from data the cell has already computed. :func:`slider`
renders one PNG frame per combination of values when the cell runs and returns a view that is

- on the rendered page (and anywhere without a kernel): an HTML ``<input type="range">`` per
  parameter plus a few lines of inline JavaScript that shows the frame of the chosen values;
- in a live kernel (Jupyter, Binder): ipywidgets sliders over an image; the kernel drew every
  frame when the cell ran, so a move swaps images instantly.

Both live in one MIME bundle: front ends with a widget manager pick the live widget, the book
is configured to pick the HTML. The static HTML contract, which ``tools/browser_check.py``
verifies in Chromium::

    <div class="grpo-slider" id="grpo-slider-NAME" data-params="G;beta">
      <input type="range" class="grpo-slider-input" data-param="G" data-labels='["1", "2"]'
       disabled>  (enabled by the inline script when it runs)
      <output class="grpo-slider-value" data-param="G">2</output>
      <img class="grpo-slider-frame" data-key="G=2;beta=0.1" alt="...">  (one per frame;
      all but the current one are hidden)
"""

from __future__ import annotations

import base64
import html
import io
import itertools
import json
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

_NAME = re.compile(r"^[a-z0-9][a-z0-9-]*$")
PALETTE = {"none": "#7f7f7f", "group": "#1f77b4", "group_norm": "#d62728", "loo": "#2ca02c",
           "critic": "#9467bd", "batch": "#ff7f0e", "exact": "black"}


def _label(value: Any, fmt: str | None) -> str:
    if fmt is not None:
        return fmt.format(value)
    if isinstance(value, float | np.floating):
        return f"{float(value):g}"
    return str(value)


def _ink_box(rgba: np.ndarray, background: np.ndarray) -> tuple[int, int, int, int] | None:
    """The box ``(x0, y0, x1, y1)`` (pixels, end exclusive) around every pixel of
    ``rgba (H, W, 4)`` that differs from ``background (4,)``; None if the image is blank."""
    ink = np.any(rgba != background, axis=-1)
    rows, cols = np.flatnonzero(ink.any(axis=1)), np.flatnonzero(ink.any(axis=0))
    if rows.size == 0:
        return None
    return int(cols[0]), int(rows[0]), int(cols[-1]) + 1, int(rows[-1]) + 1


MIN_TEXT_PX = 8  # the smallest text a figure may show, in image pixels (CSS px at its own size)
TEXT_PX_KEY = "grpo-min-text-px"  # PNG text chunk: the smallest text of the image, in its pixels


def _smallest_text_pt(fig) -> float | None:
    """The size in points of the smallest visible, non-empty text of ``fig`` (None if none)."""
    from matplotlib.text import Text

    sizes = [t.get_fontsize() for t in fig.findobj(Text)
             if t.get_visible() and t.get_text().strip() and t.get_figure() is fig]
    return min(sizes) if sizes else None


def _readable_dpi(fig, dpi: float) -> tuple[float, float | None]:
    """``(dpi', px)``: ``dpi`` raised so that the smallest text of ``fig`` is at least
    MIN_TEXT_PX pixels high (a 7-pt legend at 72 dpi is 7 px: drawn at 82.3 dpi it is 8), and that
    text's height in pixels at ``dpi'`` (None: no text)."""
    pt = _smallest_text_pt(fig)
    if pt is None:
        return dpi, None
    dpi = max(float(dpi), MIN_TEXT_PX * 72 / pt)
    return dpi, pt * dpi / 72


def _png(fig, dpi: float) -> bytes:
    """:func:`_draw_png`, leaving the figure's own dpi as it was (its text repr, e.g.
    ``<Figure size 560x288 with 1 Axes>``, is a stored output that nbval compares)."""
    return _png_beyond(fig, dpi)[0]


def _png_beyond(fig, dpi: float, tight_first: bool = False) -> tuple[bytes, bool]:
    """``(png, beyond)``: :func:`_draw_png` of ``fig`` at ``dpi``, and whether the drawing went on
    beyond the canvas (so it was drawn into matplotlib's tight box). With ``tight_first`` the
    tight box is computed before drawing (about a fifth of a draw): a drawing that goes beyond
    the canvas is then drawn once, into that box, not once to find out and once more. A slider
    passes it for every frame after one that went beyond: its frames share one layout."""
    own = fig.dpi
    try:
        return _draw_png(fig, dpi, tight_first)
    finally:
        fig.set_dpi(own)


def _tight_box(fig, dpi: float, w: int, h: int):
    """``(box, beyond)``: matplotlib's tight box of ``fig`` (inches, padded by
    savefig.pad_inches), and whether the drawing goes on beyond its ``w`` x ``h`` pixel canvas
    at ``dpi`` (the boxes of tick labels often do, by a pixel)."""
    import matplotlib as mpl

    tight = fig.get_tightbbox(fig.canvas.get_renderer())
    x0, y0, x1, y1 = (v * dpi for v in tight.extents)
    beyond = x0 < 0 or y0 < 0 or x1 > w or y1 > h
    return tight.padded(mpl.rcParams["savefig.pad_inches"]), beyond


def _render_rgb(fig, dpi: float, bbox_inches):
    """``fig`` drawn once into ``bbox_inches`` (a Bbox, inches) as a PIL RGB image: the pixels
    ``savefig(..., bbox_inches=bbox_inches)`` writes to a PNG, without encoding and decoding it."""
    from PIL import Image

    buf = io.BytesIO()
    fig.savefig(buf, format="rgba", dpi=dpi, bbox_inches=bbox_inches)
    raw = buf.getvalue()
    # the canvas is the box in pixels, each side rounded by the renderer: find the exact width
    for w in sorted({int(bbox_inches.width * dpi) + d for d in (0, 1, -1, 2)}, key=lambda x: abs(
            x - bbox_inches.width * dpi)):
        h = len(raw) // (4 * w) if w > 0 else 0
        if w > 0 and 4 * w * h == len(raw) and abs(h - bbox_inches.height * dpi) < 2:
            rgba = np.frombuffer(raw, np.uint8).reshape(h, w, 4)
            return Image.fromarray(np.ascontiguousarray(rgba[:, :, :3]))
    raise RuntimeError(f"savefig wrote {len(raw)} RGBA bytes for a {bbox_inches.width * dpi:.1f}"
                       f" x {bbox_inches.height * dpi:.1f} px box")


def _draw_png(fig, dpi: float, tight_first: bool = False) -> tuple[bytes, bool]:
    """The figure as a 256-colour palette PNG (about a third of the RGBA bytes; every frame is
    inlined in the page), for slider frames and, after :func:`book_style`, every inline figure.

    Drawn once at `dpi`. With savefig.bbox "tight" (book_style) the image is cropped to the
    pixels that differ from the figure's background, plus savefig.pad_inches: savefig's tight
    box would draw the figure twice, and matplotlib's tight box walks every artist again (about
    a fifth of a draw). Only when ink touches the canvas edge (a legend placed outside the axes)
    is matplotlib's tight box computed, and if the drawing goes on beyond the canvas, savefig
    draws it once more into that box (the previous version cut such a legend off); with
    ``tight_first`` (:func:`_png_beyond`) the box is computed first and the figure drawn once,
    into it. Returns the PNG and whether it was drawn into that box. Colours are
    reduced by PIL's maximum coverage (half median cut's time here, white stays exactly white,
    no channel off by more than 2; fast octree is faster but turns white into 254)."""
    import matplotlib as mpl
    from PIL import Image, PngImagePlugin

    # no text below MIN_TEXT_PX: a higher dpi where a figure's smallest font needs it; the size
    # reached is stored in the PNG for tools/browser_check.py, which checks it as shown
    dpi, text_px = _readable_dpi(fig, dpi)
    image, bbox_inches = None, None  # None: savefig.bbox decides
    tight = mpl.rcParams["savefig.bbox"] == "tight"
    if hasattr(fig.canvas, "buffer_rgba"):  # Agg (the inline backend): one draw
        fig.set_dpi(dpi)
        w, h = (int(x) for x in fig.bbox.size)
        if tight and tight_first and fig.get_layout_engine() is None:
            # (a layout engine would move the axes in the draw: its box is known only after it)
            t, beyond = _tight_box(fig, dpi, w, h)
            bbox_inches = t if beyond else None
        if bbox_inches is None:
            fig.canvas.draw()
            rgba = np.asarray(fig.canvas.buffer_rgba())
            h, w = rgba.shape[:2]
            box = (0, 0, w, h)
            if tight:
                background = np.round(255 * np.asarray(mpl.colors.to_rgba(fig.get_facecolor())))
                ink = _ink_box(rgba, background.astype(np.uint8))
                pad = round(mpl.rcParams["savefig.pad_inches"] * dpi)
                if ink is None:
                    pass
                elif ink[0] == 0 or ink[1] == 0 or ink[2] == w or ink[3] == h:
                    # ink at the canvas edge: the drawing may go on beyond it. matplotlib's
                    # tight box says; if it does, it is drawn once more into that box.
                    t, beyond = _tight_box(fig, dpi, w, h)
                    if beyond:
                        bbox_inches = t
                    else:
                        box = (max(0, int(t.x0 * dpi)), max(0, int(h - t.y1 * dpi)),
                               min(w, int(np.ceil(t.x1 * dpi))),
                               min(h, int(np.ceil(h - t.y0 * dpi))))
                else:
                    box = (max(0, ink[0] - pad), max(0, ink[1] - pad),
                           min(w, ink[2] + pad), min(h, ink[3] + pad))
            if bbox_inches is None:
                image = Image.fromarray(np.ascontiguousarray(rgba[box[1]:box[3], box[0]:box[2],
                                                                  :3]))
        if image is None:
            image = _render_rgb(fig, dpi, bbox_inches)
    else:
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=dpi, metadata={"Software": None})
        image = Image.open(buf).convert("RGB")
    out = io.BytesIO()
    info = PngImagePlugin.PngInfo()
    if text_px is not None:
        info.add_text(TEXT_PX_KEY, f"{text_px:.2f}")
    image.quantize(256, method=Image.Quantize.MAXCOVERAGE).save(out, "PNG", pnginfo=info)
    return out.getvalue(), bbox_inches is not None


def _inline_png(fig) -> str | None:
    """IPython's PNG formatter for figures, as :func:`_png` at the figure's dpi (base64 text, as
    IPython's own ``print_figure`` returns). None for an empty figure, as IPython does."""
    if not fig.axes and not fig.lines:
        return None
    return base64.b64encode(_png(fig, fig.dpi)).decode("ascii")


class SliderView:
    """A precomputed slider; display it (it is the last expression of a cell).

    Attributes:
        name: the DOM id suffix (unique within a chapter).
        params: parameter name -> list of values.
        labels: parameter name -> list of display strings.
        frames: frame key (e.g. ``"G=8;beta=0.02"``) -> PNG bytes.
        timings: seconds per frame for ``draw`` (data + figure) and for rasterising it,
            paid once when the cell runs.
    """

    def __init__(self, name: str, params: dict[str, list], labels: dict[str, list[str]],
                 initial: dict[str, Any], frames: dict[str, bytes],
                 timings: dict[str, list[float]], alt: str) -> None:
        self.name, self.params, self.labels = name, params, labels
        self.initial, self.frames = initial, frames
        self.timings, self.alt = timings, alt
        self._widget = None

    @staticmethod
    def key(values: Mapping[str, str]) -> str:
        """The frame key of a combination of display labels: ``"G=8;beta=0.02"``."""
        return ";".join(f"{k}={v}" for k, v in values.items())

    def frame_key(self, values: Mapping[str, Any]) -> str:
        """The frame key of a combination of parameter values (not labels)."""
        return self.key({p: self.labels[p][self.params[p].index(values[p])] for p in self.params})

    def html(self) -> str:
        """The kernel-free slider: range inputs, value read-outs, frames, inline JavaScript.

        The inputs are ``disabled`` until the inline script runs and enables them: where the
        script is dropped (an untrusted notebook in JupyterLab shows the HTML sanitized), the
        slider is inert, not a slider that moves and changes nothing."""
        dom_id = f"grpo-slider-{self.name}"
        parts = [f'<div class="grpo-slider" id="{dom_id}" '
                 f'data-params="{html.escape(";".join(self.params))}">']
        for p, values in self.params.items():
            i0 = values.index(self.initial[p])
            labels = html.escape(json.dumps(self.labels[p]), quote=True)
            parts.append(
                f'<label style="display:block;margin:0.2em 0">{html.escape(p)} '
                f'<input type="range" class="grpo-slider-input" data-param="{html.escape(p)}" '
                f'min="0" max="{len(values) - 1}" step="1" value="{i0}" disabled '
                f'aria-valuetext="{html.escape(f"{p} = {self.labels[p][i0]}", quote=True)}" '
                f'data-labels="{labels}" style="width:16em;vertical-align:middle"> '
                f'<output class="grpo-slider-value" data-param="{html.escape(p)}">'
                f'{html.escape(self.labels[p][i0])}</output></label>')
        start = self.frame_key(self.initial)
        for key, png in self.frames.items():
            shown = "" if key == start else ' hidden="hidden"'  # JupyterLab drops a bare `hidden`
            desc = html.escape(f"{self.alt} ({key.replace(';', ', ')})", quote=True)
            parts.append(
                f'<img class="grpo-slider-frame" data-key="{html.escape(key, quote=True)}" '
                f'alt="{desc}" style="max-width:100%;height:auto"{shown} '
                f'src="data:image/png;base64,{base64.b64encode(png).decode()}">')
        parts.append(_SCRIPT.replace("DOM_ID", dom_id))
        parts.append("</div>")
        return "\n".join(parts)

    def widget(self):
        """The live form: ipywidgets sliders over an image of the chosen frame.

        The frames were drawn by this kernel when the cell ran (edit the cell and re-run it,
        and they are drawn again), so a move only swaps the image: no figure is rebuilt and
        no PNG is rasterised on the hot path, which keeps a drag instant.
        """
        if self._widget is not None:
            return self._widget
        import ipywidgets as w

        sliders = {p: w.SelectionSlider(options=list(zip(self.labels[p], values, strict=True)),
                                        value=self.initial[p], description=p,
                                        continuous_update=True)
                   for p, values in self.params.items()}

        def current_frame() -> bytes:
            return self.frames[self.frame_key({p: s.value for p, s in sliders.items()})]

        image = w.Image(value=current_frame(), format="png")

        def show(_change=None) -> None:
            image.value = current_frame()

        for s in sliders.values():
            s.observe(show, names="value")
        self._widget = w.VBox([*sliders.values(), image])
        self._widget.sliders = sliders  # exposed for tests and the slider benchmark
        return self._widget

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict[str, Any]:
        bundle = {
            "text/plain": f"<slider {self.name}: "
            + ", ".join(f"{p} in [{', '.join(self.labels[p])}]" for p in self.params)
            + f"; {len(self.frames)} frames>",
            "text/html": self.html(),
        }
        if os.environ.get("GRPO_STATIC_ONLY") != "1":
            bundle["application/vnd.jupyter.widget-view+json"] = {
                "version_major": 2, "version_minor": 0, "model_id": self.widget().model_id}
        return bundle


_SCRIPT = """<script>
(function () {
  var root = document.getElementById("DOM_ID");
  if (!root || root.dataset.ready) { return; }
  root.dataset.ready = "1";
  var inputs = root.querySelectorAll("input.grpo-slider-input");
  var frames = root.querySelectorAll("img.grpo-slider-frame");
  function update() {
    var parts = [];
    inputs.forEach(function (inp) {
      var label = JSON.parse(inp.dataset.labels)[Number(inp.value)];
      root.querySelector('output[data-param="' + inp.dataset.param + '"]').textContent = label;
      inp.setAttribute("aria-valuetext", inp.dataset.param + " = " + label);
      parts.push(inp.dataset.param + "=" + label);
    });
    var key = parts.join(";");
    frames.forEach(function (f) { f.hidden = f.dataset.key !== key; });
  }
  inputs.forEach(function (inp) {
    inp.addEventListener("input", update);
    inp.disabled = false;
  });
  update();
})();
</script>"""


def slider(name: str, params: Mapping[str, Sequence[Any]], draw: Callable[..., Any], *,
           initial: Mapping[str, Any] | None = None, fmt: Mapping[str, str] | None = None,
           dpi: int = 72, alt: str = "figure") -> SliderView:
    """Precompute a two-form slider. Make it the last expression of its cell.

    Args:
        name: lowercase id, unique within the chapter (``[a-z0-9-]``).
        params: parameter name -> the values it can take, e.g. ``{"G": [1, 2, 4, 8]}``.
        draw: ``draw(**values) -> matplotlib.figure.Figure`` built from data the cell has
            already computed; it is called once per combination of values, when the cell runs.
        initial: the starting value of each parameter (default: the first value).
        fmt: optional format string per parameter for its display label, e.g. ``"{:.2f}"``.
        dpi: resolution of the static frames (kept modest: every frame is in the notebook;
            at 72, 8-pt legend text is 8 px high). Raised where a frame's smallest text would
            be below MIN_TEXT_PX pixels.
        alt: what the figure shows, for the frames' alt text.

    Returns:
        A :class:`SliderView`. Used by every chapter.
    """
    import matplotlib.pyplot as plt

    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"name must match [a-z0-9][a-z0-9-]*, got {name!r}")
    if not params:
        raise ValueError("params must name at least one parameter")
    values = {str(p): list(v) for p, v in params.items()}
    for p, v in values.items():
        if len(v) < 2:
            raise ValueError(f"parameter {p!r} needs at least 2 values, got {v!r}")
    fmt = dict(fmt or {})
    labels = {p: [_label(x, fmt.get(p)) for x in v] for p, v in values.items()}
    for p, lab in labels.items():
        if any(";" in x or "=" in x for x in [p, *lab]):
            raise ValueError(f"parameter {p!r} and its labels {lab} must not contain ';' or '='"
                             " (they build the frame keys)")
        if len(set(lab)) != len(lab):
            raise ValueError(f"parameter {p!r} has repeated display labels {lab}; pass fmt")
    start = {p: v[0] for p, v in values.items()}
    for p, x in (initial or {}).items():
        if p not in values or x not in values[p]:
            raise ValueError(f"initial value {p}={x!r} is not among {p}'s values")
        start[p] = x
    frames: dict[str, bytes] = {}
    timings: dict[str, list[float]] = {"draw": [], "raster": []}
    beyond = False  # did the last frame go on beyond its canvas? (see _png_beyond)
    for combo in itertools.product(*(range(len(v)) for v in values.values())):
        kwargs = {p: values[p][i] for p, i in zip(values, combo, strict=True)}
        t0 = time.perf_counter()
        fig = draw(**kwargs)
        t1 = time.perf_counter()
        key = SliderView.key({p: labels[p][i] for p, i in zip(values, combo, strict=True)})
        frames[key], beyond = _png_beyond(fig, dpi, tight_first=beyond)
        timings["draw"].append(t1 - t0)
        timings["raster"].append(time.perf_counter() - t1)
        plt.close(fig)
    view = SliderView(name, values, labels, start, frames, timings, alt)
    _log_timings(view)
    return view


def _log_timings(view: SliderView) -> None:
    """With ``GRPO_SLIDER_LOG`` set (by benchmarks/bench_sliders.py), append the slider's
    per-frame costs and one timed live move per value to that JSON-lines file."""
    path = os.environ.get("GRPO_SLIDER_LOG")
    if not path:
        return
    moves = []
    box = view.widget()
    for p, s in box.sliders.items():
        for v in view.params[p]:
            if v == s.value:
                continue
            t0 = time.perf_counter()
            s.value = v  # the observer swaps the frame synchronously, as a real move does
            moves.append(time.perf_counter() - t0)
        s.value = view.initial[p]
    with open(path, "a") as fh:
        fh.write(json.dumps({"name": view.name, "frames": len(view.frames),
                             "draw_s": view.timings["draw"], "raster_s": view.timings["raster"],
                             "move_s": moves}) + "\n")


def band(ax, x: np.ndarray, runs: np.ndarray, *, label: str, color: str | None = None,
         single: np.ndarray | None = None, alpha: float = 0.2):
    """Mean over runs as a line and mean +- 1 sd as a band; optionally one run dashed.

    ``x (T,)``, ``runs (S, T)``, ``single (T,)``. Returns the mean line. Used by chapters 4-9.
    """
    runs = np.asarray(runs, dtype=float)
    mean, sd = runs.mean(axis=0), runs.std(axis=0)
    (line,) = ax.plot(x, mean, color=color, label=f"{label} (mean of {len(runs)} seeds)")
    ax.fill_between(x, mean - sd, mean + sd, color=line.get_color(), alpha=alpha, lw=0)
    if single is not None:
        ax.plot(x, single, color=line.get_color(), ls="--", lw=1, label=f"{label} (one seed)")
    return line


def bars(ax, x, heights, width: float, *, bottom=0.0, **style):
    """A bar chart drawn as ONE PolyCollection (far cheaper to redraw in a slider than a patch
    per bar). ``x, heights (N,)``; ``style`` goes to the collection (facecolor, label, ...).
    Used by chapters 1 and 2."""
    from matplotlib.collections import PolyCollection

    x, h = np.asarray(x, float), np.asarray(heights, float)
    b = np.broadcast_to(np.asarray(bottom, float), h.shape)
    lo, hi = x - width / 2, x + width / 2
    verts = np.stack([np.c_[lo, b], np.c_[lo, b + h], np.c_[hi, b + h], np.c_[hi, b]], axis=1)
    ax.add_collection(PolyCollection(verts, **style))
    ax.autoscale_view()


def plain_log(*axes, xticks=None, yticks=None) -> None:
    """Log axes with plain tick labels at the given values and no minor ticks (``10^k`` labels
    are slow to draw and hard to read). Used by chapters 1, 2, 5."""
    for ax in axes:
        if xticks is not None:
            ax.set_xticks(xticks, [f"{t:g}" for t in xticks])
        if yticks is not None:
            ax.set_yticks(yticks, [f"{t:g}" for t in yticks])
        ax.minorticks_off()


def quiet_minor_ticks(*axes) -> None:
    """No minor ticks, and plain labels (0.01, not mathtext 10^-2) on the log axes' automatic
    major ticks: cleaner, and several times faster to draw. Used by chapter 5."""
    from matplotlib.ticker import FuncFormatter, NullLocator

    for ax in axes:
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_minor_locator(NullLocator())
            if axis.get_scale() == "log":
                axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))


def reference(ax, y: float, label: str, *, color: str = "black", ls: str = "--"):
    """One style for a horizontal reference line (a ceiling, the reference policy's value, an
    exact value). Returns the line. Used by chapters 1, 4-9."""
    return ax.axhline(y, color=color, ls=ls, lw=1, label=label)


def ceiling(ax, y: float, label: str = "ceiling"):
    """The best reward any policy can reach, drawn the same way in every chapter."""
    return reference(ax, y, f"{label} {y:.4f}", color="black", ls=":")


def band_among(ax, x, curves: Mapping[Any, np.ndarray], chosen, *, label: str,
               color: str | None = None):
    """Every setting's mean curve in light grey, the chosen one as a band (a slider's frame).

    ``curves``: setting -> ``(S, T)`` runs. Returns the chosen mean line. Used by chapters 4-9.
    """
    for key, runs in curves.items():
        if key != chosen:
            ax.plot(x, np.asarray(runs).mean(axis=0), color="0.8", lw=1)
    return band(ax, x, curves[chosen], label=label, color=color)


def moving_average(y: np.ndarray, k: int) -> np.ndarray:
    """The mean of each window of ``k`` consecutive values along the last axis of ``y (..., T)``,
    returned as ``(..., T - k + 1)``: noisy per-step training logs, smoothed the same way in every
    figure. Used by chapter 15."""
    y = np.asarray(y, dtype=float)
    c = np.cumsum(np.concatenate([np.zeros((*y.shape[:-1], 1)), y], axis=-1), axis=-1)
    return (c[..., k:] - c[..., :-k]) / k


def book_style() -> None:
    """The book's matplotlib defaults: compact figures, readable fonts, light grid. Used by every
    chapter's setup cell."""
    import matplotlib as mpl

    mpl.rcParams.update({
        "figure.figsize": (7.0, 3.6), "figure.dpi": 80, "axes.grid": True, "grid.alpha": 0.3,
        "axes.spines.top": False, "axes.spines.right": False, "font.size": 10,
        "legend.fontsize": 8, "legend.frameon": False, "savefig.bbox": "tight",
    })
    _use_inline_png()


def _use_inline_png() -> None:
    """In a running IPython kernel, figures shown inline become :func:`_png`'s palette PNGs,
    drawn once (IPython's tight box draws each figure twice), as the slider frames are.
    pyplot is imported first, so the inline backend's own formatter is in place to be replaced.
    """
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is None or not hasattr(shell, "display_formatter"):
        return
    import matplotlib.pyplot as plt  # noqa: F401 - activates the inline backend first
    from matplotlib.figure import Figure

    shell.display_formatter.formatters["image/png"].for_type(Figure, _inline_png)


def show_source(obj: Any):
    """The source of a ``grpo_core`` function or class as a highlighted code block.

    Chapters show the mechanism from the package itself, never a pasted copy that could drift.
    Used by every chapter.
    """
    import inspect

    from IPython.display import Markdown

    return Markdown(f"```python\n{inspect.getsource(obj).rstrip()}\n```")


def show_script(path: str | os.PathLike, *names: str):
    """Top-level definitions of a script file (functions, classes, assignments such as a table of
    settings, each with the comment lines just above it), by name, as one highlighted code block,
    read from the file without running it: a script that imports TRL is shown without importing
    TRL. Raises KeyError for a name the file does not define. Chapter 19."""
    import ast

    from IPython.display import Markdown

    text = open(path, encoding="utf-8").read()
    lines = text.splitlines()
    found = {}
    for node in ast.parse(text).body:
        targets = ([t.id for t in node.targets if isinstance(t, ast.Name)]
                   if isinstance(node, ast.Assign) else [getattr(node, "name", None)])
        for name in set(targets) & set(names):
            first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
            while first > 1 and lines[first - 2].lstrip().startswith("#"):
                first -= 1  # the comment block that introduces it
            found[name] = "\n".join(lines[first - 1:node.end_lineno])
    missing = [n for n in names if n not in found]
    if missing:
        raise KeyError(f"{path} defines no {', '.join(missing)}")
    return Markdown("```python\n" + "\n\n\n".join(found[n] for n in names) + "\n```")


class Table:
    """A small result table in two forms: aligned plain text (``repr``, what a terminal and the
    stored-output checks see) and an HTML ``<table>`` that wraps to the page's column (what the
    book shows). Build it with :func:`table`."""

    def __init__(self, header: Sequence[str], rows: Sequence[Sequence[str]], caption: str | None,
                 numeric: Sequence[bool]) -> None:
        self.header, self.rows, self.caption, self.numeric = header, rows, caption, numeric

    def __repr__(self) -> str:
        columns = range(len(self.header))
        widths = [max(len(r[j]) for r in [self.header, *self.rows]) for j in columns]

        def line(cells):
            padded = (c.rjust(w) if num else c.ljust(w)
                      for c, w, num in zip(cells, widths, self.numeric, strict=True))
            return "  ".join(padded).rstrip()

        out = [line(self.header), "  ".join("-" * w for w in widths)]
        out += [line(r) for r in self.rows]
        return "\n".join(([self.caption] if self.caption else []) + out)

    def _repr_html_(self) -> str:
        def cell(tag, text, num):
            align = "right" if num else "left"
            return f'<{tag} style="text-align:{align}">{html.escape(text)}</{tag}>'

        head = "".join(cell("th", h, n) for h, n in zip(self.header, self.numeric, strict=True))
        body = "".join("<tr>" + "".join(cell("td", c, n) for c, n in
                                         zip(r, self.numeric, strict=True)) + "</tr>"
                       for r in self.rows)
        caption = f"<caption>{html.escape(self.caption)}</caption>" if self.caption else ""
        return (f'<div class="grpo-table" style="max-width:100%;overflow-x:auto">'
                f'<table class="table">{caption}<thead><tr>{head}</tr></thead>'
                f"<tbody>{body}</tbody></table></div>")


def table(header: Sequence[str], rows: Sequence[Sequence[Any]], *, caption: str | None = None,
          fmt: str = "{:.4f}") -> Table:
    """A table of results (one row per setting), shown as a real HTML table on the page and as
    aligned text elsewhere. Make it the last expression of its cell.

    Args:
        header: the column names, ``(C,)``.
        rows: ``(R, C)`` cells: strings are shown as they are, numbers through ``fmt``
            (format them yourself where a column needs another precision); integers as they are.
        caption: an optional line above the table.
        fmt: the format of numeric cells, e.g. ``"{:.3f}"``.

    Returns:
        A :class:`Table`. Used by chapters 10-15.
    """
    header = [str(h) for h in header]
    text = [[c if isinstance(c, str) else str(c) if isinstance(c, int | np.integer)
             else fmt.format(c) for c in r] for r in rows]
    if any(len(r) != len(header) for r in text):
        raise ValueError(f"every row needs {len(header)} cells, one per column of {header}")
    numeric = [all(_is_number(r[j]) or r[j] in ("-", "") for r in text)  # "-": no value
               and any(_is_number(r[j]) for r in text) for j in range(len(header))]
    return Table(header, text, caption, numeric)


def _is_number(text: str) -> bool:
    try:
        float(text.replace(",", "").replace("%", "").replace("+-", "").split()[0])
    except (ValueError, IndexError):
        return False
    return True
