"""Checks of the book's frame: table of contents, build configuration, sanitizing, the notebook
regeneration tool, and the README's commands (which .ci/run must run as written)."""

import importlib.util
import json
import re
from pathlib import Path

import nbformat
import pytest
import yaml
from nbval.plugin import get_sanitize_patterns

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "book"

# The README's set-up commands; .ci/run runs the test command exactly as written. torch comes
# alone from PyTorch's CPU index (--index-url: that index for torch only, never for the rest,
# and a blocked host fails fast: 2 retries, 15 s timeout), then the rest from the default index.
# each line but the last ends with `&&`: pasted as a block, it stops at the first failure (if the
# torch line fails, the next would install PyPI's 2.5 GB CUDA torch)
INSTALL_AND_BUILD = [
    "python3.11 -m venv .venv &&",
    ".venv/bin/pip install --retries 2 --timeout 15 --no-deps torch==2.13.0"
    " --index-url https://download.pytorch.org/whl/cpu &&",
    ".venv/bin/pip install -r requirements.txt -c constraints.txt &&",
    ".venv/bin/jupyter-book build . -W -n --keep-going",
]
TEST_COMMAND = ".venv/bin/python -m pytest"

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def load_yaml(name):
    return yaml.safe_load((ROOT / name).read_text(encoding="utf-8"))


def load_tool(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def toc_files():
    """Every `file:` of _toc.yml, root first, in reading order."""
    return load_tool("check_build").toc_files(load_yaml("_toc.yml"))


def source_of(entry):
    return [p for p in (ROOT / f"{entry}.ipynb", ROOT / f"{entry}.md") if p.exists()]


def test_toc_is_a_numbered_jb_book():
    toc = load_yaml("_toc.yml")
    assert toc["format"] == "jb-book"
    assert toc["root"] == "book/intro"
    parts = toc.get("parts") or []
    for part in parts:
        assert part.get("caption"), part
        # chapters are numbered; the closing "Reference" part (cheat-sheet, glossary) is not
        assert part.get("numbered") is (part["caption"] != "Reference"), part
    assert [p["caption"] for p in parts].index("Reference") == len(parts) - 1


def test_parts_are_numbered_in_the_sidebar_and_the_intro_uses_the_same_names():
    captions = [p["caption"] for p in load_yaml("_toc.yml")["parts"] if p["numbered"]]
    numerals = ["I", "II", "III", "IV", "V", "VI", "VII", "VIII"]
    assert [c.split(" · ")[0] for c in captions] == [f"Part {n}" for n in numerals[:len(captions)]]
    intro = (BOOK / "intro.md").read_text(encoding="utf-8")
    assert re.findall(r"^\*\*(Part [IV]+ · [^*]+)\*\*$", intro, re.M) == captions


def test_every_toc_entry_has_exactly_one_source_file():
    for entry in toc_files():
        assert len(source_of(entry)) == 1, f"_toc.yml entry {entry!r}: found {source_of(entry)}"


def test_every_page_in_book_is_in_the_toc():
    # only_build_toc_files: a chapter missing from _toc.yml would silently not be built.
    listed = set(toc_files())
    pages = {f"book/{p.stem}" for p in [*BOOK.glob("*.ipynb"), *BOOK.glob("*.md")]}
    assert pages - listed == set(), "add these to _toc.yml"


def test_config_builds_stored_outputs_and_prefers_the_html_twin():
    config = load_yaml("_config.yml")
    assert config["execute"]["execute_notebooks"] == "off"
    assert config["only_build_toc_files"] is True
    assert {".*", "_build", "grpo_core", "tests", "README.md"} <= set(config["exclude_patterns"])
    assert config["launch_buttons"]["thebe"] is False
    assert {"dollarmath", "amsmath"} <= set(config["parse"]["myst_enable_extensions"])
    overrides = config["sphinx"]["config"]["nb_mime_priority_overrides"]
    assert ["*", WIDGET_VIEW, None] in overrides


def test_sanitize_file_hides_png_bytes_but_not_the_html_around_them():
    patterns = get_sanitize_patterns((ROOT / "nbval_sanitize.cfg").read_text(encoding="utf-8"))
    assert len(patterns) >= 2

    def sanitize(s):
        for regex, replace in patterns:
            s = re.sub(regex, replace, s)
        return s

    html = '<input type="range" id="s1"><img id="f1" src="data:image/png;base64,iVBOR+w/0KG=">'
    assert sanitize(html) == (
        '<input type="range" id="s1"><img id="f1" src="data:image/png;base64,<PNG>">'
    )
    other = html.replace("iVBOR+w/0KG=", "AAAA")
    assert sanitize(html) == sanitize(other)
    assert sanitize(html) != sanitize(html.replace('id="s1"', 'id="s2"'))
    assert sanitize("<function f at 0x7f3a2c1d5e40>") == sanitize("<function f at 0x55d0c0ffee00>")


def test_stored_notebooks_are_valid_and_carry_no_widget_state():
    for path in sorted(BOOK.glob("*.ipynb")):
        nb = nbformat.read(path, as_version=nbformat.NO_CONVERT)
        nbformat.validate(nb)
        assert "widgets" not in nb.metadata, f"{path.name}: regenerate with tools/run_notebooks.py"
        assert all(cell.get("id") for cell in nb.cells), path.name


def test_readme_holds_the_two_setup_commands_and_ci_runs_the_test_command():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    lines = readme.splitlines()
    i = lines.index(INSTALL_AND_BUILD[0])
    assert lines[i:i + len(INSTALL_AND_BUILD)] == INSTALL_AND_BUILD
    assert lines[i - 1] == "```bash" and lines[i + len(INSTALL_AND_BUILD)] == "```"
    assert all(line.endswith(" &&") for line in INSTALL_AND_BUILD[:-1])
    pins = (ROOT / "requirements.txt").read_text(encoding="utf-8").splitlines()
    torch_pin = next(p for p in pins if p.startswith("torch=="))
    assert f" {torch_pin} " in INSTALL_AND_BUILD[1]  # the README installs the pinned torch
    assert TEST_COMMAND in readme.splitlines()
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert any(line.strip() == TEST_COMMAND for line in ci.splitlines())


# The regeneration tool, on throwaway notebooks (starts two kernels, ~4 s).


@pytest.fixture(scope="module")
def run_notebooks():
    return load_tool("run_notebooks")


def write_notebook(path, *sources):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}}}
    nbformat.write(nb, path)
    return [cell.id for cell in nb.cells]


