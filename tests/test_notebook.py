"""Outside the tests a chapter's checks of stored numbers warn; under the tests they stay strict."""

import os
import sys
from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell

from grpo_core import notebook

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def shell():
    sh = InteractiveShell.instance()
    saved = list(sh.ast_transformers)
    yield sh
    sh.ast_transformers[:] = saved


def test_outside_the_tests_a_failing_check_prints_and_the_cell_runs_on(shell, monkeypatch, capsys):
    monkeypatch.delenv(notebook.STRICT_ENV, raising=False)
    notebook.tolerate_differences(shell)
    assert notebook.tolerating(shell)
    result = shell.run_cell("x = 1\nassert x == 2, 'never shown'\ny = x + 1")
    assert result.success and shell.user_ns["y"] == 2
    out = capsys.readouterr().out
    assert "does not hold here" in out and "x == 2" in out
    assert shell.run_cell("assert x == 1").success
    assert "does not hold" not in capsys.readouterr().out  # a check that holds is silent
    notebook.tolerate_differences(shell)  # idempotent: one transformer
    assert sum(isinstance(t, notebook._IPythonTransformer) for t in shell.ast_transformers) == 1


def test_under_the_tests_checks_stay_strict(shell, monkeypatch):
    monkeypatch.setenv(notebook.STRICT_ENV, "1")
    notebook.tolerate_differences(shell)
    assert not notebook.tolerating(shell)
    result = shell.run_cell("assert 1 == 2")
    assert not result.success and isinstance(result.error_in_exec, AssertionError)


def test_the_tests_and_the_output_store_set_strict():
    assert os.environ.get(notebook.STRICT_ENV) == "1"  # conftest.py, for nbval's kernels
    sys.path.insert(0, str(ROOT / "tools"))
    import run_notebooks

    assert run_notebooks.DETERMINISTIC_ENV[notebook.STRICT_ENV] == "1"
    # conftest.py sets the very environment the stored outputs were computed in
    env = run_notebooks.DETERMINISTIC_ENV
    assert {k: os.environ.get(k) for k in env} == env
    assert "tolerate_differences()" in run_notebooks.colab_cell_source()


def test_torch_runs_its_avx2_kernels_not_avx512():
    # the stored outputs' last digits depend on it (tools/run_notebooks.py, DETERMINISTIC_ENV)
    import torch

    assert torch.backends.cpu.get_cpu_capability() in ("AVX2", "DEFAULT")
