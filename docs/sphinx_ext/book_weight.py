"""A local Sphinx extension for the pages' weight and stability (loaded from _config.yml).

What the theme loads on every page and the book does without, fixed at build time:

- Icons: the theme's FontAwesome kit (`fontawesome.js`, 1.49 MB, 530 KB gzipped, parsed on every
  page) turns ~20 `<i class="fa-...">` icons into SVGs, and its CSS fetches two web fonts (270 KB).
  Each icon is written into the page as the same inline SVG instead (its path read from that very
  kit at build time), and the script is dropped: no font or script is fetched for icons.
- Search: `searchindex.js` (the whole site's index, 113 KB), `searchtools.js` and
  `language_data.js` were render-blocking scripts on every page, though only the search page
  searches (the search box submits to it; search-as-you-type is off): they load there only.
- Scripts: the other scripts of the head are deferred (they run once the page is parsed, in
  order), sphinx-thebe's script and style are dropped (Thebe is off), and MathJax loads as its
  startup component plus the parts the book uses (TeX input, CHTML output, the hidden MathML for
  screen readers) instead of `tex-chtml.js`, which adds its 430 KB context menu (display
  equations stay focusable, as the menu made them, so one that scrolls can be scrolled by keys).
- Colour mode: the theme has no default mode set here and logs `Got invalid theme mode` on every
  first visit: it is set to "auto" (the theme's own fallback, so nothing changes for readers).
- Layout shift: every `<img>` without a size gets `width` and `height` (read from the PNG), so the
  browser reserves its box before the picture arrives.
- Tab stops: the theme's script measured every code block and output at `load` (`scrollWidth`)
  to give the ones that scroll `tabindex` 0: one task that laid out the sections the page leaves
  unrendered until the reader nears them (1-2.5 s on Lighthouse's simulated phone). That call is
  dropped from the built `pydata-sphinx-theme.js`; `_static/grpo.js` applies the same rule to
  each box when it comes near the screen (and to the rest at the first Tab key press).

The stylesheets are purged into one file by the sibling extension book_css.py.

tools/check_build.py checks the result (no FontAwesome, search index only on the search page);
tools/browser_check.py checks that no console error is logged.
"""

from __future__ import annotations

import base64
import hashlib
import re
import struct
from pathlib import Path

ICON_SETS = {"fas": "fas", "fa-solid": "fas", "fab": "fab", "fa-brands": "fab",
             "far": "far", "fa-regular": "far"}
SEARCH_SCRIPTS = ("searchtools.js", "language_data.js", "searchindex.js")
# Loaded as separate MathJax components (their files are in _static/mathjax) instead of
# tex-chtml.js, which also holds ui/menu.
MATHJAX_LOAD = ["input/tex", "output/chtml", "a11y/assistive-mml"]
# The menu also made every equation focusable; a display equation wider than its box scrolls
# inside it, so it stays reachable from the keyboard (axe: scrollable-region-focusable).
MATHJAX_FOCUS = ("<script>MathJax.startup = {pageReady: () => MathJax.startup.defaultPageReady()"
                 ".then(() => document.querySelectorAll('mjx-container[display=\"true\"]')"
                 ".forEach((c) => { c.tabIndex = 0; }))};</script>")


def read_icons(kit: str) -> dict[tuple[str, str], tuple[int, int, str]]:
    """{(set, name or alias): (width, height, SVG path)} from FontAwesome 6's JS kit."""
    # a minified object literal: `"arrow-up":[...]`, or unquoted where the name allows: `sun:[...]`
    entry = re.compile(r'(?<![\w$])"?([a-z0-9-]+)"?:\[(\d+),(\d+),\[([^\]]*)\],"[0-9a-f]+",'
                       r'"([^"]+)"\]')
    marks = [(m.start(), m.group(1)) for m in re.finditer(r'\(\s*"(fa[bsr])"\s*,', kit)]
    icons = {}
    for m in entry.finditer(kit):
        set_ = next((s for pos, s in marks if pos > m.start()), None)
        if set_ is None:
            continue
        value = (int(m.group(2)), int(m.group(3)), m.group(5))
        names = [m.group(1)] + re.findall(r'"([a-z0-9-]+)"', m.group(4))
        for name in names:
            icons.setdefault((set_, name), value)
    return icons


