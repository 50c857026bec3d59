"""Reading statistics per chapter: prose words, visible code lines, figures, exercises, time.

    python tools/reading_stats.py                     # every book/*.ipynb
    python tools/reading_stats.py book/03_*.ipynb     # some of them
    python tools/reading_stats.py --paths             # the intro's reading paths, timed
    python tools/reading_stats.py --write-intro       # rewrite book/intro.md's path lines

What a reader of the rendered page meets:
- prose words: words in markdown cells (math and code spans count as words, roughly; table
  pipes, MyST directive fences and their ``:option:`` lines are not words);
- fenced code in markdown (an exercise's stub) counts as visible code lines, not words;
- visible code lines: non-blank source lines of code cells not tagged ``remove-cell``,
  ``remove-input``, ``hide-input`` or ``hide-cell`` (collapsed code is counted apart, as "hidden");
- shown source: non-blank lines of package source a visible ``viz.show_source`` output prints
  (outputs of cells tagged ``remove-output`` or ``hide-output`` or ``hide-cell`` excluded);
- figures: stored PNG outputs of cells whose output is shown, plus one per kernel-free slider;
- exercises: bold "**Exercise N.**" openings in markdown;
- optional words: prose inside collapsed MyST ``{dropdown}`` blocks (side notes, derivations,
  answers), counted apart and left out of the careful reading time.

The careful reading time uses the learner review's rates: prose at 150 words/min (the prose is
maths-dense), visible code and shown source at 20 lines/min, 1.5 min per figure or slider,
4 min per exercise. It is an estimate for comparing versions of the book, not a promise.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORDS_PER_MIN, LINES_PER_MIN, MIN_PER_FIGURE, MIN_PER_EXERCISE = 150, 20, 1.5, 4
HIDDEN_CODE = {"remove-cell", "remove-input", "hide-input", "hide-cell"}
DROPDOWN = re.compile(r"^(`{3,}|:{3,})\{dropdown\}.*?^\1[ \t]*$", re.M | re.S)
FENCE = re.compile(r"^\s*(`{3,}|:{3,})(.*)$")
NOT_WORDS = re.compile(r"^\s*:[\w-]+:.*$|(?<!\S)\|(?!\S)|^\s*\|[-:| ]+\|\s*$", re.M)
HIDDEN_OUTPUT = {"remove-cell", "remove-output", "hide-output", "hide-cell"}


def _text(x: str | list[str]) -> str:
    return "".join(x) if isinstance(x, list) else x


def _split_code(markdown: str) -> tuple[str, int]:
    """(prose with fence lines and fenced code removed, non-blank fenced code lines)."""
    prose, code, stack = [], 0, []  # stack: open fences, each (marker, is code)
    for line in markdown.splitlines():
        m = FENCE.match(line)
        if m and stack and m.group(1) == stack[-1][0] and not m.group(2).strip():
            stack.pop()  # a closing fence
            continue
        if m and not (stack and stack[-1][1]):
            stack.append((m.group(1), not m.group(2).strip().startswith("{")))
            continue
        if stack and stack[-1][1]:
            code += bool(line.strip())
        else:
            prose.append(line)
    return "\n".join(prose), code


def _words(markdown: str) -> int:
    return len(re.findall(r"\S+", NOT_WORDS.sub(" ", markdown)))


# The chapter's own "reading time" cell (inserted by tools/run_notebooks.py) is not counted.
READING_TIME_CELL_ID = "reading-time"


def chapter_stats(path: Path) -> dict[str, float]:
    """Counts for one notebook (see the module docstring for what each one means)."""
    return notebook_stats(json.loads(path.read_text(encoding="utf-8")))


def notebook_stats(nb: dict) -> dict[str, float]:
    """Counts for one notebook given as its JSON dict (or an nbformat NotebookNode)."""
    s = dict(words=0, optional=0, code=0, hidden=0, source=0, figures=0, exercises=0)
    for cell in nb["cells"]:
        if cell.get("id") == READING_TIME_CELL_ID:
            continue
        tags = set(cell.get("metadata", {}).get("tags", []))
        src = _text(cell["source"])
        if cell["cell_type"] == "markdown":
            if "remove-cell" not in tags:
                folded = "".join(m.group(0) for m in DROPDOWN.finditer(src))
                prose, code = _split_code(DROPDOWN.sub("", src))
                s["code"] += code
                s["optional"] += _words(_split_code(folded)[0])
                s["words"] += _words(prose)
                s["exercises"] += len(re.findall(r"\*\*Exercise \d+", src))
            continue
        if cell["cell_type"] != "code":
            continue
        lines = sum(1 for line in src.splitlines() if line.strip())
        s["hidden" if tags & HIDDEN_CODE else "code"] += lines
        if tags & HIDDEN_OUTPUT:
            continue
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            html = _text(data.get("text/html", ""))
            if "image/png" in data:
                s["figures"] += 1
            elif 'type="range"' in html:
                s["figures"] += 1  # a kernel-free slider: one figure to study
            elif ("show_source" in src or "show_script" in src) and "text/markdown" in data:
                shown = _text(data["text/markdown"]).splitlines()
                s["source"] += sum(1 for line in shown if line.strip() and not
                                   line.startswith("```"))
    s["minutes"] = (s["words"] / WORDS_PER_MIN + (s["code"] + s["source"]) / LINES_PER_MIN
                    + s["figures"] * MIN_PER_FIGURE + s["exercises"] * MIN_PER_EXERCISE)
    return s


def reading_time_markdown(s: dict[str, float]) -> str:
    """The line shown at the top of a chapter: its careful reading time and what it is made of."""
    lines = s["code"] + s["source"]
    parts = [f"{s['words']:,.0f} words", f"{lines:,.0f} line{'s' * (lines != 1)} of code"]
    if s["figures"]:
        parts.append(f"{s['figures']:.0f} figure{'s' * (s['figures'] != 1)}")
    if s["exercises"]:
        parts.append(f"{s['exercises']:.0f} exercise{'s' * (s['exercises'] != 1)}")
    text = (f"*Careful reading: about {round(s['minutes'])} min* ({', '.join(parts)}; "
            "counted by the book's `tools/reading_stats.py`).")
    if s["optional"]:
        text += f" The collapsed boxes add {s['optional']:,.0f} words, optional."
    return text


# The reading paths book/intro.md offers: (name, chapter numbers, what the path gives). Their
# times are the sum of the chapters' careful reading times, so they follow every edit of a
# chapter: `--write-intro` (and tools/run_notebooks.py after running chapters) rewrites the
# block between the two markers in book/intro.md, and
# tests/test_reading_time.py fails (printing the expected block) when the intro's lines differ.
PATHS = [
    ("Quick look", (1, 3, 10),
     "the policy gradient, one group's advantages by hand, the loss as TRL computes it"),
    ("Practitioner path", (1, 3, 10, 11, 13, 15, 16, 18),
     "for a TRL `GRPOTrainer` user: the gradient and the group advantage (1, 3), the loss, ratio "
     "and clip (10), 0/1 rewards, dead groups and `frac_reward_zero_std` (11), `loss_type` and "
     "length (13), the logged metrics as a debugging guide (15), a real `GRPOTrainer` run (16), "
     "a task of your own (18)"),
    ("Parts I-III", tuple(range(1, 10)), "GRPO's mechanism, measured exactly in the toy world"),
    # every numbered chapter in book/: a new chapter joins this path without an edit here
    ("The whole book", tuple(sorted(int(p.name[:2]) for p in (ROOT / "book").glob("[0-9]*.ipynb"))),
     "every chapter, in order"),
]
INTRO = ROOT / "book" / "intro.md"
PATHS_BEGIN = "% reading paths: generated by `python tools/reading_stats.py --write-intro`"
PATHS_END = "% end of the reading paths"


def chapter_path(number: int, book: Path = ROOT / "book") -> Path:
    """The notebook of chapter `number` (``book/NN_*.ipynb``)."""
    (path,) = sorted(book.glob(f"{number:02d}_*.ipynb"))
    return path


def path_minutes(chapters: tuple[int, ...], book: Path = ROOT / "book") -> float:
    """Careful reading minutes of a reading path: the sum of its chapters' times."""
    return sum(chapter_stats(chapter_path(n, book))["minutes"] for n in chapters)


