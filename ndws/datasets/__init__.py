"""Example data sets that need no network: bundled ones (iris, digits, a text for character
models) and MNIST from files the user has (`load_mnist`; nothing is downloaded).

The tables in ``ndws/datasets/data/`` are copied from scikit-learn's bundled data, the text is
public domain (``ndws/datasets/data/README.md`` gives the origin, citation and license of
each file).

>>> from ndws.datasets import load_iris
>>> X, y = load_iris()
>>> X.shape, X.dtype, y.shape, y.dtype
((150, 4), dtype('float32'), (150,), dtype('int64'))
"""
from __future__ import annotations

import functools
import gzip
import io
import os
from importlib import resources
from typing import Any

import numpy as np

from ndws.datasets._idx import read_idx
from ndws.datasets.text import (TEXTS, CharacterIterator, default_character_set, load_text,
                                minimal_character_set)

__all__ = ["load_iris", "load_digits", "load_mnist", "IRIS_CLASS_NAMES", "MNIST_FILES",
           "load_text", "TEXTS", "CharacterIterator", "minimal_character_set",
           "default_character_set"]

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
            batch_size: int | None, iterator_kwargs: dict[str, Any], name: str,
            shared: bool = True) -> Any:
    # shared: the arrays are cached ones, so the caller gets copies
    if not isinstance(as_iterator, bool):
        raise TypeError(f"{name}: as_iterator must be a bool, got {as_iterator!r}")
    if not as_iterator:
        if batch_size is not None or iterator_kwargs:
            given = ["batch_size"] if batch_size is not None else []
            given += sorted(iterator_kwargs)
            raise TypeError(f"{name}: iterator options ({', '.join(given)}) require "
                            f"as_iterator=True")
        # copies: the cached arrays stay pristine whatever the caller does with the result
        return (features.copy(), labels.copy()) if shared else (features, labels)
    from ndws.data.iterators import ArrayDataSetIterator

    one_hot = np.zeros((labels.shape[0], n_classes), dtype=np.float32)
    one_hot[np.arange(labels.shape[0]), labels] = 1.0
    if batch_size is None:
        batch_size = features.shape[0]
    return ArrayDataSetIterator(features.copy() if shared else features, one_hot, batch_size,
                                **iterator_kwargs)


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


#: the MNIST files `load_mnist` reads, by split: (images, labels); each may also be gzipped
#: (the same name with ``.gz``), as the files are distributed
MNIST_FILES = {"train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
               "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}


def _mnist_file(folder: str, name: str) -> str:
    for candidate in (name, name + ".gz"):
        path = os.path.join(folder, candidate)
        if os.path.lexists(path):
            return path
    every = ", ".join(n for pair in MNIST_FILES.values() for n in pair)
    raise FileNotFoundError(f"load_mnist: no {name} (or {name}.gz) in {folder!r}; MNIST is the "
                            f"four files {every}, plain or gzipped (ndws downloads nothing)")


def load_mnist(path: Any, train: bool = True, as_iterator: bool = False,
               batch_size: int | None = None, flatten: bool = True, normalize: bool = False,
               **iterator_kwargs: Any) -> Any:
    """MNIST's handwritten digits from the IDX files in folder `path` (LeCun's
    ``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``, ``t10k-images-idx3-ubyte``,
    ``t10k-labels-idx1-ubyte``, each plain or gzipped with ``.gz``; the plain one is read
    when both are there). Nothing is downloaded: a missing file is a FileNotFoundError that
    names it. Any file of the IDX format with 8-bit images works (Fashion-MNIST too).

    Every file's header is checked against its size before its data is read: a truncated
    file, trailing data, a header claiming more than the file holds, a file that is not IDX
    (or of another type or number of dimensions), a corrupt gzip stream or a directory in a
    file's place is a ValueError naming the file; so are images and labels of different
    counts and labels outside 0..9.

    Parameters
    ----------
    path : str or os.PathLike
        The folder holding the files.
    train : bool
        True (default): the 60,000 training images; False: the 10,000 test images.
    as_iterator : bool
        False (default): NumPy arrays. True: an
        :class:`ndws.data.iterators.ArrayDataSetIterator` with one-hot labels.
    batch_size : int, optional
        The iterator's batch size (default: all images in one batch). Only with
        ``as_iterator=True``.
    flatten : bool
        True (default, DL4J's ``MnistDataSetIterator``): features ``(n, rows * cols)``, each
        image row by row (``InputType.convolutional_flat(28, 28, 1)``); False: ``(n, 1, rows,
        cols)``, NCHW.
    normalize : bool
        False (default): pixel values 0..255; True: divided by 255 into [0, 1] (what DL4J's
        ``MnistDataSetIterator`` gives).
    **iterator_kwargs
        Passed on to ``ArrayDataSetIterator`` (shuffle, seed, ...). Only with
        ``as_iterator=True``.

    Returns
    -------
    (features, labels) : tuple of ndarray
        ``(n, 784) ndarray of float32`` (or ``(n, 1, 28, 28)``) and ``(n,) ndarray of int64``
        digits 0..9.
    iterator : ArrayDataSetIterator
        With ``as_iterator=True``: those features, labels ``(n, 10)`` float32 one-hot.
    """
    for name, value in (("train", train), ("flatten", flatten), ("normalize", normalize),
                        ("as_iterator", as_iterator)):
        if not isinstance(value, bool):
            raise TypeError(f"load_mnist: {name} must be a bool, got {value!r}")
    from ndws.data.records import folder_arg

    folder = folder_arg(path, "load_mnist: ")
    image_name, label_name = MNIST_FILES["train" if train else "test"]
    image_path = _mnist_file(folder, image_name)
    label_path = _mnist_file(folder, label_name)
    labels = read_idx(label_path, 1, np.dtype(np.uint8))
    images = read_idx(image_path, 3, np.dtype(np.uint8))
    if images.shape[0] != labels.shape[0]:
        raise ValueError(f"load_mnist: {image_path} holds {images.shape[0]} images but "
                         f"{label_path} holds {labels.shape[0]} labels")
    if labels.size and labels.max() > 9:
        bad = int(np.argmax(labels > 9))
        raise ValueError(f"{label_path}: label {int(labels[bad])} at index {bad} is not a digit "
                         f"0..9")
    n, rows, cols = images.shape
    features = images.reshape((n, rows * cols) if flatten else (n, 1, rows, cols)).astype(
        np.float32)
    if normalize:
        features /= np.float32(255.0)
    return _result(features, labels.astype(np.int64), 10, as_iterator, batch_size,
                   iterator_kwargs, "load_mnist", shared=False)
