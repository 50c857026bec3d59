"""Each chapter shows its careful reading time at the top; the number is the one
tools/reading_stats.py computes for the notebook as stored now, so text and tool cannot drift
(tools/run_notebooks.py writes the cell)."""

import importlib.util
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = sorted((ROOT / "book").glob("*.ipynb"))


def load_tool(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


stats = load_tool("reading_stats")


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_chapter_shows_the_reading_time_the_tool_computes(path):
    nb = nbformat.read(path, as_version=4)
    cells = [c for c in nb.cells if c.get("id") == stats.READING_TIME_CELL_ID]
    assert len(cells) == 1, f"{path.name}: regenerate it with tools/run_notebooks.py"
    cell = cells[0]
    assert cell.cell_type == "markdown" and not cell.metadata.get("tags"), path.name
    index = nb.cells.index(cell)
    assert nb.cells[index - 1].source.startswith("# "), "the cell follows the chapter's title"
    assert cell.source == stats.reading_time_markdown(stats.notebook_stats(nb)), (
        f"{path.name}: stale reading time; regenerate it with tools/run_notebooks.py")


def test_the_reading_time_cell_is_not_counted():
    path = CHAPTERS[0]
    nb = nbformat.read(path, as_version=4)
    without = [c for c in nb.cells if c.get("id") != stats.READING_TIME_CELL_ID]
    padded = nbformat.v4.new_markdown_cell("many words " * 500, id=stats.READING_TIME_CELL_ID)
    assert stats.notebook_stats({"cells": [*without, padded]}) == stats.notebook_stats(
        {"cells": without})
    assert stats.chapter_stats(path) == stats.notebook_stats(nb)


def test_reading_time_text_carries_the_minutes_and_the_counts():
    s = dict(words=1500, optional=300, code=40, source=20, hidden=9, figures=1, exercises=2,
             minutes=10 + 3 + 1.5 + 8)
    text = stats.reading_time_markdown(s)
    assert text.startswith("*Careful reading: about 22 min*")
    assert "1,500 words" in text and "60 lines of code" in text and "1 figure," in text
    assert "2 exercises" in text and "boxes add 300 words" in text


def test_run_notebooks_inserts_the_cell_after_the_title_then_refreshes_it_in_place():
    run_notebooks = load_tool("run_notebooks")
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("pass", id="colab-install", metadata={"tags": ["remove-cell"]}),
        nbformat.v4.new_markdown_cell("# Title\n\n" + "word " * 300, id="title"),
        nbformat.v4.new_markdown_cell("**Exercise 1.** " + "word " * 148, id="body"),
    ])
    run_notebooks.ensure_reading_time_cell(nb)
    assert [c.id for c in nb.cells] == ["colab-install", "title", stats.READING_TIME_CELL_ID,
                                        "body"]
    assert nb.cells[2].source.startswith("*Careful reading: about 7 min* (452 words, 0 lines")
    nb.cells[3].source += " more" * 150
    run_notebooks.ensure_reading_time_cell(nb)
    assert [c.id for c in nb.cells][2] == stats.READING_TIME_CELL_ID and len(nb.cells) == 4
    assert nb.cells[2].source.startswith("*Careful reading: about 8 min* (602 words")


# The intro's reading paths: their times are the tool's sums of the chapters' times, so a
# shortened chapter changes them. tools/run_notebooks.py rewrites them after running chapters;
# after an edit without a run: python tools/reading_stats.py --write-intro


def test_intro_states_the_reading_path_times_the_tool_computes():
    text = stats.INTRO.read_text(encoding="utf-8")
    expected = stats.reading_paths_markdown()
    assert stats.intro_paths_block(text) == expected, (
        "book/intro.md: stale reading paths; run `python tools/reading_stats.py --write-intro`, "
        f"which writes:\n{expected}")


def test_a_path_time_is_the_sum_of_its_chapters_times():
    one, three = (stats.chapter_stats(stats.chapter_path(n))["minutes"] for n in (1, 3))
    assert stats.path_minutes((1, 3)) == pytest.approx(one + three)
    chapters = {int(p.name[:2]) for p in CHAPTERS}
    for name, path, what in stats.PATHS:
        assert set(path) <= chapters and list(path) == sorted(set(path)), name
        assert f"**{name}**" in stats.reading_paths_markdown() and what
    practitioner = dict((name, path) for name, path, _ in stats.PATHS)["Practitioner path"]
    assert stats.path_minutes(practitioner) < stats.path_minutes(tuple(sorted(chapters)))


def test_write_intro_rewrites_only_the_block_of_paths(tmp_path):
    intro = tmp_path / "intro.md"
    stale = stats.reading_paths_markdown().replace("about", "about 1 +")
    intro.write_text(f"# Title\n\nbefore\n\n{stale}\n\nafter\n", encoding="utf-8")
    assert stats.write_intro(intro) is True
    assert intro.read_text(encoding="utf-8") == (
        f"# Title\n\nbefore\n\n{stats.reading_paths_markdown()}\n\nafter\n")
    assert stats.write_intro(intro) is False  # already up to date


def test_a_longer_chapter_changes_the_paths_through_it(tmp_path):
    for path in CHAPTERS:
        (tmp_path / path.name).write_bytes(path.read_bytes())
    nb = nbformat.read(stats.chapter_path(3), as_version=4)
    nb.cells.append(nbformat.v4.new_markdown_cell("word " * 1500, id="padding"))
    nbformat.write(nb, stats.chapter_path(3, tmp_path))
    for name, path, _ in stats.PATHS:
        grown = stats.path_minutes(path, tmp_path) - stats.path_minutes(path)
        assert grown == pytest.approx(10.0 if 3 in path else 0.0), name
    assert stats.reading_paths_markdown(tmp_path) != stats.reading_paths_markdown()


def test_run_notebooks_rewrites_the_intros_paths_after_running_a_chapter(monkeypatch, capsys):
    run_notebooks = load_tool("run_notebooks")
    calls = []

    class Stats:  # stands in for tools/reading_stats.py
        INTRO = stats.INTRO

        @staticmethod
        def write_intro():
            calls.append("intro")
            return True

    monkeypatch.setattr(run_notebooks, "execute_notebook", lambda path, **kw: False)
    monkeypatch.setattr(run_notebooks, "set_deterministic_env", lambda: None)
    monkeypatch.setattr(run_notebooks, "_reading_stats", lambda: Stats)
    assert run_notebooks.main([str(ROOT / "tests" / "elsewhere.ipynb")]) == 0
    assert calls == []  # a notebook outside book/: the intro is left alone
    assert run_notebooks.main([str(stats.chapter_path(9))]) == 0
    assert calls == ["intro"] and "book/intro.md  reading paths updated" in capsys.readouterr().out
