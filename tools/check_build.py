"""Check that the built site has an HTML page for every _toc.yml entry (root and chapters).

    python tools/check_build.py [_build/html]

Exit status 1, with the missing pages listed, if any page is missing.
"""

import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


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


def main(argv: list[str]) -> int:
    html = Path(argv[0]) if argv else ROOT / "_build" / "html"
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    entries = toc_files(toc)
    missing = [f for f in entries if not (html / f"{f}.html").is_file()]
    if not (html / "index.html").is_file():
        missing.append("index")
    for f in entries:
        print(f"{'MISSING' if f in missing else 'ok':7}  {html / f}.html")
    if missing:
        print(f"{len(missing)} page(s) missing from {html}: {', '.join(missing)}", file=sys.stderr)
        return 1
    print(f"all {len(entries)} _toc.yml entries have a page in {html}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
