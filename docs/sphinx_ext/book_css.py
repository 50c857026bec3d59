"""A local Sphinx extension: the site's stylesheets purged into one file (loaded from _config.yml).

Every page linked the same 11 stylesheets in its head (the theme's, Sphinx's, sphinx-design's,
MyST-NB's, the book's): 11 requests that block the first paint, 97 KB gzipped, of which the
theme's `pydata-sphinx-theme.css` alone is 66 KB and ~91% unused on a page (Lighthouse's
`unused-css-rules`). On a simulated phone on slow 4G this was most of the 2.7-2.9 s before the
first paint. After every page is written (and after book_weight.py), this step:

- collects what any page can use: every class and id in every built HTML page, and every word
  of every script a page loads or holds inline, the search index (data) apart (the classes the
  theme's scripts add or toggle at run time: `show`, `collapsing`, `toggle-hidden`,
  `bs-tooltip-...`; a word ending in `-`, such
  as `"bs-" + name`, keeps every class that starts with it);
- drops from each stylesheet the selectors that can match nothing: a selector is dropped only if
  it needs a class or id (outside `:not(...)`, `:is(...)` and other parentheses, and outside
  attribute selectors) that no page has and no script names; a rule none of whose selectors
  remain is dropped. Selectors of elements, attributes (`html[data-theme=dark]`), pseudo-classes,
  `:root`'s custom properties, `@font-face`, `@keyframes` and the like are kept as they are;
  `@media`, `@supports`, `@layer` and `@container` blocks are purged inside (and dropped when
  emptied); a selector list with a vendor-prefixed pseudo (`::-moz-...`), which one invalid
  selector makes the browser ignore as a whole, is kept whole if it is kept at all;
- concatenates the purged stylesheets in the page's order (the cascade is unchanged; an
  `@import` is inlined where it stood, `url(...)`s rewritten for the new file's folder) into one
  file, `_static/book-HASH.css` (HASH: of its text, so a browser never keeps a stale copy), and
  links it where the first stylesheet was: one request instead of 11, cached from page to page.
  The original stylesheets stay in `_static`, untouched.

Result: 162 KB (28 KB gzipped) instead of 544 KB (97 KB); the simulated phone's first paint comes
about 1 s earlier (README "Page weight"). Inlining it in each page's head instead measured the
same first paint in Lighthouse and would be downloaded again with every page, so it is a file.
tests/test_book_css.py tests the purge; tools/browser_check.py and before/after screenshots
check that the pages look and work as before.
"""

from __future__ import annotations

import hashlib
import posixpath
import re
from dataclasses import dataclass, field
from pathlib import Path

# at-rules whose block holds style rules, purged inside; every other block (@font-face,
# @keyframes, @page, @property...) is kept as it is
NESTED_AT_RULES = ("@media", "@supports", "@layer", "@container", "@document", "@-moz-document")
_VENDOR_PSEUDO = re.compile(r"::?-(?:webkit|moz|ms|o)-")
_WORD = re.compile(r"-?[A-Za-z_][-\w]*")
_TOKEN = re.compile(r"([.#])(-?[A-Za-z_\u00a0-\uffff][-\w\u00a0-\uffff]*)")


@dataclass
class Used:
    """What the site's pages and scripts can put in the DOM: class names, ids, script words and
    class-name prefixes (a script word ending in `-`)."""

    names: set[str] = field(default_factory=set)
    prefixes: tuple[str, ...] = ()

    def add_html(self, page: str) -> None:
        for value in re.findall(r'\sclass="([^"]*)"', page):
            self.names.update(value.split())
        self.names.update(re.findall(r'\sid="([^"]*)"', page))
        for script in re.findall(r"<script\b[^>]*>(.*?)</script>", page, flags=re.S):
            self.add_script(script)

    def add_script(self, text: str) -> None:
        words = set(_WORD.findall(text))
        self.names.update(words)
        fresh = {w for w in words if w.endswith("-") and len(w.strip("-")) >= 2}
        self.prefixes = tuple(sorted(set(self.prefixes) | fresh))

    def has(self, name: str) -> bool:
        return name in self.names or name.startswith(self.prefixes)


def _string_end(css: str, i: int) -> int:
    """The index just past the string that starts at css[i] (a quote)."""
    quote, j = css[i], i + 1
    while j < len(css) and css[j] != quote:
        j += 2 if css[j] == "\\" else 1
    return j + 1


