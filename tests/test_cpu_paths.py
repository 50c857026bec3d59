"""Every library the book computes with runs the code path DETERMINISTIC_ENV pins, the one Intel
and AMD CPUs with AVX2 and FMA run alike (tools/run_notebooks.py explains each variable).

Each check runs kernels in a fresh interpreter, because the variables only act when set before
numpy and torch are imported: this process imported them long ago. On an AVX2-only CPU (this
machine) numpy and OpenBLAS would take these paths anyway, and only the MKL check fails
without its pin (MKL then reports CNR:OFF); on an AVX-512 CPU every check can."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import run_notebooks  # noqa: E402

sys.path.pop(0)

CPU_PINS = ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "NPY_DISABLE_CPU_FEATURES", "OPENBLAS_CORETYPE")

# Reports, one per line, the path each library took: torch's kernels, the most advanced loop any
# numpy ufunc runs, MKL's branch (its verbose line of one matmul, which MKL prints on the C-level
# stdout) and the OpenBLAS kernels numpy loads.
PROBE = r"""
import ctypes, glob, os, sys
import numpy as np
import torch
from numpy.lib.introspect import opt_func_info

print("torch", torch.backends.cpu.get_cpu_capability())
current = {loop["current"].split("(")[0] for sigs in opt_func_info().values()
           for loop in sigs.values()}
print("numpy", " ".join(sorted(current)))
a = torch.ones(8, 8)
sys.stdout.flush()
with torch.backends.mkl.verbose(torch.backends.mkl.VERBOSE_ON):
    a @ a
libs = glob.glob(os.path.join(os.path.dirname(np.__file__) + ".libs", "*openblas*"))
lib = ctypes.CDLL(libs[0])
get = getattr(lib, "scipy_openblas_get_corename64_", None) or lib.openblas_get_corename
get.restype = ctypes.c_char_p
print("openblas", get().decode())
"""


def has_avx2() -> bool:
    cpuinfo = Path("/proc/cpuinfo")
    return cpuinfo.exists() and "avx2" in cpuinfo.read_text().split()


def run_probe(env: dict, prelude: str = "") -> dict[str, str]:
    out = subprocess.run([sys.executable, "-c", prelude + PROBE], env=env, capture_output=True,
                         text=True, check=True, timeout=120).stdout
    report = {}
    for line in out.splitlines():
        if line.startswith("MKL_VERBOSE") and "GEMM" in line:
            report["mkl"] = next(w for w in line.split() if w.startswith("CNR:"))
        elif line.split(" ", 1)[0] in ("torch", "numpy", "openblas", "printed", "threads"):
            key, value = line.split(" ", 1)
            report[key] = value
    return report


def assert_pinned(report: dict[str, str]) -> None:
    assert report["torch"] == ("AVX2" if has_avx2() else "DEFAULT")
    assert set(report["numpy"].split()) <= {"baseline", "X86_V3"}, report["numpy"]
    assert report["mkl"] == "CNR:COMPATIBLE"
    if has_avx2():
        assert report["openblas"] == "Haswell"


def without_pins() -> dict[str, str]:
    return {k: v for k, v in os.environ.items()
            if k not in run_notebooks.DETERMINISTIC_ENV and k != "MKL_VERBOSE"}


pytestmark = pytest.mark.skipif(not has_avx2(), reason="the pins are for x86-64 CPUs with AVX2")


def test_the_tests_environment_runs_every_library_on_its_pinned_path():
    env = {**without_pins(), **run_notebooks.DETERMINISTIC_ENV}
    assert_pinned(run_probe(env))


def test_the_first_cell_gives_a_readers_kernel_the_tests_threads_and_paths():
    """The chapters' hidden first cell, as IPython turns it into Python, in a fresh interpreter
    WITHOUT the tests' environment: it prints nothing, and then torch has one thread and every
    library runs its pinned path."""
    from IPython.core.inputtransformer2 import TransformerManager

    cell = TransformerManager().transform_cell(run_notebooks.colab_cell_source(["0" * 16]))
    prelude = ("import contextlib, io\nbuf = io.StringIO()\nwith contextlib.redirect_stdout(buf):\n"
               f"    exec(compile({cell!r}, 'cell', 'exec'))\n"
               "print('printed', repr(buf.getvalue()))\n"
               "print('threads', __import__('torch').get_num_threads())\n")
    report = run_probe(without_pins(), prelude)
    assert report["printed"] == "''" and report["threads"] == "1"
    assert_pinned(report)


def test_the_numpy_pin_names_every_loop_above_x86_v3():
    """NPY_DISABLE_CPU_FEATURES must list every dispatch target numpy has above X86_V3 (AVX2,
    FMA): a numpy that adds one (or renames them) would otherwise run it on a CPU that has it."""
    from numpy._core._multiarray_umath import __cpu_dispatch__

    disabled = run_notebooks.DETERMINISTIC_ENV["NPY_DISABLE_CPU_FEATURES"].split()
    assert set(disabled) == set(__cpu_dispatch__) - {"X86_V3"}
    assert set(CPU_PINS) <= set(run_notebooks.DETERMINISTIC_ENV)
