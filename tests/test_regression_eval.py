"""Tests for ndws.evaluation.regression (RegressionEvaluation) and ndws.evaluation._evaluate."""
from __future__ import annotations

import json
import math
import tracemalloc

import numpy as np
import pytest
from sklearn.metrics import mean_absolute_error, mean_squared_error, r2_score

import ndws
from ndws.evaluation import _regression_kernels as _k
from ndws.evaluation._evaluate import evaluate
from ndws.evaluation.regression import RegressionEvaluation, RegressionMetric

#: relative tolerance of the metrics against scikit-learn / NumPy (float64 accumulation; the
#: oracle computes in float64 from the same float32/float64 values)
RTOL = 1e-10
DTYPES = [np.float32, np.float64]


def _problem(rng, n, k, dtype_y=np.float64, dtype_p=np.float64, offset=0.0):
    y = (rng.normal(size=(n, k)) * rng.uniform(0.5, 3, size=k) + offset).astype(dtype_y)
    p = (y + rng.normal(size=(n, k)) * rng.uniform(0.1, 2, size=k)).astype(dtype_p)
    return y, p


def _check_parity(ev, y, p, rtol=RTOL):
    RTOL = rtol  # noqa: N806 (the tolerance of this call)
    y64, p64 = y.astype(np.float64), p.astype(np.float64)
    k = y.shape[1]
    np.testing.assert_allclose([ev.mean_squared_error(c) for c in range(k)],
                               mean_squared_error(y64, p64, multioutput="raw_values"), rtol=RTOL)
    np.testing.assert_allclose([ev.mean_absolute_error(c) for c in range(k)],
                               mean_absolute_error(y64, p64, multioutput="raw_values"), rtol=RTOL)
    np.testing.assert_allclose([ev.root_mean_squared_error(c) for c in range(k)],
                               np.sqrt(mean_squared_error(y64, p64, multioutput="raw_values")),
                               rtol=RTOL)
    r2 = r2_score(y64, p64, multioutput="raw_values")
    np.testing.assert_allclose([ev.r_squared(c) for c in range(k)], r2, rtol=RTOL)
    np.testing.assert_allclose([ev.relative_squared_error(c) for c in range(k)], 1 - r2,
                               rtol=1e-9)
    pc = [np.corrcoef(y64[:, c], p64[:, c])[0, 1] for c in range(k)]
    np.testing.assert_allclose([ev.pearson_correlation(c) for c in range(k)], pc, rtol=RTOL)
    assert ev.average_r_squared() == pytest.approx(r2_score(y64, p64), rel=RTOL)
    assert ev.average_mean_squared_error() == pytest.approx(mean_squared_error(y64, p64),
                                                            rel=RTOL)
    assert ev.average_mean_absolute_error() == pytest.approx(mean_absolute_error(y64, p64),
                                                             rel=RTOL)
    assert ev.average_pearson_correlation() == pytest.approx(np.mean(pc), rel=RTOL)


# -- scikit-learn parity -------------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("dy", DTYPES)
@pytest.mark.parametrize("dp", DTYPES)
def test_sklearn_parity_random_batches(seed, dy, dp):
    # every fused specialisation (float32/float64 labels x predictions) of the kernel
    rng = np.random.default_rng(seed)
    n, k = int(rng.integers(50, 700)), int(rng.integers(1, 7))
    y, p = _problem(rng, n, k, dy, dp)
    ev = RegressionEvaluation()
    cuts = np.sort(rng.integers(0, n, size=4))
    for a, b in zip(np.r_[0, cuts], np.r_[cuts, n]):
        ev.eval(y[a:b], p[a:b])
    assert ev.num_columns() == k
    assert ev.column_names == [f"col_{i}" for i in range(k)]
    np.testing.assert_array_equal(ev.example_count_per_column, np.full(k, n))
    _check_parity(ev, y, p)