_ICON_TAG = re.compile(r'<(i|span) class="([^"]*\bfa-[^"]*)"([^>]*)>\s*</\1>')


def inline_icons(page: str, icons) -> tuple[str, list[str]]:
    """Replace each `<i class="fa-...">` (or empty `<span>`) by an inline SVG; returns the page and
    the icons it could not find (left as they were)."""
    missing = []

    def svg(m: re.Match) -> str:
        classes = m.group(2).split()
        set_ = next((ICON_SETS[c] for c in classes if c in ICON_SETS), "fas")
        names = [c[3:] for c in classes if c.startswith("fa-") and c not in ICON_SETS
                 and c not in ("fa-lg", "fa-fw", "fa-xs", "fa-sm", "fa-2x")]
        found = next(((n, icons[(set_, n)]) for n in names if (set_, n) in icons), None)
        if found is None:
            missing.append(" ".join(classes))
            return m.group(0)
        width, height, path = found[1]
        keep = " ".join(["grpo-icon"] + [c for c in classes if not c.startswith("fa")])
        attrs = m.group(3) if "aria-hidden" in m.group(3) else f' aria-hidden="true"{m.group(3)}'
        size = "1.25em" if "fa-lg" in classes else "1em"  # the kit's sizes; its width is fixed
        return (f'<svg class="{keep}" viewBox="0 0 {width} {height}" focusable="false"{attrs} '
                f'style="height:{size};width:auto;vertical-align:-0.125em;fill:currentColor;'
                f'overflow:visible"><path d="{path}"/></svg>')

    return _ICON_TAG.sub(svg, page), missing


# pydata-sphinx-theme draws each admonition's icon with the FontAwesome font (`content:
# var(--pst-icon-admonition-tip)`): the same icons as CSS masks, in _static/grpo-icons.css.
ADMONITION_ICONS = {"": "bell", "note": "info-circle", "attention": "exclamation-circle",
                    "caution": "exclamation-triangle", "warning": "exclamation-triangle",
                    "danger": "exclamation-triangle", "error": "times-circle", "hint": "lightbulb",
                    "tip": "lightbulb", "important": "exclamation-circle", "seealso": "share",
                    "todo": "pencil"}
ICON_CSS = "grpo-icons.css"


def admonition_css(icons) -> str:
    """CSS that draws the admonition icons as masks of inline SVGs, without the icon font."""
    from urllib.parse import quote

    rules = [".admonition>.admonition-title:after,div.admonition>.admonition-title:after{"
             'content:""!important;font:inherit!important;background-color:currentColor;'
             "-webkit-mask:var(--grpo-icon) center/contain no-repeat;"
             "mask:var(--grpo-icon) center/contain no-repeat}"]
    for kind, name in ADMONITION_ICONS.items():
        if ("fas", name) not in icons:
            continue
        width, height, path = icons[("fas", name)]
        svg = (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}">'
               f'<path d="{path}"/></svg>')
        sel = "".join(f".{c}" for c in ("admonition", kind) if c)
        rules.append(f"{sel}>.admonition-title:after,div{sel}>.admonition-title:after"
                     f'{{--grpo-icon:url("data:image/svg+xml,{quote(svg)}")}}')
    return "/* written by docs/sphinx_ext/book_weight.py */\n" + "\n".join(rules) + "\n"


def link_icon_css(page: str) -> str:
    """Link _static/grpo-icons.css right after grpo.css (same relative prefix), once."""
    if ICON_CSS in page:
        return page
    grpo_css = r'(<link rel="stylesheet" type="text/css" href="([^"]*)_static/grpo\.css[^"]*" />)'
    return re.sub(grpo_css,
                  lambda m: m.group(1) + f'\n    <link rel="stylesheet" type="text/css" '
                  f'href="{m.group(2)}_static/{ICON_CSS}" />', page, count=1)


def png_size(data: bytes) -> tuple[int, int] | None:
    if data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR":
        return struct.unpack(">II", data[16:24])
    return None


_IMG = re.compile(r"<img\b[^>]*>")


