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
import sys
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


def _param(value: Any, name: str, minimum: float | None = None) -> Any:
    """A finite real parameter (loc, scale, low, high): a float, or for an array-like a
    float64 array (NumPy broadcasts it against the output), or an error naming it."""
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name}: expected a real number or an array of them, got "
                        f"{type(value).__name__} {value!r:.40}")
    if isinstance(value, (int, float, np.integer, np.floating)):
        try:
            f = float(value)
        except OverflowError:
            raise ValueError(f"{name}: must be finite, got {value!r:.40}") from None
        if not np.isfinite(f):
            raise ValueError(f"{name}: must be finite, got {value!r}")
        if minimum is not None and f < minimum:
            raise ValueError(f"{name}: must be non-negative, got {value!r}")
        return f
    arr = _numeric(value, name, "biuf", "a real number or an array of them").astype(np.float64)
    if not np.isfinite(arr).all():
        raise ValueError(f"{name}: must be finite, got an array holding "
                         f"{float(arr[~np.isfinite(arr)][0])!r}")
    if minimum is not None and arr.size and arr.min() < minimum:
        raise ValueError(f"{name}: must be non-negative, got an array holding "
                         f"{float(arr.min())!r}")
    return arr


def _numeric(value: Any, name: str, kinds: str, what: str) -> np.ndarray:
    """`value` as a NumPy array of dtype kind `kinds` (an NDArray is read in place), or a
    TypeError naming it as `what` it should be."""
    if isinstance(value, NDArray):
        arr = _core._np_view(value, "random", name)
    else:
        try:
            arr = np.asarray(value)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{name}: expected {what}, got {type(value).__name__} "
                            f"({exc})") from None
    if arr.dtype.hasobject or arr.dtype.kind not in kinds:
        raise TypeError(f"{name}: expected {what}, got {type(value).__name__} {value!r:.40}")
    return arr


def _size(size: Any, **params: Any) -> tuple:
    """NumPy's `size` as a tuple: None (the broadcast shape of the array `params`, () for
    scalars), an int or a sequence of ints; each array parameter must broadcast to it."""
    if size is None:
        shapes = {n: v.shape for n, v in params.items() if isinstance(v, np.ndarray)}
        try:
            return np.broadcast_shapes(*shapes.values())
        except ValueError:
            raise ValueError(f"{', '.join(shapes)}: shapes {', '.join(map(str, shapes.values()))}"
                             f" can't be broadcast together") from None
    items = tuple(size) if isinstance(size, (tuple, list)) else (size,)
    count = 1
    for n in items:
        if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)):
            raise TypeError(f"size: expected None, an int or a tuple of ints, got {size!r:.60}")
        if n < 0:
            raise ValueError(f"size: negative dimensions are not allowed, got {size!r}")
        count *= int(n)
    if count * 8 > sys.maxsize:
        raise ValueError(f"size: {size!r:.60} is too many values: array is too big")
    shape = tuple(int(n) for n in items)
    for name, v in params.items():
        if isinstance(v, np.ndarray):
            try:
                fits = np.broadcast_shapes(v.shape, shape) == shape
            except ValueError:
                fits = False
            if not fits:
                raise ValueError(f"{name}: shape {v.shape} can't be broadcast to size {shape}")
    return shape


