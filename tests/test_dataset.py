"""DataSet / MultiDataSet: construction, placement, split, shuffle, batch_by, merge, errors.
NumPy is the oracle."""
from __future__ import annotations

import numpy as np
import pytest

import ndws
from ndws.data.dataset import DataSet, MultiDataSet, SplitTestAndTrain
from conftest import assert_matches


def _tab(rng, n=10, f=3, k=4):
    x = rng.standard_normal((n, f))
    y = np.eye(k)[rng.integers(0, k, n)]
    return x, y


def _ts(rng, n=5, f=3, k=2, t=7):
    x = rng.standard_normal((n, f, t))
    y = rng.standard_normal((n, k, t))
    m = (rng.random((n, t)) > 0.3).astype(np.float64)
    return x, y, m


# -- construction and placement ----------------------------------------------------------------

def test_numpy_inputs_become_ndarrays(rng):
    x, y = _tab(rng)
    ds = DataSet(x, y)
    assert isinstance(ds.features, ndws.NDArray) and isinstance(ds.labels, ndws.NDArray)
    assert ds.features_mask is None and ds.labels_mask is None
    assert_matches(ds.features, x)
    assert_matches(ds.labels, y)
    assert ds.num_examples() == 10 == len(ds)
    assert ds.features.memory_kind == "detached"


def test_ndarray_inputs_are_kept(rng):
    x, y = _tab(rng)
    fx = ndws.asarray(x)
    ds = DataSet(fx, y)
    assert ds.features is fx


def test_arrays_created_in_current_workspace_and_detach(rng):
    x, y, m = _ts(rng)
    with ndws.workspace("DS_WS"):
        ds = DataSet(x, y, m, m)
        assert all(a.is_attached() for a in (ds.features, ds.labels, ds.features_mask,
                                              ds.labels_mask))
        kept = ds.copy()
        assert kept.features.is_attached()
        assert ds.detach() is ds
        assert not any(a.is_attached() for a in (ds.features, ds.labels, ds.features_mask,
                                                  ds.labels_mask))
    assert kept.features.stale == "leaked"
    assert_matches(ds.features, x)
    assert_matches(ds.labels_mask, m)
    with pytest.raises(ndws.WorkspaceError):
        kept.detach()


def test_migrate_into_current_workspace(rng):
    x, y = _tab(rng)
    ds = DataSet(x, y)
    with ndws.workspace("MIGRATE"):
        assert ds.migrate() is ds
        assert ds.features.workspace_id == "MIGRATE"
        assert ds.labels.workspace_id == "MIGRATE"
        assert_matches(ds.features, x)
        ds.detach()
    assert_matches(ds.labels, y)


def test_copy_and_equality(rng):
    x, y, m = _ts(rng)
    ds = DataSet(x, y, m, None)
    c = ds.copy()
    assert c == ds and c is not ds and c.features is not ds.features
    c.features[0, 0, 0] = 123.0
    assert c != ds
    assert ds != DataSet(x, y, None, None)
    assert ds != DataSet(x.astype(np.float32), y, m)
    assert (ds == 3) is False
    with pytest.raises(TypeError):
        hash(ds)


def test_rank4_images(rng):
    x = rng.random((6, 3, 4, 5)).astype(np.float32)
    y = np.eye(2, dtype=np.float32)[[0, 1, 0, 1, 1, 0]]
    ds = DataSet(x, y)
    parts = ds.batch_by(4)
    assert [p.num_examples() for p in parts] == [4, 2]
    assert_matches(parts[1].features, x[4:])
    assert DataSet.merge(parts) == ds


# -- errors --------------------------------------------------------------------------------------

def test_mismatched_example_counts(rng):
    x, y = _tab(rng)
    with pytest.raises(ValueError, match=r"^labels has shape \(9, 4\), expected 10 examples "
                                         r"along axis 0"):
        DataSet(x, y[:9])


def test_bad_mask_shapes(rng):
    x, y, m = _ts(rng)
    with pytest.raises(ValueError, match=r"^features_mask has shape \(5, 6\), expected "
                                         r"\(5, 7\) \(\[examples, time\]"):
        DataSet(x, y, m[:, :6])
    with pytest.raises(ValueError, match=r"^labels_mask has shape \(4, 7\), expected 4|"
                                         r"^labels_mask has shape \(4, 7\)"):
        DataSet(x, y, None, m[:4])
    xt, yt = _tab(rng)
    with pytest.raises(ValueError, match=r"^features_mask has shape \(10, 2\), expected "
                                         r"\(10, 1\) or \(10, 3\)"):
        DataSet(xt, yt, np.ones((10, 2)))
    with pytest.raises(ValueError, match=r"^features_mask is given but features has rank 4"):
        DataSet(np.ones((2, 1, 2, 2)), np.ones((2, 1)), np.ones((2, 2)))


