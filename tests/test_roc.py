"""ROC, ROCBinary and ROCMultiClass (reference 7.2, 7.3): ND4J's test cases, scikit-learn parity,
histogram vs exact, merge == one-shot, masks, NDArray inputs, allocation, plots."""
from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from sklearn.metrics import auc as sk_auc
from sklearn.metrics import precision_recall_curve, roc_auc_score, roc_curve

import ndws
from ndws import WorkspaceError
from ndws.evaluation import _roc_kernels
from ndws.evaluation.roc import (ROC, PrecisionRecallCurve, ROCBinary, ROCMetric, ROCMultiClass,
                                 RocCurve)

SEEDS = [0, 1, 2, 3, 4, 5]


def problem(seed, n=1000, ties=False, dtype=np.float64, pos_rate=0.3):
    """Random binary problem: labels (n,) of 0/1 and informative probabilities (n,)."""
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < pos_rate).astype(np.int64)
    y[:2] = [0, 1]   # both classes present
    p = np.clip(rng.normal(0.4 + 0.25 * y, 0.2), 0.0, 1.0)
    if ties:
        p = np.round(p, 2)
    return y, p.astype(dtype)


def rocbasic_inputs():
    # ROCTest.testRocBasic: 5 negatives then 5 positives, p1 = 0.001, 0.101, ..., 0.901
    p1 = np.arange(10) / 10 + 0.001
    y = np.array([0] * 5 + [1] * 5)
    return np.stack([1 - y, y], axis=1).astype(np.float64), np.stack([1 - p1, p1], axis=1)


# ------------------------------------------------------------------------------------------------
# reference cases


def test_roc_basic_histogram():
    labels, preds = rocbasic_inputs()
    roc = ROC(10)
    roc.eval(labels, preds)
    curve = roc.roc_curve()
    assert isinstance(curve, RocCurve)
    assert len(curve) == 11
    np.testing.assert_allclose(curve.thresholds, np.arange(11) / 10)
    np.testing.assert_allclose(curve.tpr, [1, 1, 1, 1, 1, 1, 0.8, 0.6, 0.4, 0.2, 0])
    np.testing.assert_allclose(curve.fpr, [1, 0.8, 0.6, 0.4, 0.2, 0, 0, 0, 0, 0, 0])
    np.testing.assert_array_equal(curve.tp, [5, 5, 5, 5, 5, 5, 4, 3, 2, 1, 0])
    np.testing.assert_array_equal(curve.fn, [0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5])
    assert roc.calculate_auc() == 1.0
    assert roc.count_actual_positive == 5 and roc.count_actual_negative == 5


def test_roc_basic_exact_with_redundant_point_removal():
    labels, preds = rocbasic_inputs()
    roc = ROC()
    roc.eval(labels, preds)
    assert roc.calculate_auc() == 1.0
    curve = roc.roc_curve()
    # the vertical run to (0, 1) and the horizontal run to (1, 1) collapse to their ends
    np.testing.assert_array_equal(curve.thresholds, [1.0, 0.501, 0.0])
    np.testing.assert_array_equal(curve.fpr, [0, 0, 1])
    np.testing.assert_array_equal(curve.tpr, [0, 1, 1])
    full = ROC(remove_redundant_points=False)
    full.eval(labels, preds)
    assert len(full.roc_curve()) == 12      # 10 distinct probabilities + 2 edge points
    assert full.calculate_auc() == 1.0


@pytest.mark.parametrize("steps", [0, 10])
def test_auprc_reference(steps):
    # ROCTest.testAUCPrecisionRecall
    roc = ROC(steps)
    roc.eval(np.array([[1], [1], [0]]), np.array([[0.33], [0.66], [0.25]]))
    assert roc.calculate_auprc() == pytest.approx(1.0, abs=1e-12)
    roc = ROC(steps)
    roc.eval(np.array([[1], [1], [0]]), np.array([[0.33], [0.66], [0.5]]))
    tol = 1e-8 if steps == 0 else 1e-4
    assert abs(roc.calculate_auprc() - 0.7916666667) < tol
    assert roc.precision_recall_curve().calculate_auprc() == pytest.approx(
        roc.calculate_auprc(), abs=1e-12)


