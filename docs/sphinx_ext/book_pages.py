"""A local Sphinx extension for the pages' hygiene and accessibility (loaded from _config.yml).

What the theme and its extensions write that the book can fix here (tools/browser_check.py runs
axe-core on every page and fails on serious or critical violations):

- Accessible names that contain the visible label (WCAG 2.5.3, axe `label-content-name-mismatch`):
  myst-nb's "Show code cell source" toggles are `<summary aria-label="Toggle hidden content">`
  and the theme's search field is `aria-label="Search"` around "Search Ctrl+K": without the
  `aria-label` their names are their visible text. The theme's colour-mode button shows icons
  whose `title` ("Light", "Dark") is read as visible text: the icons are marked decorative
  (`aria-hidden`), and the button keeps its name "Color mode".
- sphinx-thebe writes its inline config script (`const THEBE_JS_URL = ...`) twice into every page
  (even with Thebe off) and the second `const` throws: each script is written once.
- A meta description per page (search results, link previews): the page's first sentences of
  prose, unless the page sets its own (MyST front matter `html_meta`).
"""

from __future__ import annotations

import html
import re
from pathlib import Path

from docutils import nodes

DESCRIPTION_CHARS = 160  # search engines show about this much

# (pattern, replacement, what): applied to every written HTML page by fix_accessible_names
_NAME_FIXES = [
    (re.compile(r'<summary aria-label="Toggle hidden content">'), "<summary>",
     "code-cell toggle named by its visible text"),
    (re.compile(r'(<button class="[^"]*\bsearch-button-field\b[^"]*"[^>]*?) aria-label="Search"'),
     r"\1", "search field named by its visible text"),
    (re.compile(r'(<i class="theme-switch [^"]*" data-mode="\w+")\s+title="[^"]*"'),
     r'\1 aria-hidden="true"', "colour-mode icon marked decorative"),
]


def fix_accessible_names(page: str) -> tuple[str, dict[str, int]]:
    """``page`` with the fixes of _NAME_FIXES applied, and how many of each were made."""
    counts = {}
    for pattern, replacement, what in _NAME_FIXES:
        page, n = pattern.subn(replacement, page)
        counts[what] = n
    return page, counts


def _in_prose(node) -> bool:
    """A paragraph of the page's own text: not in a code cell, admonition, table, figure."""
    parent = node.parent
    while parent is not None:
        if isinstance(parent, (nodes.Admonition, nodes.table, nodes.figure, nodes.footnote,
                               nodes.sidebar, nodes.topic, nodes.block_quote)):
            return False
        if isinstance(parent, nodes.container) and "cell" in parent.get("classes", []):
            return False
        parent = parent.parent
    return True


def _plain(tex: str) -> str:
    """Inline TeX as plain text: ``\\pi_\\theta`` -> ``pi_theta``, ``\\mathrm{KL}`` -> ``KL``."""
    tex = re.sub(r"\\(?:math[a-z]*|text[a-z]*|operatorname)\b\s*", "", tex)
    tex = re.sub(r"\\([A-Za-z]+)", r"\1", tex)
    tex = re.sub(r"\\.", " ", tex)  # spacing commands such as \, and \;
    return tex.replace("{", "").replace("}", "")


def _text(node) -> str:
    if isinstance(node, nodes.math):
        return _plain(node.astext())
    if isinstance(node, nodes.Text):
        return node.astext()
    return "".join(_text(child) for child in node.children)


def description(doctree) -> str:
    """The first sentences of the page's prose, at most DESCRIPTION_CHARS characters, cut at a
    word; inline math as plain text (a description is plain text)."""
    text = ""
    for para in doctree.findall(nodes.paragraph):
        if not _in_prose(para):
            continue
        words = " ".join(_text(para).split())
        if not words:
            continue
        text = f"{text} {words}".strip()
        if len(text) >= DESCRIPTION_CHARS // 2:
            break
    if len(text) > DESCRIPTION_CHARS:
        text = text[:DESCRIPTION_CHARS - 1].rsplit(" ", 1)[0].rstrip(",;:") + "\u2026"
    return text


def page_context(app, pagename, templatename, context, doctree) -> None:
    # each inline script once (sphinx-thebe's config is registered twice)
    scripts = context.get("script_files")
    if isinstance(scripts, list):
        seen, unique = set(), []
        for js in scripts:
            key = (getattr(js, "filename", js) or "",  # an inline script: None or ""
                   tuple(sorted(getattr(js, "attributes", {}).items())))
            if key not in seen:
                seen.add(key)
                unique.append(js)
        scripts[:] = unique
    # a meta description, unless the page has its own
    metatags = context.get("metatags", "")
    if doctree is not None and 'name="description"' not in metatags:
        text = description(doctree) or context.get("title", "")
        if text:
            context["metatags"] = (f'{metatags}\n<meta name="description" '
                                   f'content="{html.escape(text, quote=True)}" />')


def fix_pages(app, exc) -> None:
    if exc is not None or app.builder.format != "html":
        return
    total: dict[str, int] = {}
    for path in sorted(Path(app.outdir).rglob("*.html")):
        page = path.read_text(encoding="utf-8")
        fixed, counts = fix_accessible_names(page)
        if fixed != page:
            path.write_text(fixed, encoding="utf-8")
        for what, n in counts.items():
            total[what] = total.get(what, 0) + n
    print("book_pages: " + ", ".join(f"{n} x {what}" for what, n in total.items()))


def setup(app):
    app.connect("html-page-context", page_context, priority=900)  # after the theme's handlers
    app.connect("build-finished", fix_pages)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
