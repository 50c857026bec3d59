"""Check that the built site has an HTML page for every _toc.yml entry (root and chapters), and
print what a first visit to each page loads.

    python tools/check_build.py [_build/html] [--allow-client-math]

Exit status 1, with the pages named, if any page is missing; if a page loads a file that
docs/sphinx_ext/book_weight.py keeps off it (HEAVY: the FontAwesome kit anywhere, the search index
outside the search page...); if a page with math still typesets it in the browser (a MathJax
script: docs/sphinx_ext/book_math.py renders it at build time when Node and tools/mathjax are
installed; --allow-client-math accepts such a local build); or if a first visit to a page, empty
cache, would transfer more than FIRST_VISIT_BUDGET bytes: its HTML, stylesheets (and their
@imports) and scripts gzipped at level 6 (as GitHub Pages serves text), its images, the MathJax
fonts its math uses and its icon. A slider's hidden frames are not counted (they load when the
reader uses the slider); every other image is, as if the reader scrolled the whole page.
"""

import gzip
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
FIRST_VISIT_BUDGET = 500_000  # bytes transferred (text gzipped), empty cache: issue 33's target


def toc_files(toc: dict) -> list[str]:
    """The root and every `file:` of a jb-book _toc.yml (parts, chapters, sections), in reading
    order, without extension ("book/01_x.ipynb" and "book/01_x" are the same page)."""
    files = [toc["root"]]

    def walk(entries) -> None:
        for entry in entries or []:
            if "file" in entry:
                files.append(entry["file"])
            walk(entry.get("sections"))

    walk(toc.get("chapters"))
    for part in toc.get("parts") or []:
        walk(part.get("chapters"))
    return [re.sub(r"\.(ipynb|md)$", "", f) for f in files]


def gz_size(data: bytes) -> int:
    return len(gzip.compress(data, compresslevel=6, mtime=0))


TEXT = (".html", ".css", ".js", ".svg", ".json", ".txt")  # what GitHub Pages gzips


def _local(base: Path, ref: str, html: Path) -> Path | None:
    """The built file `ref` (relative to `base`) names, or None (another host, a data: URI...)."""
    ref = ref.split("#")[0].split("?")[0]
    if not ref or re.match(r"[a-z]+:", ref) or ref.startswith("//"):
        return None
    target = (base / ref).resolve()
    return target if target.is_file() and html.resolve() in target.parents else None


def css_imports(css: Path, html: Path, seen: set[Path]) -> list[Path]:
    """`css` and the stylesheets it @imports, recursively."""
    if css in seen:
        return []
    seen.add(css)
    found = [css]
    text = css.read_text(encoding="utf-8", errors="replace")
    for ref in re.findall(r'@import\s+(?:url\()?["\']?([^"\')\s;]+)', text):
        target = _local(css.parent, ref, html)
        if target is not None:
            found += css_imports(target, html, seen)
    return found


def first_visit(html: Path, page: Path) -> dict[str, int]:
    """Bytes a first visit to `page` transfers, by kind: "html", "css", "js" (gzipped), "images",
    "fonts" (MathJax's woff files its math needs), "other" (its icon). Hidden slider frames that
    load only when shown (loading="lazy") are left out."""
    sys.path.insert(0, str(ROOT / "docs" / "sphinx_ext"))
    try:
        import book_math
    finally:
        sys.path.remove(str(ROOT / "docs" / "sphinx_ext"))
    text = page.read_text(encoding="utf-8")
    files: dict[Path, str] = {}
    for tag in re.findall(r"<(?:script|link|img)\b[^>]*>", text):
        ref = re.search(r'\s(?:src|href)="([^"]+)"', tag)
        if ref is None:
            continue
        if tag.startswith("<link") and not re.search(
                r'rel="(?:stylesheet|preload|icon|shortcut icon)"', tag):
            continue
        if tag.startswith("<img") and "grpo-slider-frame" in tag and 'loading="lazy"' in tag:
            continue
        target = _local(page.parent, ref.group(1), html)
        if target is None:
            continue
        if target.suffix == ".css":
            for css in css_imports(target, html, set()):
                files[css] = "css"
        else:
            files[target] = {".js": "js", ".png": "images", ".jpg": "images", ".jpeg": "images",
                             ".gif": "images", ".webp": "images"}.get(target.suffix, "other")
    for ref in book_math.fonts_used(text):
        target = _local(page.parent, ref, html)
        if target is not None:
            files[target] = "fonts"
    weight = {"html": gz_size(page.read_bytes()), "css": 0, "js": 0, "images": 0, "fonts": 0,
              "other": 0}
    for target, kind in files.items():
        data = target.read_bytes()
        weight[kind] += gz_size(data) if target.suffix in TEXT else len(data)
    return weight


