"""Check the built book the way a reader sees it: in a real browser (Chromium via Playwright).

    python tools/browser_check.py                # the book in this repository
    python tools/browser_check.py --book DIR     # a book in DIR (DIR/_toc.yml, DIR/_build/html)
    python tools/browser_check.py --update-docs  # also copy slider screenshots to docs/images/
    python tools/browser_check.py --width 390    # at phone width, with phone screenshots

Serves the built HTML on 127.0.0.1 (a free port) and, for every page of _toc.yml (the root and
every `file:` entry), checks that:

- the page loads, and every <img> in the article has loaded (naturalWidth > 0); a slider's
  hidden frames (files loaded when shown or when the reader reaches for the slider) are checked
  as the slider is moved (images from other hosts, such as a badge, are counted apart: the
  check blocks other hosts);
- every image of the book has alt text that is not a file name;
- no JavaScript exception is thrown and nothing is logged with console.error (apart from a short,
  commented allowlist of offline noise);
- no file of the book itself (a request to the local server) is missing;
- ids are unique on the page;
- no raw TeX (`\\(`, `\\[`, `$$`, or any command such as `\\frac` or `\\lambda`) is visible outside
  code, whether the math was rendered at build time (docs/sphinx_ext/book_math.py) or MathJax
  (served by the site itself, so this holds offline) has typeset the page, and
  MathJax shows no error box (`mjx-merror`, "Math input error");
- no notebook or Markdown source of the book contains a control character (JSON turns an
  unescaped `\\b` of `\\beta` into a backspace; checked before the browser starts);
- a notebook page has a Binder launch button that opens it in JupyterLab;
- every kernel-free slider (grpo_core.viz.slider; contract in its module docstring) works: its
  range inputs are moved, one at a time (value set + an `input` event, as a drag does), through
  every value and every combination of values, and after each move every displayed <output> is
  its input's current label, each input's aria-valuetext (what a screen reader announces) is
  "param = label", exactly one frame is visible, its data-key (and alt text) name the
  slider's current values, and its picture differs from the one shown before the move.

At every width it also checks the layout: the page does not scroll sideways, and no display
equation is wider than the column without scrolling inside its box (a clipped equation). At
desktop width (above 640 px) no table may be wider than the article's column at all, and no
display equation, as MathJax typeset it, wider than its box (the column less the equation
number): it must fit without scrolling. At phone
width (`--width` 640 or less) every figure must be shown at 90% of its pixel size or more (scaled to
a 360 px column, a figure's text is 3-5 px high; _static/grpo.css shows it at its own size in an
output box that scrolls sideways), a tap on the page's widest figure wider than its box must fit
it to the box and a second tap restore it (_static/grpo.js), and a screenshot of each page's
widest figure and widest equation is saved (`PAGE-figure.png`, `PAGE-math.png`). Each page's
line reports the smallest figure scale shown (CSS px per image px).

Accessibility and page hygiene (check_axe, check_hygiene, check_text_size): axe-core (bundled by
the `axe-playwright-python` package; its experimental rules too, e.g. WCAG 2.5.3's
`label-content-name-mismatch`) runs on every page and every serious or critical violation fails,
except the few in AXE_UPSTREAM that come from the theme and that the book cannot fix (listed in
the README). Every page has a favicon that loads and a meta description, loads nothing from
another host, and its sliders' inputs were enabled by their script. Every figure made by
grpo_core.viz records its smallest text in pixels; as shown (a figure wider than the column is
scaled down) it must be at least MIN_TEXT_PX high.

Requests to any other host are blocked, so the check is the same online and offline. Chromium is
Debian's (`apt-get install -y chromium`) at /usr/bin/chromium; Playwright never downloads a browser.

It prints one line per page with its counts, then every failure naming the page, the slider and
the value, and exits 1 on any failure. It also saves screenshots of the first chapter that has a
slider (the slider as first shown, the slider after one move, and the page) into
_build/screenshots/; with --update-docs the two slider pictures are copied to docs/images/, where
the README shows them.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import re
import shutil
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from check_build import toc_files  # the pages the build must have are the pages checked

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
]
VIEWPORT = {"width": 1280, "height": 900}
PHONE_WIDTH = 640  # at this width or less: phone checks and screenshots (_static/grpo.css)
PHONE_HEIGHT = 844  # with --width 390: an iPhone 12-15's viewport in CSS px
MIN_PHONE_SCALE = 0.9  # a figure shown smaller than this at phone width has unreadable text
SCREENSHOTS = {"initial": "slider-initial.png", "moved": "slider-moved.png", "page": "page.png"}
DOCS_IMAGES = ROOT / "docs" / "images"

# JavaScript exceptions that are harmless offline noise from third-party scripts, never from the
# book's own code. Each entry: (regular expression matched against the message, why it is allowed).
# Keep this list short and narrow: an exception not matched here fails the check.
# (sphinx-thebe's duplicated inline config, which threw on every page, is now written once by
# docs/sphinx_ext/book_pages.py.)
ALLOWED_PAGE_ERRORS: list[tuple[str, str]] = []

# axe-core: the impacts that fail the check, and the violations that come from upstream (the
# theme) and that the book cannot fix: (rule id, regular expression matched against the node's
# CSS selector, why). The README lists them. Keep this list short and narrow.
AXE_FAILING_IMPACTS = ("serious", "critical")
AXE_UPSTREAM: list[tuple[str, str, str]] = []
MIN_TEXT_PX = 8.0  # grpo_core.viz.MIN_TEXT_PX: the smallest text a figure may show, in CSS px
TEXT_PX_KEY = "grpo-min-text-px"  # grpo_core.viz.TEXT_PX_KEY


@dataclass
class PageResult:
    page: str
    images: int = 0
    external: int = 0  # images from other hosts (badges): not loaded here, not checked
    sliders: int = 0
    values: int = 0
    min_scale: float | None = None  # smallest shown/natural width of a figure
    taps: int = 0  # figures tapped to fit and back (phone width)
    axe: dict = field(default_factory=dict)  # axe-core rule id -> (impact, nodes, upstream)
    min_text_px: float | None = None  # smallest figure text as shown, CSS px
    seconds: float = 0.0
    failures: list[str] = field(default_factory=list)

    def fail(self, what: str) -> None:
        self.failures.append(f"{self.page}: {what}")


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the base class's signature
        pass


def serve(directory: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    handler = functools.partial(_QuietHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    host, port = server.server_address[:2]
    return server, f"http://{host}:{port}/"


# In the page (_static/grpo.js checks whether a box scrolls sideways, to make it focusable and
# add the cue under it, when the box comes near the screen, and every box left at the first Tab
# key press): scroll through the page as a reader does, one screen at a time, and return the
# boxes that were on screen (shown: not inside a closed <details>) but are still unchecked.
JS_SCROLL_THROUGH = """async () => {
  if (typeof grpoPending === 'undefined') { return []; }
  const frame = () => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
  const seen = [];
  const step = Math.max(200, window.innerHeight);
  for (let y = 0; ; y += step) {
    window.scrollTo(0, y);
    await frame();
    await frame();
    // (the boxes grpo.js checks: its own selectors)
    document.querySelectorAll("div.cell_output, " + GRPO_THEME_SCROLLERS).forEach((el) => {
      const r = el.getBoundingClientRect();
      if (el.checkVisibility() && r.bottom > 0 && r.top < window.innerHeight) {
        seen.push(el);
      }
    });
    if (y + window.innerHeight >= document.documentElement.scrollHeight) { break; }
  }
  window.scrollTo(0, 0);
  await frame();
  return seen.filter((el) => grpoPending.has(el)).slice(0, 5)
    .map((el) => el.tagName.toLowerCase() + "." + el.className + " " + el.textContent.slice(0, 40));
}"""
JS_SCROLLERS_CHECKED = ("() => document.documentElement.dataset.grpoScrollers === 'checked'"
                        " || typeof grpoCheckAll === 'undefined'")


def check_scrollers(page, result: PageResult) -> None:
    """grpo.js checks the boxes a reader scrolls past, and the rest at the first Tab key press."""
    missed = page.evaluate(JS_SCROLL_THROUGH)
    for what in missed:
        result.fail(f"a box on screen was not checked for sideways scrolling: {what!r}")
    page.keyboard.press("Tab")
    page.wait_for_function(JS_SCROLLERS_CHECKED, timeout=30_000)
    page.evaluate("() => document.activeElement && document.activeElement.blur()")


# In the page: wait for every image of the article, then count and describe them. A lazy image
# (loading="lazy": below the fold) is loaded as a reader scrolling to it would; a slider's hidden
# frames (lazy until shown, docs/sphinx_ext/book_weight.py) are left to check_slider, which shows
# each of them.
JS_IMAGES = """async () => {
  const scope = document.querySelector("article") || document.querySelector("main")
    || document.body;
  const imgs = Array.from(scope.querySelectorAll("img"));
  const frame = (img) => img.matches(".grpo-slider img.grpo-slider-frame[loading=lazy]");
  imgs.forEach((img) => { if (img.loading === "lazy" && !frame(img)) { img.loading = "eager"; } });
  await Promise.all(imgs.map((img) => img.complete || frame(img) ? null : new Promise((ok) => {
    img.addEventListener("load", ok);
    img.addEventListener("error", ok);
  })));
  return imgs.map((img) => ({
    ok: frame(img) || (img.complete && img.naturalWidth > 0),
    alt: img.getAttribute("alt") || "",
    external: /^https?:/.test(img.src) && !img.src.startsWith(location.origin + "/"),
    what: (img.getAttribute("data-key") ? "frame " + img.getAttribute("data-key") + " of "
           + (img.closest(".grpo-slider") || {}).id : (img.getAttribute("src") || "").slice(0, 80)),
  }));
}"""

# In the page: wait for MathJax to typeset (the site serves its own copy: no CDN), then return
# the visible prose text that still holds TeX delimiters (code blocks and typeset math excluded).
JS_RAW_TEX = r"""async () => {
  // the page's MathJax script, if any: wait (up to 10 s) for it to start, then to typeset
  if (document.querySelector('script[src*="mathjax" i]')) {
    for (let t = 0; t < 100 && !(window.MathJax && MathJax.startup && MathJax.startup.promise);
         t++) {
      await new Promise((ok) => setTimeout(ok, 100));
    }
    if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
      await MathJax.startup.promise;
    }
  }
  const scope = document.querySelector("article") || document.querySelector("main")
    || document.body;
  const skip = "pre, code, script, style, mjx-container, .MathJax, textarea";
  const walker = document.createTreeWalker(scope, NodeFilter.SHOW_TEXT);
  const found = [];
  // delimiters, or any TeX command (a backslash and two or more letters) left as text
  const tex = /\\\(|\\\)|\\\[|\\\]|\$\$|\\[A-Za-z]{2,}/;
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const el = n.parentElement;
    if (!el || el.closest(skip) || !el.checkVisibility()) { continue; }
    const m = n.textContent.match(tex);
    if (m) {
      const i = n.textContent.indexOf(m[0]);
      found.push(n.textContent.slice(Math.max(0, i - 30), i + 50).replace(/\s+/g, " "));
    }
  }
  return {mathjax: !!(window.MathJax && MathJax.version), version: (window.MathJax || {}).version
          || null, raw: found};
}"""

# In the page: the layout at this width. Sideways page overflow; display equations wider than their
# box that do not scroll inside it (clipped); each visible figure's shown/natural width.
JS_LAYOUT = r"""() => {
  const scope = document.querySelector("article") || document.querySelector("main")
    || document.body;
  const doc = document.documentElement;
  const math = [];
  scope.querySelectorAll("div.math").forEach((box, i) => {
    const c = box.querySelector("mjx-container");
    const m = c && c.querySelector("mjx-math");
    if (!m) { return; }
    const wide = m.getBoundingClientRect().width > box.clientWidth + 1;
    const scrolls = c.scrollWidth > c.clientWidth + 1
      && /auto|scroll/.test(getComputedStyle(c).overflowX)
      && c.getBoundingClientRect().right <= box.getBoundingClientRect().right + 1;
    math.push({index: i, id: box.id || "", width: m.getBoundingClientRect().width,
               box: box.clientWidth, clipped: wide && !scrolls});
  });
  const figures = Array.from(scope.querySelectorAll("div.cell_output img"))
    .filter((img) => img.naturalWidth > 0 && img.checkVisibility())
    .map((img, i) => ({index: i, natural: img.naturalWidth,
                       shown: img.getBoundingClientRect().width,
                       what: img.getAttribute("data-key") || (img.getAttribute("alt") || "")
                         .slice(0, 60)}));
  return {overflow: doc.scrollWidth - doc.clientWidth, math: math, figures: figures};
}"""

# In the page, after MathJax has typeset it: every MathJax error box (mjx-merror: "Math input
# error" in red on the page), with the TeX it could not read.
JS_MATH_ERRORS = r"""() => Array.from(document.querySelectorAll("mjx-merror")).map((e) => ({
  text: (e.getAttribute("data-mjx-error") || e.textContent || "").slice(0, 80),
  tex: ((e.closest("mjx-container") || {}).getAttribute
        ? (e.closest("mjx-container").getAttribute("aria-label") || "") : "").slice(0, 80)}))"""

# In the page: tables (markdown tables and tables in outputs) and code blocks wider than the
# article's column, and every visible display equation's size once MathJax has typeset it (its
# typeset width, and its box's width and scroll width: the box is narrower than the column by the
# equation number), for equation_failures. At desktop width nothing should need to scroll sideways
# to be read.
JS_WIDE = r"""() => {
  const scope = document.querySelector("article") || document.querySelector("main")
    || document.body;
  const column = scope.clientWidth;
  const wide = [];
  const describe = (el) => (el.id || (el.closest("[id]") || {}).id || "")
    + ": " + (el.textContent || "").replace(/\s+/g, " ").trim().slice(0, 50);
  const equations = [];
  scope.querySelectorAll("div.math mjx-math, mjx-container[display='true'] mjx-math")
    .forEach((m) => {
      const c = m.closest("mjx-container");
      if (!m.checkVisibility()) { return; }
      equations.push({width: m.getBoundingClientRect().width, box: c.clientWidth,
                      content: c.scrollWidth,
                      what: describe(m.closest("div.math, mjx-container"))});
    });
  scope.querySelectorAll("table").forEach((t) => {
    const w = Math.max(t.scrollWidth, t.getBoundingClientRect().width);
    if (w > column + 1 && t.checkVisibility()) {
      wide.push({kind: "table", width: w, column: column, what: describe(t)});
    }
  });
  // code (cells and code blocks): a line too long for the column wraps (_static/code-width.css)
  scope.querySelectorAll("div.highlight pre").forEach((p) => {
    if (p.scrollWidth > p.clientWidth + 1 && p.checkVisibility()) {
      wide.push({kind: "code block", width: p.scrollWidth, column: p.clientWidth,
                 what: describe(p)});
    }
  });
  return {column: column, wide: wide, equations: equations};
}"""

JS_DUPLICATE_IDS = """() => {
  const seen = new Map();
  document.querySelectorAll("[id]").forEach((e) => seen.set(e.id, (seen.get(e.id) || 0) + 1));
  return Array.from(seen).filter(([, n]) => n > 1).map(([id, n]) => id + " (x" + n + ")");
}"""

JS_BINDER_LINKS = """() => Array.from(document.querySelectorAll('a[href^="https://mybinder.org/"]'))
  .map((a) => a.href)"""

JS_WIDGET_VIEWS = """() => document.querySelectorAll(
  'script[type="application/vnd.jupyter.widget-view+json"]').length"""

# The static structure of every slider (before anything is moved).
JS_SLIDERS = """() => Array.from(document.querySelectorAll(".grpo-slider")).map((root, i) => ({
  id: root.id || ("#" + (i + 1) + " (no id)"),
  index: i,
  params: (root.dataset.params || "").split(";"),
  inputs: Array.from(root.querySelectorAll("input.grpo-slider-input")).map((inp) => ({
    param: inp.dataset.param, value: Number(inp.value), min: Number(inp.min),
    max: Number(inp.max), step: Number(inp.step),
    labels: (() => {
      try { return JSON.parse(inp.dataset.labels); } catch (e) { return null; }
    })(),
  })),
  outputs: Array.from(root.querySelectorAll("output.grpo-slider-value"))
    .map((o) => o.dataset.param),
  keys: Array.from(root.querySelectorAll("img.grpo-slider-frame")).map((f) => f.dataset.key),
}))"""

# What a reader sees in one slider: the read-outs and the visible frames.
JS_STATE = """(index) => {
  const root = document.querySelectorAll(".grpo-slider")[index];
  // A slider inside a collapsed block (e.g. a hide-output toggle) has no layout: judge its
  // frames by their own hidden/display state then.
  const laidOut = root.getClientRects().length > 0;
  const shown = Array.from(root.querySelectorAll("img.grpo-slider-frame")).filter((f) => {
    const r = f.getBoundingClientRect();
    return !f.hidden && getComputedStyle(f).display !== "none"
      && (!laidOut || (r.width > 0 && r.height > 0));
  });
  const outputs = {};
  root.querySelectorAll("output.grpo-slider-value").forEach((o) => {
    outputs[o.dataset.param] = o.textContent.trim();
  });
  const valuetext = {};
  root.querySelectorAll("input.grpo-slider-input").forEach((i) => {
    valuetext[i.dataset.param] = i.getAttribute("aria-valuetext");
  });
  return {outputs: outputs, valuetext: valuetext,
          shown: shown.map((f) => ({key: f.dataset.key, alt: f.alt, src: f.currentSrc || f.src}))};
}"""

# The frames of one slider: is each loaded, is it lazy, is it shown. After a move the frame shown
# may still be loading (a lazy frame loads once shown): wait for it (up to 10 s).
JS_FRAMES = """async (index) => {
  const root = document.querySelectorAll(".grpo-slider")[index];
  const frames = Array.from(root.querySelectorAll("img.grpo-slider-frame"));
  await Promise.all(frames.filter((f) => !f.hidden && !f.complete).map((f) => Promise.race([
    new Promise((ok) => { f.addEventListener("load", ok); f.addEventListener("error", ok); }),
    new Promise((ok) => setTimeout(ok, 10000))])));
  return frames.map((f) => ({key: f.dataset.key, lazy: f.loading === "lazy", hidden: f.hidden,
                             loaded: f.complete && f.naturalWidth > 0}));
}"""

# A reader reaching for a slider (keyboard focus on its first input): _static/grpo.js starts
# loading all its frames; wait until they have loaded (up to 10 s).
JS_REACH = """async (index) => {
  const root = document.querySelectorAll(".grpo-slider")[index];
  root.querySelector("input.grpo-slider-input").focus();
  const frames = Array.from(root.querySelectorAll("img.grpo-slider-frame"));
  await Promise.all(frames.filter((f) => !f.complete).map((f) => Promise.race([
    new Promise((ok) => { f.addEventListener("load", ok); f.addEventListener("error", ok); }),
    new Promise((ok) => setTimeout(ok, 10000))])));
  document.activeElement.blur();
  return frames.filter((f) => !(f.complete && f.naturalWidth > 0)).map((f) => f.dataset.key);
}"""

# A reader about to use a slider has it on screen: open the collapsed blocks around it (a hidden
# cell output) and scroll it into view (a lazy frame loads once shown near the viewport).
JS_TO_SLIDER = """(index) => {
  const root = document.querySelectorAll(".grpo-slider")[index];
  for (let d = root.closest("details"); d; d = d.parentElement.closest("details")) {
    d.open = true;
  }
  root.scrollIntoView({block: "center"});
}"""

# Move one range input as a drag does: set its value, then fire "input".
JS_MOVE = """([index, param, value]) => {
  const root = document.querySelectorAll(".grpo-slider")[index];
  const inp = Array.from(root.querySelectorAll("input.grpo-slider-input"))
    .find((i) => i.dataset.param === param);
  inp.value = String(value);
  inp.dispatchEvent(new Event("input", {bubbles: true}));
  return Number(inp.value);
}"""


def check_frames_load(page, result: PageResult, info: dict, reach: bool) -> None:
    """Frames as files (docs/sphinx_ext/book_weight.py): the frame shown first has loaded with the
    page; a hidden frame has not (it loads when shown), unless `reach`: then the reader reaches
    for the slider (focus) and every frame must load (_static/grpo.js)."""
    where = f"slider {info['id']}"
    frames = page.evaluate(JS_FRAMES, info["index"])
    for f in frames:
        if not f["hidden"] and not f["loaded"]:
            result.fail(f"{where}: the frame shown first ({f['key']}) did not load with the page")
        if not f["hidden"] and f["lazy"]:
            result.fail(f"{where}: the frame shown first ({f['key']}) is lazy")
        if f["hidden"] and f["lazy"] and f["loaded"]:
            result.fail(f"{where}: hidden frame {f['key']} loaded before the reader used the "
                        "slider (loading=lazy should keep it back)")
    if reach and any(f["lazy"] for f in frames):
        for key in page.evaluate(JS_REACH, info["index"]):
            result.fail(f"{where}: frame {key} did not load when the slider took the focus")


def check_slider(page, result: PageResult, info: dict) -> None:
    """Move every input of one slider through all its values; record failures on `result`."""
    sid = info["id"]
    where = f"slider {sid}"
    params, inputs = info["params"], {i["param"]: i for i in info["inputs"]}
    if not info["inputs"]:
        result.fail(f"{where}: no range input")
        return
    if list(inputs) != params or len(info["inputs"]) != len(params):
        result.fail(f"{where}: data-params {params} but range inputs for "
                    f"{[i['param'] for i in info['inputs']]}")
        return
    if sorted(info["outputs"]) != sorted(params):
        result.fail(f"{where}: <output> read-outs for {info['outputs']}, expected {params}")
        return
    state = {}
    for p, inp in inputs.items():
        labels = inp["labels"]
        if not isinstance(labels, list) or len(labels) < 2:
            result.fail(f"{where}: input {p} has data-labels {labels!r}")
            return
        if (inp["min"], inp["max"], inp["step"]) != (0, len(labels) - 1, 1):
            result.fail(f"{where}: input {p} has min/max/step {inp['min']}/{inp['max']}/"
                        f"{inp['step']}, expected 0/{len(labels) - 1}/1 for {len(labels)} labels")
            return
        state[p] = inp["value"]
    n_frames = 1
    for inp in inputs.values():
        n_frames *= len(inp["labels"])
    if len(info["keys"]) != n_frames or len(set(info["keys"])) != len(info["keys"]):
        result.fail(f"{where}: {len(info['keys'])} frames ({len(set(info['keys']))} distinct "
                    f"keys), expected one per combination: {n_frames}")

    def expected_key() -> str:
        return ";".join(f"{p}={inputs[p]['labels'][state[p]]}" for p in params)

    def look(what: str) -> dict | None:
        """Check what the reader sees against `state`; return the visible frame."""
        seen = page.evaluate(JS_STATE, info["index"])
        ok = True
        for p in params:
            want = inputs[p]["labels"][state[p]]
            if seen["outputs"].get(p) != want:
                result.fail(f"{where}, {what}: read-out of {p} shows "
                            f"{seen['outputs'].get(p)!r}, expected {want!r}")
                ok = False
            if seen["valuetext"].get(p) != f"{p} = {want}":  # what a screen reader announces
                result.fail(f"{where}, {what}: aria-valuetext of {p} is "
                            f"{seen['valuetext'].get(p)!r}, expected {p + ' = ' + want!r}")
                ok = False
        if len(seen["shown"]) != 1:
            result.fail(f"{where}, {what}: {len(seen['shown'])} frames visible "
                        f"({[f['key'] for f in seen['shown']]}), expected exactly one")
            return None
        frame = seen["shown"][0]
        key = expected_key()
        if frame["key"] != key:
            result.fail(f"{where}, {what}: visible frame is {frame['key']!r}, expected {key!r}")
            ok = False
        elif key.replace(";", ", ") not in (frame["alt"] or ""):
            result.fail(f"{where}, {what}: alt text {frame['alt']!r} does not name {key!r}")
            ok = False
        return frame if ok else None

    previous = look("as first shown")
    initial = dict(state)
    for p, v in walk(params, {p: len(inputs[p]["labels"]) for p in params}, initial):
        what = f"{p}={inputs[p]['labels'][v]}"
        before = previous
        got = page.evaluate(JS_MOVE, [info["index"], p, v])
        state[p] = v
        result.values += 1
        if got != v:
            result.fail(f"{where}, {what}: the input took value {got}, not {v}")
            state[p] = got
        for f in page.evaluate(JS_FRAMES, info["index"]):  # the frame now shown has loaded
            if not f["hidden"] and not f["loaded"]:
                result.fail(f"{where}, {what}: frame {f['key']} did not load once shown")
        previous = look(f"{what} (at {expected_key()})")
        if previous is not None and before is not None and previous["src"] == before["src"]:
            result.fail(f"{where}, {what} (at {expected_key()}): the figure did not change "
                        f"(same picture as {before['key']!r})")


def walk(params: list[str], sizes: dict[str, int], start: dict[str, int]) -> list[tuple[str, int]]:
    """Moves (parameter, new value index) that show every frame of a slider, one input at a time.

    From the starting values, each input goes to its first value; then a reflected Gray code
    visits every combination, each step moving one input by one notch, as a drag does; then each
    input returns to its starting value. Every move changes one value, so the figure must change.
    """
    def gray(ps: list[str]) -> list[tuple[int, ...]]:
        if not ps:
            return [()]
        rest = gray(ps[1:])
        return [(i, *r) for i in range(sizes[ps[0]]) for r in (rest if i % 2 == 0 else rest[::-1])]

    state, moves = dict(start), []

    def go(p: str, v: int) -> None:
        if state[p] != v:
            moves.append((p, v))
            state[p] = v

    for p in params:
        go(p, 0)
    for combo in gray(params):
        for p, v in zip(params, combo, strict=True):
            go(p, v)
    for p in params:
        go(p, start[p])
    return moves


def check_layout(page, result: PageResult, phone: bool) -> None:
    """No sideways page scroll, no clipped display equation; at phone width, no figure shown
    below MIN_PHONE_SCALE of its pixel size."""
    layout = page.evaluate(JS_LAYOUT)
    if layout["overflow"] > 1:
        result.fail(f"the page scrolls sideways by {layout['overflow']} px")
    for m in layout["math"]:
        if m["clipped"]:
            result.fail(f"display equation {m['id'] or m['index']} is clipped: "
                        f"{m['width']:.0f} px wide in a {m['box']} px box that does not scroll")
    scales = [f["shown"] / f["natural"] for f in layout["figures"]]
    result.min_scale = min(scales) if scales else None
    if phone:
        for f, scale in zip(layout["figures"], scales, strict=True):
            if scale < MIN_PHONE_SCALE:
                result.fail(f"figure {f['what']!r} shown at {scale:.2f} of its {f['natural']} px "
                            f"(below {MIN_PHONE_SCALE} at phone width: its text is unreadable)")


JS_FIGURE_WIDTH = """(img) => ({shown: img.getBoundingClientRect().width,
  box: img.closest("div.cell_output").clientWidth})"""


def check_math_errors(page, result: PageResult) -> None:
    """MathJax's error boxes (``mjx-merror``, "Math input error"): TeX that MathJax could not
    read, such as a ``\\b`` of ``\\beta`` that JSON turned into a backspace. Call after
    JS_RAW_TEX, which waits for the typesetting."""
    for err in page.evaluate(JS_MATH_ERRORS):
        result.fail(f"MathJax error on the page: {err['text']!r} in {err['tex']!r}")


def equation_failures(equations: list[dict], column: float) -> list[str]:
    """At desktop width, what is wrong with each display equation as MathJax typeset it
    (JS_WIDE's measures, CSS px): wider than the article's ``column``, or its content
    (``content``, the box's scroll width) wider than its ``box``, which is the column less the
    equation number. Either way a reader scrolls inside the box to read it."""
    failures = []
    for eq in equations:
        if eq["width"] > column + 1:
            failures.append(f"display equation {eq['width']:.0f} px wide in a {column:.0f} px "
                            f"column ({eq['what']})")
        elif eq["content"] > eq["box"] + 1:
            failures.append(f"display equation scrolls in its box: {eq['content']:.0f} px of "
                            f"content in a {eq['box']:.0f} px box ({eq['what']})")
    return failures


def check_width(page, result: PageResult) -> None:
    """At desktop width: no display equation wider than its box or the article's column, no
    table or code block wider than the column (to read it a reader would scroll sideways, or it
    is cut off)."""
    found = page.evaluate(JS_WIDE)
    for w in found["wide"]:
        result.fail(f"{w['kind']} {w['width']:.0f} px wide in a {w['column']} px column "
                    f"({w['what']})")
    for failure in equation_failures(found["equations"], found["column"]):
        result.fail(failure)


# A control character in a notebook's source (other than tab, newline, carriage return) is always
# a mistake: JSON reads "\beta" as a backspace and "eta", and the page shows a MathJax error.
CONTROL_CHARS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def source_control_chars(book: Path, pages: list[str]) -> list[str]:
    """Every control character in the sources of the book's pages (notebook cells, Markdown),
    as "page, cell N, line L: ...context..." failures."""
    import json

    found = []
    for name in pages:
        for suffix in (".ipynb", ".md"):
            path = book / f"{name}{suffix}"
            if not path.is_file():
                continue
            text = path.read_text(encoding="utf-8")
            cells = ([c.get("source", "") for c in json.loads(text).get("cells", [])]
                     if suffix == ".ipynb" else [text])
            for i, src in enumerate(cells):
                src = "".join(src) if isinstance(src, list) else src
                for m in CONTROL_CHARS.finditer(src):
                    line = src.count("\n", 0, m.start()) + 1
                    context = src[max(0, m.start() - 20):m.end() + 20].replace("\n", " ")
                    found.append(f"{name}{suffix}: control character {m.group()!r} in cell {i}, "
                                 f"line {line}: ...{context!r}...")
    return found


def check_tap_to_fit(page, result: PageResult) -> None:
    """At phone width (_static/grpo.js): a tap on the widest figure that is wider than its box
    fits it to the box; a second tap shows it at its own size again."""
    layout = page.evaluate(JS_LAYOUT)
    wide = [f for f in layout["figures"] if f["shown"] > f["natural"] * MIN_PHONE_SCALE]
    img = page.locator("article div.cell_output img:visible")
    wide = [f for f in wide if img.nth(f["index"]).evaluate(JS_FIGURE_WIDTH)["box"] < f["shown"]]
    if not wide:
        return
    f = max(wide, key=lambda it: it["natural"])
    target = img.nth(f["index"])
    target.scroll_into_view_if_needed()
    for tap, fits in ((0, False), (1, True), (2, False)):
        if tap:
            target.tap()
        w = target.evaluate(JS_FIGURE_WIDTH)
        if (w["shown"] <= w["box"] + 1) != fits:
            result.fail(f"tap {tap} on figure {f['what']!r}: shown {w['shown']:.0f} px in a "
                        f"{w['box']} px box (expected it to {'fit' if fits else 'overflow'})")
        # a box that scrolls sideways says so under it (grpo.js), and only then
        if target.evaluate(JS_SCROLL_HINT) != (not fits):
            result.fail(f"tap {tap} on figure {f['what']!r}: the 'scrolls sideways' cue is "
                        f"{'missing' if not fits else 'shown on a fitted figure'}")
    result.taps += 1


# True when the figure's output box is followed by grpo.js's visible "scrolls sideways" cue.
JS_SCROLL_HINT = """(img) => {
  const next = img.closest("div.cell_output").nextElementSibling;
  return !!next && next.classList.contains("grpo-scroll-hint") && next.offsetHeight > 0;
}"""


def phone_screenshots(page, base: str, name: str, out: Path) -> list[Path]:
    """At phone width: the viewport around the page's widest figure and its widest display
    equation (a figure's output box and an equation's box scroll sideways)."""
    page.goto(f"{base}{name}.html", wait_until="load")
    page.evaluate(JS_RAW_TEX)  # waits for MathJax to typeset
    layout = page.evaluate(JS_LAYOUT)
    out.mkdir(parents=True, exist_ok=True)
    stem, saved = name.replace("/", "_"), []
    for kind, items, selector in (("figure", layout["figures"], "div.cell_output img"),
                                  ("math", layout["math"], "div.math")):
        if not items:
            continue
        widest = max(items, key=lambda it: it["natural"] if kind == "figure" else it["width"])
        target = page.locator(f"article {selector}" if kind == "math"
                              else f"article {selector}:visible").nth(widest["index"])
        target.evaluate("(el) => el.scrollIntoView({block: 'center'})")
        path = out / f"{stem}-{kind}.png"
        page.screenshot(path=path)
        saved.append(path)
    return saved


# --- accessibility and page hygiene: axe-core, favicon, meta description, no external loads,
# enabled slider inputs, figure text size as shown ---

JS_AXE_EXPERIMENTAL = "() => axe.getRules(['experimental']).map((r) => r.ruleId)"


def _axe_script() -> str:
    from axe_playwright_python.base import AXE_SCRIPT  # axe.min.js, bundled by the package

    return AXE_SCRIPT


def axe_upstream(rule: str, target: str) -> str | None:
    """Why a violation node is upstream's (AXE_UPSTREAM), or None if the book must fix it."""
    return next((why for rid, rx, why in AXE_UPSTREAM
                 if rid == rule and re.search(rx, target)), None)


def check_axe(page, result: PageResult) -> None:
    """axe-core on the page as shown (after MathJax), with its experimental rules on; fail on
    each serious or critical violation not in AXE_UPSTREAM, naming the rule and the nodes."""
    page.evaluate(_axe_script())
    # every experimental rule but css-orientation-lock, which needs axe's stylesheet preload;
    # the preload (off) asks the server for /basic.css, an @import of the theme's CSS resolved
    # against the wrong folder: a 404 that would fail the check of missing files
    experimental = [r for r in page.evaluate(JS_AXE_EXPERIMENTAL) if r != "css-orientation-lock"]
    options = {"resultTypes": ["violations"], "preload": False,
               "rules": {rule: {"enabled": True} for rule in experimental}}
    found = page.evaluate("(options) => axe.run(document, options)", options)
    for v in found["violations"]:
        targets = [" ".join(map(str, n["target"])) for n in v["nodes"]]
        ours = [t for t in targets if axe_upstream(v["id"], t) is None]
        result.axe[v["id"]] = (v["impact"], len(targets), len(targets) - len(ours))
        if v["impact"] in AXE_FAILING_IMPACTS and ours:
            result.fail(f"axe-core {v['id']} ({v['impact']}, {len(ours)} node(s)): {v['help']}: "
                        + "; ".join(ours[:3]) + (" ..." if len(ours) > 3 else ""))


def axe_summary(result: PageResult) -> str:
    """The page's smallest figure text as shown and its axe-core violations, for its line."""
    text = (f"  smallest figure text {result.min_text_px:.1f} px"
            if result.min_text_px is not None else "")
    if not result.axe:
        return text + "  axe: 0 violations"
    return text + "  axe: " + ", ".join(f"{rule} ({impact}, {n}{f', {up} upstream' if up else ''})"
                                 for rule, (impact, n, up) in sorted(result.axe.items()))


def axe_totals(results: list[PageResult]) -> str:
    rules: dict[str, list[int]] = {}
    for r in results:
        for rule, (_impact, n, _up) in r.axe.items():
            rules.setdefault(rule, []).append(n)
    if not rules:
        return f"axe-core: no violations on {len(results)} pages"
    return "axe-core violations: " + ", ".join(
        f"{rule} on {len(ns)} page(s), {sum(ns)} node(s)" for rule, ns in sorted(rules.items()))


JS_HYGIENE = """() => {
  const icon = document.querySelector('link[rel~="icon"]');
  const meta = document.querySelector('meta[name="description"]');
  const external = [];
  document.querySelectorAll("img[src], script[src], iframe[src], source[src], "
      + "link[rel~='stylesheet'][href], link[rel~='icon'][href]").forEach((el) => {
    const url = el.src || el.href;
    if (/^https?:/.test(url) && !url.startsWith(location.origin + "/")) { external.push(url); }
  });
  const disabled = Array.from(document.querySelectorAll(".grpo-slider input.grpo-slider-input"))
    .filter((i) => i.disabled).map((i) => i.closest(".grpo-slider").id + " " + i.dataset.param);
  return {icon: icon ? icon.href : null, description: meta ? meta.content : null,
          external: external, disabled: disabled};
}"""


def check_hygiene(page, result: PageResult) -> None:
    """A favicon that loads, a meta description, nothing loaded from another host, and every
    slider input enabled by its script (grpo_core.viz: disabled in the HTML until it runs)."""
    h = page.evaluate(JS_HYGIENE)
    if not h["icon"]:
        result.fail("no favicon (<link rel=icon>)")
    else:
        resp = page.request.get(h["icon"])
        if not resp.ok:
            result.fail(f"favicon {h['icon']} did not load (HTTP {resp.status})")
    if not (h["description"] or "").strip():
        result.fail("no meta description")
    for url in h["external"]:
        result.fail(f"loads from another host: {url}")
    for what in h["disabled"]:
        result.fail(f"slider input still disabled (its script did not run): {what}")


JS_FIGURES_SHOWN = """() => Array.from(document.querySelectorAll(
    "article div.cell_output img, article .grpo-slider img.grpo-slider-frame"))
  // (a hidden slider frame not loaded yet: its size is in its width attribute)
  .map((img) => [img, img.naturalWidth || Number(img.getAttribute("width")) || 0])
  .filter(([img, natural]) => natural > 0
          && (img.checkVisibility() || img.closest(".grpo-slider")))
  .map(([img, natural]) => {
    const slider = img.closest(".grpo-slider");
    // a hidden frame is shown at the width of the visible one of its slider
    const shownImg = slider && img.hidden
      ? Array.from(slider.querySelectorAll("img.grpo-slider-frame")).find((f) => !f.hidden)
      : img;
    const shown = shownImg && shownImg.checkVisibility() && shownImg.naturalWidth
      ? shownImg.getBoundingClientRect().width / shownImg.naturalWidth * natural
      : null;
    return {src: img.getAttribute("src"), natural: natural, shown: shown,
            what: img.getAttribute("data-key") || (img.getAttribute("alt") || "").slice(0, 60)};
  })"""


def png_text(data: bytes) -> dict[str, str]:
    """The tEXt chunks of a PNG."""
    import struct

    out, i = {}, 8
    while i + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[i:i + 8])
        if kind == b"tEXt":
            key, _, value = data[i + 8:i + 8 + length].partition(b"\0")
            out[key.decode("latin-1")] = value.decode("latin-1")
        if kind == b"IEND":
            break
        i += 12 + length
    return out


def check_text_size(page, result: PageResult) -> None:
    """Every figure's smallest text (recorded by grpo_core.viz in the PNG), as shown on the
    page: at least MIN_TEXT_PX CSS px (a figure wider than the column is scaled down)."""
    import base64
    from urllib.parse import urljoin

    cache: dict[str, float | None] = {}
    for f in page.evaluate(JS_FIGURES_SHOWN):
        src = f["src"] or ""
        if src not in cache:
            if src.startswith("data:image/png;base64,"):
                data = base64.b64decode(src.split(",", 1)[1])
            else:
                resp = page.request.get(urljoin(page.url, src))
                data = resp.body() if resp.ok else b""
            px = png_text(data).get(TEXT_PX_KEY)
            cache[src] = float(px) if px else None
        px = cache[src]
        if px is None or f["shown"] is None:
            continue
        shown = px * f["shown"] / f["natural"]
        result.min_text_px = shown if result.min_text_px is None else min(result.min_text_px,
                                                                          shown)
        if shown < MIN_TEXT_PX - 0.05:
            result.fail(f"figure {f['what']!r}: its smallest text is {shown:.1f} px as shown "
                        f"({px:.1f} px in its {f['natural']} px image, shown "
                        f"{f['shown']:.0f} px wide): below {MIN_TEXT_PX:.0f} px")


def check_page(page, base: str, name: str, errors: list[str], bad_requests: list[str],
               notebook: bool = False, phone: bool = False) -> PageResult:
    result = PageResult(name)
    t0 = time.perf_counter()
    errors.clear()
    bad_requests.clear()
    try:
        response = page.goto(f"{base}{name}.html", wait_until="load", timeout=30_000)
    except Exception as exc:  # a page that does not load is a failure, not a crash
        result.fail(f"did not load: {exc}")
        return result
    if response is None or not response.ok:
        result.fail(f"HTTP {response.status if response else 'no response'}")
        return result
    check_scrollers(page, result)
    images = page.evaluate(JS_IMAGES)
    result.images = sum(1 for img in images if not img["external"])
    result.external = sum(1 for img in images if img["external"])
    for img in images:
        if not img["ok"] and not img["external"]:
            result.fail(f"image did not load: {img['what']}")
        if not img["external"] and (not img["alt"].strip()
                                    or re.search(r"_images/|\.(png|jpe?g|svg)$", img["alt"])):
            result.fail(f"image without real alt text: {img['what']} (alt={img['alt']!r})")
    tex = page.evaluate(JS_RAW_TEX)
    for snippet in tex["raw"][:5]:
        how = (f"MathJax {tex['version']}" if tex["version"]
               else "no MathJax script: math rendered at build time")
        result.fail(f"raw TeX visible ({how}): ...{snippet}...")
    if len(tex["raw"]) > 5:
        result.fail(f"... and {len(tex['raw']) - 5} more text node(s) with raw TeX")
    check_math_errors(page, result)
    check_layout(page, result, phone)
    if phone:
        check_tap_to_fit(page, result)
    else:
        check_width(page, result)
    check_axe(page, result)
    check_hygiene(page, result)
    check_text_size(page, result)
    dups = page.evaluate(JS_DUPLICATE_IDS)
    if dups:
        result.fail(f"duplicate ids: {', '.join(dups)}")
    sliders = page.evaluate(JS_SLIDERS)
    result.sliders = len(sliders)
    for n, info in enumerate(sliders):
        try:
            page.evaluate(JS_TO_SLIDER, info["index"])
            # the first slider is reached for (its frames load at once), the others are moved
            # cold (each frame loads when shown)
            check_frames_load(page, result, info, reach=n == 0)
            check_slider(page, result, info)
        except Exception as exc:  # e.g. the page navigated away: report, go on
            result.fail(f"slider {info['id']}: the check could not run: {exc}")
    if notebook:  # the launch button opens this chapter's notebook in JupyterLab on Binder
        links = page.evaluate(JS_BINDER_LINKS)
        if not any(re.fullmatch(rf"https://mybinder\.org/v2/gh/[^?]+\?urlpath=lab/tree/"
                                rf"{re.escape(name)}\.ipynb", h) for h in links):
            result.fail(f"no Binder launch button opening {name}.ipynb in JupyterLab "
                        f"(Binder links: {links})")
    widgets = page.evaluate(JS_WIDGET_VIEWS)
    if widgets:
        result.fail(f"{widgets} ipywidgets view(s) on the page: without a kernel they move and "
                    "redraw nothing (the page should show the slider's kernel-free HTML)")
    for message in errors:
        result.fail(f"JavaScript exception: {message}")
    for req in bad_requests:
        result.fail(f"missing file of the book: {req}")
    result.seconds = time.perf_counter() - t0
    return result


def screenshots(page, base: str, name: str, out: Path) -> list[Path]:
    """The first visible slider of `name` as first shown and after one move of its first input,
    and the window around it. Returns the saved files (none if no slider is visible)."""
    page.goto(f"{base}{name}.html", wait_until="load")
    visible = page.locator(".grpo-slider:visible")
    if visible.count() == 0:
        return []
    root = visible.first
    # the window's picture shows the slider in the middle of the page around it
    root.evaluate("(root) => root.scrollIntoView({block: 'center'})")
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / SCREENSHOTS["initial"], out / SCREENSHOTS["moved"], out / SCREENSHOTS["page"]]
    root.screenshot(path=paths[0])
    root.evaluate("""(root) => {
      const inp = root.querySelector("input.grpo-slider-input");
      inp.value = String((Number(inp.value) + 1) % (Number(inp.max) + 1));
      inp.dispatchEvent(new Event("input", {bubbles: true}));
    }""")
    root.screenshot(path=paths[1])
    page.screenshot(path=paths[2])
    return paths


