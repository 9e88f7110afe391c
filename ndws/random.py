"""Seeded random numbers written straight into workspace memory.

`Generator` wraps NumPy's ``Generator`` (PCG64) and fills arrays allocated like any other ndws
array: in the calling thread's current workspace, or detached memory when none is current. For
the same seed the values are bit-for-bit those of ``numpy.random.default_rng(seed)``.

Examples
--------
>>> import ndws, numpy as np
>>> g = ndws.random.Generator(42)
>>> x = g.normal(0.0, 1.0, size=(2, 3))
>>> bool(np.array_equal(x.numpy(), np.random.default_rng(42).normal(0.0, 1.0, size=(2, 3))))
True
"""
from __future__ import annotations

import operator
from typing import Any

import numpy as np

from ndws import _core, _creation
from ndws._core import NDArray

__all__ = ["Generator", "default_rng", "integers", "normal", "permutation", "rand", "randn",
           "random", "seed", "shuffle", "standard_normal", "uniform"]

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def _float_dtype(dtype: Any) -> np.dtype:
    try:
        dt = np.dtype(dtype)
    except TypeError:
        dt = None
    if dt is None or dt not in _FLOATS:     # (None == float64 for NumPy's dtype compare)
        raise TypeError(f"dtype: expected float32 or float64, got {dtype!r}")
    return dt


def _real(value: Any, name: str, minimum: float | None = None) -> float:
    """A finite real parameter (loc, scale, low, high), or an error naming it."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer,
                                                                     np.floating)):
        raise TypeError(f"{name}: expected a real number, got {type(value).__name__} "
                        f"{value!r:.40}")
    f = float(value)
    if not np.isfinite(f):
        raise ValueError(f"{name}: must be finite, got {value!r}")
    if minimum is not None and f < minimum:
        raise ValueError(f"{name}: must be non-negative, got {value!r}")
    return f


def _size(size: Any) -> Any:
    # NumPy's `size`: None (a 0-d result), an int or a sequence of ints
    if size is None:
        return ()
    items = size if isinstance(size, (tuple, list)) else (size,)
    for n in items:
        if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)):
            raise TypeError(f"size: expected None, an int or a tuple of ints, got {size!r:.60}")
        if n < 0:
            raise ValueError(f"size: negative dimensions are not allowed, got {size!r}")
    return size


class Generator:
    """Random number generator that allocates its results like ndws arrays.

    Parameters
    ----------
    seed : int, sequence of int, numpy.random.SeedSequence or numpy.random.BitGenerator, optional
        Seed for PCG64 (fresh OS entropy when None).
    """

    def __init__(self, seed: Any = None):
        if isinstance(seed, np.random.BitGenerator):
            self._gen = np.random.Generator(seed)
        else:
            self._gen = np.random.Generator(np.random.PCG64(seed))

    @property
    def numpy_generator(self) -> np.random.Generator:
        """The underlying ``numpy.random.Generator``."""
        return self._gen

    def _filled(self, size: Any, dtype: Any, fill: Any) -> NDArray:
        return _core.new_filled(_size(size), dtype, fill, op="random")

    def random(self, size: Any = None, dtype: Any = np.float64) -> NDArray:
        """Uniform floats in [0, 1).

        Parameters
        ----------
        size : int or tuple of int, optional
            Output shape; None gives a 0-d array.
        dtype : {float32, float64}
        """
        dt = _float_dtype(dtype)
        return self._filled(size, dt, lambda v: self._gen.random(out=v, dtype=dt))

    def rand(self, *shape: int) -> NDArray:
        """Uniform floats in [0, 1) of shape `shape` (``numpy.random.rand`` style)."""
        return self.random(shape)

    def standard_normal(self, size: Any = None, dtype: Any = np.float64) -> NDArray:
        """Standard normal samples."""
        dt = _float_dtype(dtype)
        return self._filled(size, dt, lambda v: self._gen.standard_normal(out=v, dtype=dt))

    def randn(self, *shape: int) -> NDArray:
        """Standard normal samples of shape `shape` (``numpy.random.randn`` style)."""
        return self.standard_normal(shape)

    def uniform(self, low: float = 0.0, high: float = 1.0, size: Any = None,
                dtype: Any = np.float64) -> NDArray:
        """Uniform floats in [low, high): ``low + (high - low) * random()``, NumPy's formula."""
        dt = _float_dtype(dtype)
        low, high = _real(low, "low"), _real(high, "high")
        span = high - low
        if span < 0:
            raise ValueError("high - low < 0")
        if not np.isfinite(span):
            raise OverflowError("high - low range exceeds valid bounds")

        def fill(v: np.ndarray) -> None:
            self._gen.random(out=v, dtype=dt)
            np.multiply(v, high - low, out=v, casting="unsafe")
            np.add(v, low, out=v, casting="unsafe")
        return self._filled(size, dt, fill)

    def normal(self, loc: float = 0.0, scale: float = 1.0, size: Any = None,
               dtype: Any = np.float64) -> NDArray:
        """Normal samples: ``loc + scale * standard_normal()``, NumPy's formula."""
        loc, scale = _real(loc, "loc"), _real(scale, "scale", 0.0)
        dt = _float_dtype(dtype)

        def fill(v: np.ndarray) -> None:
            self._gen.standard_normal(out=v, dtype=dt)
            np.multiply(v, scale, out=v, casting="unsafe")
            np.add(v, loc, out=v, casting="unsafe")
        return self._filled(size, dt, fill)

    def integers(self, low: int, high: int | None = None, size: Any = None,
                 dtype: Any = np.int64, endpoint: bool = False) -> NDArray:
        """Random integers in [low, high) (or [low, high] with `endpoint`), as NumPy's."""
        # NumPy's integers() has no out=; the draw is copied into place.
        values = self._gen.integers(low, high, size=_size(size), dtype=dtype,
                                    endpoint=endpoint)
        return _core._np_result(values)

    def permutation(self, x: Any) -> NDArray:
        """A shuffled arange(x) for an int, else a shuffled copy of `x` (along axis 0)."""
        if isinstance(x, (int, np.integer)):
            out = _creation.arange(operator.index(x))
        else:
            out = _creation.array(x)
        self.shuffle(out)
        return out

    def shuffle(self, x: NDArray, axis: int = 0) -> None:
        """Shuffle `x` in place along `axis`."""
        if not isinstance(x, NDArray):
            raise TypeError(f"x: expected an NDArray, got {type(x).__name__}")
        self._gen.shuffle(_core._np_view(x, "shuffle", "x"), axis=axis)


