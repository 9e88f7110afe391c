"""ndws.datasets: the bundled iris and digits data, checked against scikit-learn's loaders
(scikit-learn is a test-only dependency) and a few known values."""
from __future__ import annotations

import doctest
import hashlib
from importlib import resources

import numpy as np
import pytest

import ndws.datasets
from ndws.data.iterators import ArrayDataSetIterator
from ndws.datasets import IRIS_CLASS_NAMES, load_digits, load_iris

sklearn_datasets = pytest.importorskip("sklearn.datasets")

DATA_FILES = {
    "iris.csv": "f13ffa8fdd56fd8e6c8d16d4081a3fbd3114bcd0aae4256c43205169cd9d1449",
    "digits.csv.gz": "09f66e6debdee2cd2b5ae59e0d6abbb73fc2b0e0185d2e1957e9ebb51e23aa22",
}


def test_package_data_files_and_attribution():
    data = resources.files("ndws.datasets").joinpath("data")
    for name, sha in DATA_FILES.items():
        assert hashlib.sha256(data.joinpath(name).read_bytes()).hexdigest() == sha
    readme = data.joinpath("README.md").read_text(encoding="utf-8")
    for needle in ("CC BY 4.0", "BSD-3-Clause", "BSD 3-Clause License", "UCI Machine Learning",
                   "https://doi.org/10.24432/C56C76", "https://doi.org/10.24432/C50P49",
                   "Fisher", "Alpaydin", *DATA_FILES.values()):
        assert needle in readme, needle


def test_iris_arrays():
    X, y = load_iris()
    assert X.shape == (150, 4) and X.dtype == np.float32
    assert y.shape == (150,) and y.dtype == np.int64
    assert np.bincount(y).tolist() == [50, 50, 50]
    np.testing.assert_array_equal(X[0], np.array([5.1, 3.5, 1.4, 0.2], dtype=np.float32))
    np.testing.assert_array_equal(X[-1], np.array([5.9, 3.0, 5.1, 1.8], dtype=np.float32))
    assert y[0] == 0 and y[50] == 1 and y[-1] == 2
    # the two points in which Fisher's data (and scikit-learn's copy) differ from UCI's file
    np.testing.assert_array_equal(X[34], np.array([4.9, 3.1, 1.5, 0.2], dtype=np.float32))
    np.testing.assert_array_equal(X[37], np.array([4.9, 3.6, 1.4, 0.1], dtype=np.float32))
    assert IRIS_CLASS_NAMES == ("setosa", "versicolor", "virginica")


def test_iris_equals_scikit_learn():
    X, y = load_iris()
    ref = sklearn_datasets.load_iris()
    np.testing.assert_array_equal(X, ref.data.astype(np.float32))
    np.testing.assert_array_equal(y, ref.target)
    assert tuple(ref.target_names) == IRIS_CLASS_NAMES


def test_digits_arrays_and_scikit_learn():
    X, y = load_digits()
    assert X.shape == (1797, 64) and X.dtype == np.float32
    assert y.shape == (1797,) and y.dtype == np.int64
    counts = np.bincount(y)
    assert counts.tolist() == [178, 182, 177, 183, 181, 182, 181, 179, 174, 180]
    assert X.min() == 0 and X.max() == 16 and np.all(X == np.round(X))
    assert X[0, :10].tolist() == [0, 0, 5, 13, 9, 1, 0, 0, 0, 0]
    assert y[:10].tolist() == list(range(10))
    ref = sklearn_datasets.load_digits()
    np.testing.assert_array_equal(X, ref.data.astype(np.float32))
    np.testing.assert_array_equal(y, ref.target)
    np.testing.assert_array_equal(X.reshape(-1, 8, 8), ref.images.astype(np.float32))


def test_results_are_fresh_copies():
    X, y = load_iris()
    X[:] = -1
    y[:] = 7
    X2, y2 = load_iris()
    assert X2[0, 0] == np.float32(5.1) and y2[0] == 0
    assert X2.flags.writeable and X2 is not X


def test_iris_iterator_one_hot_batches():
    X, y = load_iris()
    it = load_iris(as_iterator=True, batch_size=32)
    assert isinstance(it, ArrayDataSetIterator)
    assert (it.batch(), it.input_columns(), it.total_outcomes()) == (32, 4, 3)
    batches = list(it)
    assert [b.num_examples() for b in batches] == [32, 32, 32, 32, 22]
    feats = np.concatenate([b.features.numpy() for b in batches])
    labs = np.concatenate([b.labels.numpy() for b in batches])
    np.testing.assert_array_equal(feats, X)
    np.testing.assert_array_equal(labs, np.eye(3, dtype=np.float32)[y])
    assert labs.dtype == np.float32


def test_digits_iterator_default_batch_and_kwargs():
    X, y = load_digits()
    whole = load_digits(as_iterator=True)
    ds = whole.next()
    assert ds.num_examples() == 1797 and not whole.has_next()
    np.testing.assert_array_equal(ds.labels.numpy().argmax(axis=1), y)
    shuffled = load_digits(as_iterator=True, batch_size=500, shuffle=True, seed=3)
    got = np.concatenate([b.features.numpy() for b in shuffled])
    assert not np.array_equal(got, X)
    np.testing.assert_array_equal(np.sort(got, axis=0), np.sort(X, axis=0))


def test_argument_errors():
    with pytest.raises(TypeError, match=r"load_iris: iterator options \(batch_size\) require "
                                        r"as_iterator=True"):
        load_iris(batch_size=10)
    with pytest.raises(TypeError, match=r"load_digits: iterator options \(batch_size, shuffle\) "
                                        r"require as_iterator=True"):
        load_digits(batch_size=10, shuffle=True)
    with pytest.raises(TypeError, match="load_iris: as_iterator must be a bool, got 1"):
        load_iris(as_iterator=1)


def test_docstring_examples():
    result = doctest.testmod(ndws.datasets)
    assert result.failed == 0 and result.attempted >= 5
