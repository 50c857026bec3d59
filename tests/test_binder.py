"""Binder (mybinder.org, via repo2docker) builds the live environment from binder/ alone.

These tests keep binder/ in step with the root requirements that CI and local work use, so the two
cannot drift: the same exact pins, torch from the PyTorch CPU index (an extra index, in binder/
only), and launch buttons that open JupyterLab on Binder with Thebe off.
"""

import re
import shlex
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
BINDER = ROOT / "binder"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
# pip options that choose where packages come from
INDEX_OPTIONS = {"-i", "--index-url", "--extra-index-url", "-f", "--find-links", "--no-index",
                 "--trusted-host"}


def read_requirements(path: Path) -> dict:
    """Parse a pip requirements file the way pip reads it (the subset this project uses).

    Returns {"options": [(option, value)], "includes": [Path], "editables": [str],
    "pins": {canonical name: Requirement}}.
    """
    text = re.sub(r"\\\n", "", path.read_text(encoding="utf-8"))  # line continuations
    parsed = {"options": [], "includes": [], "editables": [], "pins": {}}
    for raw in text.splitlines():
        line = re.sub(r"(^|\s)#.*$", "", raw).strip()  # comments: "#" at the start or after space
        if not line:
            continue
        if line.startswith("-"):
            words = shlex.split(line.replace("=", " ", 1) if line.startswith("--") else line)
            option, value = words[0], " ".join(words[1:])
            if option[:2] in ("-r", "-e", "-i", "-f", "-c") and len(option) > 2:  # "-rfile"
                option, value = option[:2], option[2:] + value
            if option in ("-r", "--requirement"):
                parsed["includes"].append((path.parent / value).resolve())
            elif option in ("-e", "--editable"):
                parsed["editables"].append(value)
            else:
                parsed["options"].append((option, value))
            continue
        req = Requirement(line)
        name = canonicalize_name(req.name)
        assert name not in parsed["pins"], f"{path}: {req.name} is listed twice"
        parsed["pins"][name] = req
    return parsed


def exact_version(req: Requirement) -> Version | None:
    """The version of an exact `==` pin (no wildcard), else None."""
    specs = list(req.specifier)
    if len(specs) == 1 and specs[0].operator == "==" and "*" not in specs[0].version:
        return Version(specs[0].version)
    return None


@pytest.fixture(scope="module")
def root_reqs():
    return read_requirements(ROOT / "requirements.txt")


@pytest.fixture(scope="module")
def binder_reqs():
    return read_requirements(BINDER / "requirements.txt")


def test_binder_runs_python_311():
    # repo2docker's default Python is too old for numpy 2.4 / matplotlib 3.11; CI uses 3.11.
    assert (BINDER / "runtime.txt").read_text(encoding="utf-8").strip() == "python-3.11"
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert Version("3.11") in SpecifierSet(requires)


def test_binder_takes_torch_from_the_cpu_index_as_its_main_index(binder_reqs):
    # As the README's and CI's torch step: --index-url PyTorch's CPU index; PyPI as the extra one
    # for the rest (a requirements file has one set of index options for all its lines).
    assert binder_reqs["options"] == [("--index-url", CPU_INDEX),
                                      ("--extra-index-url", "https://pypi.org/simple")], (
        binder_reqs["options"])
    torch = binder_reqs["pins"].get("torch")
    assert torch is not None, "binder/requirements.txt must pin torch (the CPU build)"
    version = exact_version(torch)
    assert version is not None and version.local == "cpu", (
        f"binder/requirements.txt: torch must be pinned exactly to a '+cpu' build, got {torch}")


def test_binder_requirements_are_self_contained(binder_reqs):
    """No -r and no -e: repo2docker installs a file without local references *before* it copies
    the repository, so the torch layer stays cached across commits."""
    assert not binder_reqs["includes"], "binder/requirements.txt must not include other files"
    assert not binder_reqs["editables"], "binder/ installs the package in postBuild"
    text = (BINDER / "requirements.txt").read_text(encoding="utf-8")
    lines = [re.sub(r"(^|\s)#.*$", "", raw).strip() for raw in text.splitlines()]
    assert not [ln for ln in lines if ln.startswith((".", "/", "file:"))], "a local path"