def test_large_offset_keeps_its_digits(rng):
    # DL4J's raw sums of squares cancel here (mean 1e8, spread ~1); centred moments do not
    y, p = _problem(rng, 2000, 2, offset=1e8)
    ev = RegressionEvaluation(2)
    for i in range(0, 2000, 300):
        ev.eval(y[i:i + 300], p[i:i + 300])
    # y ~ 1e8 has an ulp of 1.5e-8 against a unit spread: both sides' centring differs there
    _check_parity(ev, y, p, rtol=1e-8)


def test_strided_and_negative_stride_views(rng):
    y, p = _problem(rng, 400, 6)
    yv, pv = y[::-3, ::2], np.asfortranarray(p)[::-3, ::2]
    ev = RegressionEvaluation()
    ev.eval(yv, pv)
    _check_parity(ev, yv, pv)


def test_one_dimensional_inputs_are_one_column(rng):
    y, p = _problem(rng, 100, 1)
    ev = RegressionEvaluation()
    ev.eval(y[:, 0], p[:, 0])
    assert ev.num_columns() == 1
    _check_parity(ev, y, p)


def test_integer_labels_are_converted(rng):
    y = rng.integers(0, 10, size=(50, 2))
    p = y + rng.normal(size=(50, 2))
    ev = RegressionEvaluation()
    ev.eval(y, p)
    _check_parity(ev, y.astype(np.float64), p)


def test_reference_values_by_hand():
    ev = RegressionEvaluation(["price"])
    ev.eval(np.array([[1.0], [2.0], [3.0]]), np.array([[1.5], [2.0], [2.5]]))
    assert ev.mean_squared_error(0) == pytest.approx(1 / 6)
    assert ev.mean_absolute_error(0) == pytest.approx(1 / 3)
    assert ev.root_mean_squared_error(0) == pytest.approx(math.sqrt(1 / 6))
    assert ev.relative_squared_error(0) == pytest.approx(0.25)
    assert ev.r_squared(0) == pytest.approx(0.75)
    assert ev.pearson_correlation(0) == pytest.approx(1.0)


def test_perfect_and_degenerate_columns():
    ev = RegressionEvaluation()
    y = np.array([[1.0, 5.0], [2.0, 5.0], [3.0, 5.0]])
    ev.eval(y, np.array([[1.0, 5.0], [2.0, 5.0], [3.0, 6.0]]))
    assert ev.r_squared(0) == 1.0 and ev.mean_squared_error(0) == 0.0
    # constant labels: Java's double division (DL4J): R2 = -1/0 = -inf, PC = 0/0 = NaN, RSE inf
    assert ev.r_squared(1) == -math.inf
    assert math.isnan(ev.pearson_correlation(1))
    assert ev.relative_squared_error(1) == math.inf
    text = ev.stats()
    assert "-Infinity" in text and "NaN" in text and "Infinity" in text


# -- masks ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("mdtype", [bool, np.float32, np.float64, np.int8, np.int32, np.int64,
                                    np.uint16])
def test_per_example_mask(seed, mdtype):
    rng = np.random.default_rng(seed)
    y, p = _problem(rng, 300, 3)
    keep = rng.random(300) < 0.6
    ev, ev_col = RegressionEvaluation(), RegressionEvaluation()
    ev.eval(y, p, keep.astype(mdtype))                       # (n,)
    ev_col.eval(y, p, keep.astype(mdtype)[:, None])          # (n, 1)
    for e in (ev, ev_col):
        _check_parity(e, y[keep], p[keep])


@pytest.mark.parametrize("seed", range(4))
def test_per_output_mask(seed):
    rng = np.random.default_rng(seed)
    y, p = _problem(rng, 400, 4)
    m = (rng.random((400, 4)) < 0.7).astype(np.float32)
    ev = RegressionEvaluation()
    ev.eval(y[:200], p[:200], m[:200])
    ev.eval(y[200:], p[200:], m[200:])
    np.testing.assert_array_equal(ev.example_count_per_column, m.sum(axis=0))
    for c in range(4):
        keep = m[:, c] != 0
        yc, pc = y[keep, c], p[keep, c]
        assert ev.mean_squared_error(c) == pytest.approx(mean_squared_error(yc, pc), rel=RTOL)
        assert ev.mean_absolute_error(c) == pytest.approx(mean_absolute_error(yc, pc), rel=RTOL)
        assert ev.r_squared(c) == pytest.approx(r2_score(yc, pc), rel=RTOL)
        assert ev.pearson_correlation(c) == pytest.approx(np.corrcoef(yc, pc)[0, 1], rel=RTOL)


