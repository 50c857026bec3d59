"""Re-execute the book's notebooks in place and store their outputs.

This is the only way stored outputs are made: never by hand, never by saving from JupyterLab.

    python tools/run_notebooks.py                      # every book/*.ipynb
    python tools/run_notebooks.py book/05_group_size.ipynb ...
    python tools/run_notebooks.py --refresh-first-cell     # only the hidden first cell's source

Each notebook runs top to bottom in a fresh kernel of the current interpreter, with the
notebook's folder (book/) as working directory, under the same conditions as the tests
(see conftest.py): one OpenMP/MKL thread, a fixed hash seed, and in torch, MKL, numpy and
OpenBLAS the code path every x86-64 CPU with AVX2 runs alike (DETERMINISTIC_ENV), so seeded results
are bit-identical from run to run, and on Intel and AMD CPUs with and without AVX-512.

Widget state is NOT stored, and any stored `widgets` metadata is removed: a widget restored
without a kernel is a slider that moves and changes nothing. The static page shows the
kernel-free text/html twin of each slider instead (see nb_mime_priority_overrides in
_config.yml); in Jupyter/Binder the cells are run again and the live widgets appear.

Each notebook gets (or has refreshed) a first cell, tagged `remove-cell`, that sets those CPU
code paths and one thread before numpy and torch are imported (the conditions above), and
installs grpo_core from the repository when it is not importable (Colab opens a single notebook
without the repository); elsewhere it installs nothing and prints nothing. Outside the tests (no
GRPO_BOOK_STRICT in the environment) it also makes later checks of stored numbers print a note
instead of raising (grpo_core/notebook.py).

A chapter of book/ also gets (or has refreshed) its reading-time line, and book/intro.md its
reading paths, whose times are sums of chapter times (tools/reading_stats.py).

A notebook that fails is reported and left untouched; the exit status is then 1.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "book"
TIMEOUT_PER_CELL = 300  # seconds; generous: a cell that needs more belongs in a benchmark

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"

# The environment the stored outputs are computed in; conftest.py sets the same one for nbval
# (it reads it from here). Kernels inherit the parent's environment.
DETERMINISTIC_ENV = {
    "PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
    # Every library the book computes with picks its code path by CPU at run time, and a different
    # path rounds differently; 300 training steps can carry one rounding into a printed digit.
    # Each is pinned to a path every x86-64 CPU with AVX2 and FMA runs alike, Intel or AMD, and
    # the variables must be set before numpy or torch is imported (every kernel inherits them).
    # torch's own kernels: AVX2, not AVX-512 (chapters 4, 6 and 9 differed on an AMD EPYC with
    # AVX-512 under the default ones).
    "ATEN_CPU_CAPABILITY": "avx2",
    # torch's MKL (matmul; exp, log and sqrt of a tensor): by default Intel CPUs get MKL's AVX2 or
    # AVX-512 code and other CPUs a generic SSE2 path, which round differently. COMPATIBLE is
    # that generic path, and the only branch MKL offers on non-Intel CPUs.
    "MKL_CBWR": "COMPATIBLE",
    # numpy's SIMD loops: X86_V3 (AVX2, FMA), not its AVX-512 ones (exp and log of float64 among
    # them; np.lib.introspect.opt_func_info() shows the loop each ufunc runs)
    "NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SPR",
    # numpy's OpenBLAS (@, np.dot): its Haswell (AVX2) kernels, not SkylakeX (AVX-512) ones
    "OPENBLAS_CORETYPE": "Haswell",
    "GRPO_BOOK_STRICT": "1",  # the checks of stored numbers stay strict
}


def set_deterministic_env() -> None:
    os.environ.update(DETERMINISTIC_ENV)
    # Unset, ipykernel picks the inline backend, as under nbval; a user's MPLBACKEND=Agg
    # would silently drop every figure from the stored outputs.
    os.environ.pop("MPLBACKEND", None)


def ensure_cell_ids(nb) -> None:
    """Give cells without an id a deterministic one (nbformat would pick random ones)."""
    if (nb.nbformat, nb.nbformat_minor) < (4, 5):
        nb.nbformat_minor = 5
    used = {cell.get("id") for cell in nb.cells}
    for i, cell in enumerate(nb.cells):
        if not cell.get("id"):
            new = f"cell-{i:03d}"
            while new in used:
                new += "x"
            cell["id"] = new
            used.add(new)


COLAB_CELL_ID = "colab-install"


def book_checks(nb) -> list[str]:
    """The hashes (grpo_core.notebook.cell_hash) of the notebook's own check cells: every code
    cell but the first whose source holds an ``assert`` statement, sorted. The first cell hands
    them to grpo_core.notebook.tolerate_differences, so that outside the tests a failing check in
    one of these cells prints a note, and an assert in any other cell (a reader's) stays one."""
    import ast

    from IPython.core.inputtransformer2 import TransformerManager

    from grpo_core.notebook import cell_hash

    found = set()
    for cell in nb.cells:
        if cell.cell_type != "code" or cell.get("id") == COLAB_CELL_ID:
            continue
        try:
            tree = ast.parse(TransformerManager().transform_cell(cell.source))
        except SyntaxError:
            continue  # a cell that does not parse runs no assert either
        if any(isinstance(node, ast.Assert) for node in ast.walk(tree)):
            found.add(cell_hash(cell.source))
    return sorted(found)


def _set_literal(items: list[str], indent: int = 4, width: int = 100) -> str:
    """``{"a", "b", ...}`` wrapped at `width`, one item more per line than fits never."""
    if not items:
        return "set()"
    lines, line = [], " " * indent
    for item in items:
        word = f'"{item}", '
        if len(line) + len(word.rstrip()) > width:
            lines.append(line.rstrip())
            line = " " * indent
        line += word
    lines.append(line.rstrip())
    return "{\n" + "\n".join(lines) + "\n}"


def repository_url() -> str:
    """The book's repository (_config.yml's url and branch) as pip's VCS address: the one place
    the address is set; the deploy workflow checks it against the repository it deploys from
    (docs/sphinx_ext/book_repository.py)."""
    import yaml

    repo = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))["repository"]
    return f"git+{repo['url'].rstrip('/')}@{repo['branch']}"