def strip_comments(css: str) -> str:
    """The stylesheet without its comments, except license comments (`/*! ... */`)."""
    out, i, start = [], 0, 0
    while i < len(css):
        c = css[i]
        if c in "\"'":
            i = _string_end(css, i)
        elif css.startswith("/*", i):
            end = css.find("*/", i + 2)
            end = len(css) if end < 0 else end + 2
            out.append(css[start:i])
            if css.startswith("/*!", i):
                out.append(css[i:end] + "\n")
            i = start = end
        else:
            i += 1
    out.append(css[start:])
    return "".join(out)


def blocks(css: str) -> list[tuple[str, str | None]]:
    """The top-level statements of a stylesheet without comments: (prelude, body) for a rule or
    block at-rule (body: the text between its braces), (statement, None) for `@import ...;`."""
    items: list[tuple[str, str | None]] = []
    i, start, n = 0, 0, len(css)
    while i < n:
        c = css[i]
        if c in "\"'":
            i = _string_end(css, i)
        elif css.startswith("/*!", i):  # a license comment: a statement of its own
            end = css.find("*/", i + 3)
            end = n if end < 0 else end + 2
            items.append((css[i:end], None))
            i = start = end
        elif c == "{":
            depth, j = 1, i + 1
            while j < n and depth:
                if css[j] in "\"'":
                    j = _string_end(css, j)
                    continue
                depth += {"{": 1, "}": -1}.get(css[j], 0)
                j += 1
            items.append((css[start:i].strip(), css[i + 1:j - 1]))
            i = start = j
        elif c == ";":
            items.append((css[start:i].strip(), None))
            i = start = i + 1
        elif c == "}":  # a stray brace: skipped, as a browser does
            i = start = i + 1
        else:
            i += 1
    if css[start:].strip():
        items.append((css[start:].strip(), None))
    return items


def _top_level(text: str):
    """``(index, character)`` of each character of ``text`` outside strings, parentheses and
    brackets (the brackets themselves excluded)."""
    depth, i = 0, 0
    while i < len(text):
        c = text[i]
        if c in "\"'":
            i = _string_end(text, i)
            continue
        if c in "([":
            depth += 1
        elif c in ")]":
            depth -= 1
        elif depth == 0:
            yield i, c
        i += 1


def split_selectors(prelude: str) -> list[str]:
    """A selector list split at its top-level commas (not inside parentheses, brackets or
    strings)."""
    parts, start = [], 0
    for i, c in _top_level(prelude):
        if c == ",":
            parts.append(prelude[start:i].strip())
            start = i + 1
    parts.append(prelude[start:].strip())
    return [p for p in parts if p]


def _outside_brackets(selector: str) -> str:
    """The selector without strings, attribute selectors and the arguments of functional
    pseudo-classes (`:not(.a)`, `:is(.a, .b)`, `:has(...)`), none of which needs a class."""
    return "".join(c for _, c in _top_level(selector))


def can_match(selector: str, used: Used) -> bool:
    """False only if the selector needs a class or id that nothing on the site has."""
    if "\\" in selector:  # an escaped name (`.md\\:flex`): not worth parsing; kept
        return True
    return all(used.has(name) for _kind, name in _TOKEN.findall(_outside_brackets(selector)))


def purge(css: str, used: Used) -> str:
    """The stylesheet (without comments) less the selectors and rules that can match nothing."""
    out = []
    for prelude, body in blocks(css):
        if body is None:
            out.append(prelude if prelude.startswith("/*!") else prelude + ";")
        elif prelude.startswith("@"):
            name = re.match(r"@[-\w]+", prelude)
            if name and name.group(0).lower() in NESTED_AT_RULES:
                inner = purge(body, used)
                if inner.strip():
                    out.append(f"{prelude}{{{inner}}}")
            else:
                out.append(f"{prelude}{{{body}}}")
        else:
            selectors = split_selectors(prelude)
            kept = [s for s in selectors if can_match(s, used)]
            if not kept:
                continue
            if len(kept) < len(selectors) and any(_VENDOR_PSEUDO.search(s) for s in selectors):
                kept = selectors
            out.append(",".join(kept) + "{" + body + "}")
    return "\n".join(out)


_URL = re.compile(r"""url\(\s*(["']?)([^"')]+)\1\s*\)""")


def rebase_urls(css: str, css_dir: str, page_dir: str) -> str:
    """`url(...)`s of a stylesheet in `css_dir` made relative to a page in `page_dir` (both
    relative to the site's root, POSIX)."""
    def fix(m: re.Match) -> str:
        ref = m.group(2).strip()
        if re.match(r"[a-z][-a-z0-9+.]*:", ref, flags=re.I) or ref.startswith(("/", "#")):
            return m.group(0)
        target = posixpath.normpath(posixpath.join(css_dir, ref))
        return f'url("{posixpath.relpath(target, page_dir or ".")}")'

    return _URL.sub(fix, css)