def test_precision_recall_curve_exact_points_and_counts():
    roc = ROC()
    roc.eval(np.array([1, 1, 0]), np.array([0.33, 0.66, 0.5]))
    pr = roc.precision_recall_curve()
    assert isinstance(pr, PrecisionRecallCurve)
    # ascending thresholds: end edge (0.0), 0.33, 0.5, 0.66, start edge (1.0)
    np.testing.assert_allclose(pr.thresholds, [0.0, 0.33, 0.5, 0.66, 1.0])
    np.testing.assert_allclose(pr.precision, [2 / 3, 2 / 3, 0.5, 1.0, 1.0])
    np.testing.assert_allclose(pr.recall, [1.0, 1.0, 0.5, 0.5, 0.0])
    np.testing.assert_array_equal(pr.tp, [2, 2, 1, 1, 0])
    np.testing.assert_array_equal(pr.fp, [1, 1, 1, 0, 0])
    np.testing.assert_array_equal(pr.fn, [0, 0, 1, 1, 2])
    assert pr.total_count == 3


def test_histogram_pr_edge_rules():
    # precision 1 where nothing is predicted positive; at t = 1.0 nothing is, even p = 1.0
    roc = ROC(4)
    roc.eval(np.array([1, 0, 1]), np.array([1.0, 0.5, 0.25]))
    pr = roc.precision_recall_curve()
    np.testing.assert_allclose(pr.thresholds, [0, 0.25, 0.5, 0.75, 1.0])
    np.testing.assert_array_equal(pr.tp, [2, 2, 1, 1, 0])
    np.testing.assert_array_equal(pr.fp, [1, 1, 1, 0, 0])
    np.testing.assert_allclose(pr.precision, [2 / 3, 2 / 3, 0.5, 1.0, 1.0])
    np.testing.assert_allclose(pr.recall, [1, 1, 0.5, 0.5, 0])
    only_negatives = ROC(4)
    only_negatives.eval(np.array([0, 0]), np.array([0.1, 0.9]))
    np.testing.assert_array_equal(only_negatives.precision_recall_curve().recall, np.ones(5))


# ------------------------------------------------------------------------------------------------
# scikit-learn parity


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_exact_auc_and_curves_match_sklearn(seed, ties, dtype):
    y, p = problem(seed, n=700 + 100 * seed, ties=ties, dtype=dtype)
    roc = ROC(remove_redundant_points=False)
    roc.eval(y.reshape(-1, 1), p.reshape(-1, 1))
    assert roc.calculate_auc() == pytest.approx(roc_auc_score(y, p), rel=1e-12)
    # roc_curve: sklearn starts at threshold inf where we put the 1.0 edge, and ends at the
    # lowest score where we add the (1, 1) edge at 0.0; ties give one point in both
    fpr, tpr, thr = roc_curve(y, p, drop_intermediate=False)
    curve = roc.roc_curve()
    np.testing.assert_allclose(curve.fpr[:-1], fpr, rtol=1e-12)
    np.testing.assert_allclose(curve.tpr[:-1], tpr, rtol=1e-12)
    np.testing.assert_array_equal(curve.thresholds[1:-1], thr[1:].astype(np.float64))
    # precision_recall_curve: our interior points (ascending) are sklearn's but its last one
    prec, rec, pthr = precision_recall_curve(y, p, drop_intermediate=False)
    pr = roc.precision_recall_curve()
    np.testing.assert_allclose(pr.precision[1:-1], prec[:-1], rtol=1e-12)
    np.testing.assert_allclose(pr.recall[1:-1], rec[:-1], rtol=1e-12)
    np.testing.assert_array_equal(pr.thresholds[1:-1], pthr.astype(np.float64))
    # AUPRC is the trapezoid over those points (ND4J); sklearn's average_precision_score is a
    # step sum and differs, so the oracle is sklearn's curve integrated with sklearn.metrics.auc
    assert roc.calculate_auprc() == pytest.approx(sk_auc(rec, prec), rel=1e-12)