def test_bad_types():
    with pytest.raises(TypeError, match=r"^features must be an NDArray or array_like, got "
                                        r"None$"):
        DataSet(None, None)
    with pytest.raises(TypeError, match=r"^labels must be numeric array_like, got dtype <U1$"):
        DataSet(np.ones((2, 2)), ["a", "b"])


# -- split / shuffle / batch_by -----------------------------------------------------------------

def test_split_int_and_fraction(rng):
    x, y = _tab(rng)
    ds = DataSet(x, y)
    split = ds.split_test_and_train(7)
    assert isinstance(split, SplitTestAndTrain)
    train, test = split
    assert split.get_train() is train and split.get_test() is test
    assert_matches(train.features, x[:7])
    assert_matches(test.labels, y[7:])
    train, test = ds.split_test_and_train(0.65)
    assert (train.num_examples(), test.num_examples()) == (6, 4)


def test_split_with_seed_is_reproducible_and_leaves_self(rng):
    x, y = _tab(rng)
    ds = DataSet(x, y)
    a = ds.split_test_and_train(6, seed=42)
    b = ds.split_test_and_train(6, seed=42)
    assert a.train == b.train and a.test == b.test
    perm = np.random.default_rng(42).permutation(10)
    assert_matches(a.train.features, x[perm[:6]])
    assert_matches(a.test.labels, y[perm[6:]])
    assert_matches(ds.features, x)


@pytest.mark.parametrize("bad, exc, msg", [
    (0, ValueError, r"^n_or_fraction=0 must be between 1 and 9"),
    (10, ValueError, r"^n_or_fraction=10 must be between 1 and 9"),
    (1.5, ValueError, r"^n_or_fraction=1\.5 as a fraction must be in \(0, 1\)$"),
    (0.05, ValueError, r"^n_or_fraction=0\.05 of 10 examples gives 0 training examples"),
    ("half", TypeError, r"^n_or_fraction must be an int"),
    (True, TypeError, r"^n_or_fraction must be an int"),
])
def test_split_errors(rng, bad, exc, msg):
    ds = DataSet(*_tab(rng))
    with pytest.raises(exc, match=msg):
        ds.split_test_and_train(bad)


def test_shuffle_in_place_keeps_rows_together(rng):
    x, y, m = _ts(rng, n=8)
    ds = DataSet(x, y, m, m)
    feats = ds.features
    ds.shuffle(seed=7)
    perm = np.random.default_rng(7).permutation(8)
    assert ds.features is feats                      # in place
    assert_matches(ds.features, x[perm])
    assert_matches(ds.labels, y[perm])
    assert_matches(ds.features_mask, m[perm])
    assert_matches(ds.labels_mask, m[perm])
    other = DataSet(x, y, m, m)
    other.shuffle(seed=7)
    assert other == ds


def test_shuffle_inside_workspace_stays_there(rng):
    x, y = _tab(rng)
    with ndws.workspace("SHUF"):
        ds = DataSet(x, y)
        ds.shuffle(seed=1)
        assert ds.features.workspace_id == "SHUF"
        got = ds.features.numpy()
    assert_matches(got, x[np.random.default_rng(1).permutation(10)])


def test_batch_by_matches_slicing(rng):
    x, y, m = _ts(rng, n=7)
    ds = DataSet(x, y, m)
    parts = ds.batch_by(3)
    assert [p.num_examples() for p in parts] == [3, 3, 1]
    for i, p in enumerate(parts):
        assert_matches(p.features, x[3 * i:3 * i + 3])
        assert_matches(p.labels, y[3 * i:3 * i + 3])
        assert_matches(p.features_mask, m[3 * i:3 * i + 3])
        assert p.labels_mask is None
    assert [p.num_examples() for p in ds.as_list()] == [1] * 7
    with pytest.raises(ValueError, match=r"^n must be a positive int, got 0$"):
        ds.batch_by(0)
    with pytest.raises(TypeError, match=r"^n must be a positive int, got 2\.0$"):
        ds.batch_by(2.0)


# -- merge ---------------------------------------------------------------------------------------

def test_merge_tabular(rng):
    x, y = _tab(rng)
    merged = DataSet.merge([DataSet(x[:4], y[:4]), DataSet(x[4:], y[4:])])
    assert merged == DataSet(x, y)


def test_merge_variable_length_time_series_is_padded_and_masked(rng):
    a = DataSet(rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 2, 4)))
    b = DataSet(rng.standard_normal((1, 3, 6)), rng.standard_normal((1, 2, 6)))
    mb = np.array([[1, 1, 1, 1, 1, 0.0]])
    b.features_mask = ndws.asarray(mb)
    merged = DataSet.merge([a, b])
    fx = np.zeros((3, 3, 6))
    fx[:2, :, :4] = a.features.numpy()
    fx[2:] = b.features.numpy()
    assert_matches(merged.features, fx)
    ly = np.zeros((3, 2, 6))
    ly[:2, :, :4] = a.labels.numpy()
    ly[2:] = b.labels.numpy()
    assert_matches(merged.labels, ly)
    assert_matches(merged.features_mask, np.array([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 0, 0],
                                                   [1, 1, 1, 1, 1, 0.0]]))
    assert_matches(merged.labels_mask, np.array([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 0, 0],
                                                 [1, 1, 1, 1, 1, 1.0]]))


