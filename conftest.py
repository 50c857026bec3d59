"""Root pytest configuration: run tests and notebooks under fixed, reproducible conditions.

nbval starts one kernel per notebook and kernels inherit this process's environment, so setting it
here (before any kernel starts or torch is imported) makes `pytest` execute the notebooks exactly as
tools/run_notebooks.py did when it stored their outputs.
"""

import os
from pathlib import Path

os.environ.update({"PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})
# Unset, ipykernel picks the inline backend, as in tools/run_notebooks.py.
os.environ.pop("MPLBACKEND", None)


def pytest_configure(config):
    # nbval opens the sanitize file relative to the working directory; anchor it at the root so
    # `pytest` also works when started from a subfolder.
    name = getattr(config.option, "nbval_sanitize_with", None)
    if name and not Path(name).is_absolute():
        config.option.nbval_sanitize_with = str(config.rootpath / name)