def test_binder_post_build_installs_the_package_without_dependencies():
    post_build = BINDER / "postBuild"
    assert post_build.stat().st_mode & 0o111, "binder/postBuild must be executable"
    commands = [ln.strip() for ln in post_build.read_text(encoding="utf-8").splitlines()
                if ln.strip() and not ln.strip().startswith("#")]
    assert any(re.fullmatch(r"pip install( --no-cache-dir)? --no-deps -e \.", c) for c in commands)


def test_binder_installs_what_the_package_needs_and_no_dev_tools(binder_reqs):
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    needed = {canonicalize_name(Requirement(d).name) for d in project["dependencies"]}
    assert needed <= set(binder_reqs["pins"]), needed - set(binder_reqs["pins"])
    dev = {"ruff", "playwright", "pytest", "pytest-xdist", "nbval", "hypothesis", "jupyter-book"}
    assert not dev & set(binder_reqs["pins"]), dev & set(binder_reqs["pins"])


def test_root_requirements_name_no_index(root_reqs):
    # The index line lives in binder/ only: here pip would retry an unreachable host for every
    # package on machines that reach PyPI alone.
    used = [opt for opt, _ in root_reqs["options"] if opt in INDEX_OPTIONS]
    assert not used, f"requirements.txt must not choose an index: {used}"
    text = (ROOT / "requirements.txt").read_text(encoding="utf-8")
    assert "://" not in re.sub(r"#.*", "", text), "requirements.txt must not contain URLs"


def test_root_pins_every_package_exactly(root_reqs):
    loose = [str(r) for r in root_reqs["pins"].values() if exact_version(r) is None]
    assert not loose, f"requirements.txt: not pinned with ==: {loose}"
    assert "torch" in root_reqs["pins"]


def test_binder_pins_agree_with_root(binder_reqs, root_reqs):
    """Every package pinned in binder/ is pinned to the same version (a local label such as '+cpu'
    aside) in constraints.txt, CI's frozen environment, and in the root requirements if it is
    there; the root's pin accepts binder's: pip merges the two."""
    frozen = read_requirements(ROOT / "constraints.txt")["pins"]
    for name, req in binder_reqs["pins"].items():
        version = exact_version(req)
        assert version is not None, f"binder/requirements.txt: {req} is not an exact pin"
        assert name in frozen, f"binder/requirements.txt pins {req}, constraints.txt does not"
        assert exact_version(frozen[name]).public == version.public, (
            f"{name}: binder/ pins {version}, constraints.txt {exact_version(frozen[name])}")
        root = root_reqs["pins"].get(name)
        if root is not None:
            assert root.specifier.contains(version, prereleases=True), (
                f"{name}: pip cannot satisfy both {root} (root) and {req} (binder/)")


@pytest.fixture(scope="module")
def binder_lock():
    sys.path.insert(0, str(ROOT / "tools"))
    import binder_lock

    yield binder_lock
    sys.path.remove(str(ROOT / "tools"))


@pytest.mark.skipif(sys.platform != "linux", reason="reads the installed packages of Linux CI")
def test_binder_resolves_to_the_environment_ci_tests(binder_reqs, binder_lock):
    """What pip resolves on Binder is what CI tested: the pins are exactly the dependency closure
    of the reader's packages in CI's venv (installed from requirements + constraints), at its
    versions, and every pin meets every dependency edge, so pip has nothing left to choose."""
    versions, edges = binder_lock.closure()
    expected = {n: v for n, v in versions.items() if n not in binder_lock.INSTALLER_TOOLS}
    pinned = {n: exact_version(r) for n, r in binder_reqs["pins"].items()}
    assert set(pinned) == set(expected), (
        f"missing: {sorted(set(expected) - set(pinned))}, "
        f"extra: {sorted(set(pinned) - set(expected))}: run tools/binder_lock.py")
    for name, version in pinned.items():
        assert version.public == expected[name].public, (name, version, expected[name])
    for dependent, req in edges:
        name = canonicalize_name(req.name)
        if name in pinned:
            assert req.specifier.contains(pinned[name], prereleases=True), (
                f"{dependent} requires {req}; binder/ pins {name}=={pinned[name]}")
    assert binder_lock.main(["--check"]) == 0  # and the file is the tool's, byte for byte