def test_run_notebooks_stores_outputs_deterministically(tmp_path, run_notebooks, capsys):
    path = tmp_path / "demo.ipynb"
    ids = write_notebook(
        path,
        "import os, pathlib\nprint(pathlib.Path.cwd().name, os.environ['OMP_NUM_THREADS'])",
        "import ipywidgets\nipywidgets.IntSlider(value=3)",
        "sum(range(10))",
    )
    assert run_notebooks.main([str(path)]) == 0
    first = path.read_text(encoding="utf-8")
    nb = nbformat.reads(first, as_version=4)
    nbformat.validate(nb)
    assert [cell.id for cell in nb.cells] == [run_notebooks.COLAB_CELL_ID, *ids]
    assert nb.cells[0].outputs == []  # the guarded install cell: silent where grpo_core imports
    assert "widgets" not in nb.metadata
    assert nb.cells[1].outputs[0]["text"] == f"{tmp_path.name} 1\n"
    assert nb.cells[2].outputs[0]["data"][WIDGET_VIEW]["model_id"] == f"{ids[1]}-0"
    assert nb.cells[3].outputs[0]["data"]["text/plain"] == "45"
    assert "updated" in capsys.readouterr().out

    assert run_notebooks.main([str(path)]) == 0
    assert path.read_text(encoding="utf-8") == first
    assert "unchanged" in capsys.readouterr().out


def test_run_notebooks_fails_loudly_and_leaves_a_broken_notebook_untouched(
    tmp_path, run_notebooks, capsys
):
    path = tmp_path / "broken.ipynb"
    write_notebook(path, "1 / 0")
    before = path.read_text(encoding="utf-8")
    assert run_notebooks.main([str(path)]) == 1
    assert path.read_text(encoding="utf-8") == before
    assert "FAILED" in capsys.readouterr().out
    assert json.loads(before)["metadata"]["widgets"]  # not even the metadata was rewritten


def test_every_notebook_starts_with_the_colab_install_cell(run_notebooks):
    """Colab opens one notebook without the repository: its first cell installs grpo_core when it
    is missing. tools/run_notebooks.py inserts and refreshes that cell; the page never shows it.
    It names the notebook's own check cells (their hashes) as they are now: after editing a check
    cell, `tools/run_notebooks.py --refresh-first-cell` brings it up to date."""
    for path in sorted(BOOK.glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        first = nb.cells[0]
        assert first.get("id") == run_notebooks.COLAB_CELL_ID, (
            f"{path.name}: regenerate it with tools/run_notebooks.py (adds the Colab cell)")
        expected = run_notebooks.colab_cell_source(run_notebooks.book_checks(nb))
        assert first.cell_type == "code" and first.source == expected, (
            f"{path.name}: stale first cell: tools/run_notebooks.py --refresh-first-cell")
        assert "remove-cell" in first.metadata.get("tags", []), path.name
        assert first.get("outputs") == [], f"{path.name}: the install cell printed something"


def test_colab_cell_installs_this_repository_without_dependencies(run_notebooks):
    repo = load_yaml("_config.yml")["repository"]
    source = run_notebooks.colab_cell_source()
    assert f'"git+{repo["url"]}@{repo["branch"]}"' in source
    assert 'f"grpo-core @ {source}"' in source
    assert 'if importlib.util.find_spec("grpo_core") is None:' in source
    assert "--no-deps" in source and "--quiet" in source
    assert "%pip" not in source.replace("%{command}", "")  # %pip prints a restart note


def test_refresh_first_cell_rewrites_that_cell_alone_and_runs_nothing(
    tmp_path, run_notebooks, capsys
):
    path = tmp_path / "stale.ipynb"
    write_notebook(path, "print('stale first cell')", "1 / 0")  # 1 / 0: nothing may execute
    nb = nbformat.read(path, as_version=4)
    nb.cells[0].id = run_notebooks.COLAB_CELL_ID
    nb.cells[1].outputs = [nbformat.v4.new_output("stream", text="kept as it was\n")]
    nbformat.write(nb, path)
    before = nbformat.read(path, as_version=4)

    assert run_notebooks.main(["--refresh-first-cell", str(path)]) == 0
    after = nbformat.read(path, as_version=4)
    assert after.cells[0].source == run_notebooks.colab_cell_source()  # no assert: no checks
    assert after.cells[0].metadata == {"tags": ["remove-cell"]}
    assert after.cells[1:] == before.cells[1:]
    assert after.metadata == before.metadata
    assert "first cell updated" in capsys.readouterr().out
    first = path.read_text(encoding="utf-8")
    assert run_notebooks.main(["--refresh-first-cell", str(path)]) == 0
    assert path.read_text(encoding="utf-8") == first
    assert "first cell unchanged" in capsys.readouterr().out