def default_rng(seed: Any = None) -> Generator:
    """A new `Generator` (``numpy.random.default_rng`` counterpart)."""
    return Generator(seed)


# Module-level draws from one process-wide generator, as ``numpy.random.rand`` & co. NumPy's
# bit generators lock around each draw, so threads may share it; for reproducible parallel
# streams give each thread its own `Generator`.
_default = Generator()


def seed(seed: Any = None) -> None:
    """Re-seed the generator behind the module-level functions."""
    global _default
    _default = Generator(seed)


def random(size: Any = None, dtype: Any = np.float64) -> NDArray:
    """`Generator.random` on the module's generator."""
    return _default.random(size, dtype)


def rand(*shape: int) -> NDArray:
    """`Generator.rand` on the module's generator."""
    return _default.rand(*shape)


def randn(*shape: int) -> NDArray:
    """`Generator.randn` on the module's generator."""
    return _default.randn(*shape)


def standard_normal(size: Any = None, dtype: Any = np.float64) -> NDArray:
    """`Generator.standard_normal` on the module's generator."""
    return _default.standard_normal(size, dtype)


def uniform(low: float = 0.0, high: float = 1.0, size: Any = None,
            dtype: Any = np.float64) -> NDArray:
    """`Generator.uniform` on the module's generator."""
    return _default.uniform(low, high, size, dtype)


def normal(loc: float = 0.0, scale: float = 1.0, size: Any = None,
           dtype: Any = np.float64) -> NDArray:
    """`Generator.normal` on the module's generator."""
    return _default.normal(loc, scale, size, dtype)


def integers(low: int, high: int | None = None, size: Any = None, dtype: Any = np.int64,
             endpoint: bool = False) -> NDArray:
    """`Generator.integers` on the module's generator."""
    return _default.integers(low, high, size, dtype, endpoint)


def permutation(x: Any) -> NDArray:
    """`Generator.permutation` on the module's generator."""
    return _default.permutation(x)


def shuffle(x: NDArray, axis: int = 0) -> None:
    """`Generator.shuffle` on the module's generator."""
    _default.shuffle(x, axis)
