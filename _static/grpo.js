// Phone width (grpo.css): a tap on a figure toggles between its own pixel size (readable text,
// the output box scrolls sideways) and fit-to-width (the whole figure at once).
document.addEventListener("click", function (event) {
  var img = event.target.closest && event.target.closest("div.cell_output img");
  if (!img || !window.matchMedia("(max-width: 640px)").matches) { return; }
  img.closest("div.cell_output").classList.toggle("grpo-fit");
});
