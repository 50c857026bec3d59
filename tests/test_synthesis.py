"""Chapter 9's table of the book's findings quotes each chapter, it does not re-measure: every
number of a row must be printed by the chapter the row links to (its main text or its stored
outputs), so a chapter that changes a result breaks this test instead of leaving the table wrong."""

import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "book"
sys.path.insert(0, str(ROOT / "tools"))
from reading_stats import DROPDOWN  # noqa: E402

TABLE_CELL = "ch09-findings"
LINK = re.compile(r"\{doc\}`(\d+) <(\d\d_\w+)>`")
NUMBER = re.compile(r"\d+(?:\.\d+)?(?:e-?\d+)?")


def _cells(path):
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def findings():
    """(finding, headline, label, notebook stem) for each row of chapter 9's findings table."""
    (cell,) = [c for c in _cells(BOOK / "09_grpo_compressed.ipynb") if c.get("id") == TABLE_CELL]
    rows = [line for line in "".join(cell["source"]).splitlines() if line.startswith("| ")]
    out = []
    for line in rows[1:]:  # the first is the header
        finding, headline, link = (part.strip() for part in line.strip("| ").split(" | "))
        (match,) = LINK.findall(link)
        out.append((finding, headline, *match))
    return out


ROWS = findings()


def chapter_text(stem):
    """What a reader of the chapter sees printed: main-text prose (outside dropdowns, hidden
    cells skipped) and the text of its stored outputs."""
    parts = []
    for c in _cells(BOOK / f"{stem}.ipynb"):
        if "remove-cell" in c.get("metadata", {}).get("tags", []):
            continue
        if c["cell_type"] == "markdown":
            parts.append(DROPDOWN.sub("", "".join(c["source"])))
        for out in c.get("outputs", []):
            parts.append("".join(out.get("text", "")))
            for kind in ("text/plain", "text/markdown", "text/html"):
                parts.append("".join(out.get("data", {}).get(kind, "")))
    return "\n".join(parts)


def printed(number, text):
    """Whether text prints number as a whole number (0.87 is not in 0.873, 43 is in 43%)."""
    return re.search(rf"(?<![\d.]){re.escape(number)}(?![\d])", text) is not None


def test_the_table_has_a_row_for_every_other_chapter():
    linked = {stem[:2] for *_, stem in ROWS}
    chapters = {p.name[:2] for p in BOOK.glob("[0-9][0-9]_*.ipynb")} - {"09"}
    assert linked == chapters, f"no finding from: {sorted(chapters - linked)}"


@pytest.mark.parametrize(("finding", "headline", "label", "stem"), ROWS,
                         ids=[f"{stem[:2]}-{headline[:30]}" for _, headline, _, stem in ROWS])
def test_each_number_is_printed_by_the_linked_chapter(finding, headline, label, stem):
    assert (BOOK / f"{stem}.ipynb").exists(), stem
    assert int(label) == int(stem[:2]), f"link text {label} for {stem}"
    numbers = NUMBER.findall(headline)
    assert numbers, f"row without a number: {finding}"
    text = chapter_text(stem)
    missing = [n for n in numbers if not printed(n, text)]
    assert not missing, (f"{stem} does not print {missing} ({finding!r}): update the row of "
                         "chapter 9's table to what the chapter now says")


def test_numbers_are_matched_whole():
    assert printed("0.873", "cosine 0.873 with")
    assert printed("43", "loses 43% of its groups")
    assert printed("1e-12", "autograd to 1e-12.")
    assert not printed("0.87", "cosine 0.873")
    assert not printed("0.873", "cosine 10.873")
    assert not printed("2.5", "KL 2.51")
