"""The book's math, rendered at build time (called by book_weight.py once the HTML is written).

In the browser, MathJax (240-280 KB of script and fonts) typesets every equation after the page
has loaded: a long main-thread task on a phone, and prose that moves when inline math takes its
final width (layout shift). Here the same MathJax 3.2.2, run in Node
(tools/mathjax/render.js, pinned by tools/mathjax/package-lock.json), turns every
`<span class="math">\\(...\\)</span>` and `<div class="math">\\[...\\]</div>` that Sphinx writes
into MathJax's CommonHTML markup, with the hidden MathML that screen readers read
(assistive MathML); display equations stay focusable (`tabindex="0"`) so that one wider than the
column can be scrolled from the keyboard, as before. Each page is rendered as its own document,
as MathJax does in the browser, and gets the stylesheet MathJax would have added to it (the
rules of the characters and constructs it uses; the woff fonts are the copies already in
`_static/mathjax`) as a `<style>` at the end of its head, where MathJax put it: the page looks
as before and loads no MathJax script.

Where Node or the package is missing (`npm ci --prefix tools/mathjax` was not run), the pages
are left as Sphinx wrote them: MathJax typesets them in the browser, as before, and the build
says so. tools/check_build.py fails on such a build unless told to allow it (CI requires the
rendered form).
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
RENDERER = ROOT / "tools" / "mathjax" / "render.js"
PACKAGE = ROOT / "tools" / "mathjax" / "node_modules" / "mathjax-full"
STYLE_ID = "MJX-CHTML-styles"  # the id MathJax gives its stylesheet in the browser
# relative to the site's root: the woff fonts sphinx-mathjax-offline copies
FONT_URL = "_static/mathjax/output/chtml/fonts/woff-v2"
# MathJax in the browser scales the math so that its x-height matches the surrounding text's
# (matchFontHeight: the font-size it writes on each container, 127% for this theme's font in
# Chromium here). CSS says the same without measuring: 1ex of the parent's font over the x-height
# of MathJax's TeX font (0.442 em), for whatever font the reader's device shows.
MATCH_FONT_HEIGHT = 'mjx-container[jax="CHTML"]{font-size:calc(1ex / 0.442)}'

# What Sphinx writes for math (sphinx.ext.mathjax): inline `\(...\)` in a span, display `\[...\]`
# in a div (after its equation number, if labelled)
MATH_ELEMENT = re.compile(r'<(span|div) class="math notranslate nohighlight"([^>]*)>(.*?)</\1>',
                          re.S)
# MathJax's delimiters (its defaults; the book sets none of its own), and environments
TEX = re.compile(r"\\\((?P<inline>.*?)\\\)|\\\[(?P<display>.*?)\\\]|\$\$(?P<dollars>.*?)\$\$"
                 r"|(?P<env>\\begin\{(?P<name>[A-Za-z]+\*?)\}.*?\\end\{(?P=name)\})", re.S)
EQNO = re.compile(r'<span class="eqno">.*?</span>', re.S)

# [{"fontURL": ..., "items": [(TeX, display), ...]}] -> {"version": ..., "pages": [{"html": [...],
# "css": ..., "errors": [[index, message], ...]}]}: tools/mathjax/render.js, or a stand-in in tests
Renderer = Callable[[list[dict]], dict]


def find_math(page: str) -> list[tuple[str, bool]]:
    """Every TeX expression of a page's math elements, as (TeX, display), in page order."""
    found = []
    for m in MATH_ELEMENT.finditer(page):
        body = EQNO.sub("", m.group(3))
        for t in TEX.finditer(body):
            found.append(_item(t))
    return found


def _item(t: re.Match) -> tuple[str, bool]:
    if t.group("inline") is not None:
        return html.unescape(t.group("inline")), False
    tex = next(g for g in (t.group("display"), t.group("dollars"), t.group("env")) if g is not None)
    return html.unescape(tex), True


def replace_math(page: str, rendered: dict[tuple[str, bool], str]) -> tuple[str, int]:
    """The page with every expression found by find_math replaced by its markup in `rendered`
    (display containers made focusable); returns the page and how many were replaced. An
    expression missing from `rendered` is left as TeX."""
    count = 0

    def expr(t: re.Match) -> str:
        nonlocal count
        markup = rendered.get(_item(t))
        if markup is None:
            return t.group(0)
        count += 1
        if _item(t)[1] and " tabindex=" not in markup[:200]:
            markup = markup.replace("<mjx-container ", '<mjx-container tabindex="0" ', 1)
        return markup

    def element(m: re.Match) -> str:
        tag, attrs, body = m.groups()
        # the equation number is markup, not TeX: only the text around it is searched
        parts = re.split(f"({EQNO.pattern})", body, flags=re.S)
        new = "".join(p if EQNO.fullmatch(p) else TEX.sub(expr, p) for p in parts)
        return f'<{tag} class="math notranslate nohighlight"{attrs}>{new}</{tag}>'

    return MATH_ELEMENT.sub(element, page), count


# The head's MathJax: its configuration, the focus script book_weight.py adds, and the loader.
_MATHJAX_HEAD = re.compile(
    r'\s*<script>window\.MathJax = .*?</script>(?:<script>MathJax\.startup = .*?</script>)?'
    r'|\s*<script\b[^>]*\bsrc="[^"]*/mathjax/(?:startup|tex-chtml|tex-mml-chtml)\.js[^"]*"[^>]*>'
    r"</script>", re.S)


def static_prefix(page: str) -> str | None:
    """The relative path from the page to the site's root, read from its own links to _static/."""
    m = re.search(r'(?:href|src)="((?:\.\./)*)_static/', page)
    return m.group(1) if m else None


