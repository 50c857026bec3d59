// Phone width (grpo.css): a tap on a figure toggles between its own pixel size (readable text,
// the output box scrolls sideways) and fit-to-width (the whole figure at once).
document.addEventListener("click", function (event) {
  var img = event.target.closest && event.target.closest("div.cell_output img");
  if (!img || !window.matchMedia("(max-width: 640px)").matches) { return; }
  img.closest("div.cell_output").classList.toggle("grpo-fit");
  grpoFocusableScrollers();  // (defined below) a fitted figure no longer scrolls: no cue
});

// An output box that scrolls sideways (at phone width a figure is shown at its own size, wider
// than the column) can be scrolled from the keyboard: it takes the focus (WCAG 2.1.1; axe-core's
// scrollable-region-focusable). Checked again once images have loaded and on every resize.
function grpoFocusableScrollers() {
  document.querySelectorAll("div.cell_output").forEach(function (box, i) {
    if (box.scrollWidth > box.clientWidth + 1) {
      box.tabIndex = 0;
      box.setAttribute("role", "region");  // a focusable element needs a role and a unique name
      box.setAttribute("aria-label", "cell output " + (i + 1) + ", scrolls sideways");
      box.dataset.grpoScrolls = "1";
      // a visible cue under the box: a clipped figure shows that it goes on (grpo.css)
      var hint = box.nextElementSibling;
      if (!hint || !hint.classList.contains("grpo-scroll-hint")) {
        hint = document.createElement("p");
        hint.className = "grpo-scroll-hint";
        hint.textContent = "\u2194 scrolls sideways" +
          (box.querySelector("img") ? "; tap the figure to fit it" : "");
        box.after(hint);
      }
    } else if (box.dataset.grpoScrolls) {
      ["tabindex", "role", "aria-label", "data-grpo-scrolls"].forEach(function (a) {
        box.removeAttribute(a);
      });
      var old = box.nextElementSibling;
      if (old && old.classList.contains("grpo-scroll-hint")) { old.remove(); }
    }
  });
}
window.addEventListener("load", grpoFocusableScrollers);
window.addEventListener("resize", grpoFocusableScrollers);