def colab_cell_source(checks: list[str] = ()) -> str:
    """The guarded first cell, silent where it succeeds: sets one thread and the CPU code paths
    (the tests' conditions, DETERMINISTIC_ENV) before numpy and torch are imported; installs
    grpo_core when it is not importable (Colab opens one notebook alone): from the clone the
    notebook sits in (book/ of a checkout), else from the repository of _config.yml, and if pip
    fails it stops with one message (what failed, the command to run), so no later cell runs;
    then it makes the book's own checks (`checks`: book_checks of the notebook) print a note
    outside the tests."""
    url = repository_url()
    return (
        "# The conditions the book's outputs were computed and tested under, set before numpy\n"
        "# and torch are imported: one thread (this small model gains nothing from more, and on a\n"
        "# busy machine two threads ran 13-24x slower than one) and, in every library, the code\n"
        "# path that Intel and AMD CPUs with AVX2 run alike (on an AVX-512 CPU the default paths\n"
        "# round differently, and long training runs can carry that into a printed digit).\n"
        "import os\n"
        "from pathlib import Path\n"
        "\n"
        'os.environ.setdefault("OMP_NUM_THREADS", "1")\n'
        'os.environ.setdefault("ATEN_CPU_CAPABILITY", "avx2")  # torch\'s kernels\n'
        'os.environ.setdefault("MKL_CBWR", "COMPATIBLE")  # torch\'s MKL\n'
        "# numpy's SIMD loops: X86_V3 (AVX2 and FMA), not its AVX-512 ones\n"
        'os.environ.setdefault("NPY_DISABLE_CPU_FEATURES", "X86_V4 AVX512_ICL AVX512_SPR")\n'
        "# numpy's OpenBLAS: its AVX2 kernels, on Linux with an AVX2 CPU (elsewhere, its choice)\n"
        'if Path("/proc/cpuinfo").exists()'
        ' and "avx2" in Path("/proc/cpuinfo").read_text().split():\n'
        '    os.environ.setdefault("OPENBLAS_CORETYPE", "Haswell")\n'
        "\n"
        "# Colab, or any Python without this book's package: install grpo_core, quietly, from the\n"
        "# clone this notebook sits in, else from the book's repository. --no-deps keeps the\n"
        "# runtime's own numpy, torch, matplotlib. If pip fails, stop here with one message.\n"
        "import importlib\n"
        "import importlib.util\n"
        "import subprocess\n"
        "import sys\n"
        "\n"
        'if importlib.util.find_spec("grpo_core") is None:\n'
        "    clone = Path.cwd().parent  # a chapter runs in book/\n"
        '    source = (clone.as_uri() if (clone / "grpo_core" / "notebook.py").is_file()\n'
        f'              else "{url}")\n'
        '    pip = ["pip", "install", "--quiet", "--no-deps", f"grpo-core @ {source}"]\n'
        '    done = subprocess.run([sys.executable, "-m", *pip], capture_output=True, text=True)\n'
        "    if done.returncode != 0:\n"
        "        class InstallFailed(Exception):\n"
        "            def _render_traceback_(self):  # IPython shows this message, no traceback\n"
        "                return [str(self)]\n"
        "\n"
        "        said = [ln for ln in (done.stderr or done.stdout).splitlines() if ln.strip()]\n"
        '        command = " ".join(pip[:-1] + [repr(pip[-1])])\n'
        '        raise InstallFailed("\\n".join([\n'
        "            \"This chapter needs the book's package grpo_core; installing it failed:\",\n"
        '            f"    {command}", *("  | " + ln for ln in said[-4:]),\n'
        '            "Fix the cause (no network?) and run this cell again, or run in a cell:",\n'
        '            f"    %{command}"])) from None\n'
        "    importlib.invalidate_caches()\n"
        "\n"
        "# Outside the tests, a failing check of a stored number in one of this chapter's own\n"
        "# check cells (listed by their source's hash) prints a note instead of stopping the\n"
        "# chapter: another numpy/torch/CPU can round differently. Any other assert stays one.\n"
        "import torch\n"
        "\n"
        "import grpo_core.notebook\n"
        "\n"
        "torch.set_num_threads(1)\n"
        f"grpo_core.notebook.tolerate_differences({_set_literal(list(checks))})"
    )