def print_weights(html: Path, entries: list[str]) -> list[str]:
    """Print each page's first visit; return the pages over FIRST_VISIT_BUDGET."""
    over = []
    kinds = ("html", "css", "js", "images", "fonts", "other")
    print(f"{'first visit (KB, text gzipped)':32} " + " ".join(f"{k:>7}" for k in kinds)
          + f" {'total':>7}")
    for f in entries:
        page = html / f"{f}.html"
        if not page.is_file():
            continue
        w = first_visit(html, page)
        total = sum(w.values())
        print(f"{f:32} " + " ".join(f"{w[k] / 1e3:7.0f}" for k in kinds) + f" {total / 1e3:7.0f}"
              + ("  OVER" if total > FIRST_VISIT_BUDGET else ""))
        if total > FIRST_VISIT_BUDGET:
            over.append(f)
    print(f"budget per page (first visit, empty cache): {FIRST_VISIT_BUDGET / 1e3:.0f} KB")
    return over


# What docs/sphinx_ext/book_weight.py keeps off the pages: (file name, the only page that may load
# it, or None for none). The FontAwesome kit is 530 KB gzipped; the search index loads where the
# search runs; MathJax's combined file carries a 430 KB menu.
HEAVY = [("fontawesome.js", None), ("searchindex.js", "search.html"),
         ("searchtools.js", "search.html"), ("tex-chtml.js", None), ("sphinx-thebe.js", None)]


def heavy_assets(html: Path) -> list[str]:
    """Pages that load a file of HEAVY they should not, as "page: file"."""
    found = []
    for page in sorted(html.rglob("*.html")):
        scripts = re.findall(r'<script\b[^>]*\bsrc="([^"?]+)', page.read_text(encoding="utf-8"))
        for name, allowed in HEAVY:
            rel = page.relative_to(html).as_posix()
            if rel != allowed and any(s.rsplit("/", 1)[-1] == name for s in scripts):
                found.append(f"{rel}: {name}")
    return found


def client_math(html: Path) -> list[str]:
    """Pages that typeset math in the browser (a MathJax script) instead of carrying it rendered
    at build time (docs/sphinx_ext/book_math.py)."""
    return [page.relative_to(html).as_posix() for page in sorted(html.rglob("*.html"))
            if re.search(r'<script\b[^>]*\bsrc="[^"]*mathjax/[^"]*"', page.read_text(
                encoding="utf-8")) or "window.MathJax =" in page.read_text(encoding="utf-8")]


def main(argv: list[str]) -> int:
    allow_client_math = "--allow-client-math" in argv
    argv = [a for a in argv if a != "--allow-client-math"]
    html = Path(argv[0]) if argv else ROOT / "_build" / "html"
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    entries = toc_files(toc)
    missing = [f for f in entries if not (html / f"{f}.html").is_file()]
    if not (html / "index.html").is_file():
        missing.append("index")
    for f in entries:
        print(f"{'MISSING' if f in missing else 'ok':7}  {html / f}.html")
    over = print_weights(html, entries)
    failed = False
    if over:
        print(f"{len(over)} page(s) over {FIRST_VISIT_BUDGET} bytes on a first visit: "
              f"{', '.join(over)}", file=sys.stderr)
        failed = True
    heavy = heavy_assets(html)
    if heavy:
        print(f"{len(heavy)} page(s) load what docs/sphinx_ext/book_weight.py drops: "
              + ", ".join(heavy[:10]), file=sys.stderr)
        failed = True
    client = client_math(html)
    if client:
        print(f"{len(client)} page(s) typeset math in the browser (MathJax script), not rendered "
              f"at build time: {', '.join(client[:10])} (install Node and run `npm ci --prefix "
              "tools/mathjax`, then build again); their first-visit figures above leave out what "
              "MathJax's script fetches itself (its components and fonts, 240-280 KB)",
              file=sys.stderr)
        failed = failed or not allow_client_math
    else:
        print("math: rendered at build time on every page (no MathJax script)")
    if missing:
        print(f"{len(missing)} page(s) missing from {html}: {', '.join(missing)}", file=sys.stderr)
        return 1
    print(f"all {len(entries)} _toc.yml entries have a page in {html}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