def _as(value: Any, dt: np.dtype) -> Any:
    # an array parameter in the output's dtype (a float stays a weak Python scalar): float32
    # draws are scaled in float32 either way
    return value.astype(dt) if isinstance(value, np.ndarray) else value


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
            try:
                self._gen = np.random.Generator(np.random.PCG64(seed))
            except (TypeError, ValueError) as exc:
                raise type(exc)(f"seed: expected None, an int >= 0, a sequence of them, a "
                                f"SeedSequence or a BitGenerator, got {seed!r:.40} "
                                f"({exc})") from None

    @property
    def numpy_generator(self) -> np.random.Generator:
        """The underlying ``numpy.random.Generator``."""
        return self._gen

    def _filled(self, shape: tuple, dtype: Any, fill: Any) -> NDArray:
        return _core.new_filled(shape, dtype, fill, op="random")

    def random(self, size: Any = None, dtype: Any = np.float64) -> NDArray:
        """Uniform floats in [0, 1).

        Parameters
        ----------
        size : int or tuple of int, optional
            Output shape; None gives a 0-d array.
        dtype : {float32, float64}
        """
        dt = _float_dtype(dtype)
        return self._filled(_size(size), dt, lambda v: self._gen.random(out=v, dtype=dt))

    def rand(self, *shape: int) -> NDArray:
        """Uniform floats in [0, 1) of shape `shape` (``numpy.random.rand`` style)."""
        return self.random(shape)

    def standard_normal(self, size: Any = None, dtype: Any = np.float64) -> NDArray:
        """Standard normal samples."""
        dt = _float_dtype(dtype)
        return self._filled(_size(size), dt,
                            lambda v: self._gen.standard_normal(out=v, dtype=dt))

    def randn(self, *shape: int) -> NDArray:
        """Standard normal samples of shape `shape` (``numpy.random.randn`` style)."""
        return self.standard_normal(shape)

    def uniform(self, low: float = 0.0, high: float = 1.0, size: Any = None,
                dtype: Any = np.float64) -> NDArray:
        """Uniform floats in [low, high): ``low + (high - low) * random()``, NumPy's formula.
        `low` and `high` may be arrays that broadcast to `size` (NumPy's rules)."""
        dt = _float_dtype(dtype)
        low, high = _param(low, "low"), _param(high, "high")
        shape = _size(size, low=low, high=high)
        # a Python float for scalars: a weak scalar keeps float32 draws in float32 (NEP 50)
        span = high - low if isinstance(high - low, float) else np.subtract(high, low)
        if np.any(span < 0):
            raise ValueError("high - low < 0")
        if not np.all(np.isfinite(span)):
            raise OverflowError("high - low range exceeds valid bounds")
        span, low = _as(span, dt), _as(low, dt)

        def fill(v: np.ndarray) -> None:
            self._gen.random(out=v, dtype=dt)
            np.multiply(v, span, out=v, casting="unsafe")
            np.add(v, low, out=v, casting="unsafe")
        return self._filled(shape, dt, fill)

    def normal(self, loc: float = 0.0, scale: float = 1.0, size: Any = None,
               dtype: Any = np.float64) -> NDArray:
        """Normal samples: ``loc + scale * standard_normal()``, NumPy's formula. `loc` and
        `scale` may be arrays that broadcast to `size` (NumPy's rules); every value must be
        finite and `scale` non-negative."""
        loc, scale = _param(loc, "loc"), _param(scale, "scale", 0.0)
        dt = _float_dtype(dtype)
        shape = _size(size, loc=loc, scale=scale)
        loc, scale = _as(loc, dt), _as(scale, dt)

        def fill(v: np.ndarray) -> None:
            self._gen.standard_normal(out=v, dtype=dt)
            np.multiply(v, scale, out=v, casting="unsafe")
            np.add(v, loc, out=v, casting="unsafe")
        return self._filled(shape, dt, fill)

    def integers(self, low: int, high: int | None = None, size: Any = None,
                 dtype: Any = np.int64, endpoint: bool = False) -> NDArray:
        """Random integers in [low, high) (or [low, high] with `endpoint`), as NumPy's."""
        # NumPy's integers() has no out=; the draw is copied into place.
        try:
            dt = np.dtype(dtype)
        except TypeError:
            dt = None
        if dt is None or dt.kind not in "biu":
            raise TypeError(f"dtype: expected an integer or bool dtype, got {dtype!r:.40}")
        values = self._gen.integers(low, high, size=_size(size), dtype=dt, endpoint=endpoint)
        return _core._np_result(values)

    def permutation(self, x: Any) -> NDArray:
        """A shuffled arange(x) for an int, else a shuffled copy of `x` (along axis 0)."""
        if isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_)):
            n = operator.index(x)
            if not 0 <= n <= sys.maxsize // 8:
                raise ValueError(f"x: expected an int in [0, {sys.maxsize // 8}] (the length "
                                 f"of the permutation), got {n!r}")
            out = _creation.arange(n)
        else:
            if not isinstance(x, NDArray):
                x = _numeric(x, "x", "biufc", "an int or an array of numbers")
            if x.ndim == 0:
                raise ValueError(f"x: expected an int or an array of at least one dimension, "
                                 f"got a 0-d array")
            out = _creation.array(x)
        self.shuffle(out)
        return out

    def shuffle(self, x: NDArray, axis: int = 0) -> None:
        """Shuffle `x` in place along `axis`."""
        if not isinstance(x, NDArray):
            raise TypeError(f"x: expected an NDArray, got {type(x).__name__}")
        view = _core._np_view(x, "shuffle", "x")
        if isinstance(axis, (bool, np.bool_)) or not isinstance(axis, (int, np.integer)):
            raise TypeError(f"axis: expected an int, got {type(axis).__name__} {axis!r:.40}")
        if not -x.ndim <= axis < x.ndim:
            raise ValueError(f"axis: {axis} is out of bounds for x of {x.ndim} dimension"
                             f"{'s' if x.ndim != 1 else ''}")
        self._gen.shuffle(view, axis=axis)


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
