"""Numbers printed in the main text of more than one chapter: each result should live in one.

    python tools/repeated_numbers.py            # every repeat, with its chapters; exit 1 if any
    python tools/repeated_numbers.py -v         # ... and the sentence around each occurrence

A result (a measured value: 5.5395, 0.873, 4.69) is printed in one chapter's prose; other chapters
link to that chapter in a line, without the number. Chapter 9's findings table (the cell
``ch09-findings``) is the one place allowed to repeat them. The check reads what a reader reads:

- the prose of markdown cells, outside collapsed ``{dropdown}`` blocks (optional reading), fenced
  code and inline code spans (code is not a result), the same way ``tools/reading_stats.py``
  separates them; hidden (``remove-cell``) cells and the reading-time line are skipped;
- numbers with two or more decimals (0.873, 4.69) and integers of 100 or more (161, 1538); shorter
  numbers are too common to mean one thing.

Inputs are not results. A number is an input, and ignored, when the words around it say so
(:data:`INPUT_BEFORE`, :data:`INPUT_AFTER`: an arXiv id, a TRL line number, a β or learning rate a
run is given, a default, a count of steps, draws or seeds), or when :data:`INPUTS` lists it with a
reason. A two-decimal number can also be two different quantities in two chapters by chance: the
chapter where it means something else is listed in :data:`COINCIDENCES` with both meanings.
Both lists stay short; a result that moves to another chapter must not be hidden by them.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from reading_stats import DROPDOWN, READING_TIME_CELL_ID, _split_code  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

# 0.873, -1.04, 4.69 (two or more decimals) and 161, 1538 (three or more digits, not 1,153)
NUMBER = re.compile(r"(?<![\w.])[-−]?\d+\.\d{2,}|(?<![\w.,])\d{3,}(?![\w.,])")
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1", re.S)

# The one place allowed to repeat results: chapter 9's table of the book's findings.
SYNTHESIS = ("09", "ch09-findings")

# The words just before a number that make it an input (matched against the preceding text).
INPUT_BEFORE = {
    "an arXiv id": r"arXiv\s*$",
    "a TRL source line": r"\b(?:lines?|trainer|config)\s+(?:\d+\s*(?:-|–|and|,)\s*)*$",
    "a β (KL or Adam β2) the run is given": r"(?:β|\\beta)(?:_?2|₂)?\$?\s*=\s*\$?\s*$",
    "a learning rate the run is given": r"\b(?:lr|learning rate)(?:\s+of)?\s*\(?\s*$",
    "a default value": r"\bdefault(?:s to)?\s*\(?\s*$",
    "a step index": r"\bsteps?\s+$",
    "DeepSeek-R1's β": r"\bDeepSeek-R1(?:\s+used)?\s+$",
    "DeepSeekMath's β": r"\bDeepSeekMath:\s*$",
}
# ... and just after it.
INPUT_AFTER = {
    "a count a run is given": r"^(?:-|\s+)(?:Adam\s+)?(?:steps|draws?|batches|sampled batches|seeds"
                              r"|runs|groups|completions|(?:independent\s+)?(?:gradient\s+)?estimates)\b",
    "a default value": r"^\s+(?:by default|at launch)\b",
    "a β written into a formula": r"^\s*(?:\\,)?\s*\\mathrm\{KL\}",
}
_BEFORE = re.compile("|".join(f"(?:{p})" for p in INPUT_BEFORE.values()))
_AFTER = re.compile("|".join(f"(?:{p})" for p in INPUT_AFTER.values()))

# Inputs wherever they appear, each with its reason.
INPUTS = {
    "1.16": "the TRL version the book cites (TRL 1.16.0)",
    "5.25": "the transformers version the book cites (transformers 5.25.0)",
    "100": "a round count or offset chosen by the text (100 steps, batches, 'add 100')",
}

# (number, chapter) -> why the number is another quantity in that chapter than elsewhere.
COINCIDENCES = {
    ("0.21", "13"): "entropy in nats under dapo (ch1: a probability; ch17: an advantage)",
    ("0.21", "17"): "an advantage of a summed reward (ch1: a probability; ch13: an entropy)",
    ("0.93", "12"): "k1's sd after 300 steps (ch1: reward left on prompt 5)",
    ("0.93", "17"): "a pass rate after 40 batches (ch1: reward left on prompt 5)",
    ("0.02", "11"): "the hardest prompt's pass rate (elsewhere β = 0.02)",
    ("0.02", "12"): "a distance to the frontier (elsewhere β = 0.02)",
    ("0.02", "15"): "an exercise's logged reward (elsewhere β = 0.02)",
    ("0.001", "14"): "a pass-rate difference at Adam β2 = 0.9 (elsewhere R1's β, tolerances)",
    ("0.005", "11"): "a pass-rate difference of three baselines (ch4: a reward tolerance)",
    ("0.005", "14"): "a pass-rate gain of /std (ch4: a reward tolerance)",
    ("0.07", "12"): "k3's distance below the frontier (ch2: an sd; ch6: a KL change)",
    ("0.12", "12"): "k3's distance below the frontier (ch6: a KL)",
    ("0.12", "17"): "an advantage of a normalised reward (ch6: a KL)",
    ("0.01", "12"): "a distance to k3's target (ch6: a β and a distance)",
    ("0.500", "10"): "an advantage in the clip example (ch2: a (G-1)/G factor)",
    ("0.875", "17"): "a pass rate under the off-policy mask (elsewhere (G-1)/G at G = 8)",
    ("0.61", "11"): "an entropy in nats (ch2, ch6: the hard prompt's reward std)",
    ("0.55", "11"): "an entropy at step 150 (ch3: an average std ratio)",
    ("0.78", "16"): "a pass@1 at generation step 20 (ch3: an average std ratio)",
    ("0.96", "13"): "a pass rate (ch3: a std ratio; ch8: an sd)",
    ("0.99", "17"): "a pass rate after 40 batches (ch3: a Bessel factor; ch8: a probability)",
    ("1.24", "13"): "a weight ratio of loss_type grpo (ch6: a KL)",
    ("0.865", "11"): "the live-group fraction at step 150 (ch16: TRL's pass@1)",
    ("0.995", "15"): "a logged reward of a broken run (ch12: a cosine)",
    ("0.68", "16"): "TRL's mean reward over its first 10 steps (ch13: a cosine)",
}


def _canonical(number: str) -> str:
    return number.replace("−", "-").lstrip("-")


def prose_numbers(nb: dict, chapter: str) -> list[tuple[str, str]]:
    """(number, sentence around it) for every counted number of one notebook's main text."""
    found = []
    for cell in nb["cells"]:
        tags = cell.get("metadata", {}).get("tags", [])
        if (cell["cell_type"] != "markdown" or cell.get("id") == READING_TIME_CELL_ID
                or "remove-cell" in tags or (chapter, cell.get("id")) == SYNTHESIS):
            continue
        src = "".join(cell["source"])
        prose = INLINE_CODE.sub(" ", _split_code(DROPDOWN.sub("", src))[0])
        for m in NUMBER.finditer(prose):
            number = _canonical(m.group(0))
            before, after = prose[max(0, m.start() - 60):m.start()], prose[m.end():m.end() + 40]
            if (number in INPUTS or (number, chapter) in COINCIDENCES or _BEFORE.search(before)
                    or _AFTER.match(after)):
                continue
            found.append((number, " ".join((before + m.group(0) + after).split())))
    return found


def repeated(root: Path | None = None) -> dict[str, dict[str, list[str]]]:
    """number -> {chapter: [sentences]} for every number counted in two or more chapters."""
    root = ROOT if root is None else root
    where: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for path in sorted((root / "book").glob("[0-9][0-9]_*.ipynb")):
        chapter = path.name[:2]
        for number, sentence in prose_numbers(json.loads(path.read_text(encoding="utf-8")),
                                              chapter):
            where[number][chapter].append(sentence)
    return {n: dict(chs) for n, chs in sorted(where.items()) if len(chs) > 1}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="print each occurrence")
    args = parser.parse_args(argv)
    found = repeated()
    for number, chapters in found.items():
        print(f"{number}: chapters {', '.join(chapters)}")
        if args.verbose:
            for chapter, sentences in chapters.items():
                for s in sentences:
                    print(f"    {chapter}: ...{s}...")
    print(f"{len(found)} number(s) printed in more than one chapter")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