def test_fully_masked_batch_is_a_no_op(rng):
    y, p = _problem(rng, 50, 2)
    ev = RegressionEvaluation()
    ev.eval(y, p, np.zeros(50))
    with pytest.raises(RuntimeError, match="^Cannot get mean squared error: no evaluation has "
                                           "been performed$"):
        ev.mean_squared_error(0)
    assert ev.stats() == "RegressionEvaluation: No Data"
    ev.eval(y, p)
    _check_parity(ev, y, p)


def test_nan_under_a_mask_is_ignored(rng):
    y, p = _problem(rng, 20, 1)
    p[3, 0] = np.nan
    keep = np.ones(20, bool)
    keep[3] = False
    ev = RegressionEvaluation()
    ev.eval(y, p, keep)
    _check_parity(ev, y[keep], p[keep])


# -- rank 3 and 4 ---------------------------------------------------------------------------------

def test_time_series_ncw_and_nwc_with_step_mask(rng):
    n, k, t = 8, 3, 11
    y = rng.normal(size=(n, k, t))
    p = y + rng.normal(size=(n, k, t))
    m = rng.random((n, t)) < 0.8
    ev = RegressionEvaluation()
    ev.eval(y, p, m)
    rows_y = y.transpose(0, 2, 1).reshape(-1, k)[m.reshape(-1)]
    rows_p = p.transpose(0, 2, 1).reshape(-1, k)[m.reshape(-1)]
    _check_parity(ev, rows_y, rows_p)
    nwc = RegressionEvaluation(axis=2)
    nwc.eval(y.transpose(0, 2, 1), p.transpose(0, 2, 1), m)
    _check_parity(nwc, rows_y, rows_p)


def test_rank4_per_pixel(rng):
    y = rng.normal(size=(3, 2, 4, 5)).astype(np.float32)
    p = y + rng.normal(size=(3, 2, 4, 5)).astype(np.float32)
    ev = RegressionEvaluation()
    ev.eval(y, p)
    _check_parity(ev, y.transpose(0, 2, 3, 1).reshape(-1, 2),
                  p.transpose(0, 2, 3, 1).reshape(-1, 2))


# -- merge, reset, serialisation ------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(5))
def test_merge_equals_one_shot(seed):
    rng = np.random.default_rng(seed)
    y, p = _problem(rng, 600, 3, offset=float(rng.normal() * 50))
    m = rng.random((600, 3)) < 0.8
    one = RegressionEvaluation()
    one.eval(y, p, m)
    parts = [RegressionEvaluation() for _ in range(3)]
    for i, ev in enumerate(parts):
        ev.eval(y[i * 200:(i + 1) * 200], p[i * 200:(i + 1) * 200], m[i * 200:(i + 1) * 200])
    merged = RegressionEvaluation()
    for ev in parts:
        merged.merge(ev)
    merged.merge(RegressionEvaluation())          # an empty evaluation changes nothing
    np.testing.assert_allclose(merged._state, one._state, rtol=1e-11, atol=1e-9)
    assert merged.stats() == one.stats()
    for metric in RegressionMetric:
        assert merged.score_for_metric(metric) == pytest.approx(one.score_for_metric(metric),
                                                                rel=1e-11)


def test_merge_errors_and_empty_copy(rng):
    y, p = _problem(rng, 30, 2)
    a = RegressionEvaluation(["a", "b"], precision=3)
    a.eval(y, p)
    empty = RegressionEvaluation()
    empty.merge(a)
    assert empty.column_names == ["a", "b"] and empty.precision == 3
    assert empty.stats() == a.stats()
    three = RegressionEvaluation()
    three.eval(np.zeros((2, 3)), np.ones((2, 3)))
    with pytest.raises(ValueError, match=r"^Cannot merge RegressionEvaluation instances with "
                                         r"different numbers of columns: 2 and 3$"):
        a.merge(three)
    with pytest.raises(TypeError, match="^other must be a RegressionEvaluation, got dict$"):
        a.merge({})


