// Phone width (grpo.css): a tap on a figure toggles between its own pixel size (readable text,
// the output box scrolls sideways) and fit-to-width (the whole figure at once).
document.addEventListener("click", function (event) {
  var img = event.target.closest && event.target.closest("div.cell_output img");
  if (!img || !window.matchMedia("(max-width: 640px)").matches) { return; }
  var box = img.closest("div.cell_output");
  box.classList.toggle("grpo-fit");
  grpoCheckWithin(box);  // (defined below) a fitted figure no longer scrolls: no cue
});

// An output box that scrolls sideways (at phone width a figure is shown at its own size, wider
// than the column; a slider's or a table's own box may scroll too) can be scrolled from the
// keyboard: it takes the focus (WCAG 2.1.1; axe-core's scrollable-region-focusable), and a
// visible cue under the cell says that it goes on (grpo.css). The theme's own version of this
// (any code block or output that scrolls gets tabindex 0, else -1) is done here too, in the
// same pass: docs/sphinx_ext/book_weight.py drops the theme's, which measured every element at
// `load` in one task. Measuring a box lays out its section, which the page otherwise leaves
// unrendered until the reader scrolls near it (content-visibility, grpo.css): on a chapter,
// measuring them all at once was one task of 1-2.5 s on a simulated phone, during which the
// page did not respond. So the boxes are checked in document order in short slices while the
// browser is idle after `load`; the first Tab key press finishes the pass at once (the keyboard
// then finds every box that scrolls); when the pass is done the root element gets
// data-grpo-scrollers="checked" (tools/browser_check.py waits for it). A box is checked again
// when its images load, when its slider shows another frame, after a tap, and all are after a
// resize.
var GRPO_THEME_SCROLLERS = "pre, .nboutput > .output_area, .cell_output > .output, "
  + ".jp-RenderedHTMLCommon, .pst-scrollable-table-container";
var grpoScrollerCount = 0;  // each scrolling part keeps its own number in its accessible name

function grpoCheckBox(box) {
  var parts = [box].concat(Array.from(box.querySelectorAll("div.output, .grpo-table")));
  var scrolls = parts.map(function (el) { return el.scrollWidth > el.clientWidth + 1; });
  parts.forEach(function (el, i) {
    if (scrolls[i]) {
      if (!el.dataset.grpoScrolls) {
        grpoScrollerCount += 1;
        el.dataset.grpoScrolls = String(grpoScrollerCount);
      }
      el.tabIndex = 0;
      el.setAttribute("role", "region");  // a focusable element needs a role and a unique name
      el.setAttribute("aria-label", "cell output " + el.dataset.grpoScrolls
        + ", scrolls sideways");
    } else if (el.dataset.grpoScrolls) {
      ["tabindex", "role", "aria-label", "data-grpo-scrolls"].forEach(function (a) {
        el.removeAttribute(a);
      });
    }
  });
  var any = scrolls.indexOf(true) >= 0;
  var hint = box.nextElementSibling;
  var has = hint && hint.classList.contains("grpo-scroll-hint");
  if (any && !has) {
    hint = document.createElement("p");
    hint.className = "grpo-scroll-hint";
    hint.textContent = "\u2194 scrolls sideways" +
      (box.querySelector("img") ? "; tap the figure to fit it" : "");
    box.after(hint);
  } else if (!any && has) {
    hint.remove();
  }
}

function grpoCheckThemeScroller(el) {  // the theme's rule, as pydata-sphinx-theme.js had it
  el.tabIndex = el.scrollWidth > el.clientWidth || el.scrollHeight > el.clientHeight ? 0 : -1;
}

function grpoCheck(el) {
  if (el.matches("div.cell_output")) { grpoCheckBox(el); } else { grpoCheckThemeScroller(el); }
}

function grpoCheckWithin(box) {  // a box and the theme's scrollers in it, at once
  grpoCheckBox(box);
  box.querySelectorAll(GRPO_THEME_SCROLLERS).forEach(grpoCheckThemeScroller);
}

var grpoPending = [];
var grpoSliceQueued = false;
var grpoIdle = window.requestIdleCallback
  || function (f) { return setTimeout(function () { f({timeRemaining: function () { return 8; }}); }, 1); };

function grpoCheckSlice(deadline) {  // at least one element, then up to ~8 ms of work
  grpoSliceQueued = false;
  var start = performance.now();
  while (grpoPending.length) {
    grpoCheck(grpoPending.shift());
    if (performance.now() - start > 8 || deadline.timeRemaining() <= 0) { break; }
  }
  if (grpoPending.length) {
    grpoQueueSlice();
  } else {
    document.documentElement.dataset.grpoScrollers = "checked";
  }
}

function grpoQueueSlice() {
  if (grpoSliceQueued) { return; }
  grpoSliceQueued = true;
  grpoIdle(grpoCheckSlice, {timeout: 1000});
}

function grpoCheckAll() {
  grpoPassStarted = true;
  grpoPending = Array.from(document.querySelectorAll("div.cell_output, " + GRPO_THEME_SCROLLERS));
  delete document.documentElement.dataset.grpoScrollers;
  grpoQueueSlice();
}

function grpoFinishChecks() {
  while (grpoPending.length) { grpoCheck(grpoPending.shift()); }
  document.documentElement.dataset.grpoScrollers = "checked";
}

document.addEventListener("keydown", function (event) {
  if (event.key === "Tab" && grpoPending.length) { grpoFinishChecks(); }
});

// Many images load at once (a slider's frames): their boxes are checked once per animation
// frame, not once per image.
// Before `load` (which waits for the page's images) the pass checks every box anyway.
var grpoLoadedBoxes = new Set();
var grpoPassStarted = false;
function grpoQueueBox(box) {
  if (!grpoPassStarted || grpoPending.indexOf(box) >= 0) { return; }
  if (!grpoLoadedBoxes.size) {
    window.requestAnimationFrame(function () {
      grpoLoadedBoxes.forEach(grpoCheckWithin);
      grpoLoadedBoxes.clear();
    });
  }
  grpoLoadedBoxes.add(box);
}
document.querySelectorAll("div.cell_output img").forEach(function (img) {
  if (!img.complete) {
    img.addEventListener("load", function () { grpoQueueBox(img.closest("div.cell_output")); });
  }
});
document.addEventListener("input", function (event) {
  var box = event.target.closest && event.target.closest("div.cell_output");
  if (box) { setTimeout(function () { grpoCheckWithin(box); }, 0); }
});
if (document.readyState === "complete") { grpoCheckAll(); }
else { window.addEventListener("load", grpoCheckAll); }
var grpoResizeTimer = null;
window.addEventListener("resize", function () {
  clearTimeout(grpoResizeTimer);
  grpoResizeTimer = setTimeout(grpoCheckAll, 100);
});

// A slider's frames other than the first are files that load when shown (loading="lazy",
// docs/sphinx_ext/book_weight.py). When the reader reaches for a slider (the pointer over it, a
// touch, the keyboard focus), all its frames start loading, so a move shows its frame at once.
function grpoLoadFrames(event) {
  var root = event.target.closest && event.target.closest(".grpo-slider");
  if (!root) { return; }
  root.querySelectorAll('img.grpo-slider-frame[loading="lazy"]').forEach(function (img) {
    img.loading = "eager";
  });
}
["pointerover", "touchstart", "focusin"].forEach(function (type) {
  document.addEventListener(type, grpoLoadFrames, {passive: true});
});
