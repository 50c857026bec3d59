"""Root pytest configuration: run tests and notebooks under fixed, reproducible conditions.

nbval starts one kernel per notebook and kernels inherit this process's environment, so setting it
here (before any kernel starts or torch is imported) makes `pytest` execute the notebooks exactly as
tools/run_notebooks.py did when it stored their outputs.
"""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "tools"))
from run_notebooks import DETERMINISTIC_ENV  # noqa: E402  (stdlib imports only)

sys.path.pop(0)
# one thread, a fixed hash seed, torch's AVX2 kernels, strict checks of stored numbers
os.environ.update(DETERMINISTIC_ENV)
# Unset, ipykernel picks the inline backend, as in tools/run_notebooks.py.
os.environ.pop("MPLBACKEND", None)

# Property tests: no per-example deadline. Hypothesis's default (200 ms) measures the machine's
# load, not the code: on the loaded 2-core CI machine a correct test failed it.
try:
    from hypothesis import settings

    settings.register_profile("book", deadline=None)
    settings.load_profile("book")
except ImportError:  # the notebooks alone do not need hypothesis
    pass


def pytest_configure(config):
    # nbval opens the sanitize file relative to the working directory; anchor it at the root so
    # `pytest` also works when started from a subfolder.
    name = getattr(config.option, "nbval_sanitize_with", None)
    if name and not Path(name).is_absolute():
        config.option.nbval_sanitize_with = str(config.rootpath / name)


# --- the longest files first. pytest-xdist's `--dist loadfile` hands out whole files in
# collection order (pyproject.toml turns off its default reordering, which puts the files with the
# most tests first, whatever they cost): with the longest first, the short ones fill the
# workers' tails. The order comes from the previous run's times (the pytest cache,
# .pytest_cache/); without them, notebooks first, then the unit tests, each in name order. ---
_CACHE_KEY = "grpo/file_seconds"


def _file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def pytest_collection_modifyitems(session, config, items):
    cache = getattr(config, "cache", None)
    seconds = cache.get(_CACHE_KEY, {}) if cache is not None else {}
    first = {}
    for i, item in enumerate(items):
        first.setdefault(_file_of(item.nodeid), i)

    def key(item):
        path = _file_of(item.nodeid)
        return (-seconds.get(path, 0.0), not path.endswith(".ipynb"), first[path])

    items[:] = sorted(items, key=key)  # stable: a file's items keep their order


def pytest_sessionfinish(session):
    cache = getattr(session.config, "cache", None)
    if cache is None or hasattr(session.config, "workerinput") or not _FILE_SECONDS:
        return  # a worker, or nothing ran: the controller (or a plain run) records the times
    seconds = cache.get(_CACHE_KEY, {})
    seconds.update({path: round(s, 1) for path, s in _FILE_SECONDS.items()})
    cache.set(_CACHE_KEY, seconds)


# --- the slowest notebooks (and test files), summed over their items; works under pytest-xdist,
# whose controller receives every worker's reports. ---
_FILE_SECONDS: dict[str, float] = {}


def pytest_runtest_logreport(report):
    path = report.nodeid.split("::", 1)[0]
    _FILE_SECONDS[path] = _FILE_SECONDS.get(path, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter):
    if not _FILE_SECONDS:
        return
    slowest = sorted(_FILE_SECONDS.items(), key=lambda kv: -kv[1])[:10]
    terminalreporter.write_sep("=", "slowest files (seconds summed over setup, call, teardown)")
    for path, seconds in slowest:
        terminalreporter.write_line(f"{seconds:7.1f} s  {path}")