def test_reset_keeps_given_columns(rng):
    y, p = _problem(rng, 30, 2)
    ev = RegressionEvaluation(["x", "y"])
    ev.eval(y, p)
    ev.reset()
    assert ev.column_names == ["x", "y"]
    assert ev.stats() == "RegressionEvaluation: No Data"
    lazy = RegressionEvaluation()
    lazy.eval(y, p)
    lazy.reset()
    lazy.eval(np.zeros((3, 4)), np.ones((3, 4)))     # a fresh evaluation may change width
    assert lazy.num_columns() == 4


def test_dict_and_json_round_trip(rng):
    y, p = _problem(rng, 100, 3)
    ev = RegressionEvaluation(["a", "b", "c"], precision=7)
    ev.eval(y, p)
    back = RegressionEvaluation.from_json(ev.to_json())
    assert back.stats() == ev.stats()
    np.testing.assert_array_equal(back._state, ev._state)
    assert json.loads(ev.to_json())["@class"] == "RegressionEvaluation"
    back.eval(y, p)                          # a restored evaluation keeps accumulating
    ev.eval(y, p)
    assert back.stats() == ev.stats()
    fresh = RegressionEvaluation.from_dict(RegressionEvaluation().to_dict())
    assert fresh.num_columns() == 0
    with pytest.raises(ValueError, match="not a RegressionEvaluation dict"):
        RegressionEvaluation.from_dict({"@class": "ROC"})


# -- stats ----------------------------------------------------------------------------------------

def test_stats_layout_is_dl4js():
    ev = RegressionEvaluation(["price", "volume"], precision=3)
    ev.eval(np.array([[1.0, 2.0], [2.0, 4.0], [3.0, 7.0]]),
            np.array([[1.5, 2.0], [2.0, 5.0], [2.5, 6.0]]))
    lines = ev.stats().split("\n")
    # label width = longest name + 5; column width = precision + 10 (left-aligned, %-W.Pe)
    assert lines[0] == ("Column" + " " * 5 + "".join(f"{h:<13}" for h in
                                                      ("MSE", "MAE", "RMSE", "RSE", "PC", "R^2")))
    assert lines[1] == ("price      1.667e-01    3.333e-01    4.082e-01    2.500e-01    "
                        "1.000e+00    7.500e-01    ")
    assert lines[2].startswith("volume     6.667e-01    6.667e-01    ")
    assert lines[3] == "" and len(lines) == 4
    assert str(ev) == ev.stats()
    assert RegressionEvaluation().stats() == "RegressionEvaluation: No Data"


def test_score_for_metric_and_minimize(rng):
    y, p = _problem(rng, 80, 2)
    ev = RegressionEvaluation()
    ev.eval(y, p)
    assert ev.score_for_metric(RegressionEvaluation.Metric.R2) == ev.average_r_squared()
    assert ev.score_for_metric("MSE") == ev.average_mean_squared_error()
    assert ev.score_for_metric("RMSE") == ev.average_root_mean_squared_error()
    assert ev.score_for_metric("RSE") == ev.average_relative_squared_error()
    assert ev.score_for_metric("MAE") == ev.average_mean_absolute_error()
    assert ev.get_value(RegressionMetric.PC) == ev.average_pearson_correlation()
    assert [m.minimize() for m in RegressionMetric] == [True, True, True, True, False, False]
    with pytest.raises(ValueError, match="^Unknown metric: 'AUC'"):
        ev.score_for_metric("AUC")
    with pytest.raises(TypeError, match="^Can't get value for non-regression Metric 3$"):
        ev.score_for_metric(3)


# -- errors ---------------------------------------------------------------------------------------

def test_metrics_before_eval_raise():
    ev = RegressionEvaluation(3)
    for f, what in [(ev.mean_squared_error, "mean squared error"),
                    (ev.mean_absolute_error, "mean absolute error"),
                    (ev.root_mean_squared_error, "root mean squared error"),
                    (ev.relative_squared_error, "relative squared error"),
                    (ev.r_squared, "R\\^2"), (ev.pearson_correlation, "Pearson correlation")]:
        with pytest.raises(RuntimeError, match=f"^Cannot get {what}: no evaluation has been "
                                               f"performed$"):
            f(0)
    with pytest.raises(RuntimeError, match="^Cannot get R\\^2: no evaluation"):
        ev.average_r_squared()


