// Render the TeX of built pages to MathJax 3 CommonHTML markup (docs/sphinx_ext/book_math.py).
//
//   node tools/mathjax/render.js < request.json > reply.json
//
// request: {"em": 16, "ex": 8, "width": 1280,
//           "pages": [{"fontURL": "../_static/mathjax/...", "items": [[tex, display], ...]}, ...]}
// reply:   {"version": "3.2.2",
//           "pages": [{"html": ["<mjx-container ...>", ...], "css": "...",
//                      "errors": [[index, message], ...]}, ...]}
//
// The same MathJax 3.2.2 the site loads in the browser (sphinx-mathjax-offline), configured as
// the site's `input/tex` component is: TeX input with the packages that component has or loads
// on demand (never `noerrors`: a TeX error stays a visible `mjx-merror` box, which
// tools/browser_check.py looks for), CHTML output with MathJax's own woff fonts (fontURL), and
// the hidden MathML that screen readers read (assistive-mml). Each page is rendered as its own
// document, as MathJax does in the browser, so its `css` is what MathJax would have added to
// that page: the rules of the characters and constructs it uses, no more.
"use strict";

const {mathjax} = require("mathjax-full/js/mathjax.js");
const {TeX} = require("mathjax-full/js/input/tex.js");
const {CHTML} = require("mathjax-full/js/output/chtml.js");
const {liteAdaptor} = require("mathjax-full/js/adaptors/liteAdaptor.js");
const {RegisterHTMLHandler} = require("mathjax-full/js/handlers/html.js");
const {AssistiveMmlHandler} = require("mathjax-full/js/a11y/assistive-mml.js");
require("mathjax-full/js/input/tex/AllPackages.js"); // registers every package's configuration

// input/tex's own packages, then those its autoload extension loads when a macro needs them
// (colorv2 left out: it would replace color's \color)
const PACKAGES = ["base", "ams", "newcommand", "noundefined", "configmacros",
  "action", "amscd", "bbox", "boldsymbol", "braket", "bussproofs", "cancel", "cases",
  "centernot", "color", "enclose", "extpfeil", "html", "mhchem", "unicode", "verb"];

const adaptor = liteAdaptor();
AssistiveMmlHandler(RegisterHTMLHandler(adaptor));

function renderPage(page, metrics) {
  const tex = new TeX({packages: PACKAGES});
  const chtml = new CHTML({fontURL: page.fontURL, adaptiveCSS: true});
  const doc = mathjax.document("", {InputJax: tex, OutputJax: chtml});
  const html = [];
  const errors = [];
  page.items.forEach(([source, display], i) => {
    const node = doc.convert(source, {display: !!display, ...metrics});
    const error = adaptor.tags(node, "mjx-merror")[0];
    if (error) {
      errors.push([i, adaptor.getAttribute(error, "data-mjx-error") || adaptor.textContent(error)]);
    }
    html.push(adaptor.outerHTML(node));
  });
  return {html, css: adaptor.textContent(chtml.styleSheet(doc)), errors};
}

function main(request) {
  const metrics = {em: request.em || 16, ex: request.ex || 8,
    containerWidth: request.width || 1280};
  return {version: mathjax.version, pages: request.pages.map((p) => renderPage(p, metrics))};
}

let input = "";
process.stdin.setEncoding("utf8");
process.stdin.on("data", (chunk) => { input += chunk; });
process.stdin.on("end", () => {
  process.stdout.write(JSON.stringify(main(JSON.parse(input))));
});