def _duration(minutes: float) -> str:
    return f"{minutes / 60:.1f} h" if minutes >= 120 else f"{round(minutes)} min"


def _chapter_list(chapters: tuple[int, ...]) -> str:
    runs = tuple(range(chapters[0], chapters[-1] + 1))
    if len(chapters) > 3 and chapters == runs:
        return f"chapters {chapters[0]} to {chapters[-1]}"
    return "chapters " + ", ".join(map(str, chapters[:-1])) + f" and {chapters[-1]}"


def reading_paths_markdown(book: Path = ROOT / "book") -> str:
    """The intro's block of reading paths, markers included, with times from the chapters."""
    lines = [PATHS_BEGIN]
    for name, chapters, what in PATHS:
        minutes = _duration(path_minutes(chapters, book))
        lines.append(f"- **{name}**, {_chapter_list(chapters)}, about {minutes}: {what}.")
    return "\n".join([*lines, PATHS_END])


def intro_paths_block(text: str) -> str:
    """The block of reading paths as it stands in the intro's text (markers included)."""
    start, end = text.index(PATHS_BEGIN), text.index(PATHS_END) + len(PATHS_END)
    return text[start:end]


def write_intro(intro: Path = INTRO, book: Path = ROOT / "book") -> bool:
    """Rewrite the intro's reading paths with the tool's times; True if the file changed."""
    text = intro.read_text(encoding="utf-8")
    new = text.replace(intro_paths_block(text), reading_paths_markdown(book))
    if new != text:
        intro.write_text(new, encoding="utf-8")
    return new != text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path)
    parser.add_argument("--paths", action="store_true",
                        help="print the reading paths of book/intro.md and their minutes")
    parser.add_argument("--write-intro", action="store_true",
                        help="rewrite the reading paths' lines of book/intro.md")
    args = parser.parse_args(argv)
    if args.write_intro:
        print(f"{INTRO.relative_to(ROOT)}: "
              f"{'rewritten' if write_intro() else 'already up to date'}")
        return 0
    if args.paths:
        for name, chapters, _ in PATHS:
            print(f"{name:20s} {path_minutes(chapters):6.0f} min  chapters "
                  f"{', '.join(map(str, chapters))}")
        return 0
    paths = args.notebooks or sorted((ROOT / "book").glob("*.ipynb"))
    cols = ["words", "optional", "code", "source", "hidden", "figures", "exercises", "minutes"]
    print(f"{'chapter':32s}" + "".join(f"{c:>10s}" for c in cols))
    total = dict.fromkeys(cols, 0.0)
    for path in paths:
        s = chapter_stats(path)
        for c in cols:
            total[c] += s[c]
        print(f"{path.stem:32s}" + "".join(f"{s[c]:>10.0f}" for c in cols))
    print(f"{'total':32s}" + "".join(f"{total[c]:>10.0f}" for c in cols))
    print(f"careful reading time: {total['minutes'] / 60:.1f} h "
          f"({WORDS_PER_MIN} words/min, {LINES_PER_MIN} code lines/min, "
          f"{MIN_PER_FIGURE} min per figure, {MIN_PER_EXERCISE} min per exercise)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
