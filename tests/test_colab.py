"""A chapter opened alone, as Colab opens it: one notebook in an empty folder, in a Python that has
numpy, torch, matplotlib and Jupyter but not grpo_core. Its hidden first cell must install
grpo_core from the book's repository (_config.yml) without printing anything, and the chapter
must then run to the end; where the install fails, the first cell must stop with one message and
no later cell may run.

The repository's address is pointed at a snapshot of this checkout's package (git's `insteadOf`,
so pip's own git install runs, offline); the Python is a venv that sees the test venv's packages
but not its grpo_core. Chapter 9, the shortest, stands for the others (the README gives a manual
run of four chapters)."""

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
CHAPTER = ROOT / "book" / "09_grpo_compressed.ipynb"
KERNEL = "grpo-alone"


def _git(*args, cwd):
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True)


@pytest.fixture(scope="module")
def alone(tmp_path_factory):
    """(environment for a kernel whose git reads the repository's address as the given target,
    the repository snapshot)."""
    sys.path.insert(0, str(ROOT / "tools"))
    import run_notebooks

    sys.path.remove(str(ROOT / "tools"))
    url = run_notebooks.repository_url()  # git+https://github.com/OWNER/NAME@BRANCH
    address, branch = url.removeprefix("git+").rsplit("@", 1)
    tmp = tmp_path_factory.mktemp("colab")

    # the repository: this checkout's package, committed on the branch the cell installs
    src = tmp / "repo"
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (ROOT / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "grpo_core", src / "grpo_core",
                    ignore=shutil.ignore_patterns("__pycache__"))
    _git("init", "-q", "-b", branch, cwd=src)
    _git("add", "-A", cwd=src)
    _git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "snapshot", cwd=src)

    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "GRPO_BOOK_STRICT", "VIRTUAL_ENV")}
    env["GIT_CONFIG_NOSYSTEM"] = "1"
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"

    def point(target: str) -> dict:
        gitconfig = tmp / f"gitconfig-{abs(hash(target))}"
        gitconfig.write_text(f'[url "{target}"]\n\tinsteadOf = {address}\n', encoding="utf-8")
        return {**env, "GIT_CONFIG_GLOBAL": str(gitconfig)}

    return point, src


def python_without_grpo_core(tmp: Path) -> Path:
    """A venv whose site-packages links every package of this one except grpo_core's (editable)
    install, and a Jupyter kernel spec for it; returns the folder to put in JUPYTER_PATH."""
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next(venv.glob("lib/python3*/site-packages"))
    ours = Path(sysconfig.get_paths()["purelib"])
    for entry in ours.iterdir():
        if "grpo_core" not in entry.name and "grpo-core" not in entry.name:
            (site / entry.name).symlink_to(entry)
    spec = tmp / "jupyter" / "kernels" / KERNEL
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [str(venv / "bin" / "python"), "-m", "ipykernel_launcher", "-f",
                 "{connection_file}"],
        "display_name": KERNEL, "language": "python"}), encoding="utf-8")
    return tmp / "jupyter"


def run_alone(tmp_path, env, monkeypatch):
    """Execute a copy of the chapter, outputs cleared, alone in an empty folder, in a fresh
    Python without grpo_core."""
    from nbclient import NotebookClient

    jupyter = python_without_grpo_core(tmp_path)
    folder = tmp_path / "content"
    folder.mkdir()
    nb = nbformat.read(CHAPTER, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    monkeypatch.setenv("JUPYTER_PATH", str(jupyter))
    client = NotebookClient(nb, timeout=300, kernel_name=KERNEL,
                            resources={"metadata": {"path": str(folder)}})
    error = None
    try:
        client.execute(env=env)
    except Exception as exc:  # nbclient's CellExecutionError: the run stopped at a cell
        error = exc
    return nb, error


def texts(cell):
    return [o.get("text") or o.get("data", {}).get("text/plain") for o in cell.get("outputs", [])
            if o.get("output_type") in ("stream", "execute_result")]


def test_a_chapter_alone_installs_grpo_core_silently_and_runs(alone, tmp_path, monkeypatch):
    point, src = alone
    nb, error = run_alone(tmp_path, point(src.as_uri()), monkeypatch)
    assert error is None, error
    assert nb.cells[0].outputs == [], nb.cells[0].outputs  # quiet: no pip note, no warning
    stored = nbformat.read(CHAPTER, as_version=4)
    for ran, kept in zip(nb.cells, stored.cells, strict=True):
        if ran.cell_type == "code":
            assert texts(ran) == texts(kept), ran.source[:80]  # every check held, no note
            assert not [o for o in ran.outputs if o.get("name") == "stderr"], ran.source[:80]


def test_where_the_install_fails_the_first_cell_stops_with_one_message(alone, tmp_path,
                                                                       monkeypatch):
    point, src = alone
    nb, error = run_alone(tmp_path, point((src.parent / "missing").as_uri()), monkeypatch)
    assert error is not None, "the chapter ran on without grpo_core"
    (out,) = nb.cells[0].outputs
    assert out["output_type"] == "error" and out["ename"] == "InstallFailed"
    message = "\n".join(out["traceback"])
    assert "Traceback" not in message and len(message.splitlines()) <= 8, message
    assert "installing it failed" in message and "pip install --quiet --no-deps" in message
    assert "run this cell again" in message
    assert all(c.execution_count is None for c in nb.cells[1:] if c.cell_type == "code")