@pytest.mark.parametrize("seed", SEEDS[:3])
def test_redundant_removal_keeps_areas(seed):
    y, p = problem(seed, ties=True)
    a, b = ROC(), ROC(remove_redundant_points=False)
    for r in (a, b):
        r.eval(y, p)
    assert len(a.roc_curve()) < len(b.roc_curve())
    assert a.roc_curve().calculate_auc() == pytest.approx(b.calculate_auc(), rel=1e-12)
    assert a.calculate_auc() == pytest.approx(a.roc_curve().calculate_auc(), rel=1e-12)
    assert a.calculate_auprc() == pytest.approx(
        a.precision_recall_curve().calculate_auprc(), rel=1e-12)


@pytest.mark.parametrize("seed", SEEDS[:3])
def test_histogram_close_to_exact_for_fine_steps(seed):
    y, p = problem(seed, n=3000)
    exact, hist = ROC(), ROC(2000)
    exact.eval(y, p)
    hist.eval(y, p)
    assert abs(hist.calculate_auc() - exact.calculate_auc()) < 2e-3
    assert abs(hist.calculate_auprc() - exact.calculate_auprc()) < 5e-3


@pytest.mark.parametrize("seed", SEEDS[:3])
@pytest.mark.parametrize("k", [1, 3, 10, 37])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_histogram_counts_match_numpy_oracle(seed, k, dtype):
    # probabilities on and around the thresholds i/k, and the ends of [0, 1]; float32
    # predictions are compared with the thresholds in float32 (so float32(0.7) >= 0.7 holds)
    rng = np.random.default_rng(seed)
    n = 500
    p = np.concatenate([rng.integers(0, k + 1, n) / k, rng.random(n),
                        [0.0, 1.0, np.nextafter(1.0, 0), 5e-324]]).astype(dtype)
    y = rng.integers(0, 2, len(p))
    roc = ROC(k)
    roc.eval(y, p)
    thr = np.arange(k + 1) / k
    pred_pos = (p[None, :] >= thr.astype(dtype)[:, None]) & (thr[:, None] < 1.0)
    curve = roc.roc_curve()
    np.testing.assert_array_equal(curve.tp, (pred_pos & (y == 1)).sum(axis=1))
    np.testing.assert_array_equal(curve.fp, (pred_pos & (y == 0)).sum(axis=1))
    np.testing.assert_array_equal(curve.thresholds, thr)


# ------------------------------------------------------------------------------------------------
# merge, batches, masks, dtypes, strides


@pytest.mark.parametrize("steps", [0, 20])
@pytest.mark.parametrize("seed", SEEDS[:3])
def test_merge_and_batches_equal_one_shot(steps, seed):
    y, p = problem(seed, n=2500, ties=True)
    one = ROC(steps)
    one.eval(y, p)
    rng = np.random.default_rng(seed)
    cuts = np.sort(rng.choice(np.arange(1, len(y)), 4, replace=False))
    parts = []
    for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, len(y)]):
        r = ROC(steps, exact_alloc_block_size=7)    # tiny blocks: many regrowths
        r.eval(y[lo:hi], p[lo:hi])
        parts.append(r)
    merged = parts[-1]
    for r in parts[:-1]:
        merged.merge(r)
    batched = ROC(steps, exact_alloc_block_size=16)
    for lo in range(0, len(y), 300):
        batched.eval(y[lo:lo + 300], p[lo:lo + 300])
    for r in (merged, batched):
        assert r.calculate_auc() == one.calculate_auc()
        assert r.calculate_auprc() == one.calculate_auprc()
        for a, b in ((r.roc_curve(), one.roc_curve()),):
            np.testing.assert_array_equal(a.thresholds, b.thresholds)
            np.testing.assert_array_equal(a.tp, b.tp)
            np.testing.assert_array_equal(a.fp, b.fp)
        np.testing.assert_array_equal(r.precision_recall_curve().precision,
                                      one.precision_recall_curve().precision)


def test_eval_after_metrics_invalidates_cache():
    roc = ROC()
    roc.eval(np.array([1, 0]), np.array([0.9, 0.1]))
    assert roc.calculate_auc() == 1.0
    roc.eval(np.array([1, 0]), np.array([0.1, 0.9]))
    assert roc.calculate_auc() == 0.5


