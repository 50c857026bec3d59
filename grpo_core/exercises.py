"""Checkers for the book's "implement it" exercises.

Each chapter's exercise asks the reader to write one function; the chapter calls the checker
below with the reader's function, and the checker compares it with the package's reference on
random inputs (seeded) and prints what differs. Usage in a chapter::

    def my_k2(logp, ref_logp):
        ...                       # the reader's code

    gc.exercises.check_k2(my_k2)  # prints "correct" or the first input where it differs

A checker returns True when every trial agrees, so a solution cell can ``assert`` it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import torch


def _as_array(x: Any) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().double().numpy()
    return np.asarray(x, dtype=np.float64)


def _describe(args: tuple, kwargs: dict) -> str:
    parts = [f"{type(a).__name__} shape {tuple(np.shape(_as_array(a)))}" if hasattr(a, "shape")
             else repr(a) for a in args]
    parts += [f"{k}={v!r}" for k, v in kwargs.items()]
    return ", ".join(parts)


def check(user_fn: Callable, reference_fn: Callable, trials: Iterable[tuple[tuple, dict]], *,
          name: str, rtol: float = 1e-6, atol: float = 1e-9, hint: str = "") -> bool:
    """Compare ``user_fn(*args, **kwargs)`` with ``reference_fn`` on every trial.

    Prints "correct" (and returns True) when all agree to ``rtol``/``atol``; otherwise prints
    the first disagreeing trial (the inputs' shapes, the expected and the returned values, where
    they differ most) and the ``hint``, and returns False. An exception in the reader's code is
    reported, not raised. Used by every chapter's exercise checkers.
    """
    for i, (args, kwargs) in enumerate(trials):
        expected = _as_array(reference_fn(*args, **kwargs))
        try:
            got = user_fn(*args, **kwargs)
        except Exception as e:  # the reader's code: report, do not crash the notebook
            print(f"{name}: your function raised {type(e).__name__}: {e}\n"
                  f"  on trial {i} with ({_describe(args, kwargs)})")
            return False
        got = _as_array(got)
        if got.shape != expected.shape:
            print(f"{name}: wrong shape on trial {i}: expected {expected.shape}, got {got.shape}"
                  f"\n  inputs: ({_describe(args, kwargs)})")
            return False
        if not np.allclose(got, expected, rtol=rtol, atol=atol, equal_nan=True):
            where = np.unravel_index(np.nanargmax(np.abs(got - expected)), got.shape) \
                if got.ndim else ()
            print(f"{name}: differs on trial {i} ({_describe(args, kwargs)})\n"
                  f"  largest difference at index {tuple(int(w) for w in where)}: expected "
                  f"{expected[where]:.6g}, got {got[where]:.6g}" + (f"\n  hint: {hint}" if hint
                                                                    else ""))
            return False
    print(f"{name}: correct")
    return True


def random_logps(rng: np.random.Generator, shape: tuple[int, ...]) -> torch.Tensor:
    """Log-probabilities in (-4, 0) of the given shape, float64: inputs for the checkers."""
    return torch.tensor(-4 * rng.random(shape))


# Chapter checkers are added below, one section per chapter, each a few lines calling `check`.