def drop_mathjax(page: str, css: str) -> str:
    """The page without MathJax's scripts, with MathJax's stylesheet `css` at the end of its head
    (where MathJax put it in the browser, so the cascade is the same as before)."""
    page = _MATHJAX_HEAD.sub("", page)
    if f'<style id="{STYLE_ID}">' in page:
        return page
    style = f'<style id="{STYLE_ID}">\n{MATCH_FONT_HEIGHT}\n{css}\n</style>\n'
    return page.replace("</head>", style + "  </head>", 1)


def has_mathjax(page: str) -> bool:
    return bool(_MATHJAX_HEAD.search(page))


def node_renderer() -> tuple[Renderer | None, str]:
    """A function that renders [(TeX, display)] with MathJax in Node, or None and why not."""
    node = shutil.which("node")
    if node is None:
        return None, "no `node` on PATH"
    if not PACKAGE.is_dir():
        return None, f"{PACKAGE.relative_to(ROOT)} missing (run `npm ci --prefix tools/mathjax`)"

    def render(pages: list[dict]) -> dict:
        done = subprocess.run([node, str(RENDERER)], input=json.dumps({"pages": pages}),
                              text=True, capture_output=True, check=True, cwd=RENDERER.parent)
        return json.loads(done.stdout)

    return render, f"MathJax in Node ({node})"


def render_pages(out: Path, pages: dict[Path, str], render: Renderer | None,
                 why: str) -> tuple[dict[Path, str], str]:
    """Render the math of `pages` ({path under `out`: HTML}) with `render`; returns the changed
    pages and a one-line summary. A page whose math could not all be rendered keeps MathJax in
    the browser."""
    with_math = {p: t for p, t in pages.items() if has_mathjax(t)}
    if not with_math:
        return {}, "book_math: no page left to render"
    if render is None:
        return {}, (f"book_math: math NOT rendered at build time ({why}): {len(with_math)} pages "
                    "typeset it in the browser with MathJax")
    found = {p: find_math(t) for p, t in with_math.items()}
    request = [{"fontURL": "../" * (len(p.relative_to(out).parts) - 1) + FONT_URL,
                "items": found[p]} for p in with_math]
    try:
        reply = render(request)
    except (OSError, subprocess.CalledProcessError, ValueError) as exc:
        detail = getattr(exc, "stderr", "") or str(exc)
        return {}, (f"book_math: math NOT rendered at build time (MathJax in Node failed: "
                    f"{detail.strip()[-500:]}): pages typeset it in the browser")
    changed, kept, errors = {}, [], []
    for (path, page), done in zip(with_math.items(), reply["pages"], strict=True):
        rendered = dict(zip(found[path], done["html"], strict=True))
        errors += [f"{path.name}: {found[path][i][0]!r}: {msg}" for i, msg in done["errors"]]
        new, n = replace_math(page, rendered)
        if n != len(found[path]) or TEX.search(_math_text(new)):
            kept.append(path.name)
            continue
        changed[path] = drop_mathjax(new, minify_css(done["css"]))
    summary = (f"book_math: {sum(len(f) for f in found.values())} expressions rendered by "
               f"MathJax {reply['version']} in Node on {len(changed)} pages (no MathJax script "
               "there)")
    if kept:
        summary += f"; left to the browser: {', '.join(sorted(kept))}"
    if errors:
        summary += (f"; {len(errors)} TeX error(s), shown as MathJax shows them: "
                    + "; ".join(errors))
    return changed, summary


def minify_css(css: str) -> str:
    """MathJax's CSS without comments, line breaks and the blanks around braces and semicolons
    (never significant in CSS outside strings; MathJax's strings hold none)."""
    css = re.sub(r"/\*.*?\*/", "", css, flags=re.S)
    css = re.sub(r"\s*\n\s*", " ", css)
    return re.sub(r"\s*([{};])\s*", r"\1", css).strip()


def _math_text(page: str) -> str:
    """The text of the page's math elements outside rendered markup (what is left to typeset)."""
    return "".join(re.sub(r"<mjx-container\b.*?</mjx-container>", "", m.group(3), flags=re.S)
                   for m in MATH_ELEMENT.finditer(page))


def font_files(css: str) -> dict[str, str]:
    """{CSS class of a MathJax font (e.g. "TEX-I"): its woff file's URL}, with "" for the default
    font (characters with no font class) and "ZERO", from MathJax's CHTML stylesheet."""
    faces = dict(re.findall(r'@font-face[^{]*\{[^}]*?font-family:\s*([\w-]+);[^}]*?'
                            r'src:\s*url\("([^"]+)"\)', css))
    classes = {cls: faces[family] for cls, family in re.findall(
        r"\.(TEX-[A-Z0-9]+)\s*\{[^}]*?font-family:\s*MJXZERO,\s*([\w-]+)", css)
        if family in faces}
    for key, family in (("", "MJXTEX"), ("ZERO", "MJXZERO")):
        if family in faces:
            classes[key] = faces[family]
    return classes


def fonts_used(page: str) -> set[str]:
    """The woff files (URLs as the page's MathJax stylesheet writes them) its math needs."""
    style = re.search(rf'<style id="{STYLE_ID}">(.*?)</style>', page, re.S)
    if style is None or "<mjx-c" not in page:
        return set()
    files = font_files(style.group(1))
    used = {files[c] for c in set(re.findall(r'<mjx-c class="mjx-c[0-9A-F]+ (TEX-[A-Z0-9]+)"',
                                            page)) if c in files}
    # stretchy delimiters (big parentheses, braces) are built from these fonts' pieces
    extra = ("", "ZERO") + (("TEX-S1", "TEX-S4", "TEX-A") if "<mjx-stretchy" in page else ())
    used.update(files[k] for k in extra if k in files)
    return used