def test_merge_rejects_different_steps():
    a, b = ROC(0), ROC(10)
    with pytest.raises(ValueError, match=r"^Cannot merge ROC instances with different numbers "
                                         r"of threshold steps$"):
        a.merge(b)
    with pytest.raises(ValueError, match="different numbers of threshold steps"):
        ROCBinary(5).merge(ROCBinary(6))
    with pytest.raises(TypeError):
        ROCBinary().merge(ROCMultiClass())


def test_buffer_grows_in_blocks():
    roc = ROC(exact_alloc_block_size=100)
    roc.eval(np.array([1, 0, 1]), np.array([0.5, 0.2, 0.7]))
    assert len(roc._pos) == len(roc._neg) == 100        # one block covers a small batch
    roc.eval(np.ones(250), np.full(250, 0.3))
    assert len(roc._pos) >= 253                          # a batch larger than a block
    y, p = problem(0, n=5000)
    big = ROC()
    big.eval(y, p)
    assert len(big._pos) == 5000                         # max(2048, batch)


@pytest.mark.parametrize("steps", [0, 10])
def test_per_example_masks(steps):
    y, p = problem(7, n=400)
    rng = np.random.default_rng(7)
    keep = rng.random(400) < 0.6
    expected = ROC(steps)
    expected.eval(y[keep], p[keep])
    for mask in (keep, keep.astype(np.float32), keep.reshape(-1, 1).astype(np.int32)):
        r = ROC(steps)
        r.eval(y, p, mask=mask)
        assert r.calculate_auc() == expected.calculate_auc()
        assert r.num_examples == keep.sum()
    fully = ROC(steps)
    fully.eval(y, p, mask=np.zeros(400))
    with pytest.raises(RuntimeError, match="no evaluation has been performed"):
        fully.calculate_auc()


def test_roc_rejects_per_output_mask_and_bad_shapes():
    labels, preds = rocbasic_inputs()
    with pytest.raises(ValueError, match="^Per-output masking for ROC is not supported$"):
        ROC().eval(labels, preds, mask=np.ones((10, 2)))
    with pytest.raises(ValueError, match="same shape"):
        ROC().eval(labels, preds[:, :1])
    with pytest.raises(ValueError, match="3 columns"):
        ROC().eval(np.eye(3), np.eye(3))
    with pytest.raises(ValueError, match="mask must have shape"):
        ROC().eval(labels, preds, mask=np.ones(9))
    with pytest.raises(ValueError, match=r"labels must be \(n_samples, n_columns\), \(batch, "
                                         r"n_columns, time\) or \(batch, n_columns, h, w\)"):
        ROC().eval(np.ones((2, 2, 2, 2, 2)), np.ones((2, 2, 2, 2, 2)))
    with pytest.raises(TypeError, match="numeric"):
        ROC().eval(np.array(["a"]), np.array(["b"]))
    with pytest.raises(ValueError, match="threshold_steps"):
        ROC(-1)


@pytest.mark.parametrize("steps", [0, 10])
def test_nan_predictions_rejected_with_count(steps):
    roc = ROC(steps)
    p = np.array([[0.1, 0.9], [np.nan, np.nan], [0.5, np.nan]], dtype=np.float32)
    with pytest.raises(ValueError, match=r"^Cannot perform evaluation with NaNs present in "
                                         r"predictions: 3 NaNs present in predictions INDArray$"):
        roc.eval(np.array([[0, 1], [1, 0], [1, 0]]), p)
    assert roc.num_examples == 0          # nothing half-counted


@pytest.mark.parametrize("what, call", [
    ("Unable to calculate AUC", lambda r: r.calculate_auc()),
    ("Unable to calculate AUPRC", lambda r: r.calculate_auprc()),
    ("Unable to get ROC curve", lambda r: r.roc_curve()),
    ("Unable to get precision recall curve", lambda r: r.precision_recall_curve()),
])
@pytest.mark.parametrize("steps", [0, 10])
def test_metrics_before_eval(what, call, steps):
    with pytest.raises(RuntimeError, match=rf"^{what}: no evaluation has been performed "
                                           rf"\(no examples\)$"):
        call(ROC(steps))


