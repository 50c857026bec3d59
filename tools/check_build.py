"""Check that the built site has an HTML page for every _toc.yml entry (root and chapters), and
print each page's weight.

    python tools/check_build.py [_build/html]

Exit status 1, with the missing pages listed, if any page is missing, if a page loads a file that
docs/sphinx_ext/book_weight.py keeps off it (HEAVY: the FontAwesome kit anywhere, the search index
outside the search page...), or if a page's own weight
(its HTML gzipped at level 6, as GitHub Pages serves text, plus its `_images/` files) exceeds
PAGE_BUDGET. The theme and MathJax assets, shared by every page and cached after the first, are
printed once.
"""

import gzip
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
PAGE_BUDGET = 1_000_000  # bytes, compressed: the heaviest page's own weight


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


def page_weight(html: Path, page: Path) -> dict[str, int]:
    """Bytes of one page: its HTML raw and gzipped, its own images, and the shared assets it
    loads (CSS/JS under _static, gzipped; MathJax fetches its fonts and extensions later)."""
    text = page.read_bytes()
    refs = set(re.findall(rb'(?:src|href)="([^"#?]+)', text))
    images, shared = 0, 0
    for ref in refs:
        if re.match(rb"[a-z]+:", ref):  # data:, https:, mailto: (inline frames are in the HTML)
            continue
        target = (page.parent / ref.decode()).resolve()
        if not target.is_file() or html.resolve() not in target.parents:
            continue
        rel = target.relative_to(html.resolve()).parts[0]
        if rel == "_images":
            images += target.stat().st_size
        elif rel == "_static" and target.suffix in (".js", ".css"):
            shared += gz_size(target.read_bytes())
    return {"html": len(text), "html_gz": gz_size(text), "images": images, "shared_gz": shared}


def print_weights(html: Path, entries: list[str]) -> list[str]:
    """Print a table of page weights; return the pages over PAGE_BUDGET."""
    over, shared = [], 0
    print(f"{'page':32} {'HTML':>9} {'HTML gz':>9} {'images':>9} {'own gz':>9}")
    for f in entries:
        page = html / f"{f}.html"
        if not page.is_file():
            continue
        w = page_weight(html, page)
        own = w["html_gz"] + w["images"]
        shared = max(shared, w["shared_gz"])
        print(f"{f:32} {w['html'] / 1e3:7.0f}KB {w['html_gz'] / 1e3:7.0f}KB "
              f"{w['images'] / 1e3:7.0f}KB {own / 1e3:7.0f}KB")
        if own > PAGE_BUDGET:
            over.append(f)
    print(f"shared theme + MathJax loader (CSS/JS, gz, cached after the first page): "
          f"{shared / 1e3:.0f} KB; budget per page (own gz): {PAGE_BUDGET / 1e3:.0f} KB")
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


def main(argv: list[str]) -> int:
    html = Path(argv[0]) if argv else ROOT / "_build" / "html"
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    entries = toc_files(toc)
    missing = [f for f in entries if not (html / f"{f}.html").is_file()]
    if not (html / "index.html").is_file():
        missing.append("index")
    for f in entries:
        print(f"{'MISSING' if f in missing else 'ok':7}  {html / f}.html")
    over = print_weights(html, entries)
    if over:
        print(f"{len(over)} page(s) over {PAGE_BUDGET} bytes compressed: {', '.join(over)}",
              file=sys.stderr)
    heavy = heavy_assets(html)
    if heavy:
        print(f"{len(heavy)} page(s) load what docs/sphinx_ext/book_weight.py drops: "
              + ", ".join(heavy[:10]), file=sys.stderr)
    if missing:
        print(f"{len(missing)} page(s) missing from {html}: {', '.join(missing)}", file=sys.stderr)
        return 1
    if heavy:
        return 1
    print(f"all {len(entries)} _toc.yml entries have a page in {html}")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