def test_input_errors(rng):
    y, p = _problem(rng, 10, 2)
    ev = RegressionEvaluation(2)
    with pytest.raises(ValueError, match=r"^Labels and predictions must have the same shape: "
                                         r"got labels \(10, 2\) and predictions \(10, 3\)$"):
        ev.eval(y, np.zeros((10, 3)))
    with pytest.raises(ValueError, match=r"^RegressionEvaluation.eval: labels and predictions "
                                         r"have 3 columns, but this evaluation has 2"):
        ev.eval(np.zeros((4, 3)), np.zeros((4, 3)))
    with pytest.raises(ValueError, match=r"^mask of shape \(9,\) does not fit labels of shape "
                                         r"\(10, 2\)"):
        ev.eval(y, p, np.ones(9))
    with pytest.raises(TypeError, match="^predictions must be a real numeric array"):
        ev.eval(y, p.astype(complex))
    with pytest.raises(TypeError, match="^mask must be a numeric or bool array"):
        ev.eval(y, p, np.array(["a"] * 10))
    with pytest.raises(ValueError, match=r"^labels must have rank 1 to 4"):
        ev.eval(np.zeros((1, 2, 1, 1, 1)), np.zeros((1, 2, 1, 1, 1)))
    with pytest.raises(ValueError, match="^column must be an int in \\[0, 2\\), got 2$"):
        ev.eval(y, p)
        ev.mean_squared_error(2)
    with pytest.raises(TypeError, match="^columns must be None, an int or a sequence"):
        RegressionEvaluation("abc")
    with pytest.raises(ValueError, match="^precision must be a non-negative int"):
        RegressionEvaluation(precision=-1)


def test_nan_predictions_rejected_without_half_writing(rng):
    y, p = _problem(rng, 10, 2)
    ev = RegressionEvaluation()
    ev.eval(y, p)
    before = ev._state.copy()
    bad = p.copy()
    bad[[1, 4], 0] = np.nan
    bad[7, 1] = np.nan
    with pytest.raises(ValueError, match="^Cannot perform evaluation with NaNs present in "
                                         "predictions: 3 NaNs present in predictions INDArray$"):
        ev.eval(y, bad)
    np.testing.assert_array_equal(ev._state, before)


def test_scratch_shape_is_checked():
    with pytest.raises(ValueError, match=r"^scratch must have shape \(8, 2\), got \(8, 3\)$"):
        _k.batch_moments(np.zeros((2, 2)), np.zeros((2, 2)), None, 0, 1, np.zeros((8, 3)))


# -- NDArray inputs -------------------------------------------------------------------------------

def test_ndarray_inputs_and_stale_arrays(rng):
    y, p = _problem(rng, 64, 2)
    ev = RegressionEvaluation()
    ev.eval(ndws.array(y), ndws.array(p.astype(np.float32)), ndws.array(np.ones(64)))
    _check_parity(ev, y, p.astype(np.float32))
    with ndws.workspace("EVAL_REG"):
        stale = ndws.array(p)
        stale_mask = ndws.ones(64)
    for args, role in [((stale, p), "labels"), ((y, stale), "predictions"),
                       ((y, p, stale_mask), "mask")]:
        with pytest.raises(ndws.WorkspaceError, match=rf"Op \[RegressionEvaluation.eval\] "
                                                      rf"{role} argument"):
            ev.eval(*args)


def test_steady_stream_allocates_nothing_batch_sized(rng):
    y, p = _problem(rng, 4096, 4, np.float32, np.float32)
    ev = RegressionEvaluation()
    ev.eval(y, p)
    tracemalloc.start()
    try:
        for _ in range(20):
            ev.eval(y, p, None)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < y.nbytes // 8, peak      # a batch is 64 KiB; views and ints only


