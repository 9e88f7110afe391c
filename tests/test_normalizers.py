"""Normalizers: statistics and transforms against NumPy formulas, masks, labels, revert,
save/load, use as an iterator's pre_processor."""
from __future__ import annotations

import doctest

import numpy as np
import pytest

import ndws
import ndws.data.normalizers
from ndws.data.dataset import DataSet
from ndws.data.iterators import ArrayDataSetIterator, ListDataSetIterator
from ndws.data.normalizers import (EPS_THRESHOLD, ImagePreProcessingScaler,
                                   NormalizerMinMaxScaler, NormalizerStandardize)


@pytest.fixture
def tab(rng):
    x = (rng.standard_normal((37, 5)) * [1, 10, 0.1, 3, 1] + [0, 5, -2, 100, 0])
    x[:, 4] = 7.0  # a constant feature
    y = rng.standard_normal((37, 2)) * 4 + 1
    return x.astype(np.float32), y.astype(np.float32)


def std_ref(x, axis=0):
    mean = x.astype(np.float64).mean(axis=axis)
    std = x.astype(np.float64).std(axis=axis)
    return mean, std


def test_standardize_fit_on_iterator_equals_numpy(tab):
    x, y = tab
    it = ArrayDataSetIterator(x, y, 8)
    norm = NormalizerStandardize()
    norm.fit(it)
    mean, std = std_ref(x)
    np.testing.assert_allclose(norm.mean, mean, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(norm.std, std, rtol=1e-9, atol=1e-12)
    assert norm.std[4] == 0.0
    # the iterator is reset and ready; the fit on the whole DataSet agrees
    assert it.has_next()
    whole = NormalizerStandardize()
    whole.fit(DataSet(x, y))
    np.testing.assert_allclose(whole.mean, norm.mean, rtol=1e-12)
    np.testing.assert_allclose(whole.std, norm.std, rtol=1e-9)


def test_standardize_transform_and_revert(tab):
    x, y = tab
    norm = NormalizerStandardize()
    norm.fit(DataSet(x, y))
    ds = DataSet(x, y)
    feats = ds.features
    norm.transform(ds)
    assert ds.features is feats  # in place
    mean, std = std_ref(x)
    expected = ((x - mean.astype(np.float32))
                / np.maximum(std, EPS_THRESHOLD).astype(np.float32))
    np.testing.assert_allclose(ds.features.numpy(), expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(ds.features.numpy()[:, 4], 0.0)  # constant: no inf/nan
    out = ds.features.numpy()[:, :4]
    np.testing.assert_allclose(out.mean(axis=0), 0, atol=1e-5)
    np.testing.assert_allclose(out.std(axis=0), 1, rtol=1e-4)
    np.testing.assert_array_equal(ds.labels.numpy(), y)  # labels untouched by default
    norm.revert(ds)
    np.testing.assert_allclose(ds.features.numpy(), x, rtol=1e-5, atol=1e-4)


def test_standardize_fit_label(tab):
    x, y = tab
    norm = NormalizerStandardize(fit_label=True)
    norm.fit(ArrayDataSetIterator(x, y, 10))
    lmean, lstd = std_ref(y)
    np.testing.assert_allclose(norm.label_mean, lmean, rtol=1e-12)
    np.testing.assert_allclose(norm.label_std, lstd, rtol=1e-9)
    ds = DataSet(x, y)
    norm.pre_process(ds)
    np.testing.assert_allclose(ds.labels.numpy(), (y - lmean) / lstd, rtol=1e-5, atol=1e-5)
    # a network's regression output is reverted with revert_labels
    out = ndws.asarray(ds.labels.numpy())
    norm.revert_labels(out)
    np.testing.assert_allclose(out.numpy(), y, rtol=1e-5, atol=1e-5)
    norm.revert(ds)
    np.testing.assert_allclose(ds.labels.numpy(), y, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ds.features.numpy(), x, rtol=1e-5, atol=1e-4)
    no_labels = NormalizerStandardize(fit_label=True)
    with pytest.raises(ValueError, match="fit_label=True but a DataSet has no labels"):
        no_labels.fit(DataSet(x))


def test_minmax_transform_revert(tab):
    x, y = tab
    norm = NormalizerMinMaxScaler(-1, 3)
    norm.fit(ArrayDataSetIterator(x, y, 6))
    np.testing.assert_array_equal(norm.min, x.min(axis=0).astype(np.float64))
    np.testing.assert_array_equal(norm.max, x.max(axis=0).astype(np.float64))
    ds = DataSet(x, y)
    norm.transform(ds)
    lo, hi = x.min(axis=0).astype(np.float64), x.max(axis=0).astype(np.float64)
    expected = (x - lo) / np.maximum(hi - lo, EPS_THRESHOLD) * 4 - 1
    np.testing.assert_allclose(ds.features.numpy(), expected, rtol=1e-5, atol=1e-5)
    got = ds.features.numpy()
    np.testing.assert_allclose(got[:, :4].min(axis=0), -1, atol=1e-6)
    np.testing.assert_allclose(got[:, :4].max(axis=0), 3, atol=1e-5)
    np.testing.assert_array_equal(got[:, 4], -1.0)  # constant feature -> min_range
    norm.revert(ds)
    np.testing.assert_allclose(ds.features.numpy(), x, rtol=1e-5, atol=1e-4)


def test_minmax_fit_label_default_range(tab):
    x, y = tab
    norm = NormalizerMinMaxScaler(fit_label=True)
    norm.fit(DataSet(x, y))
    ds = DataSet(x, y)
    norm.transform(ds)
    lab = ds.labels.numpy()
    np.testing.assert_allclose(lab, (y - y.min(0)) / (y.max(0) - y.min(0)), rtol=1e-5,
                               atol=1e-6)
    norm.revert(ds)
    np.testing.assert_allclose(ds.labels.numpy(), y, rtol=1e-5, atol=1e-5)


def make_series(rng):
    """(4, 3, 6) time series with a (4, 6) mask of variable lengths; padding holds junk."""
    x = rng.standard_normal((4, 3, 6)).astype(np.float32) * [[1], [5], [0.5]] + [[0], [2], [9]]
    x = x.astype(np.float32)
    lengths = [6, 2, 4, 1]
    mask = np.zeros((4, 6), dtype=np.float32)
    for i, n in enumerate(lengths):
        mask[i, :n] = 1
        x[i, :, n:] = 1000.0  # must not enter the statistics
    return x, mask


def test_time_series_statistics_over_unmasked_steps(rng):
    x, mask = make_series(rng)
    y = rng.standard_normal((4, 2, 6)).astype(np.float32)
    valid = x.transpose(0, 2, 1)[mask != 0]  # (unmasked steps, features)
    for norm, ref in ((NormalizerStandardize(), None), (NormalizerMinMaxScaler(), None)):
        norm.fit(ListDataSetIterator([DataSet(x[:2], y[:2], mask[:2], mask[:2]),
                                      DataSet(x[2:], y[2:], mask[2:], mask[2:])]))
        if isinstance(norm, NormalizerStandardize):
            np.testing.assert_allclose(norm.mean, valid.astype(np.float64).mean(0), rtol=1e-12)
            np.testing.assert_allclose(norm.std, valid.astype(np.float64).std(0), rtol=1e-9)
        else:
            np.testing.assert_array_equal(norm.min, valid.min(0))
            np.testing.assert_array_equal(norm.max, valid.max(0))
        ds = DataSet(x, y, mask, mask)
        norm.transform(ds)
        got = ds.features.numpy()
        # masked steps are zeroed (DL4J); unmasked ones follow the formula
        m3 = mask[:, None, :] != 0
        np.testing.assert_array_equal(got[~np.broadcast_to(m3, got.shape)], 0)
        if isinstance(norm, NormalizerStandardize):
            exp = (x - norm.mean[None, :, None]) / norm.std[None, :, None]
        else:
            exp = (x - norm.min[None, :, None]) / (norm.max - norm.min)[None, :, None]
        sel = np.broadcast_to(m3, got.shape)
        np.testing.assert_allclose(got[sel], exp[sel], rtol=1e-5, atol=1e-5)
        norm.revert(ds)
        np.testing.assert_allclose(ds.features.numpy()[sel], x[sel], rtol=1e-5, atol=1e-4)


def test_images_per_channel_statistics(rng):
    x = (rng.standard_normal((5, 3, 4, 4)) * [[[1]], [[2]], [[3]]]).astype(np.float32)
    norm = NormalizerStandardize()
    norm.fit(DataSet(x, np.zeros((5, 1), np.float32)))
    np.testing.assert_allclose(norm.mean, x.astype(np.float64).mean(axis=(0, 2, 3)),
                               rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(norm.std, x.astype(np.float64).std(axis=(0, 2, 3)), rtol=1e-9)
    ds = DataSet(x, np.zeros((5, 1), np.float32))
    norm.transform(ds)
    np.testing.assert_allclose(
        ds.features.numpy(),
        (x - norm.mean[None, :, None, None]) / norm.std[None, :, None, None],
        rtol=1e-5, atol=1e-5)


def test_image_scaler(rng):
    pix = rng.integers(0, 256, (2, 1, 3, 3)).astype(np.uint8)
    s = ImagePreProcessingScaler()
    s.fit(DataSet(pix.astype(np.float32)))  # accepted, no statistics
    ds = DataSet(pix, np.ones((2, 1), np.float32))
    s.pre_process(ds)
    assert ds.features.dtype == np.float32  # integer pixels become float32
    np.testing.assert_allclose(ds.features.numpy(), pix / 255.0, rtol=1e-6)
    s.revert(ds)
    np.testing.assert_allclose(ds.features.numpy(), pix, rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(ds.labels.numpy(), 1.0)
    s2 = ImagePreProcessingScaler(-1, 1, max_bits=4)
    ds = DataSet(np.array([[0.0, 15.0, 5.0]], dtype=np.float64))
    s2.transform(ds)
    assert ds.features.dtype == np.float64
    np.testing.assert_allclose(ds.features.numpy(), [[-1.0, 1.0, 5 / 15 * 2 - 1]], rtol=1e-12)
    s2.revert(ds)
    np.testing.assert_allclose(ds.features.numpy(), [[0.0, 15.0, 5.0]], rtol=1e-12,
                               atol=1e-12)


def test_as_pre_processor_of_an_iterator(tab):
    x, y = tab
    it = ArrayDataSetIterator(x, y, 10)
    norm = NormalizerStandardize()
    norm.fit(it)
    it.pre_processor = norm
    got = np.concatenate([b.features.numpy() for b in it])
    mean, std = std_ref(x)
    np.testing.assert_allclose(got, (x - mean) / np.maximum(std, EPS_THRESHOLD), rtol=1e-5,
                               atol=1e-5)


def test_transform_inside_a_workspace_keeps_the_batch_there(tab):
    x, y = tab
    norm = NormalizerMinMaxScaler()
    norm.fit(DataSet(x, y))
    with ndws.workspace("NORM_WS"):
        ds = DataSet(x, y)
        norm.transform(ds)
        assert ds.features.workspace_id == "NORM_WS"
        kept = ds.copy().detach()
    with pytest.raises(ndws.WorkspaceError):
        norm.transform(ds)  # a stale batch is reported, not silently read
    assert not kept.features.is_attached()
    np.testing.assert_array_equal(kept.features.numpy()[:, 4], 0.0)


@pytest.mark.parametrize("make", [
    lambda: NormalizerStandardize(),
    lambda: NormalizerStandardize(fit_label=True),
    lambda: NormalizerMinMaxScaler(-2, 2, fit_label=True),
    lambda: ImagePreProcessingScaler(0.5, 1.0, max_bits=10),
])
def test_save_load_round_trip(tmp_path, tab, make):
    x, y = tab
    norm = make()
    norm.fit(DataSet(x, y))
    path = tmp_path / "stats.bin"
    norm.save(path)
    assert path.exists() and not (tmp_path / "stats.bin.tmp").exists()
    back = type(norm).load(path)
    assert vars(back).keys() == vars(norm).keys()
    for k, v in vars(norm).items():
        if isinstance(v, dict):
            assert v.keys() == vars(back)[k].keys()
            for name in v:
                np.testing.assert_array_equal(v[name], vars(back)[k][name])
        else:
            assert vars(back)[k] == v, k
    a, b = DataSet(x, y), DataSet(x, y)
    norm.transform(a)
    back.transform(b)
    assert a == b


def test_load_rejects_other_kinds_and_files(tmp_path, tab):
    x, y = tab
    norm = NormalizerStandardize()
    norm.fit(DataSet(x, y))
    norm.save(tmp_path / "s.npz")
    with pytest.raises(ValueError, match="holds a 'standardize' normalizer, not 'minmax'"):
        NormalizerMinMaxScaler.load(tmp_path / "s.npz")
    np.savez(tmp_path / "other.npz", a=np.zeros(2))
    with pytest.raises(ValueError, match=r"other.npz: not an ndws normalizer file, or not a "
                                         r"complete one \(meta.npy missing\)$"):
        NormalizerStandardize.load(tmp_path / "other.npz")


def test_errors(tab, rng):
    x, y = tab
    norm = NormalizerStandardize()
    with pytest.raises(RuntimeError, match="NormalizerStandardize has not been fitted: call "
                                           "fit\\(\\) or load\\(\\) first"):
        norm.transform(DataSet(x, y))
    with pytest.raises(TypeError, match="data must be a DataSet or a DataSetIterator, got "
                                        "ndarray"):
        norm.fit(x)
    with pytest.raises(TypeError, match="ds must be a DataSet, got ndarray"):
        norm.transform(x)
    norm.fit(DataSet(x, y))
    with pytest.raises(ValueError, match=r"features has 3 features \(axis 1 of shape "
                                         r"\(2, 3\)\), but the normalizer was fitted on 5"):
        norm.transform(DataSet(np.zeros((2, 3), np.float32)))
    with pytest.raises(ValueError, match="features of the DataSets have different numbers"):
        norm.fit(ListDataSetIterator([DataSet(x), DataSet(x[:, :3])]))
    with pytest.raises(TypeError, match="fit_label must be a bool"):
        NormalizerStandardize(fit_label=1)
    with pytest.raises(ValueError, match="min_range must be < max_range, got min_range=1, "
                                         "max_range=1"):
        NormalizerMinMaxScaler(1, 1)
    with pytest.raises(TypeError, match="max_range must be a number"):
        NormalizerMinMaxScaler(0, "1")
    with pytest.raises(ValueError, match=r"max_bits must be in \[1, 32\], got 0"):
        ImagePreProcessingScaler(max_bits=0)
    series = rng.standard_normal((2, 5, 3)).astype(np.float32)
    with pytest.raises(ValueError, match="data holds no \\(unmasked\\) examples to fit on"):
        NormalizerStandardize().fit(DataSet(series, None, np.zeros((2, 3), np.float32)))


def test_docstring_examples():
    result = doctest.testmod(ndws.data.normalizers)
    assert result.failed == 0 and result.attempted >= 10


# -- all or nothing ----------------------------------------------------------------------------

def _read_only(a):
    a = np.array(a)
    a.flags.writeable = False
    return ndws.from_numpy(a)


@pytest.mark.parametrize("make", [lambda: NormalizerStandardize(fit_label=True),
                                  lambda: NormalizerMinMaxScaler(fit_label=True)],
                         ids=["standardize", "minmax"])
@pytest.mark.parametrize("method", ["transform", "revert"])
def test_a_failure_on_the_labels_leaves_the_features_untouched(tab, make, method):
    x, y = tab
    norm = make()
    norm.fit(DataSet(x, y))
    ds = DataSet(ndws.array(x), _read_only(y))
    with pytest.raises(ValueError) as info:
        getattr(norm, method)(ds)
    assert str(info.value) == ("labels: the array is read-only, and the normalizer works in "
                               "place; pass a writable copy (e.g. ds.labels = ds.labels.copy())")
    np.testing.assert_array_equal(ds.features.numpy(), x)
    wrong = DataSet(ndws.array(x), ndws.array(y[:, :1]))      # labels of another width
    with pytest.raises(ValueError, match="^labels has 1 features"):
        getattr(norm, method)(wrong)
    np.testing.assert_array_equal(wrong.features.numpy(), x)


def test_a_stale_label_array_leaves_the_features_untouched(tab):
    x, y = tab
    norm = NormalizerStandardize(fit_label=True)
    norm.fit(DataSet(x, y))
    with ndws.workspace("NORM_STALE"):
        labels = ndws.array(y)
    ds = DataSet(ndws.array(x), labels)
    with pytest.raises(ndws.WorkspaceError) as info:
        norm.transform(ds)
    assert info.value.kind == "leaked" and info.value.op == "transform"
    np.testing.assert_array_equal(ds.features.numpy(), x)


@pytest.mark.parametrize("content, fragment", [
    (b"", "norm.npz: not an ndws normalizer file, or not a complete one"),
    (b"PK\x03\x04 truncated zip", "norm.npz: not an ndws normalizer file, or not a complete one"),
    (b"\x00\x01\x02 binary", "norm.npz: not an ndws normalizer file, or not a complete one"),
])
def test_load_of_files_that_are_not_normalizers(tmp_path, content, fragment):
    path = tmp_path / "norm.npz"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=fragment):
        NormalizerStandardize.load(path)


def test_load_of_a_truncated_normalizer_file_and_of_paths_that_are_not_files(tmp_path, tab):
    x, y = tab
    norm = NormalizerStandardize()
    norm.fit(DataSet(x, y))
    good = tmp_path / "good.npz"
    norm.save(good)
    data = good.read_bytes()
    cut = tmp_path / "cut.npz"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=r"cut.npz: not an ndws normalizer file, or not a "
                                         r"complete one"):
        NormalizerStandardize.load(cut)
    with pytest.raises(IsADirectoryError, match="is a directory, not a normalizer file"):
        NormalizerStandardize.load(tmp_path)
    with pytest.raises(FileNotFoundError):
        NormalizerStandardize.load(tmp_path / "missing.npz")
    assert NormalizerStandardize.load(good).mean.tolist() == norm.mean.tolist()


# -- files nobody vouches for -------------------------------------------------------------------

def _saved_entries(tmp_path, tab, norm):
    import zipfile
    x, y = tab
    norm.fit(DataSet(x, y))
    norm.save(tmp_path / "good.npz")
    with zipfile.ZipFile(tmp_path / "good.npz") as z:
        return {n: z.read(n) for n in z.namelist()}


def _npy(array):
    import io
    buf = io.BytesIO()
    np.save(buf, array)
    return buf.getvalue()


def _write_npz(path, entries):
    import zipfile
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for n, d in entries.items():
            z.writestr(n, d)


def _meta(kind="standardize", **params):
    import json
    return _npy(np.array(json.dumps({"format": "ndws-normalizer-1", "kind": kind,
                                     "params": params})))


@pytest.mark.parametrize("name, content, msg", [
    ("features_std.npy", _npy(np.ones(4)), r"features_std.npy: holds 4 features, "
                                           r"features_mean.npy holds 5$"),
    ("features_std.npy", _npy(np.ones((5, 1))), r"features_std.npy: holds float64 \(5, 1\), a "
                                                r"statistic is a \(n_features,\) float64 vector"),
    ("features_mean.npy", _npy(np.ones(5, np.float32)), r"features_mean.npy: holds float32"),
    ("features_mean.npy", _npy(np.ones(5))[:-8], r"features_mean.npy: the header says float64 "
                                                 r"\(5,\) \(40 bytes\), the entry holds 32 "),
    ("features_mean.npy", b"\x93NUMPY\x01\x00" + b"\x50\x00" + b"{" * 80,
     r"features_mean.npy: not an .npy array"),
    ("meta.npy", _npy(np.array(["a", "b"])), r"meta.npy: holds <U1 \(2,\), not one text"),
    ("meta.npy", _npy(np.array("x" * 70000)), r"meta.npy: holds <U70000 \(\), not one text of "
                                              r"at most 65536 characters"),
    ("meta.npy", _npy(np.zeros(3)), r"meta.npy: holds dtype float64, not text"),
    ("meta.npy", _npy(np.array("{not json")), r"meta.npy: not JSON text"),
    ("meta.npy", _npy(np.array("[1]")), r"meta.npy: expected a JSON object, got list"),
    ("meta.npy", _meta(fit_label="yes"), r"meta.npy: params: fit_label must be a bool"),
    ("meta.npy", _meta(fit_label=False, min_range=10**400), r"meta.npy: params: .*unexpected "
                                                            r"keyword argument 'min_range'"),
    ("meta.npy", _meta(fit_lable=True), r"meta.npy: params: .*unexpected keyword"),
    ("meta.npy", _npy(np.array('{"format": "ndws-normalizer-1", "kind": "standardize", '
                               '"params": [1]}')), r"meta.npy: params: expected a JSON object"),
    ("meta.npy", _npy(np.array("[" * 30000 + "]" * 30000)), r"meta.npy: not JSON text "
                                                            r"\(RecursionError"),
])
def test_load_names_the_file_and_the_entry(tmp_path, tab, name, content, msg):
    entries = _saved_entries(tmp_path, tab, NormalizerStandardize())
    entries[name] = content
    _write_npz(tmp_path / "bad.npz", entries)
    with pytest.raises(ValueError, match=r"bad.npz: " + msg):
        NormalizerStandardize.load(tmp_path / "bad.npz")


def test_load_of_fit_label_statistics_and_paths(tmp_path, tab):
    entries = _saved_entries(tmp_path, tab, NormalizerMinMaxScaler(fit_label=True))
    del entries["labels_max.npy"]
    _write_npz(tmp_path / "bad.npz", entries)
    with pytest.raises(ValueError, match=r"bad.npz: not an ndws normalizer file, or not a "
                                         r"complete one \(labels_max.npy missing\)$"):
        NormalizerMinMaxScaler.load(tmp_path / "bad.npz")
    with pytest.raises(TypeError, match=r"^path: expected a str or os.PathLike, got int$"):
        NormalizerMinMaxScaler.load(3)
    with pytest.raises(FileNotFoundError, match=r"^path: no such file"):
        NormalizerMinMaxScaler.load(tmp_path / "missing.npz")


def test_a_statistics_header_claiming_2_40_features_is_refused_before_allocating(tmp_path, tab):
    import io
    entries = _saved_entries(tmp_path, tab, NormalizerStandardize())
    for stat in ("mean", "std"):
        buf = io.BytesIO()
        np.lib.format.write_array_header_1_0(buf, {"descr": "<f8", "fortran_order": False,
                                                   "shape": (2**40,)})
        entries[f"features_{stat}.npy"] = buf.getvalue() + bytes(64)
    _write_npz(tmp_path / "bad.npz", entries)
    with pytest.raises(ValueError, match=r"bad.npz: features_mean.npy: the header says float64 "
                                         r"\(1099511627776,\) \(8796093022208 bytes\), the entry "
                                         r"holds 64 bytes of data$"):
        NormalizerStandardize.load(tmp_path / "bad.npz")


@pytest.mark.parametrize("params, msg", [
    ({"min_range": 10**400}, r"min_range must be finite, got 1000"),
    ({"max_range": -10**400}, r"max_range must be finite, got -1000"),
    ({"min_range": 2.0, "max_range": 1.0}, r"min_range must be < max_range"),
])
def test_minmax_settings_in_a_file_are_checked(tmp_path, tab, params, msg):
    entries = _saved_entries(tmp_path, tab, NormalizerMinMaxScaler())
    import json
    meta = {"format": "ndws-normalizer-1", "kind": "minmax",
            "params": {"min_range": 0.0, "max_range": 1.0, "fit_label": False, **params}}
    entries["meta.npy"] = _npy(np.array(json.dumps(meta)))
    _write_npz(tmp_path / "bad.npz", entries)
    with pytest.raises(ValueError, match=r"bad.npz: meta.npy: params: " + msg):
        NormalizerMinMaxScaler.load(tmp_path / "bad.npz")
