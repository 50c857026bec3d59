"""Each result is printed in one chapter's main text (tools/repeated_numbers.py); chapter 9's
findings table is the one place that repeats them."""

import importlib.util
import json
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = sorted(p.name[:2] for p in (ROOT / "book").glob("[0-9][0-9]_*.ipynb"))


def _load_tool():
    spec = importlib.util.spec_from_file_location(
        "repeated_numbers", ROOT / "tools" / "repeated_numbers.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


rn = _load_tool()


@pytest.fixture(scope="module")
def repeats():
    return rn.repeated(ROOT)


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_each_result_once(repeats, chapter):
    mine = {n: chs for n, chs in repeats.items() if chapter in chs}
    lines = [f"{n} also in chapter(s) {', '.join(c for c in chs if c != chapter)}: "
             f"...{chs[chapter][0]}..." for n, chs in mine.items()]
    assert not mine, (f"chapter {chapter} prints numbers another chapter prints too (keep the "
                      "result in one chapter and link to it, or list an input in "
                      "tools/repeated_numbers.py):\n" + "\n".join(lines))


def _notebook(*markdown, ids=None):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell(text) for text in markdown]
    for cell, cid in zip(nb.cells, ids or [f"c{i}" for i in range(len(nb.cells))], strict=True):
        cell.id = cid
    return json.loads(nbformat.writes(nb))


def _numbers(*markdown, chapter="05", ids=None):
    return [n for n, _ in rn.prose_numbers(_notebook(*markdown, ids=ids), chapter)]


def test_results_are_counted():
    text = "The cosine is 0.873, the critic has 161 parameters, and the mean −1.04 is negative."
    assert _numbers(text) == ["0.873", "161", "1.04"]


def test_short_numbers_and_thousands_are_not_counted():
    assert _numbers("G = 8, 0.5 and 1.2 of 32 seeds, 1,153 runs, 99 prompts.") == []


def test_optional_text_code_and_hidden_cells_are_not_counted():
    dropdown = ":::{dropdown} Why\nThe floor is 0.873.\n:::\nOutside: 0.421."
    fenced = "```python\nx = 0.873\n```\nInline `scale=0.873` is code."
    assert _numbers(dropdown) == ["0.421"]
    assert _numbers(fenced) == []
    nb = _notebook("Hidden 0.873.")
    nb["cells"][0]["metadata"]["tags"] = ["remove-cell"]
    assert rn.prose_numbers(nb, "05") == []


def test_inputs_are_recognised_by_their_context():
    text = ("DeepSeekMath (arXiv 2402.03300) used β = 0.04 and $\\beta_2$ = 0.999, lr 0.05, "
            "a learning rate of 0.05; TRL 1.16 (`grpo_trainer.py` lines 1538-1546 and "
            "line 3020, trainer 3153-3167), default 0.999, after 300 steps, 400-draw "
            "estimates, by step 150, 512 by default, 0.04 at launch, DeepSeek-R1 used 0.001, "
            "the optimum of $E[r] - 0.02\\,\\mathrm{KL}$.")
    assert _numbers(text) == []


def test_a_result_next_to_an_input_is_still_counted():
    assert _numbers("After 300 steps the reward is 5.5395 (β = 0.02).") == ["5.5395"]


def test_only_chapter_9s_findings_table_may_repeat():
    table = "| finding | number |\n|---|---|\n| cosine | 0.873 |"
    assert _numbers(table, chapter="09", ids=[rn.SYNTHESIS[1]]) == []
    assert _numbers(table, chapter="09", ids=["other"]) == ["0.873"]
    assert _numbers(table, chapter="04", ids=[rn.SYNTHESIS[1]]) == ["0.873"]


def test_each_listed_coincidence_is_in_its_chapter():
    # an entry whose number left its chapter must go: the list stays short and true
    prose = {}
    for path in sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb")):
        nb = json.loads(path.read_text(encoding="utf-8"))
        saved, rn.COINCIDENCES = rn.COINCIDENCES, {}
        try:
            prose[path.name[:2]] = {n for n, _ in rn.prose_numbers(nb, path.name[:2])}
        finally:
            rn.COINCIDENCES = saved
    stale = [key for key in rn.COINCIDENCES if key[0] not in prose.get(key[1], set())]
    assert not stale, f"no longer printed in that chapter, remove: {stale}"


def test_the_tool_exits_1_and_lists_a_repeat(tmp_path, capsys, monkeypatch):
    for name, text in (("01_a", "The cosine is 0.873."), ("02_b", "Cosine 0.873 again, 0.421.")):
        (tmp_path / "book").mkdir(exist_ok=True)
        (tmp_path / "book" / f"{name}.ipynb").write_text(json.dumps(_notebook(text)))
    assert rn.repeated(tmp_path).keys() == {"0.873"}
    monkeypatch.setattr(rn, "ROOT", tmp_path)
    assert rn.main([]) == 1
    assert "0.873: chapters 01, 02" in capsys.readouterr().out