# -- evaluate() -----------------------------------------------------------------------------------

class _DataSet:
    def __init__(self, features, labels, labels_mask=None):
        self.features, self.labels, self.labels_mask = features, labels, labels_mask


class _Iterator:
    def __init__(self, batches):
        self.batches, self.resets = batches, 0

    def reset(self):
        self.resets += 1

    def __iter__(self):
        return iter(self.batches)


def test_evaluate_pairs_and_datasets(rng):
    w = rng.normal(size=(5, 2))
    x = rng.normal(size=(300, 5))
    y = x @ w + rng.normal(size=(300, 2)) * 0.1
    predict = lambda f: np.asarray(f) @ w                        # noqa: E731
    ev = evaluate(predict, [(x[i:i + 64], y[i:i + 64]) for i in range(0, 300, 64)],
                  RegressionEvaluation())
    assert isinstance(ev, RegressionEvaluation)
    _check_parity(ev, y, x @ w)
    mask = rng.random(300) < 0.5
    it = _Iterator([_DataSet(x[i:i + 100], y[i:i + 100], mask[i:i + 100])
                    for i in range(0, 300, 100)])
    a, b = evaluate(predict, it, RegressionEvaluation(), RegressionEvaluation(2))
    assert it.resets == 1
    for e in (a, b):
        _check_parity(e, y[mask], (x @ w)[mask])


def test_evaluate_duck_typed_and_errors(rng):
    seen = []

    class Counter:
        def eval(self, labels, predictions, mask=None):
            seen.append((np.shape(labels), np.shape(predictions), mask))

    out = evaluate(lambda f: f * 2, [(np.ones((3, 1)), np.zeros((3, 1)))] * 2, Counter(),
                   Counter())
    assert isinstance(out, tuple) and len(out) == 2
    assert seen == [((3, 1), (3, 1), None)] * 4
    with pytest.raises(ValueError, match="^evaluate needs at least one evaluation$"):
        evaluate(lambda f: f, [])
    with pytest.raises(TypeError, match="^evaluations must have an eval"):
        evaluate(lambda f: f, [], object())
    with pytest.raises(TypeError, match="^batch 0 of the iterator must be a"):
        evaluate(lambda f: f, [3], Counter())


def test_all_lists_names():
    from ndws.evaluation import _evaluate, regression
    assert regression.__all__ == ["RegressionEvaluation", "RegressionMetric"]
    assert _evaluate.__all__ == ["evaluate"]


@pytest.mark.parametrize("seed", range(3))
def test_rank3_across_row_blocks_with_per_output_mask(seed):
    # 40 x 17 = 680 (example, step) rows: several 256-row kernel blocks whose boundaries fall
    # inside a sequence, strided (transposed) inputs, and a per-output mask
    rng = np.random.default_rng(seed)
    y = rng.normal(size=(40, 17, 3)).transpose(0, 2, 1)          # (n, k, T) view
    p = (y + rng.normal(size=y.shape)).astype(np.float32)
    m = rng.random(y.shape) < 0.75
    ev = RegressionEvaluation()
    ev.eval(y, p, m)
    rows_y = y.transpose(0, 2, 1).reshape(-1, 3)
    rows_p = p.transpose(0, 2, 1).reshape(-1, 3)
    rows_m = m.transpose(0, 2, 1).reshape(-1, 3)
    for c in range(3):
        keep = rows_m[:, c]
        yc, pc = rows_y[keep, c], rows_p[keep, c].astype(np.float64)
        assert ev.example_count_per_column[c] == keep.sum()
        assert ev.mean_squared_error(c) == pytest.approx(mean_squared_error(yc, pc), rel=RTOL)
        assert ev.mean_absolute_error(c) == pytest.approx(mean_absolute_error(yc, pc), rel=RTOL)
        assert ev.r_squared(c) == pytest.approx(r2_score(yc, pc), rel=RTOL)
        assert ev.pearson_correlation(c) == pytest.approx(np.corrcoef(yc, pc)[0, 1], rel=RTOL)


def test_module_docstring_examples():
    import doctest

    from ndws.evaluation import regression
    assert doctest.testmod(regression).failed == 0