def test_label_and_prediction_dtypes_and_strides():
    y, p = problem(3, n=300)
    ref = ROC()
    ref.eval(y, p)
    expected = ref.calculate_auc()
    for ldt in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
                np.uint64, np.bool_, np.float32, np.float64, np.float16):
        r = ROC()
        r.eval(y.astype(ldt), p)
        assert r.calculate_auc() == expected, ldt
    # one-hot columns of a Fortran-ordered array, reversed rows, a column of a wider array
    two = np.asfortranarray(np.stack([1 - p, p], axis=1))
    r = ROC()
    r.eval(np.stack([1 - y, y], axis=1), two)
    assert r.calculate_auc() == expected
    r = ROC()
    r.eval(y[::-1].reshape(-1, 1), p[::-1].reshape(-1, 1))
    assert r.calculate_auc() == expected
    wide = np.zeros((300, 5))
    wide[:, 3] = p
    r = ROC()
    r.eval(y[:, None], wide[:, 3:4])
    assert r.calculate_auc() == expected
    # float32 predictions through the F32 read (same values as their float64 widening)
    p32 = p.astype(np.float32)
    a, b = ROC(), ROC()
    a.eval(y, p32)
    b.eval(y, p32.astype(np.float64))
    assert a.calculate_auc() == b.calculate_auc()
    assert a.calculate_auc() == pytest.approx(roc_auc_score(y, p32), rel=1e-12)


def test_empty_batch_is_noop():
    roc = ROC()
    roc.eval(np.zeros((0, 1)), np.zeros((0, 1)))
    assert roc.num_examples == 0


def test_single_class_gives_nan():
    roc = ROC()
    roc.eval(np.ones(3), np.array([0.2, 0.5, 0.9]))
    assert np.isnan(roc.calculate_auc())
    assert roc.calculate_auprc() == 1.0
    neg = ROC()
    neg.eval(np.zeros(3), np.array([0.2, 0.5, 0.9]))
    assert np.isnan(neg.calculate_auc()) and np.isnan(neg.calculate_auprc())


def test_score_for_metric_and_stats():
    labels, preds = rocbasic_inputs()
    roc = ROC()
    roc.eval(labels, preds)
    assert roc.score_for_metric(ROC.Metric.AUROC) == roc.calculate_auc()
    assert roc.score_for_metric("auprc") == roc.calculate_auprc()
    text = roc.stats()
    assert "AUC (Area under ROC Curve):" in text and "1.000000" in text
    assert "no evaluation" in ROC().stats()


# ------------------------------------------------------------------------------------------------
# kernels directly


def test_kernel_argument_checks():
    buf = np.empty(2)
    x = np.ones((3, 1))
    with pytest.raises(ValueError, match="too small"):
        _roc_kernels.append_exact(x, x, None, 0, 0, buf, 0, buf, 0)
    with pytest.raises(TypeError, match="2-D numpy.ndarray"):
        _roc_kernels.count_nans(np.ones(3))
    with pytest.raises(ValueError, match="out of range"):
        _roc_kernels.append_exact(x, x, None, 1, 0, np.empty(9), 0, np.empty(9), 0)
    with pytest.raises(ValueError, match="rows"):
        _roc_kernels.append_exact(x, np.ones((2, 1)), None, 0, 0, np.empty(9), 0, np.empty(9), 0)
    thr, tp, fp = _roc_kernels.exact_points(np.array([0.2, 0.5, 0.5]), np.array([0.5, 0.7]))
    np.testing.assert_array_equal(thr, [0.7, 0.5, 0.2])
    np.testing.assert_array_equal(tp, [0, 2, 3])
    np.testing.assert_array_equal(fp, [1, 2, 2])
    assert _roc_kernels.count_nans(np.array([[np.nan, 1.0]], dtype=np.float32)) == 1
    assert _roc_kernels.count_nans(np.array([[1, 2]])) == 0


# ------------------------------------------------------------------------------------------------
# ROCBinary, ROCMultiClass