def size_images(page: str, page_dir: Path) -> tuple[str, int]:
    """Give every PNG `<img>` without a width its `width` and `height`; returns the page and how
    many were sized."""
    count = 0

    def fix(m: re.Match) -> str:
        nonlocal count
        tag = m.group(0)
        if re.search(r"\swidth=", tag):
            return tag
        src = re.search(r'\ssrc="([^"]+)"', tag)
        if not src:
            return tag
        src = src.group(1)
        size = None
        if src.startswith("data:image/png;base64,"):
            size = png_size(base64.b64decode(src[22:22 + 44]))
        elif not re.match(r"[a-z]+:", src) and src.endswith(".png"):
            target = page_dir / src
            if target.is_file():
                with open(target, "rb") as f:
                    size = png_size(f.read(24))
        if size is None:
            return tag
        count += 1
        return tag[:4] + f' width="{size[0]}" height="{size[1]}"' + tag[4:]

    return _IMG.sub(fix, page), count


# A kernel-free slider (grpo_core.viz.slider) holds every frame as a data-URI PNG in its output,
# so that it works anywhere the notebook goes (JupyterLab, a saved page). On the built page the
# frames are files instead: the frame shown first loads with the page, the others only when
# shown (`loading="lazy"` on a hidden image: the browser fetches it once it is displayed) or
# when the reader reaches for the slider (_static/grpo.js loads them on pointer, touch or focus).
FRAME_PREFIX = "grpo-frame-"
_FRAME = re.compile(r'<img\b[^>]*\bclass="grpo-slider-frame"[^>]*>')


def frame_files(page: str, root: str) -> tuple[str, dict[str, bytes]]:
    """Move the slider frames' data-URI PNGs into files: returns the page, whose frames now
    point to `{root}_images/grpo-frame-HASH.png` (HASH: of the PNG bytes), and {file name: PNG}.
    `root` is the relative path from the page to the site's root ("../" for book/x.html)."""
    files: dict[str, bytes] = {}

    def move(m: re.Match) -> str:
        tag = m.group(0)
        src = re.search(r'\ssrc="data:image/png;base64,([^"]+)"', tag)
        if not src:
            return tag
        data = base64.b64decode(src.group(1))
        name = f"{FRAME_PREFIX}{hashlib.sha256(data).hexdigest()[:20]}.png"
        files[name] = data
        tag = tag[:src.start()] + f' src="{root}_images/{name}"' + tag[src.end():]
        if re.search(r"\shidden\b", tag) and "loading=" not in tag:
            tag = tag[:4] + ' loading="lazy" decoding="async"' + tag[4:]
        return tag

    return _FRAME.sub(move, page), files


def lighten_head(page: str, search_page: bool) -> str:
    """Drop the search scripts (except on the search page) and sphinx-thebe, defer the head's
    other scripts, and load MathJax by components."""
    def script(m: re.Match) -> str:
        tag = m.group(0)
        src = m.group(1)
        name = src.split("?")[0].rsplit("/", 1)[-1]
        if name in SEARCH_SCRIPTS and not search_page:
            return ""
        if name in ("sphinx-thebe.js", "fontawesome.js"):
            return ""
        if name == "documentation_options.js" or " defer" in tag or " async" in tag:
            return tag  # inline scripts of the page read DOCUMENTATION_OPTIONS at once
        return tag.replace("<script ", "<script defer ", 1)

    page = re.sub(r'<script\b[^>]*\bsrc="([^"]+)"[^>]*></script>', script, page)
    page = re.sub(r'\s*<link rel="stylesheet" type="text/css" href="[^"]*sphinx-thebe\.css'
                  r'[^"]*" />', "", page)
    page = re.sub(r"\s*<script>const THEBE_JS_URL = [^<]*</script>", "", page)
    page = re.sub(r'\s*<link rel="preload" as="script" href="[^"]*fontawesome[^"]*" />', "", page)
    page = page.replace("mathjax/tex-chtml.js", "mathjax/startup.js")
    if '<script>window.MathJax = {"loader"' not in page:  # (a page left from a previous build)
        page = re.sub(r"<script>window\.MathJax = \{(.*?)</script>",
                      lambda m: '<script>window.MathJax = {"loader": {"load": '
                      + str(MATHJAX_LOAD).replace("'", '"') + "}, " + m.group(1) + "</script>"
                      + MATHJAX_FOCUS, page, count=1)
    return page