def test_the_package_accepts_every_pinned_version(binder_reqs, root_reqs):
    """`-e .` installs grpo_core with its pyproject dependencies: they must accept the pins (for
    torch, both the root's and binder's +cpu build), or the install fails to resolve."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for dep in map(Requirement, project.get("dependencies", [])):
        name = canonicalize_name(dep.name)
        for where, reqs in (("requirements.txt", root_reqs), ("binder/requirements.txt",
                                                               binder_reqs)):
            pin = reqs["pins"].get(name)
            if pin is not None:
                assert dep.specifier.contains(exact_version(pin), prereleases=True), (
                    f"pyproject.toml requires {dep}, {where} pins {pin}")


def test_launch_buttons_open_jupyterlab_on_binder_without_thebe():
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    launch = config.get("launch_buttons") or {}
    assert launch.get("binderhub_url") == "https://mybinder.org"
    assert launch.get("notebook_interface") == "jupyterlab"
    assert not launch.get("thebe"), "Thebe stays off"
    repo = config.get("repository") or {}
    assert re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+", repo.get("url", "")), repo
    assert repo.get("branch"), repo


@pytest.mark.parametrize("page, image", [
    ("README.md", "[![Binder](https://mybinder.org/badge_logo.svg)]"),
    # the site loads nothing from other hosts: the book's badge is served from _static/
    ("book/intro.md", "[![Launch Binder](../_static/binder-badge.svg)]"),
])
def test_binder_badge_opens_chapter_1_of_this_repository(page, image):
    """The "Run it live" badge points at the repository and branch of _config.yml."""
    repo = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))["repository"]
    owner_name = repo["url"].removeprefix("https://github.com/").strip("/")
    target = "book/01_toy_world.ipynb"
    badge = (f"{image}(https://mybinder.org/v2/gh/"
             f"{owner_name}/{repo['branch']}?urlpath=lab/tree/{target})")
    if page.startswith("book/"):
        assert (ROOT / page).parent.joinpath(image.split("(")[1].rstrip(")]")).is_file()
    text = (ROOT / page).read_text(encoding="utf-8")
    assert badge in text, f"{page}: expected the Binder badge {badge}"


def test_binder_badge_target_is_a_chapter():
    toc = (ROOT / "_toc.yml").read_text(encoding="utf-8")
    if not re.search(r"^\s*-\s*file:\s*book/01_toy_world\s*$", toc, re.M):
        pytest.skip("chapter 1 is not in _toc.yml yet")  # the frame's tests then require the file
    assert (ROOT / "book/01_toy_world.ipynb").is_file(), "the Binder badge opens a missing notebook"


def test_constraints_freeze_agrees_with_the_pins(root_reqs):
    """constraints.txt (the frozen CI venv) pins every package exactly, and every root pin to the
    same version: `-r requirements.txt -c constraints.txt` then resolves."""
    frozen = read_requirements(ROOT / "constraints.txt")
    assert not frozen["options"] and not frozen["includes"] and not frozen["editables"]
    loose = [str(r) for r in frozen["pins"].values() if exact_version(r) is None]
    assert not loose, f"constraints.txt: not pinned with ==: {loose}"
    for name, req in root_reqs["pins"].items():
        assert name in frozen["pins"], f"constraints.txt lacks {name}"
        assert frozen["pins"][name].specifier == req.specifier, (
            f"{name}: requirements.txt {req}, constraints.txt {frozen['pins'][name]}")


def test_binder_start_gives_every_kernel_one_thread_and_the_pinned_cpu_paths():
    """binder/start (repo2docker's entrypoint hook) exports the tests' thread count and CPU code
    paths, then runs the server it was given: run it here on `env`."""
    import os
    import subprocess
    import sys

    sys.path.insert(0, str(ROOT / "tools"))
    import run_notebooks

    start = BINDER / "start"
    assert start.stat().st_mode & 0o111, "binder/start must be executable"
    keys = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "ATEN_CPU_CAPABILITY", "MKL_CBWR",
            "NPY_DISABLE_CPU_FEATURES", "OPENBLAS_CORETYPE")
    env = {k: v for k, v in os.environ.items() if k not in keys}
    out = subprocess.run([str(start), "env"], env=env, capture_output=True, text=True,
                         check=True, timeout=30).stdout
    got = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    assert {k: got.get(k) for k in keys} == {k: run_notebooks.DETERMINISTIC_ENV[k] for k in keys}