@pytest.mark.parametrize("steps", [0, 50])
@pytest.mark.parametrize("seed", SEEDS[:4])
def test_rocbinary_per_column_with_per_output_mask(steps, seed):
    rng = np.random.default_rng(seed)
    n, c = 600, 4
    y = (rng.random((n, c)) < 0.4).astype(np.float32)
    p = np.clip(rng.normal(0.4 + 0.2 * y, 0.25), 0, 1).astype(np.float32)
    m = (rng.random((n, c)) < 0.8).astype(np.float64)
    rb = ROCBinary(steps)
    rb.eval(y, p, mask=m)
    assert rb.num_labels() == c
    for j in range(c):
        keep = m[:, j] != 0
        single = ROC(steps)
        single.eval(y[keep, j], p[keep, j])
        assert rb.calculate_auc(j) == single.calculate_auc()
        assert rb.calculate_auprc(j) == single.calculate_auprc()
        assert rb.count_actual_positive(j) == (y[keep, j] == 1).sum()
        if steps == 0:
            assert rb.calculate_auc(j) == pytest.approx(roc_auc_score(y[keep, j], p[keep, j]),
                                                        rel=1e-12)
    assert rb.calculate_average_auc() == pytest.approx(
        np.mean([rb.calculate_auc(j) for j in range(c)]), rel=1e-15)
    assert rb.calculate_average_auprc() == pytest.approx(
        np.mean([rb.calculate_auprc(j) for j in range(c)]), rel=1e-15)
    assert rb.score_for_metric(ROCMetric.AUROC) == rb.calculate_average_auc()
    # a per-example mask applies to every column; merge == one-shot
    row_mask = m[:, 0]
    a, b, one = ROCBinary(steps), ROCBinary(steps), ROCBinary(steps)
    a.eval(y[:250], p[:250], mask=row_mask[:250])
    b.eval(y[250:], p[250:], mask=row_mask[250:, None])
    one.eval(y, p, mask=row_mask)
    a.merge(b)
    for j in range(c):
        assert a.calculate_auc(j) == one.calculate_auc(j)
    assert "Average AUC" in one.stats()


def test_rocbinary_column_count_must_not_change():
    rb = ROCBinary()
    rb.eval(np.ones((3, 2)), np.ones((3, 2)) * 0.5)
    with pytest.raises(ValueError, match=r"^ROCBinary.eval: labels have 3 columns, but this "
                                         r"ROCBinary has 2 \(from its first batch\)"):
        rb.eval(np.ones((3, 3)), np.ones((3, 3)))
    with pytest.raises(RuntimeError, match="no evaluation has been performed"):
        ROCBinary().calculate_average_auc()


@pytest.mark.parametrize("steps", [0, 100])
@pytest.mark.parametrize("seed", SEEDS[:4])
def test_rocmulticlass_one_vs_all_matches_sklearn(steps, seed):
    rng = np.random.default_rng(seed)
    n, c = 800, 5
    actual = rng.integers(0, c, n)
    logits = rng.normal(size=(n, c)) + 1.5 * np.eye(c)[actual]
    prob = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    onehot = np.eye(c)[actual]
    rm = ROCMultiClass(steps)
    for lo in range(0, n, 128):
        rm.eval(onehot[lo:lo + 128], prob[lo:lo + 128])
    per_class = [rm.calculate_auc(i) for i in range(c)]
    if steps == 0:
        np.testing.assert_allclose(per_class, roc_auc_score(onehot, prob, average=None),
                                   rtol=1e-12)
        assert rm.calculate_average_auc() == pytest.approx(
            roc_auc_score(onehot, prob, average="macro"), rel=1e-12)
    else:
        exact = ROCMultiClass()
        exact.eval(onehot, prob)
        assert abs(rm.calculate_average_auc() - exact.calculate_average_auc()) < 5e-3
    assert rm.calculate_average_auprc() == pytest.approx(
        np.mean([rm.calculate_auprc(i) for i in range(c)]), rel=1e-15)