# pydata-sphinx-theme.js, at `load`, measures every code block and output (`scrollWidth`) and
# gives the ones that scroll tabindex 0, the others -1: one task that lays out the whole page,
# including the sections the page leaves unrendered until the reader scrolls near them
# (content-visibility, _static/grpo.css): 1-2.5 s on a simulated phone. _static/grpo.js does
# the same (with the book's own cue and accessible names) to each box as it comes near the
# screen, so the theme's call is dropped from the built script: its minified form
# `"complete"===document.readyState?F():window.addEventListener("load",F)`, where F is the
# function that sets `tabIndex` from `scrollWidth` (pydata-sphinx-theme 0.17).
_THEME_TAB_STOPS = re.compile(r'"complete"===document\.readyState\?(\w+)\(\):window\.'
                              r'addEventListener\("load",\1\)')


def drop_theme_tab_stops(script: str) -> tuple[str, bool]:
    """The theme's script without its load-time tab-stop pass; returns it and whether the call
    was found (and its function is the one that sets `tabIndex` from `scrollWidth`)."""
    for m in _THEME_TAB_STOPS.finditer(script):
        body = re.search(r"function " + re.escape(m.group(1)) + r"\(\)\{(.{0,400})", script)
        if body and "tabIndex=e.scrollWidth>e.clientWidth" in body.group(1):
            return script[:m.start()] + "void 0" + script[m.end():], True
    return script, False


def config_inited(app, config) -> None:
    # pydata-sphinx-theme reads the mode from the template context; unset, it writes "" and its
    # script logs "Got invalid theme mode" on every first visit
    if not config.html_context.get("default_mode"):
        config.html_context["default_mode"] = "auto"


def lighten_pages(app, exc) -> None:
    if exc is not None or app.builder.format != "html":
        return
    import book_math  # (docs/sphinx_ext is on the path: _config.yml's local_extensions)

    out = Path(app.outdir)
    kit = out / "_static" / "scripts" / "fontawesome.js"
    icons = read_icons(kit.read_text(encoding="utf-8")) if kit.is_file() else {}
    (out / "_static" / ICON_CSS).write_text(admonition_css(icons), encoding="utf-8")
    missing, sized, frames = set(), 0, {}
    pages, changed = {}, {}
    for path in sorted(out.rglob("*.html")):
        page = path.read_text(encoding="utf-8")
        rel = path.relative_to(out)
        new, lost = inline_icons(page, icons)
        missing.update(lost)
        new = lighten_head(new, search_page=rel.as_posix() == "search.html")
        new = link_icon_css(new)
        new, n = size_images(new, path.parent)
        sized += n
        new, files = frame_files(new, "../" * (len(rel.parts) - 1))
        frames.update(files)
        pages[path] = new
        if new != page:
            changed[path] = new
    images = out / "_images"
    images.mkdir(exist_ok=True)
    for name, data in frames.items():
        target = images / name
        if not target.is_file() or target.read_bytes() != data:
            target.write_bytes(data)
    theme_js = out / "_static" / "scripts" / "pydata-sphinx-theme.js"
    tab_stops = "theme's tab-stop pass: script not found"
    if theme_js.is_file():
        script, found = drop_theme_tab_stops(theme_js.read_text(encoding="utf-8"))
        if found:
            theme_js.write_text(script, encoding="utf-8")
        tab_stops = ("theme's load-time tab-stop pass dropped (done by grpo.js)" if found else
                     "theme's tab-stop pass NOT found in pydata-sphinx-theme.js: left as it is")
    render, why = book_math.node_renderer()
    math, math_summary = book_math.render_pages(out, pages, render, why)
    changed.update(math)
    for path, page in changed.items():
        path.write_text(page, encoding="utf-8")
    print(f"book_weight: {len(changed)} pages: icons inline ({len(icons)} known), search scripts "
          f"on search.html only, head scripts deferred, MathJax by components; {sized} images "
          f"sized; {len(frames)} slider frames moved to _images/{FRAME_PREFIX}*.png; {tab_stops}"
          + (f"; icons not found: {sorted(missing)}" if missing else ""))
    print(math_summary)


def setup(app):
    app.connect("config-inited", config_inited)
    app.connect("build-finished", lighten_pages)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
