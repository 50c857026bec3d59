// Phone width (grpo.css): a tap on a figure toggles between its own pixel size (readable text,
// the output box scrolls sideways) and fit-to-width (the whole figure at once).
document.addEventListener("click", function (event) {
  var img = event.target.closest && event.target.closest("div.cell_output img");
  if (!img || !window.matchMedia("(max-width: 640px)").matches) { return; }
  img.closest("div.cell_output").classList.toggle("grpo-fit");
  grpoFocusableScrollers();  // (defined below) a fitted figure no longer scrolls: no cue
});

// An output box that scrolls sideways (at phone width a figure is shown at its own size, wider
// than the column; a slider's or a table's own box may scroll too) can be scrolled from the
// keyboard: it takes the focus (WCAG 2.1.1; axe-core's scrollable-region-focusable), and a
// visible cue under the cell says that it goes on (grpo.css). Checked again once images have
// loaded, when a slider shows another frame, after a tap, and on every resize.
function grpoFocusableScrollers() {
  var n = 0;
  document.querySelectorAll("div.cell_output").forEach(function (box) {
    var parts = [box].concat(Array.from(box.querySelectorAll("div.output, .grpo-table")));
    var any = false;
    parts.forEach(function (el) {
      if (el.scrollWidth > el.clientWidth + 1) {
        any = true;
        n += 1;
        el.tabIndex = 0;
        el.setAttribute("role", "region");  // a focusable element needs a role and a unique name
        el.setAttribute("aria-label", "cell output " + n + ", scrolls sideways");
        el.dataset.grpoScrolls = "1";
      } else if (el.dataset.grpoScrolls) {
        ["tabindex", "role", "aria-label", "data-grpo-scrolls"].forEach(function (a) {
          el.removeAttribute(a);
        });
      }
    });
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
  });
}
// Many images load at once (a slider's frames): one check per animation frame, not one per image
// (each check measures every output box: a full layout of the page).
var grpoCheckQueued = false;
function grpoQueueCheck() {
  if (grpoCheckQueued) { return; }
  grpoCheckQueued = true;
  window.requestAnimationFrame(function () {
    grpoCheckQueued = false;
    grpoFocusableScrollers();
  });
}
document.querySelectorAll("div.cell_output img").forEach(function (img) {
  if (!img.complete) { img.addEventListener("load", grpoQueueCheck); }
});
document.addEventListener("input", function () { setTimeout(grpoFocusableScrollers, 0); });
window.addEventListener("load", grpoFocusableScrollers);
window.addEventListener("resize", grpoFocusableScrollers);

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