def test_rocmulticlass_rejections():
    rm = ROCMultiClass()
    with pytest.raises(ValueError, match="^Per-output masking for ROCMultiClass is not "
                                         "supported$"):
        rm.eval(np.eye(3), np.eye(3), mask=np.ones((3, 3)))
    rm.eval(np.eye(3), np.eye(3) * 0.8 + 0.1, mask=np.array([1, 0, 1]))
    assert rm.count_actual_positive(1) == 0 and rm.count_actual_negative(1) == 2
    with pytest.raises(ValueError, match=r"^ROCMultiClass.eval: labels have 4 columns, but "
                                         r"this ROCMultiClass has 3"):
        rm.eval(np.eye(4), np.eye(4))
    with pytest.raises(ValueError, match="needs one column per class"):
        ROCMultiClass().eval(np.ones((2, 1)), np.ones((2, 1)))


# ------------------------------------------------------------------------------------------------
# NDArray inputs, allocation


def test_ndarray_inputs_and_stale_arrays():
    y, p = problem(11, n=200)
    expected = ROC()
    expected.eval(y, p)
    roc = ROC()
    roc.eval(ndws.array(y.astype(np.float64).reshape(-1, 1)), ndws.array(p.reshape(-1, 1)),
             mask=ndws.ones(200))
    assert roc.calculate_auc() == expected.calculate_auc()
    ws = ndws.workspace("WS_ROC_TEST")
    with ws:
        labels = ndws.array(y.astype(np.float64))
        preds = ndws.array(p)
        inside = ROC(10)
        inside.eval(labels, preds)        # valid inside its cycle
    with ws:
        for role, args in (("labels", (labels, p)), ("predictions", (y, preds))):
            with pytest.raises(WorkspaceError, match=rf"Op \[ROC.eval\] {role} argument uses "
                                                     r"outdated workspace pointer"):
                ROC().eval(*args)
        with pytest.raises(WorkspaceError, match=r"Op \[ROCBinary.eval\] predictions"):
            ROCBinary().eval(y, preds)
    assert inside.num_examples == 200


@pytest.mark.parametrize("steps", [0, 100])
def test_steady_stream_of_batches_allocates_nothing(steps):
    rng = np.random.default_rng(1)
    batch = 4096
    y = rng.integers(0, 2, (batch, 1)).astype(np.float32)
    p = rng.random((batch, 1)).astype(np.float32)
    roc = ROC(steps)
    roc.eval(y, p)
    if steps == 0:   # room for the stream, as a long-running accumulation reaches
        roc._pos = roc._grow(roc._pos, roc._n_pos, 20 * batch)
        roc._neg = roc._grow(roc._neg, roc._n_neg, 20 * batch)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        for _ in range(20):
            roc.eval(y, p)
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    # a batch-sized temporary would be >= 4096 * 4 bytes; only small Python objects remain
    assert peak < 4096, peak
    assert roc.num_examples == 21 * batch


# ------------------------------------------------------------------------------------------------
# plots


def test_plots_to_png(tmp_path):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    y, p = problem(2, n=300)
    roc = ROC()
    roc.eval(y, p)
    ax = roc.plot()
    assert isinstance(ax, matplotlib.axes.Axes)
    assert "AUC = " in ax.get_legend().get_texts()[0].get_text()
    np.testing.assert_array_equal(ax.lines[0].get_xdata(), roc.roc_curve().fpr)
    ax.figure.savefig(tmp_path / "roc.png")
    fig, axes = plt.subplots(1, 2)
    assert roc.plot_precision_recall(ax=axes[0]) is axes[0]
    rb = ROCBinary(20)
    rb.eval(np.stack([y, 1 - y], 1), np.stack([p, 1 - p], 1))
    rb.set_label_names(["a", "b"])
    assert rb.plot(ax=axes[1]) is axes[1]
    assert len(axes[1].get_legend().get_texts()) == 2
    fig.savefig(tmp_path / "both.png")
    rb.plot_precision_recall()
    for name in ("roc.png", "both.png"):
        assert (tmp_path / name).stat().st_size > 1000
    plt.close("all")


def test_docstring_examples_and_all():
    import doctest

    import ndws.evaluation.roc as roc_module
    result = doctest.testmod(roc_module)
    assert result.attempted >= 2 and result.failed == 0
    for name in roc_module.__all__:
        assert hasattr(roc_module, name)


# ------------------------------------------------------------------------------------------------
# Time series (batch, columns, time) and per-pixel (batch, columns, h, w) input: every step or
# pixel is one example, read in place


