"""Outside the tests the book's own checks warn; a reader's asserts, and every check under the
tests, stay asserts."""

import os
import sys
from pathlib import Path

import nbformat
import pytest
from IPython.core.interactiveshell import InteractiveShell

from grpo_core import notebook

ROOT = Path(__file__).resolve().parent.parent
BOOK_CHECK = "x = 1\nassert x == 2, 'never shown'\ny = x + 1"


@pytest.fixture
def shell():
    sh = InteractiveShell.instance()
    saved = list(sh.ast_transformers)
    yield sh
    notebook.stop_tolerating(sh)
    sh.ast_transformers[:] = saved


@pytest.fixture
def run_notebooks():
    sys.path.insert(0, str(ROOT / "tools"))
    import run_notebooks

    yield run_notebooks
    sys.path.remove(str(ROOT / "tools"))


def test_a_book_check_that_fails_prints_a_note_and_the_cell_runs_on(shell, monkeypatch, capsys):
    monkeypatch.delenv(notebook.STRICT_ENV, raising=False)
    notebook.tolerate_differences({notebook.cell_hash(BOOK_CHECK)}, shell)
    assert notebook.tolerating(shell) == {notebook.cell_hash(BOOK_CHECK)}
    result = shell.run_cell(BOOK_CHECK)
    assert result.success and shell.user_ns["y"] == 2
    out = capsys.readouterr().out
    assert "does not hold here" in out and "x == 2" in out


def test_a_readers_assert_stays_an_assert(shell, monkeypatch, capsys):
    monkeypatch.delenv(notebook.STRICT_ENV, raising=False)
    notebook.tolerate_differences({notebook.cell_hash(BOOK_CHECK)}, shell)
    for cell in ("assert 1 == 2",  # a cell of the reader's own
                 BOOK_CHECK.replace("x + 1", "x + 10"),  # a book cell the reader edited
                 "def f():\n    assert False\nf()"):  # also inside a function
        result = shell.run_cell(cell)
        assert not result.success and isinstance(result.error_in_exec, AssertionError), cell
    assert "does not hold" not in capsys.readouterr().out
    # the book's cell right after a reader's still warns, and the reader's after it still raises
    assert shell.run_cell(BOOK_CHECK).success
    assert isinstance(shell.run_cell("assert 0").error_in_exec, AssertionError)


def test_tolerance_is_replaced_not_stacked_and_can_be_undone(shell, monkeypatch):
    monkeypatch.delenv(notebook.STRICT_ENV, raising=False)
    notebook.tolerate_differences({"a" * 16}, shell)
    notebook.tolerate_differences({notebook.cell_hash(BOOK_CHECK)}, shell)
    assert sum(isinstance(t, notebook._BookChecks) for t in shell.ast_transformers) == 1
    assert shell.run_cell(BOOK_CHECK).success
    notebook.stop_tolerating(shell)
    assert notebook.tolerating(shell) == frozenset()
    assert isinstance(shell.run_cell(BOOK_CHECK).error_in_exec, AssertionError)
    with pytest.raises(TypeError):
        notebook.tolerate_differences(notebook.cell_hash(BOOK_CHECK), shell)  # one str


def test_under_the_tests_checks_stay_strict(shell, monkeypatch):
    monkeypatch.setenv(notebook.STRICT_ENV, "1")
    notebook.tolerate_differences({notebook.cell_hash("assert 1 == 2")}, shell)
    assert not notebook.tolerating(shell)
    result = shell.run_cell("assert 1 == 2")
    assert not result.success and isinstance(result.error_in_exec, AssertionError)


def test_a_cells_hash_ignores_line_endings_and_edge_whitespace_only():
    h = notebook.cell_hash("a = 1\nassert a")
    assert h == notebook.cell_hash("\na = 1  \r\nassert a\n\n") and len(h) == 16
    assert h != notebook.cell_hash("a = 1\nassert  a") != notebook.cell_hash("a = 2\nassert a")


def test_the_first_cell_names_exactly_the_cells_with_an_assert(run_notebooks):
    cells = ["%matplotlib inline\nassert True",  # a magic, then an assert: a check cell
             "x = 1",
             "def f():\n    assert x\n",
             "print('no check')  # assert in a comment",
             "this is not python"]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in cells])
    nb.cells.append(nbformat.v4.new_markdown_cell("assert 1"))
    assert run_notebooks.book_checks(nb) == sorted(notebook.cell_hash(s)
                                                   for s in (cells[0], cells[2]))
    source = run_notebooks.colab_cell_source(run_notebooks.book_checks(nb))
    for s in (cells[0], cells[2]):
        assert f'"{notebook.cell_hash(s)}"' in source
    assert "tolerate_differences({" in source


def test_the_tests_and_the_output_store_set_strict(run_notebooks):
    assert os.environ.get(notebook.STRICT_ENV) == "1"  # conftest.py, for nbval's kernels
    assert run_notebooks.DETERMINISTIC_ENV[notebook.STRICT_ENV] == "1"
    # conftest.py sets the very environment the stored outputs were computed in
    env = run_notebooks.DETERMINISTIC_ENV
    assert {k: os.environ.get(k) for k in env} == env


def test_torch_runs_its_avx2_kernels_not_avx512():
    # the stored outputs' last digits depend on it (tools/run_notebooks.py, DETERMINISTIC_ENV)
    import torch

    assert torch.backends.cpu.get_cpu_capability() in ("AVX2", "DEFAULT")
