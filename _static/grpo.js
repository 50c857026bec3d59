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
// (any code block or output that scrolls gets tabindex 0, else -1) is done here too:
// docs/sphinx_ext/book_weight.py drops the theme's, which measured every element at `load` in
// one task. Measuring a box lays out its section, which the page otherwise leaves unrendered
// until the reader scrolls near it (content-visibility, grpo.css): on a chapter, measuring them
// all was 1-2.5 s of a simulated phone's main thread, and still 0.3-0.6 s when done in slices
// while the browser was idle, since one box can cost a whole section's layout.
// So a box is measured when it comes near the screen (an IntersectionObserver, a quarter of a
// screen ahead, where the browser has laid its section out already: the measure costs nothing
// and the cue is added before the reader sees the box), and the first Tab key press checks the
// rest at once (the keyboard then finds every box that scrolls). When none is left unchecked
// the root element gets data-grpo-scrollers="checked" (tools/browser_check.py scrolls through a
// page, checks that every box it passed is checked, then presses Tab and waits for it). A box
// is checked again when its images load, when its slider shows another frame, after a tap,
// and all are after a resize.
var GRPO_THEME_SCROLLERS = "pre, .nboutput > .output_area, .cell_output > .output, "
  + ".jp-RenderedHTMLCommon, .pst-scrollable-table-container";
var grpoScrollerCount = 0;  // each scrolling part keeps its own number in its accessible name

// A check is a measure (read only) then an update (write only), so that checking several boxes
// at once lays the page out once, not once per box.
function grpoMeasure(el) {
  if (!el.matches("div.cell_output")) {  // the theme's rule, as pydata-sphinx-theme.js had it
    return {el: el, theme: el.scrollWidth > el.clientWidth || el.scrollHeight > el.clientHeight};
  }
  var parts = [el].concat(Array.from(el.querySelectorAll("div.output, .grpo-table")));
  return {el: el, parts: parts,
          scrolls: parts.map(function (p) { return p.scrollWidth > p.clientWidth + 1; })};
}

function grpoUpdate(m) {
  if (!m.parts) { m.el.tabIndex = m.theme ? 0 : -1; return; }
  m.parts.forEach(function (el, i) {
    if (m.scrolls[i]) {
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
  var any = m.scrolls.indexOf(true) >= 0;
  var hint = m.el.nextElementSibling;
  var has = hint && hint.classList.contains("grpo-scroll-hint");
  if (any && !has) {
    hint = document.createElement("p");
    hint.className = "grpo-scroll-hint";
    hint.textContent = "\u2194 scrolls sideways" +
      (m.el.querySelector("img") ? "; tap the figure to fit it" : "");
    m.el.after(hint);
  } else if (!any && has) {
    hint.remove();
  }
}

function grpoCheckAtOnce(elements) {
  elements.map(grpoMeasure).forEach(grpoUpdate);
}

function grpoCheckWithin(box) {  // a box and the theme's scrollers in it, at once
  grpoCheckAtOnce([box].concat(Array.from(box.querySelectorAll(GRPO_THEME_SCROLLERS))));
}

var grpoPending = new Set();  // the boxes not checked since the page loaded (or was resized)
var grpoObserver = null;

function grpoDone() {
  if (!grpoPending.size) { document.documentElement.dataset.grpoScrollers = "checked"; }
}

function grpoCheckNear(entries) {
  var near = entries.filter(function (e) {
    return e.isIntersecting && grpoPending.has(e.target);
  }).map(function (e) { return e.target; });
  near.forEach(function (el) { grpoPending.delete(el); grpoObserver.unobserve(el); });
  grpoCheckAtOnce(near);
  grpoDone();
}

function grpoCheckAll() {  // every box is checked again, as it comes near the screen
  var all = Array.from(document.querySelectorAll("div.cell_output, " + GRPO_THEME_SCROLLERS));
  delete document.documentElement.dataset.grpoScrollers;
  grpoPending = new Set(all);
  if (!window.IntersectionObserver) { grpoFinishChecks(); return; }
  if (!grpoObserver) {
    grpoObserver = new IntersectionObserver(grpoCheckNear, {rootMargin: "25% 0px"});
  }
  all.forEach(function (el) { grpoObserver.observe(el); });
  grpoDone();  // (a page without any box)
}

function grpoFinishChecks() {
  var rest = Array.from(grpoPending);  // (in document order)
  grpoPending.clear();
  if (grpoObserver) { rest.forEach(function (el) { grpoObserver.unobserve(el); }); }
  grpoCheckAtOnce(rest);
  grpoDone();
}

document.addEventListener("keydown", function (event) {
  if (event.key === "Tab" && grpoPending.size) { grpoFinishChecks(); }
});

// Many images load at once (a slider's frames): their boxes are checked once per animation
// frame, not once per image. A box not checked yet is checked when it comes near the screen.
var grpoLoadedBoxes = new Set();
function grpoQueueBox(box) {
  if (grpoPending.has(box)) { return; }
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
grpoCheckAll();
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