def test_merge_same_length_time_series_without_masks_has_no_masks(rng):
    x, y, _ = _ts(rng)
    merged = DataSet.merge(DataSet(x, y).batch_by(2))
    assert merged.features_mask is None and merged.labels_mask is None
    assert merged == DataSet(x, y)


def test_merge_errors(rng):
    x, y = _tab(rng)
    with pytest.raises(ValueError, match=r"^datasets must be a non-empty sequence of "
                                         r"DataSet$"):
        DataSet.merge([])
    with pytest.raises(TypeError, match=r"^datasets\[1\] must be a DataSet, got int$"):
        DataSet.merge([DataSet(x, y), 3])
    with pytest.raises(ValueError, match=r"^cannot merge: features have different shapes "
                                         r"beyond axis 0"):
        DataSet.merge([DataSet(x, y), DataSet(x[:, :2], y)])
    with pytest.raises(ValueError, match=r"^cannot merge: labels is None in some data sets"):
        DataSet.merge([DataSet(x, y), DataSet(x, None)])
    with pytest.raises(ValueError, match=r"^cannot merge: features have different ranks"):
        DataSet.merge([DataSet(x, y), DataSet(np.ones((10, 3, 2)), y)])


def test_merge_places_result_in_current_workspace(rng):
    x, y = _tab(rng)
    parts = DataSet(x, y).batch_by(5)
    with ndws.workspace("MERGE"):
        merged = DataSet.merge(parts)
        assert merged.features.workspace_id == "MERGE"
        merged.detach()
    assert merged == DataSet(x, y)


# -- MultiDataSet --------------------------------------------------------------------------------

def _mds(rng, n=9):
    x1 = rng.standard_normal((n, 3))
    x2, y2, m2 = _ts(rng, n=n)
    y1 = rng.standard_normal((n, 2))
    return (x1, x2, y1, y2, m2), MultiDataSet([x1, x2], [y1, y2], [None, m2], None)


def test_multidataset_basics(rng):
    (x1, x2, y1, y2, m2), mds = _mds(rng)
    assert mds.num_examples() == 9
    assert mds.num_feature_arrays() == 2 and mds.num_labels_arrays() == 2
    assert mds.features_masks[0] is None
    assert_matches(mds.features_masks[1], m2)
    assert mds.labels_masks is None
    assert mds.copy() == mds
    with ndws.workspace("MDS"):
        kept = mds.copy()
        assert kept.features[1].is_attached()
        kept.detach()
    assert kept == mds
    with ndws.workspace("MDS2"):
        mds.migrate()
        assert mds.features[0].workspace_id == "MDS2"
        mds.detach()
    assert_matches(mds.labels[1], y2)


def test_multidataset_split_shuffle_batch_merge(rng):
    (x1, x2, y1, y2, m2), mds = _mds(rng)
    train, test = mds.split_test_and_train(6, seed=5)
    perm = np.random.default_rng(5).permutation(9)
    assert_matches(train.features[1], x2[perm[:6]])
    assert_matches(test.features_masks[1], m2[perm[6:]])
    parts = mds.batch_by(4)
    assert [p.num_examples() for p in parts] == [4, 4, 1]
    assert MultiDataSet.merge(parts) == mds
    mds.shuffle(seed=3)
    p = np.random.default_rng(3).permutation(9)
    assert_matches(mds.features[0], x1[p])
    assert_matches(mds.labels[1], y2[p])
    assert_matches(mds.features_masks[1], m2[p])


def test_multidataset_errors(rng):
    with pytest.raises(ValueError, match=r"^labels\[0\] has shape \(3, 2\), expected 4 "
                                         r"examples"):
        MultiDataSet([np.ones((4, 2))], [np.ones((3, 2))])
    with pytest.raises(ValueError, match=r"^features_masks has 1 entries, expected 2"):
        MultiDataSet([np.ones((4, 2)), np.ones((4, 2))], [np.ones((4, 2))], [None])
    with pytest.raises(TypeError, match=r"^features must be a list of NDArrays or "
                                        r"array_likes, got None$"):
        MultiDataSet(None, [])
    with pytest.raises(ValueError, match=r"^features_masks\[0\] has shape \(4, 3\), "
                                         r"expected \(4, 5\)"):
        MultiDataSet([np.ones((4, 2, 5))], [np.ones((4, 2))], [np.ones((4, 3))])
    with pytest.raises(ValueError, match=r"^datasets\[1\] has 1 feature and 1 label arrays, "
                                         r"expected 2 and 1$"):
        MultiDataSet.merge([MultiDataSet([np.ones((2, 2))] * 2, [np.ones((2, 1))]),
                            MultiDataSet([np.ones((2, 2))], [np.ones((2, 1))])])