def run(book: Path, html: Path, shots: Path, update_docs: bool, width: int = 1280) -> int:
    from playwright.sync_api import sync_playwright

    toc = yaml.safe_load((book / "_toc.yml").read_text(encoding="utf-8"))
    pages = toc_files(toc)
    if not Path(CHROMIUM).exists():
        print(f"error: {CHROMIUM} not found: apt-get update && apt-get install -y chromium",
              file=sys.stderr)
        return 2
    if not html.is_dir():
        print(f"error: no built site at {html}: run jupyter-book build first", file=sys.stderr)
        return 2

    source_failures = source_control_chars(book, pages)
    for f in source_failures:
        print(f"  FAILED: {f}")
    server, base = serve(html)
    allowed = [(re.compile(rx), why) for rx, why in ALLOWED_PAGE_ERRORS]
    errors: list[str] = []
    bad_requests: list[str] = []
    blocked: list[str] = []
    ignored: list[str] = []
    results: list[PageResult] = []
    saved: list[Path] = []
    phone_saved: list[Path] = []
    t0 = time.perf_counter()
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            phone = width <= PHONE_WIDTH
            viewport = {"width": width,
                        "height": PHONE_HEIGHT if phone else VIEWPORT["height"]}
            context = browser.new_context(viewport=viewport, device_scale_factor=1,
                                          is_mobile=phone, has_touch=phone)

            def route(r):  # the book's own files only: no request leaves this machine
                if r.request.url.startswith(base) or r.request.url.startswith("data:"):
                    r.continue_()
                else:
                    blocked.append(r.request.url)
                    r.abort()

            context.route("**/*", route)
            page = context.new_page()

            def on_error(exc) -> None:
                message = str(getattr(exc, "message", exc)).strip()
                why = next((why for rx, why in allowed if rx.search(message)), None)
                if why is not None:
                    ignored.append(why)
                else:
                    stack = (getattr(exc, "stack", "") or "").strip().splitlines()
                    errors.append(message + (f" [{stack[1].strip()}]" if len(stack) > 1 else ""))

            def on_console(msg) -> None:  # console.error fails the page too (the same allowlist)
                if msg.type == "error":
                    where = msg.location or {}
                    on_error(f"console.error: {msg.text} [{where.get('url', '')}:"
                             f"{where.get('lineNumber', '')}]")

            def on_response(resp) -> None:
                if resp.url.startswith(base) and resp.status >= 400:
                    bad_requests.append(f"{resp.url[len(base):]} (HTTP {resp.status})")

            page.on("pageerror", on_error)
            page.on("console", on_console)
            page.on("response", on_response)
            for name in pages:
                notebook = (book / f"{name}.ipynb").is_file()
                result = check_page(page, base, name, errors, bad_requests, notebook, phone)
                results.append(result)
                status = "ok  " if not result.failures else "FAIL"
                extra = f"  + {result.external} external image(s)" if result.external else ""
                if result.min_scale is not None:
                    extra += f"  smallest figure scale {result.min_scale:.2f}"
                extra += axe_summary(result)
                print(f"{status} {name:40} images {result.images:3}  sliders {result.sliders:2}"
                      f"  values checked {result.values:3}  ({result.seconds:.1f} s){extra}",
                      flush=True)
            chapter = None
            for r in results[1:]:  # the first chapter (not the intro) with a visible slider
                if r.sliders and not saved:
                    chapter, saved = r.page, screenshots(page, base, r.page, shots)
            if phone:
                for name in pages:
                    phone_saved.extend(phone_screenshots(page, base, name, shots))
            browser.close()
    finally:
        server.shutdown()

    failures = [f for r in results for f in r.failures]
    for f in failures:
        print(f"  FAILED: {f}")
    if saved:
        print(f"screenshots of {chapter}: {', '.join(str(p) for p in saved)}")
    else:
        print("no chapter with a visible slider: no screenshots")
    if phone_saved:
        print(f"{len(phone_saved)} phone screenshots (widest figure and equation per page) in "
              f"{shots}")
    if update_docs:
        if saved and not failures:
            DOCS_IMAGES.mkdir(parents=True, exist_ok=True)
            for p in saved[:2]:
                shutil.copyfile(p, DOCS_IMAGES / p.name)
            print(f"copied {saved[0].name} and {saved[1].name} to {DOCS_IMAGES}")
        else:
            print(f"--update-docs: nothing copied to {DOCS_IMAGES} (no screenshots, or the check "
                  "failed)", file=sys.stderr)
    if ignored:  # reasons, with how many pages threw each
        counts = {why: sum(1 for w in ignored if w == why) for why in dict.fromkeys(ignored)}
        print("ignored allowlisted JavaScript exceptions: "
              + ", ".join(f"{why} (x{n})" for why, n in counts.items()))
    hosts = sorted({re.sub(r"^(\w+://[^/]+).*", r"\1", u) for u in blocked})
    if hosts:
        print(f"blocked {len(blocked)} request(s) to other hosts: {', '.join(hosts)}")
    print(axe_totals(results))
    n_failed = sum(1 for r in results if r.failures)
    print(f"{sum(r.images for r in results)} images, {sum(r.sliders for r in results)} sliders, "
          f"{sum(r.values for r in results)} slider values checked on {len(results)} pages "
          f"in {time.perf_counter() - t0:.1f} s")
    if any(r.taps for r in results):
        print(f"{sum(r.taps for r in results)} wide figures tapped to fit the column and back")
    print(f"browser-check: {len(results) - n_failed} passed, {n_failed} failed")
    return 1 if failures or source_failures or not results or (update_docs and not saved) else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--book", type=Path, default=ROOT,
                        help="folder with _toc.yml and _build/html (default: this repository)")
    parser.add_argument("--html", type=Path, help="built site (default: BOOK/_build/html)")
    parser.add_argument("--screenshots", type=Path,
                        help="where to save screenshots (default: BOOK/_build/screenshots)")
    parser.add_argument("--update-docs", action="store_true",
                        help=f"copy the slider screenshots to {DOCS_IMAGES.relative_to(ROOT)}/")
    parser.add_argument("--width", type=int, default=VIEWPORT["width"],
                        help=f"viewport width in CSS px (default {VIEWPORT['width']}); "
                        f"<= {PHONE_WIDTH}: phone checks and screenshots, e.g. 390")
    args = parser.parse_args(argv)
    book = args.book.resolve()
    html = (args.html or book / "_build" / "html").resolve()
    shots = (args.screenshots or book / "_build" / "screenshots").resolve()
    if args.width < 200:
        parser.error(f"--width must be at least 200 CSS px, got {args.width}")
    return run(book, html, shots, args.update_docs, args.width)


if __name__ == "__main__":
    sys.exit(main())
