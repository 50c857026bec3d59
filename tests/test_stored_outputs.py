"""No stored output prints a bare rounding residue.

A quantity that is zero up to rounding (a loss whose advantages sum to zero, the gap between two
computations of one gradient) prints its residue differently on every CPU and library build:
4.0e-15 here, 4.3e-15 there. The book prints such a quantity as the bound it is checked against
(`< 1e-12`, `... < 1e-15: True`), never the residue itself.

The rule: in the text of a code cell's outputs, a number in scientific notation whose magnitude is
below 1e-6 and that is not exactly 0 is a residue, unless a bound or an order of magnitude
introduces it (`<`, `≤`, `below`, `under`, `within`, `to`, `±`, `~`, `≈`). Source code a cell
shows (a fenced block in a Markdown output) is not output. Exact zeros (`0.0e+00`: the same
float32 tensors through the same formula) are fixed by the computation and pass. A genuinely small
quantity that the prose discusses is allowed only by cell, in ALLOWED below, with the reason.
"""

import html
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "book").glob("*.ipynb"))

SCI = re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d+)?[eE][-+]?\d+(?![\w.])")
BOUND = re.compile(r"(<|≤|<=|~|≈|\bbelow|\bunder|\bwithin|\bto|±)\s*$")
TAG = re.compile(r"<[^>]+>")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)  # source code a cell shows (viz.show_source)

# (notebook, cell id): why its small numbers are values, not residues
ALLOWED = {
    ("12_kl_estimators.ipynb", "08edb1f0"): (
        "the last column is the smallest probability of the exact-KL optimum pi*_beta (chapter "
        "6's closed form, 5.5e-41 at beta 0.1): the prose sets it against k3's floor; the next "
        "cell recomputes it in the log domain with Python's libm, equal to 1e-9 relative, and "
        "checks that no printed value is within 1e-9 of a rounding boundary"),
    ("12_kl_estimators.ipynb", "4f829b16"): (
        "the last column is the exact-KL target's smallest probability at beta' (a closed form, "
        "4.0e-08 at beta 0.5), beside the k3 runs' floor"),
}


def residues(text: str) -> list[str]:
    """The bare residues in ``text``: each line's numbers below 1e-6 (not 0) in scientific
    notation that no bound introduces."""
    found = []
    for line in html.unescape(TAG.sub(" ", text)).splitlines():
        for m in SCI.finditer(line):
            value = float(m.group())
            if value != 0 and abs(value) < 1e-6 and not BOUND.search(line[:m.start()]):
                found.append(f"{m.group()} in {line.strip()!r}")
    return found


def output_text(output: dict) -> str:
    if output.get("output_type") == "stream":
        return "".join(output.get("text", ""))
    data = output.get("data", {})
    texts = [FENCE.sub("", "".join(data["text/markdown"]))] if "text/markdown" in data else []
    return "\n".join(texts + ["".join(data[k]) for k in ("text/plain", "text/html")
                               if k in data and not "".join(data[k]).startswith("<IPython")])


def test_the_rule():
    assert residues("loss value: 4.63e-17") == ["4.63e-17 in 'loss value: 4.63e-17'"]
    row = "3   True   +1.02e-08   0.0e+00"
    assert residues(row) == [f"+1.02e-08 in {row!r}"]
    assert residues("<td>-3.7e-09</td>") == ["-3.7e-09 in '-3.7e-09'"]
    assert not residues("largest |exact - autograd|: < 1e-12")
    assert not residues("agree everywhere to 1e-12: True; |x| below 1e-13, ≤ 2e-9, ± 1e-7")
    assert not residues("a residue of ~1e-7 that Adam turns into steps")
    assert output_text({"output_type": "display_data", "data": {
        "text/markdown": "the source:\n```python\nclamp = math.log(1e-8)\n```\n",
        "text/plain": "<IPython.core.display.Markdown object>"}}).strip() == "the source:"
    assert not residues("|loss diff| 0.0e+00, grad 8.6e-02, min pi 3.89e-04, n = 1e6")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_stored_output_prints_a_bare_rounding_residue(path):
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    bad = []
    for cell in cells:
        if cell["cell_type"] != "code" or (path.name, cell.get("id")) in ALLOWED:
            continue
        for output in cell.get("outputs", []):
            bad += [f"cell {cell.get('id')}: {r}" for r in residues(output_text(output))]
    assert not bad, ("print these as the bound they are checked against (e.g. '< 1e-12'), not "
                     "their rounding:\n" + "\n".join(bad))


def test_every_allowed_cell_exists_and_still_prints_a_small_number():
    for (name, cell_id), _reason in ALLOWED.items():
        cells = json.loads((ROOT / "book" / name).read_text(encoding="utf-8"))["cells"]
        cell = next(c for c in cells if c.get("id") == cell_id)
        assert any(residues(output_text(o)) for o in cell["outputs"]), (name, cell_id)