_LINK = re.compile(r'[ \t]*<link\b(?=[^>]*\brel="stylesheet")[^>]*\bhref="([^"]+)"[^>]*>\n?')


def stylesheet_text(path: Path, root: Path, page_dir: str, seen: set[Path]) -> str:
    """The stylesheet at `path` with its local @imports inlined where they stand, comments
    removed and urls relative to `page_dir`."""
    if path in seen:
        return ""
    seen.add(path)
    css_dir = path.parent.relative_to(root).as_posix()
    css = strip_comments(path.read_text(encoding="utf-8"))

    def inline(m: re.Match) -> str:
        target = (path.parent / m.group(2)).resolve()
        if not target.is_file() or root.resolve() not in target.parents:
            return m.group(0)
        return stylesheet_text(target, root, page_dir, seen)

    css = re.sub(r"""@import\s+(?:url\()?(["']?)([^"')\s;]+)\1\)?\s*;""", inline, css)
    css = re.sub(r"@charset\s+\"[^\"]*\";", "", css)
    return rebase_urls(css, css_dir, page_dir)


def local_stylesheet(href: str, page: Path, root: Path) -> Path | None:
    ref = href.split("?")[0].split("#")[0]
    if re.match(r"[a-z]+:", ref) or ref.startswith("/"):
        return None
    target = (page.parent / ref).resolve()
    return target if target.is_file() and root.resolve() in target.parents else None


def combine_stylesheets(page: str, page_path: Path, root: Path, used: Used,
                        written: dict) -> tuple[str, int]:
    """The page with its local stylesheet links replaced, where the first one stood, by one
    link to their purged concatenation, `_static/book-HASH.css` (HASH: of its text; written once
    for all the pages that link the same stylesheets). `written` maps each list of stylesheets
    to its file name. Returns the page and how many links it replaced."""
    links = [m for m in _LINK.finditer(page) if local_stylesheet(m.group(1), page_path, root)]
    if not links:
        return page, 0
    sheets = tuple(local_stylesheet(m.group(1), page_path, root) for m in links)
    if sheets not in written:
        seen: set[Path] = set()
        css = purge("\n".join(stylesheet_text(p, root.resolve(), "_static", seen)
                               for p in sheets), used)
        name = f"book-{hashlib.sha256(css.encode()).hexdigest()[:16]}.css"
        (root / "_static" / name).write_text(css, encoding="utf-8")
        written[sheets] = name
    page_dir = page_path.parent.relative_to(root).as_posix() or "."
    href = posixpath.relpath(f"_static/{written[sheets]}", page_dir)
    tag = f'    <link rel="stylesheet" type="text/css" href="{href}" />\n'
    out, last = [], 0
    for n, m in enumerate(links):
        out.append(page[last:m.start()])
        if n == 0:
            out.append(tag)
        last = m.end()
    out.append(page[last:])
    return "".join(out), len(links)


def site_used(root: Path, pages: dict[Path, str]) -> Used:
    """Everything the built pages and the scripts they load can put in the DOM."""
    used = Used()
    scripts: set[Path] = set()
    for path, page in pages.items():
        used.add_html(page)
        for src in re.findall(r'<script\b[^>]*\bsrc="([^"]+)"', page):
            target = local_stylesheet(src, path, root)  # (any local file)
            if target is not None:
                scripts.add(target)
    for script in sorted(scripts):
        if script.name == "searchindex.js":  # the search index: data (every word of the site)
            continue
        used.add_script(script.read_text(encoding="utf-8", errors="replace"))
    return used


def purge_site_css(app, exc) -> None:
    if exc is not None or app.builder.format != "html":
        return
    root = Path(app.outdir)
    pages = {p: p.read_text(encoding="utf-8") for p in sorted(root.rglob("*.html"))}
    used = site_used(root, pages)
    written: dict = {}
    replaced = 0
    for path, page in pages.items():
        new, n = combine_stylesheets(page, path, root, used, written)
        replaced += n
        if new != page:
            path.write_text(new, encoding="utf-8")
    before = sum(len(p.read_bytes()) for p in {p for sheets in written for p in sheets})
    after = sum(len((root / "_static" / n).read_bytes()) for n in set(written.values()))
    print(f"book_css: {replaced} stylesheet links on {len(pages)} pages replaced by one purged "
          f"stylesheet ({len(set(written.values()))} file(s), {after} bytes, from {before}; "
          f"{len(used.names)} names and {len(used.prefixes)} prefixes in use)")


def setup(app):
    # after book_weight.py's build-finished step (priority 500), which rewrites the heads
    app.connect("build-finished", purge_site_css, priority=800)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
