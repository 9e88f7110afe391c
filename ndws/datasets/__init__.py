"""Bundled example data sets that need no network.

The files in ``ndws/datasets/data/`` are copied from scikit-learn's bundled data (see
``ndws/datasets/data/README.md`` for origin, citation and license).

>>> from ndws.datasets import load_iris
>>> X, y = load_iris()
>>> X.shape, X.dtype, y.shape, y.dtype
((150, 4), dtype('float32'), (150,), dtype('int64'))
"""
from __future__ import annotations

import functools
import gzip
import io
from importlib import resources
from typing import Any

import numpy as np

__all__ = ["load_iris", "load_digits", "IRIS_CLASS_NAMES"]

#: class names of the iris data, in label order (from the header of ``iris.csv``)
IRIS_CLASS_NAMES = ("setosa", "versicolor", "virginica")


def _read_bytes(name: str) -> bytes:
    return resources.files(__name__).joinpath("data", name).read_bytes()


def _split(table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    # float32 features and int64 labels (the last column), read-only: the cached arrays are
    # shared, and the loaders hand out copies.
    features = table[:, :-1].astype(np.float32)
    labels = table[:, -1].astype(np.int64)
    features.flags.writeable = False
    labels.flags.writeable = False
    return features, labels


@functools.lru_cache(maxsize=None)
def _iris_arrays() -> tuple[np.ndarray, np.ndarray]:
    text = _read_bytes("iris.csv").decode("ascii")
    header, _, body = text.partition("\n")
    n_samples, n_features, *names = header.strip().split(",")
    table = np.loadtxt(io.StringIO(body), delimiter=",", dtype=np.float64, ndmin=2)
    if (table.shape != (int(n_samples), int(n_features) + 1)
            or tuple(names) != IRIS_CLASS_NAMES):
        raise RuntimeError(f"ndws/datasets/data/iris.csv is corrupt: header {header!r}, "
                           f"table shape {table.shape}")
    return _split(table)


@functools.lru_cache(maxsize=None)
def _digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    raw = gzip.decompress(_read_bytes("digits.csv.gz")).decode("ascii")
    table = np.loadtxt(io.StringIO(raw), delimiter=",", dtype=np.float64, ndmin=2)
    if table.shape != (1797, 65):
        raise RuntimeError(f"ndws/datasets/data/digits.csv.gz is corrupt: table shape "
                           f"{table.shape}, expected (1797, 65)")
    return _split(table)


def _result(features: np.ndarray, labels: np.ndarray, n_classes: int, as_iterator: bool,
            batch_size: int | None, iterator_kwargs: dict[str, Any], name: str) -> Any:
    if not isinstance(as_iterator, bool):
        raise TypeError(f"{name}: as_iterator must be a bool, got {as_iterator!r}")
    if not as_iterator:
        if batch_size is not None or iterator_kwargs:
            given = ["batch_size"] if batch_size is not None else []
            given += sorted(iterator_kwargs)
            raise TypeError(f"{name}: iterator options ({', '.join(given)}) require "
                            f"as_iterator=True")
        # copies: the cached arrays stay pristine whatever the caller does with the result
        return features.copy(), labels.copy()
    from ndws.data.iterators import ArrayDataSetIterator

    one_hot = np.zeros((labels.shape[0], n_classes), dtype=np.float32)
    one_hot[np.arange(labels.shape[0]), labels] = 1.0
    if batch_size is None:
        batch_size = features.shape[0]
    return ArrayDataSetIterator(features.copy(), one_hot, batch_size, **iterator_kwargs)


def load_iris(as_iterator: bool = False, batch_size: int | None = None,
              **iterator_kwargs: Any) -> Any:
    """Fisher's iris data: 150 flowers, 4 measurements (cm), 3 classes of 50.

    Parameters
    ----------
    as_iterator : bool
        False (default): return NumPy arrays. True: return an
        :class:`ndws.data.iterators.ArrayDataSetIterator` over the data with one-hot labels.
    batch_size : int, optional
        Batch size of the iterator (default: all 150 samples in one batch). Only with
        ``as_iterator=True``.
    **iterator_kwargs
        Passed on to ``ArrayDataSetIterator`` (for example its shuffle and seed options).
        Only with ``as_iterator=True``.

    Returns
    -------
    (features, labels) : tuple of ndarray
        ``(150, 4) ndarray of float32`` (sepal length, sepal width, petal length, petal width)
        and ``(150,) ndarray of int64`` class indices into :data:`IRIS_CLASS_NAMES`; fresh
        copies on every call.
    iterator : ArrayDataSetIterator
        With ``as_iterator=True``: features ``(n, 4)`` float32, labels ``(n, 3)`` float32
        one-hot.

    Examples
    --------
    >>> X, y = load_iris()
    >>> X[0], int(y[0])
    (array([5.1, 3.5, 1.4, 0.2], dtype=float32), 0)
    """
    features, labels = _iris_arrays()
    return _result(features, labels, 3, as_iterator, batch_size, iterator_kwargs, "load_iris")


def load_digits(as_iterator: bool = False, batch_size: int | None = None,
                **iterator_kwargs: Any) -> Any:
    """The UCI optical-recognition handwritten digits: 1797 images of 8x8 counts (0..16).

    Parameters
    ----------
    as_iterator : bool
        False (default): return NumPy arrays. True: return an
        :class:`ndws.data.iterators.ArrayDataSetIterator` with one-hot labels.
    batch_size : int, optional
        Batch size of the iterator (default: all 1797 samples in one batch). Only with
        ``as_iterator=True``.
    **iterator_kwargs
        Passed on to ``ArrayDataSetIterator``. Only with ``as_iterator=True``.

    Returns
    -------
    (features, labels) : tuple of ndarray
        ``(1797, 64) ndarray of float32`` (each row an 8x8 image, row by row; reshape to
        ``(-1, 8, 8)`` for images) and ``(1797,) ndarray of int64`` digits 0..9.
    iterator : ArrayDataSetIterator
        With ``as_iterator=True``: features ``(n, 64)`` float32, labels ``(n, 10)`` float32
        one-hot.

    Examples
    --------
    >>> X, y = load_digits()
    >>> X.shape, int(X.max()), sorted(set(y.tolist())) == list(range(10))
    ((1797, 64), 16, True)
    """
    features, labels = _digits_arrays()
    return _result(features, labels, 10, as_iterator, batch_size, iterator_kwargs,
                   "load_digits")
