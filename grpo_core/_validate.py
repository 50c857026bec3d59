"""Input checks shared by every public function of :mod:`grpo_core`.

Each check raises ``ValueError`` or ``TypeError`` with a message that names the argument and
the allowed range, so a bad call fails at the door instead of deep inside NumPy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from numbers import Integral, Real

import numpy as np


def check_int(value: object, name: str, minimum: int) -> int:
    """Return ``value`` as an ``int`` if it is an integer >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise TypeError(f"{name} must be an integer >= {minimum}, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value}")
    return int(value)


def check_float(value: object, name: str, *, minimum: float = 0.0, strict: bool = False) -> float:
    """Return ``value`` as a finite ``float`` >= ``minimum`` (> if ``strict``)."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a real number, got {value!r}")
    value = float(value)
    relation = ">" if strict else ">="
    if not math.isfinite(value) or value < minimum or (strict and value == minimum):
        raise ValueError(f"{name} must be a finite number {relation} {minimum}, got {value}")
    return value


def check_choice(value: object, name: str, allowed: Sequence[str]) -> str:
    """Return ``value`` if it is one of the ``allowed`` strings."""
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, allowed))}; got {value!r}")
    return str(value)


def check_array(x: object, name: str, *, min_ndim: int = 1) -> np.ndarray:
    """A finite float64 array with at least ``min_ndim`` dimensions."""
    arr = np.asarray(x)
    if arr.dtype == object or not (
        np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)
    ):
        raise TypeError(f"{name} must be a numeric array, got dtype {arr.dtype}")
    if arr.ndim < min_ndim:
        raise ValueError(f"{name} needs at least {min_ndim} dimension(s), got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name} must not be empty, got shape {arr.shape}")
    arr = arr.astype(np.float64, copy=False)
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite (no NaN or inf)")
    return arr


def check_samples(samples: object, n_answers: int, name: str = "samples") -> np.ndarray:
    """Integer answer indices in ``[0, n_answers)``."""
    arr = np.asarray(samples)
    if not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"{name} must hold integer answer indices, got dtype {arr.dtype}")
    if arr.ndim < 2:
        raise ValueError(f"{name} must have shape (..., P, G), got shape {arr.shape}")
    if arr.size and (arr.min() < 0 or arr.max() >= n_answers):
        raise ValueError(
            f"{name} must be answer indices in [0, {n_answers - 1}], "
            f"got values in [{arr.min()}, {arr.max()}]"
        )
    return arr


def check_same_shape(a: object, a_name: str, b: object, b_name: str) -> None:
    """Raise if two arrays (or shapes) that must agree element for element do not."""
    sa = a if isinstance(a, tuple) else np.shape(a)
    sb = b if isinstance(b, tuple) else np.shape(b)
    if sa != sb:
        raise ValueError(f"{a_name} {sa} and {b_name} {sb} must have the same shape")


def check_rng(rng: object, name: str = "rng") -> np.random.Generator:
    """A NumPy ``Generator`` (never the hidden global state)."""
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"{name} must be a numpy.random.Generator, e.g. np.random.default_rng(0)")
    return rng