def ensure_colab_cell(nb) -> None:
    """Insert the guarded install cell first, or refresh it in place (idempotent). Tagged
    `remove-cell`: the page never shows it."""
    import nbformat

    cells = [c for c in nb.cells if c.get("id") == COLAB_CELL_ID]
    if cells:
        cell = cells[0]
        nb.cells.remove(cell)
    else:
        cell = nbformat.v4.new_code_cell(id=COLAB_CELL_ID)
    cell.source = colab_cell_source(book_checks(nb))
    cell.metadata = {"tags": ["remove-cell"]}
    nb.cells.insert(0, cell)


READING_TIME_CELL_ID = "reading-time"


def _reading_stats():
    """tools/reading_stats.py as a module (tools/ is not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("reading_stats",
                                                  ROOT / "tools" / "reading_stats.py")
    stats = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(stats)
    return stats


def ensure_reading_time_cell(nb) -> None:
    """Insert right after the title cell, or refresh in place, a small markdown cell with the
    chapter's careful reading time as tools/reading_stats.py computes it (that cell left out of
    the count). Call it on the executed notebook: figures are counted from the stored outputs.
    Untagged: the page shows it. tests/test_reading_time.py checks it never drifts."""
    import nbformat

    stats = _reading_stats()
    assert stats.READING_TIME_CELL_ID == READING_TIME_CELL_ID
    cells = [c for c in nb.cells if c.get("id") == READING_TIME_CELL_ID]
    if cells:
        cell = cells[0]
    else:
        titles = [i for i, c in enumerate(nb.cells)
                  if c.cell_type == "markdown" and c.source.lstrip().startswith("# ")]
        cell = nbformat.v4.new_markdown_cell(id=READING_TIME_CELL_ID)
        nb.cells.insert(titles[0] + 1 if titles else 0, cell)
    cell.metadata = {}
    cell.source = stats.reading_time_markdown(stats.notebook_stats(nb))


def strip_widget_state(nb) -> None:
    nb.metadata.pop("widgets", None)


def stabilise_widget_views(nb) -> None:
    """Replace the random model ids of widget-view outputs by ids derived from the cell id.

    Without stored state the ids point at nothing once the kernel is gone, and random ones
    would make every re-run a diff.
    """
    for cell in nb.cells:
        views = (
            out["data"][WIDGET_VIEW]
            for out in cell.get("outputs", [])
            if WIDGET_VIEW in out.get("data", {})
        )
        for k, view in enumerate(views):
            view["model_id"] = f"{cell.id}-{k}"


def coalesce_streams(nb) -> None:
    """Merge consecutive outputs of one stream (stdout, stderr) into one: how a cell's prints
    are cut into messages depends on timing, and the stored file should not."""
    for cell in nb.cells:
        merged = []
        for out in cell.get("outputs", []):
            prev = merged[-1] if merged else None
            if (out.get("output_type") == "stream" and prev is not None
                    and prev.get("output_type") == "stream" and prev["name"] == out["name"]):
                prev["text"] = "".join(prev["text"]) + "".join(out["text"])
            else:
                merged.append(out)
        if "outputs" in cell:
            cell["outputs"] = merged


def execute_notebook(path: Path, timeout: int = TIMEOUT_PER_CELL,
                     add_reading_time: bool = True) -> bool:
    """Execute `path` in place. Returns True if the stored file changed. A notebook of the book
    gets its reading-time cell (`add_reading_time`, or refreshed whenever it has one)."""
    import nbformat
    from nbclient import NotebookClient

    original = path.read_text(encoding="utf-8")
    nb = nbformat.reads(original, as_version=4)
    ensure_cell_ids(nb)
    ensure_colab_cell(nb)
    strip_widget_state(nb)
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",  # the kernel of the interpreter running this script
        resources={"metadata": {"path": str(path.parent)}},  # kernel cwd: the notebook's folder
        store_widget_state=False,
        record_timing=False,  # no timestamps in cell metadata: they would change every run
    )
    client.execute()
    strip_widget_state(nb)
    coalesce_streams(nb)
    stabilise_widget_views(nb)
    if add_reading_time or any(c.get("id") == READING_TIME_CELL_ID for c in nb.cells):
        ensure_reading_time_cell(nb)
    nbformat.validate(nb)
    text = nbformat.writes(nb)
    text += "" if text.endswith("\n") else "\n"  # as nbformat.write does
    if text == original:
        return False
    path.write_text(text, encoding="utf-8")
    return True


def refresh_first_cell(path: Path) -> bool:
    """Rewrite only the guarded first cell's source and tags, executing nothing: for a change of
    that cell, which prints nothing, so no stored output can change (strict nbval re-runs it).
    Every other cell stays byte for byte. Returns True if the file changed."""
    import nbformat

    original = path.read_text(encoding="utf-8")
    nb = nbformat.reads(original, as_version=4)
    ensure_colab_cell(nb)
    first = nb.cells[0]
    if first.get("outputs"):
        raise ValueError(f"{path}: the first cell has stored outputs; run the notebook instead")
    nbformat.validate(nb)
    text = nbformat.writes(nb)
    text += "" if text.endswith("\n") else "\n"
    if text == original:
        return False
    path.write_text(text, encoding="utf-8")
    return True


def _in_book(path: Path) -> bool:
    return path.resolve().parent == BOOK.resolve()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: every book/*.ipynb")
    parser.add_argument("--timeout", type=int, default=TIMEOUT_PER_CELL, help="seconds per cell")
    parser.add_argument(
        "--refresh-first-cell", action="store_true",
        help="only rewrite the guarded first cell (it prints nothing): no kernel, no outputs")
    args = parser.parse_args(argv)

    paths = args.notebooks or sorted(BOOK.glob("*.ipynb"))
    if not paths:
        print(f"no notebooks in {BOOK}")
        return 0
    if args.refresh_first_cell:
        for path in paths:
            status = "updated" if refresh_first_cell(path) else "unchanged"
            print(f"{path}  first cell {status}", flush=True)
        return 0
    set_deterministic_env()

    failed = []
    for i, path in enumerate(paths, 1):
        start = time.perf_counter()
        try:
            changed = execute_notebook(path, timeout=args.timeout,
                                       add_reading_time=_in_book(path))
        except Exception as exc:  # report every notebook, then fail
            failed.append(path)
            status = f"FAILED ({type(exc).__name__})"
            detail = traceback.format_exc()
        else:
            status = "updated" if changed else "unchanged"
            detail = ""
        print(
            f"[{i}/{len(paths)}] {path}  {time.perf_counter() - start:6.1f} s  {status}", flush=True
        )
        if detail:
            print(detail, file=sys.stderr, flush=True)

    if any(_in_book(path) for path in paths):  # the intro's reading paths sum chapter times
        stats = _reading_stats()
        status = "updated" if stats.write_intro() else "unchanged"
        print(f"{stats.INTRO.relative_to(ROOT)}  reading paths {status}", flush=True)

    if failed:
        print(
            f"{len(failed)} notebook(s) failed and were left untouched: "
            + ", ".join(map(str, failed)),
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