def _flatten_steps(x):
    """(batch, columns, *rest) -> (batch * prod(rest), columns), the oracle's 2-D form."""
    return np.moveaxis(x, 1, -1).reshape(-1, x.shape[1])


@pytest.mark.parametrize("rest", [(5,), (3, 4)])
@pytest.mark.parametrize("cls, n_cols", [(ROC, 2), (ROCBinary, 3), (ROCMultiClass, 4)])
def test_rank_3_and_4_inputs_equal_the_flattened_2d_evaluation(rest, cls, n_cols):
    rng = np.random.default_rng(7)
    shape = (6, n_cols) + rest
    if cls is ROCBinary:
        labels = (rng.random(shape) < 0.5).astype(np.float32)
    else:
        idx = rng.integers(0, n_cols, (6,) + rest)
        labels = np.moveaxis(np.eye(n_cols, dtype=np.float32)[idx], -1, 1)
    preds = rng.random(shape).astype(np.float32)
    mask = (rng.random((6,) + rest) < 0.7).astype(np.float32)
    got = cls()
    got.eval(labels, preds, mask)
    want = cls()
    keep = mask.reshape(-1) > 0
    want.eval(_flatten_steps(labels)[keep], _flatten_steps(preds)[keep])
    if cls is ROC:
        assert got.num_examples == want.num_examples == keep.sum()
        assert got.calculate_auc() == want.calculate_auc()
    else:
        for j in range(n_cols):
            assert got.calculate_auc(j) == want.calculate_auc(j)
            assert got.count_actual_positive(j) == want.count_actual_positive(j)


def test_rank_3_masks_are_checked_and_nan_rejects_the_whole_batch():
    labels = np.zeros((2, 2, 3), np.float32)
    labels[:, 1] = 1
    preds = np.full((2, 2, 3), 0.5, np.float32)
    roc = ROC()
    with pytest.raises(ValueError, match=r"^ROC.eval: mask must have shape \(2, 3\), "
                                         r"\(2, 1, 3\) or \(2, 2, 3\), got \(2, 4\)$"):
        roc.eval(labels, preds, np.ones((2, 4)))
    preds[1, 1, 2] = np.nan
    with pytest.raises(ValueError, match="NaNs present in predictions"):
        roc.eval(labels, preds)
    assert roc.num_examples == 0


@pytest.mark.parametrize("bad", [-0.5, 1.5, -np.inf, np.inf, 1.0000001])
@pytest.mark.parametrize("make, op", [(lambda: ROC(10), "ROC.eval"),
                                      (lambda: ROCBinary(10), "ROCBinary.eval"),
                                      (lambda: ROCMultiClass(10), "ROCMultiClass.eval")])
def test_histogram_mode_refuses_scores_outside_0_1(make, op, bad):
    # they used to fall outside every bin: an AUC of 0.0 where exact mode gives 1.0
    roc = make()
    labels = np.array([[1, 0], [0, 1], [1, 0]])
    preds = np.array([[0.9, 0.1], [0.2, bad], [0.7, 0.3]])
    column = 1
    if op == "ROC.eval":
        labels, preds, column = labels[:, 1], preds[:, 1], 0   # one column
    with pytest.raises(ValueError) as info:
        roc.eval(labels, preds)
    assert str(info.value) == (f"{op}: histogram mode (threshold_steps=10) counts probabilities "
                               f"in [0, 1], got {float(bad)!r} in column {column}; use exact mode "
                               f"(threshold_steps=0) for scores outside [0, 1]")
    if op == "ROC.eval":
        assert roc.num_examples == 0
    else:
        assert roc.num_labels() == 0
    exact = ROC(0)                            # exact mode ranks any score, as scikit-learn
    exact.eval(np.array([0, 1, 0]), np.array([-3.0, 7.5, 0.2]))
    assert exact.calculate_auc() == 1.0


def test_histogram_range_check_ignores_masked_rows():
    roc = ROC(4)
    roc.eval(np.array([1, 0, 1]), np.array([0.9, 42.0, 0.6]), mask=np.array([1, 0, 1]))
    assert roc.num_examples == 2
