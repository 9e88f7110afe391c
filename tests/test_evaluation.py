"""Evaluation (DL4J's ``Evaluation``): DL4J's test cases, scikit-learn parity, masks, ranks 3/4,
merging, serialisation, NDArray inputs, no per-batch allocation, plotting."""
from __future__ import annotations

import json
import math
import tracemalloc

import numpy as np
import pytest
from sklearn.metrics import (accuracy_score, confusion_matrix, matthews_corrcoef,
                             precision_recall_fscore_support)

import ndws
from ndws.evaluation import _counting
from ndws.evaluation.classification import Evaluation, Metric

SEEDS = [0, 1, 2, 3, 4, 5]


def one_hot(y: np.ndarray, c: int, dtype=np.float64) -> np.ndarray:
    return np.eye(c, dtype=dtype)[y]


def random_problem(seed: int, n: int = 500, c: int = 5, dtype=np.float64):
    """Skewed random classes (some rare) and noisy softmax-ish scores."""
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.full(c, 0.7))
    y = rng.choice(c, size=n, p=p)
    scores = rng.random((n, c)) + 0.8 * one_hot(y, c) * rng.random((n, 1))
    return y, one_hot(y, c, dtype), scores.astype(dtype)


# -- reference cases --------------------------------------------------------------------------

def binary_case():
    """EvalTest.testBinaryCase: 10 TP, 3 FN, 4 FP, 2 TN."""
    actual = [1] * 10 + [1] * 3 + [0] * 4 + [0] * 2
    predicted = [1] * 10 + [0] * 3 + [1] * 4 + [0] * 2
    return np.array(actual), np.array(predicted)


@pytest.mark.parametrize("layout", ["single", "two", "index"])
def test_binary_case(layout):
    actual, predicted = binary_case()
    ev = Evaluation(2) if layout == "index" else Evaluation()
    if layout == "single":
        ev.eval(actual[:, None].astype(np.float64), np.where(predicted, 0.9, 0.1)[:, None])
    elif layout == "two":
        ev.eval(one_hot(actual, 2), one_hot(predicted, 2) * 0.8 + 0.1)
    else:
        for p, a in zip(predicted, actual):
            ev.eval_index(int(p), int(a))
    assert ev.num_row_counter == 19
    assert ev.accuracy() == pytest.approx(12 / 19)
    assert ev.true_positives() == {0: 2, 1: 10}
    assert ev.false_negatives() == {0: 4, 1: 3}
    assert ev.false_positives() == {0: 3, 1: 4}
    assert ev.true_negatives() == {0: 10, 1: 2}
    assert ev.get_confusion_matrix().tolist() == [[2, 4], [3, 10]]
    # the no-argument accessors report binary_positive_class (1)
    assert ev.precision() == pytest.approx(10 / 14)
    assert ev.recall() == pytest.approx(10 / 13)
    assert ev.f1() == pytest.approx(2 * 10 / (2 * 10 + 4 + 3))
    assert ev.false_positive_rate() == pytest.approx(4 / 6)
    assert ev.false_negative_rate() == pytest.approx(3 / 13)
    assert ev.false_alarm_rate() == pytest.approx((4 / 6 + 3 / 13) / 2)
    assert ev.matthews_correlation(1) == pytest.approx(
        (10 * 2 - 4 * 3) / math.sqrt(14 * 13 * 6 * 5))


def test_binary_positive_class_none_and_zero():
    actual, predicted = binary_case()
    ev0 = Evaluation(binary_positive_class=0)
    evn = Evaluation(binary_positive_class=None)
    for ev in (ev0, evn):
        ev.eval(one_hot(actual, 2), one_hot(predicted, 2))
    # class 0 is the mirror image: tp 2, fp 3, fn 4, tn 10
    assert ev0.precision() == pytest.approx(2 / 5)
    assert ev0.recall() == pytest.approx(2 / 6)
    assert evn.precision() == pytest.approx((2 / 5 + 10 / 14) / 2)
    assert evn.recall() == pytest.approx((2 / 6 + 10 / 13) / 2)
    # explicit averaging for F-beta with 2 classes: class 1's value (ND4J's special case)
    assert evn.f1(averaging="macro") == pytest.approx(evn.f1(1))
    assert evn.f1(averaging="micro") == pytest.approx(evn.f1(1))
    assert "macro-averaged (equally weighted avg. of 2 classes)" in evn.stats()
    assert "reported for positive class (class 0) only" in ev0.stats()


def test_single_column_threshold():
    labels = np.array([[1.0], [1.0], [0.0], [0.0]])
    preds = np.array([[0.7], [0.4], [0.45], [0.2]])
    ev = Evaluation()
    ev.eval(labels, preds)
    assert ev.get_confusion_matrix().tolist() == [[2, 0], [1, 1]]
    ev = Evaluation(binary_decision_threshold=0.3)
    ev.eval(labels, preds)
    assert ev.get_confusion_matrix().tolist() == [[1, 1], [0, 2]]
    # strictly greater: p == threshold is negative
    ev = Evaluation()
    ev.eval(np.array([[1.0]]), np.array([[0.5]]))
    assert ev.get_confusion_matrix().tolist() == [[0, 0], [1, 0]]


def test_two_column_threshold_and_cost_array():
    labels = one_hot(np.array([0, 1, 1, 0]), 2)
    preds = np.array([[0.62, 0.38], [0.6, 0.4], [0.2, 0.8], [0.9, 0.1]])
    ev = Evaluation(binary_decision_threshold=0.35)
    ev.eval(labels, preds)
    assert ev.get_confusion_matrix().tolist() == [[1, 1], [0, 2]]
    ev3 = Evaluation(binary_decision_threshold=0.35)
    with pytest.raises(ValueError, match="Binary decision threshold can only be used"):
        ev3.eval(one_hot(np.array([0, 1, 2]), 3), np.full((3, 3), 1 / 3))
    # cost array: argmax(p * cost)
    y = np.array([0, 1, 2, 2])
    p = np.array([[0.5, 0.3, 0.2], [0.4, 0.35, 0.25], [0.4, 0.25, 0.35], [0.1, 0.1, 0.8]])
    cost = np.array([1.0, 2.0, 1.5])
    ev = Evaluation(cost_array=cost)
    ev.eval(one_hot(y, 3), p)
    expected = confusion_matrix(y, np.argmax(p * cost, axis=1), labels=range(3))
    np.testing.assert_array_equal(ev.get_confusion_matrix(), expected)
    with pytest.raises(ValueError, match="cost_array has 2 entries for 3 classes"):
        Evaluation(cost_array=[1.0, 2.0]).eval(one_hot(y, 3), p)
    for text in (["1", "2"], [1.0, None]):      # NumPy would read '1' and make None a NaN
        with pytest.raises(TypeError, match=r"^cost_array must be numbers, one per class"):
            Evaluation(cost_array=text)


def test_argmax_ties_take_the_first_maximum():
    ev = Evaluation()
    ev.eval(np.array([[0.5, 0.5, 0.0]]), np.array([[0.2, 0.4, 0.4]]))
    assert ev.get_confusion_matrix()[0, 1] == 1


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("top_n", [2, 3])
def test_top_n(seed, top_n):
    y, L, P = random_problem(seed, n=300, c=6)
    ev = Evaluation(top_n=top_n)
    ev.eval(L, P)
    true_p = P[np.arange(len(y)), y]
    expected = np.mean((P > true_p[:, None]).sum(axis=1) < top_n)
    assert ev.top_n_accuracy() == pytest.approx(expected)
    assert ev.top_n_total_count == len(y)
    assert ev.accuracy() == pytest.approx(np.mean(P.argmax(1) == y))
    assert f"Top {top_n} Accuracy:" in ev.stats()
    ev1 = Evaluation(top_n=1)
    ev1.eval(L, P)
    assert ev1.top_n_accuracy() == ev1.accuracy()
    evb = Evaluation(top_n=2)
    evb.eval(np.array([[1.0], [0.0]]), np.array([[0.9], [0.2]]))
    assert evb.top_n_accuracy() == 0.0   # nothing top-N counted for a single column


# -- scikit-learn parity ----------------------------------------------------------------------

@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("c", [3, 7])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sklearn_parity(seed, c, dtype):
    y, L, P = random_problem(seed * 31 + c, n=400, c=c, dtype=dtype)
    # make one class never predicted and, for some seeds, one never present
    P[:, c - 1] = -1.0
    if seed % 2:
        keep = y != 0
        y, L, P = y[keep], L[keep], P[keep]
    pred = P.argmax(axis=1)
    ev = Evaluation(c)
    ev.eval(L, P)
    labels = list(range(c))
    np.testing.assert_array_equal(ev.get_confusion_matrix(),
                                  confusion_matrix(y, pred, labels=labels))
    assert ev.accuracy() == pytest.approx(accuracy_score(y, pred), rel=1e-12)
    prec, rec, f1, support = precision_recall_fscore_support(
        y, pred, labels=labels, zero_division=0)
    for i in range(c):
        assert ev.precision(i) == pytest.approx(prec[i], rel=1e-12)
        assert ev.recall(i) == pytest.approx(rec[i], rel=1e-12)
        assert ev.f1(i) == pytest.approx(f1[i], rel=1e-12)
        assert ev.class_count(i) == support[i]
        # per-class MCC is the binary one-vs-rest coefficient
        yt, yp = (y == i), (pred == i)
        if yt.any() and yp.any() and not yt.all() and not yp.all():
            assert ev.matthews_correlation(i) == pytest.approx(matthews_corrcoef(yt, yp))
        else:
            assert math.isnan(ev.matthews_correlation(i))
    # macro: the mean over the classes that are not edge cases
    predicted_any = np.isin(labels, pred)
    present = np.isin(labels, y)
    assert ev.average_precision_num_classes_excluded() == int((~predicted_any).sum())
    assert ev.average_recall_num_classes_excluded() == int((~present).sum())
    assert ev.average_f1_num_classes_excluded() == int((~(predicted_any & present)).sum())
    assert ev.precision(averaging="macro") == pytest.approx(prec[predicted_any].mean())
    assert ev.recall(averaging="macro") == pytest.approx(rec[present].mean())
    assert ev.f1(averaging="macro") == pytest.approx(f1[predicted_any & present].mean())
    assert ev.precision() == ev.precision(averaging="macro")
    # micro: summed counts; precision = recall = F1 = accuracy for single-label problems
    for avg in ("precision", "recall", "f1"):
        p_, r_, f_, _ = precision_recall_fscore_support(y, pred, labels=labels,
                                                        average="micro")
        expected = {"precision": p_, "recall": r_, "f1": f_}[avg]
        assert getattr(ev, avg)(averaging="micro") == pytest.approx(expected)
    assert ev.false_negative_rate(averaging="micro") == pytest.approx(1 - ev.accuracy())


@pytest.mark.parametrize("seed", SEEDS)
def test_binary_mcc_matches_sklearn(seed):
    y, L, P = random_problem(seed, n=300, c=2)
    ev = Evaluation()
    ev.eval(L, P)
    pred = P.argmax(1)
    assert ev.matthews_correlation(1) == pytest.approx(matthews_corrcoef(y, pred))
    assert ev.matthews_correlation(0) == pytest.approx(matthews_corrcoef(y, pred))
    assert ev.score_for_metric(Metric.MCC) == pytest.approx(matthews_corrcoef(y, pred))


def test_rates_g_measure_and_averages():
    y = np.array([0, 0, 1, 1, 2, 2, 2, 0])
    pred = np.array([0, 1, 1, 1, 2, 0, 2, 0])
    ev = Evaluation(3)
    ev.eval(one_hot(y, 3), one_hot(pred, 3))
    cm = confusion_matrix(y, pred)
    tp = np.diag(cm)
    fp = cm.sum(0) - tp
    fn = cm.sum(1) - tp
    tn = cm.sum() - tp - fp - fn
    fpr, fnr = fp / (fp + tn), fn / (fn + tp)
    prec, rec = tp / (tp + fp), tp / (tp + fn)
    for i in range(3):
        assert ev.false_positive_rate(i) == pytest.approx(fpr[i])
        assert ev.false_negative_rate(i) == pytest.approx(fnr[i])
        assert ev.g_measure(i) == pytest.approx(math.sqrt(prec[i] * rec[i]))
        assert ev.false_alarm_rate(i) == pytest.approx((fpr[i] + fnr[i]) / 2)
    assert ev.false_positive_rate(averaging="macro") == pytest.approx(fpr.mean())
    assert ev.false_negative_rate(averaging="macro") == pytest.approx(fnr.mean())
    assert ev.false_positive_rate(averaging="micro") == pytest.approx(fp.sum() / (fp + tn).sum())
    # docs/porting-from-dl4j.md: micro FNR uses (fn, tp), not ND4J's (fn, tn)
    assert ev.false_negative_rate(averaging="micro") == pytest.approx(fn.sum() / (fn + tp).sum())
    assert ev.g_measure() == pytest.approx(np.sqrt(prec * rec).mean())
    micro_p = tp.sum() / (tp + fp).sum()
    micro_r = tp.sum() / (tp + fn).sum()
    assert ev.g_measure(averaging="micro") == pytest.approx(math.sqrt(micro_p * micro_r))
    assert ev.false_alarm_rate() == pytest.approx((fpr.mean() + fnr.mean()) / 2)
    assert ev.f_beta(2.0, 0) == pytest.approx(5 * prec[0] * rec[0] / (4 * prec[0] + rec[0]))
    mcc = [(tp[i] * tn[i] - fp[i] * fn[i]) / math.sqrt(
        (tp[i] + fp[i]) * (tp[i] + fn[i]) * (tn[i] + fp[i]) * (tn[i] + fn[i])) for i in range(3)]
    assert ev.matthews_correlation() == pytest.approx(np.mean(mcc))
    assert ev.matthews_correlation(averaging="micro") == pytest.approx(
        (tp.sum() * tn.sum() - fp.sum() * fn.sum()) / math.sqrt(
            (tp.sum() + fp.sum()) * (tp.sum() + fn.sum()) * (tn.sum() + fp.sum())
            * (tn.sum() + fn.sum())))
    assert ev.score_for_metric(Metric.ACCURACY) == ev.accuracy()
    assert ev.score_for_metric(Metric.F1) == ev.f1()
    assert ev.score_for_metric(Metric.PRECISION) == ev.precision()
    assert ev.score_for_metric(Metric.RECALL) == ev.recall()
    assert ev.score_for_metric(Metric.GMEASURE) == ev.g_measure(averaging="macro")
    with pytest.raises(ValueError, match="averaging must be 'macro' or 'micro'"):
        ev.precision(averaging="weighted")


def test_edge_values():
    ev = Evaluation(3)
    ev.eval(one_hot(np.array([0, 0]), 3), one_hot(np.array([0, 1]), 3))
    # class 2: never predicted, never present
    assert ev.precision(2) == 0.0
    assert ev.precision(2, edge_case=-7.0) == -7.0
    assert ev.recall(2, edge_case=0.5) == 0.5
    assert ev.f1(2) == 0.0
    assert ev.f1(1) == 0.0           # precision 0 -> F 0
    assert math.isnan(ev.matthews_correlation(2))
    assert ev.average_precision_num_classes_excluded() == 1
    assert ev.average_recall_num_classes_excluded() == 2
    assert "(1 class excluded from average)" in ev.stats()
    assert "(2 classes excluded from average)" in ev.stats()
    assert "Warning: 2 classes were never present in the labels" in ev.stats()


# -- input handling ---------------------------------------------------------------------------

def test_errors_before_eval():
    ev = Evaluation()
    for name, call in [("accuracy", ev.accuracy), ("precision", ev.precision),
                       ("recall", ev.recall), ("fBeta", ev.f1),
                       ("matthewsCorrelation", ev.matthews_correlation),
                       ("false positive rate", ev.false_positive_rate),
                       ("top N accuracy", ev.top_n_accuracy)]:
        with pytest.raises(RuntimeError,
                           match=f"^Cannot get {name}: no evaluation has been performed$"):
            call()
    assert ev.stats() == "Evaluation: No data available (no evaluation has been performed)"
    with pytest.raises(RuntimeError, match="Cannot evaluate single example"):
        ev.eval_index(0, 1)
    ev2 = Evaluation(3)
    with pytest.raises(RuntimeError, match="Cannot get accuracy"):
        ev2.accuracy()
    with pytest.raises(ValueError, match=r"actual=3 is not a class index in \[0, 3\)"):
        ev2.eval_index(0, 3)


def test_shape_mismatch_and_class_count():
    ev = Evaluation()
    with pytest.raises(ValueError, match=r"^Unable to evaluate. Predictions and labels arrays "
                       r"are not same shape. Predictions shape: \[4, 3\], Labels shape: \[4, 2\]$"):
        ev.eval(np.zeros((4, 2)), np.zeros((4, 3)))
    ev.eval(one_hot(np.array([0, 1]), 3), one_hot(np.array([0, 1]), 3))
    with pytest.raises(ValueError, match="labels have 4 columns but this Evaluation has 3"):
        ev.eval(np.eye(4), np.eye(4))
    with pytest.raises(ValueError, match="does not match the 2 labels"):
        Evaluation(3, labels=["a", "b"])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_nan_predictions_rejected_and_nothing_counted(dtype):
    ev = Evaluation()
    L = one_hot(np.array([0, 1, 2, 0]), 3)
    ev.eval(L, L.astype(dtype))
    before = ev.to_dict()
    P = np.full((4, 3), 0.3, dtype=dtype)
    P[1, 2] = P[3, 0] = P[3, 1] = np.nan
    with pytest.raises(ValueError, match=r"^Cannot perform evaluation with NaNs present in "
                       r"predictions: 3 NaNs present in predictions INDArray$"):
        ev.eval(L, P)
    assert ev.to_dict() == before
    # NaNs in masked-out rows do not count; single column is checked too
    ev.eval(L, P, mask=np.array([1, 0, 1, 0]))
    assert ev.num_row_counter == 6
    with pytest.raises(ValueError, match=": 1 NaNs present"):
        Evaluation().eval(np.ones((2, 1)), np.array([[0.2], [np.nan]], dtype=dtype))


@pytest.mark.parametrize("mask_dtype", [np.bool_, np.int8, np.uint8, np.int32, np.int64,
                                        np.float32, np.float64, np.int16])
def test_mask_rank2(mask_dtype):
    y, L, P = random_problem(3, n=200, c=4)
    m = (np.random.default_rng(1).random(200) > 0.3)
    ev = Evaluation()
    ev.eval(L, P, mask=m.astype(mask_dtype))
    ref = Evaluation()
    ref.eval(L[m], P[m])
    assert ev.to_dict() == ref.to_dict()
    ev2 = Evaluation()
    ev2.eval(L, P, mask=m.astype(mask_dtype)[:, None])
    assert ev2.to_dict() == ref.to_dict()


def test_per_output_mask_rejected_and_full_mask_noop():
    y, L, P = random_problem(4, n=20, c=3)
    ev = Evaluation()
    with pytest.raises(ValueError, match="^Per-output masking for Evaluation is not supported$"):
        ev.eval(L, P, mask=np.ones_like(L))
    with pytest.raises(ValueError, match="^Per-output masking for Evaluation is not supported$"):
        ev.eval(np.zeros((2, 3, 4)), np.zeros((2, 3, 4)), mask=np.ones((2, 3, 4)))
    with pytest.raises(ValueError, match=r"mask shape \(7,\) does not fit"):
        ev.eval(L, P, mask=np.ones(7))
    ev.eval(L, P, mask=np.zeros(20))
    assert ev.num_row_counter == 0
    assert ev.get_confusion_matrix().sum() == 0


def test_rank3_time_series_with_mask():
    rng = np.random.default_rng(7)
    b, c, t = 6, 4, 9
    y = rng.integers(0, c, (b, t))
    L = np.eye(c)[y].transpose(0, 2, 1)            # (b, c, t)
    P = rng.random((b, c, t))
    m = (rng.random((b, t)) > 0.25).astype(np.float32)
    ev = Evaluation()
    ev.eval(L, P, mask=m)
    flatL, flatP = L.transpose(0, 2, 1).reshape(-1, c), P.transpose(0, 2, 1).reshape(-1, c)
    keep = m.reshape(-1) != 0
    ref = Evaluation()
    ref.eval(flatL[keep], flatP[keep])
    assert ev.to_dict() == ref.to_dict()
    assert ev.num_row_counter == int(keep.sum())
    ev3 = Evaluation()
    ev3.eval(L, P, mask=m[:, None, :])
    assert ev3.to_dict() == ref.to_dict()


def test_rank4_per_pixel_with_mask():
    rng = np.random.default_rng(8)
    b, c, h, w = 3, 5, 4, 6
    y = rng.integers(0, c, (b, h, w))
    L = np.eye(c)[y].transpose(0, 3, 1, 2)          # (b, c, h, w)
    P = rng.random((b, c, h, w)).astype(np.float32)
    ev = Evaluation()
    ev.eval(L, P)
    ref = Evaluation()
    ref.eval(L.transpose(0, 2, 3, 1).reshape(-1, c), P.transpose(0, 2, 3, 1).reshape(-1, c))
    assert ev.to_dict() == ref.to_dict()
    m = rng.random((b, h, w)) > 0.5
    ev = Evaluation()
    ev.eval(L, P, mask=m[:, None])
    keep = m.reshape(-1)
    ref = Evaluation()
    ref.eval(L.transpose(0, 2, 3, 1).reshape(-1, c)[keep],
             P.transpose(0, 2, 3, 1).reshape(-1, c)[keep])
    assert ev.to_dict() == ref.to_dict()


@pytest.mark.parametrize("pdtype", [np.float32, np.float64])
@pytest.mark.parametrize("ldtype", [np.float32, np.float64, np.int32, np.int64, np.uint8,
                                    np.bool_, np.int16])
def test_every_kernel_specialisation(pdtype, ldtype):
    y, L, P = random_problem(11, n=150, c=4)
    ref = Evaluation(top_n=2)
    ref.eval(L, P)
    ev = Evaluation(top_n=2)
    ev.eval(L.astype(ldtype), P.astype(pdtype))
    ref32 = Evaluation(top_n=2)
    ref32.eval(L, P.astype(pdtype).astype(np.float64))
    assert ev.to_dict() == ref32.to_dict()
    evs = Evaluation()
    evs.eval((y[:, None] == 1).astype(ldtype), P[:, 1:2].astype(pdtype))
    refs = Evaluation()
    refs.eval((y[:, None] == 1).astype(np.float64), P[:, 1:2].astype(np.float64))
    assert evs.to_dict() == refs.to_dict()


def test_strided_and_reversed_inputs():
    y, L, P = random_problem(12, n=300, c=5)
    big_L = np.zeros((600, 10))
    big_L[::2, ::2] = L
    big_P = np.zeros((600, 10))
    big_P[::2, ::2] = P
    ev = Evaluation()
    ev.eval(big_L[::2, ::2], big_P[::2, ::2])
    ref = Evaluation()
    ref.eval(L, P)
    assert ev.to_dict() == ref.to_dict()
    evr = Evaluation()
    evr.eval(L[::-1], np.asfortranarray(P)[::-1])
    assert evr.to_dict() == ref.to_dict()


def test_parallel_path_matches_serial():
    """A batch big enough for several threads counts exactly what the serial kernel does."""
    y, L, P = random_problem(13, n=120_000, c=6, dtype=np.float32)
    ev = Evaluation(top_n=3)
    ev.eval(L, P)
    np.testing.assert_array_equal(ev.get_confusion_matrix(),
                                  confusion_matrix(y, P.argmax(1), labels=range(6)))
    scratch = np.zeros((1, _counting.scratch_len(6)), np.int64)
    used = _counting.count(P[:, None, None, :], L[:, None, None, :], None, 0, 0.5, None, 3,
                           scratch)
    assert used == 1
    cm = np.zeros((6, 6), np.int64)
    counters = np.zeros(4, np.int64)
    _counting.reduce_into(scratch, used, cm, counters)
    np.testing.assert_array_equal(cm, ev.get_confusion_matrix())
    assert counters[2] == ev.top_n_correct_count
    # two blocks on the helper pool, for each pair of dtypes the tasks dispatch on
    import ndws
    for pdt, ldt in [(np.float32, np.uint8), (np.float64, np.float64), (np.float64, np.int64)]:
        two = np.zeros((2, _counting.scratch_len(6)), np.int64)
        with ndws.num_threads(2):
            used = _counting.count(P.astype(pdt)[:, None, None, :],
                                   L.astype(ldt)[:, None, None, :], None, 0, 0.5, None, 3, two)
        assert used == 2
        cm2, counters2 = np.zeros((6, 6), np.int64), np.zeros(4, np.int64)
        _counting.reduce_into(two, used, cm2, counters2)
        np.testing.assert_array_equal(cm2, cm)
        np.testing.assert_array_equal(counters2, counters)


# -- merge, serialisation ---------------------------------------------------------------------

@pytest.mark.parametrize("seed", SEEDS)
def test_merge_equals_one_shot(seed):
    y, L, P = random_problem(seed, n=600, c=5)
    one = Evaluation(top_n=2)
    one.eval(L, P)
    parts = [Evaluation(top_n=2) for _ in range(3)]
    for part, sl in zip(parts, np.array_split(np.arange(600), 3)):
        part.eval(L[sl], P[sl])
    merged = Evaluation(top_n=2)
    for part in parts:
        merged.merge(part)
    assert merged.to_dict() == one.to_dict()
    assert merged.f1(averaging="macro") == one.f1(averaging="macro")
    streamed = Evaluation(top_n=2)
    for sl in np.array_split(np.arange(600), 7):
        streamed.eval(L[sl], P[sl])
    assert streamed.to_dict() == one.to_dict()
    with pytest.raises(ValueError, match="different numbers of classes: 5 and 3"):
        merged.merge(Evaluation(3))   # (an empty Evaluation(3) has counts, all zero)


def test_json_round_trip():
    y, L, P = random_problem(21, n=100, c=3)
    ev = Evaluation(labels=["cat", "dog", "eel"], top_n=2, cost_array=[1.0, 1.5, 2.0])
    ev.eval(L, P)
    text = ev.to_json()
    back = Evaluation.from_json(text)
    assert back == ev
    assert back.to_dict() == json.loads(text)
    assert back.stats() == ev.stats()
    assert back.top_n_accuracy() == ev.top_n_accuracy()
    back.eval(L, P)                     # still usable
    assert back.num_row_counter == 200
    assert Evaluation.from_dict(Evaluation().to_dict()).to_dict() == Evaluation().to_dict()
    with pytest.raises(ValueError, match="not an Evaluation dict"):
        Evaluation.from_dict({"type": "ROC"})


def test_stats_layout_and_confusion_text():
    y = np.array([0, 1, 2, 2, 1, 0, 0, 2, 2, 2, 2, 2])
    pred = np.array([0, 1, 2, 1, 1, 0, 2, 2, 2, 2, 2, 2])
    ev = Evaluation(labels=["a", "b", "c"])
    ev.eval(one_hot(y, 3), one_hot(pred, 3))
    text = ev.confusion_matrix()
    assert text.splitlines()[:5] == [
        " 0 1 2",
        "-------",
        " 2 0 1 | 0 = a",
        " 0 2 0 | 1 = b",
        " 0 1 6 | 2 = c",
    ]
    # columns widen with the largest count (10 needs two digits)
    ev10 = Evaluation(2)
    for _ in range(10):
        ev10.eval_index(1, 1)
    assert ev10.confusion_matrix().splitlines()[:4] == [
        "  0  1", "-------", "  0  0 | 0 = 0", "  0 10 | 1 = 1"]
    assert text.endswith("Confusion matrix format: Actual (rowClass) predicted as "
                         "(columnClass) N times")
    s = ev.stats()
    assert "========================Evaluation Metrics========================" in s
    assert " # of classes:    3" in s
    assert f" Accuracy:        {10 / 12:.4f}" in s
    assert f" Precision:       {ev.precision():.4f}" in s
    assert "=========================Confusion Matrix=========================" in s
    assert " a " in s and "Per-class" in s
    big = Evaluation(21)
    big.eval_index(3, 3)
    assert "Confusion Matrix====" not in big.stats()
    assert "Confusion matrix not generated" in big.stats()
    assert "Confusion Matrix====" in big.stats(include_confusion=True)


# -- NDArray inputs, allocation ---------------------------------------------------------------

def test_ndarray_inputs_and_stale_arrays():
    y, L, P = random_problem(31, n=64, c=4, dtype=np.float32)
    ref = Evaluation()
    ref.eval(L, P)
    ev = Evaluation()
    with ndws.workspace("EVAL_WS"):
        nl, npred = ndws.asarray(L), ndws.asarray(P)
        nm = ndws.ones(64)
        ev.eval(nl, npred, mask=nm)
        ev.eval(nl.T.T, npred[::1])
    ref.eval(L, P)
    assert ev.to_dict() == ref.to_dict()
    with pytest.raises(ndws.WorkspaceError, match=r"^Op \[Evaluation.eval\] labels argument "
                       r"uses leaked workspace pointer from workspace \[EVAL_WS\]"):
        ev.eval(nl, P)
    with pytest.raises(ndws.WorkspaceError, match=r"predictions argument"):
        ev.eval(L, npred)
    with pytest.raises(ndws.WorkspaceError, match=r"mask argument"):
        ev.eval(L, P, mask=nm)
    assert ev.to_dict() == ref.to_dict()


def test_no_per_batch_allocation_on_a_steady_stream():
    rng = np.random.default_rng(5)
    n, c = 50_000, 10
    batches = [(np.eye(c, dtype=np.float32)[rng.integers(0, c, n)],
                rng.random((n, c), dtype=np.float32)) for _ in range(3)]
    masks = [(rng.random(n) > 0.1) for _ in range(3)]
    ev = Evaluation(top_n=3)
    ev.eval(*batches[0])             # first call sizes the scratch
    stats_before = ndws.get_memory_manager().allocation_statistics()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base, _ = tracemalloc.get_traced_memory()
        for _ in range(5):
            for (L, P), m in zip(batches, masks):
                ev.eval(L, P, mask=m)
        now, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    batch_bytes = n * c * 4
    # nothing the size of a batch (or even a row-sized vector) was allocated, nothing kept
    assert peak - base < 16_384 < n, (peak - base, batch_bytes)
    assert now - base < 4096
    assert ndws.get_memory_manager().allocation_statistics() == stats_before


# -- plot -------------------------------------------------------------------------------------

def test_plot_confusion_matrix(tmp_path):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    y, L, P = random_problem(41, n=200, c=4)
    ev = Evaluation(labels=["w", "x", "y", "z"])
    ev.eval(L, P)
    ax = ev.plot_confusion_matrix()
    assert ax.get_xlabel() == "Predicted label" and ax.get_ylabel() == "True label"
    cm = ev.get_confusion_matrix()
    assert [t.get_text() for t in ax.texts] == [str(v) for v in cm.ravel()]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["w", "x", "y", "z"]
    out = tmp_path / "confusion.png"
    ax.figure.savefig(out)
    assert out.stat().st_size > 1000
    plt.close(ax.figure)
    fig, ax2 = plt.subplots()
    assert ev.plot_confusion_matrix(ax=ax2, normalize="true") is ax2
    assert float(ax2.texts[0].get_text()) == pytest.approx(cm[0, 0] / cm[0].sum(), rel=0.01)
    plt.close(fig)
    with pytest.raises(RuntimeError, match="no evaluation has been performed"):
        Evaluation().plot_confusion_matrix()


# -- nothing half-counted, and arguments named ----------------------------------------------------

def _state(ev):
    if isinstance(ev, Evaluation):
        return (None if ev._confusion is None else ev._confusion.copy(), ev.num_row_counter)
    if isinstance(ev, ndws.evaluation.RegressionEvaluation):
        return None if ev._state is None else ev._state.copy()
    return tuple((ev.count_actual_positive(i), ev.count_actual_negative(i))
                 for i in range(ev.num_labels()))


@pytest.mark.parametrize("first", ["regression", "roc", "multiclass", "evaluation"])
def test_evaluate_counts_a_batch_in_all_evaluations_or_in_none(first):
    from ndws.evaluation import (ROCBinary, ROCMultiClass, RegressionEvaluation, evaluate)
    make = {"regression": RegressionEvaluation, "roc": lambda: ROCBinary(10),
            "multiclass": ROCMultiClass, "evaluation": lambda: Evaluation(5)}
    good = (np.eye(5)[[0, 1]], np.eye(5)[[0, 1]] * 0.8 + 0.04)
    nan_preds = good[1].copy()
    nan_preds[1, 3] = np.nan
    evs = (make[first](), Evaluation(5))
    evaluate(lambda f: f, [(good[1], good[0])], *evs)       # one good batch counted by both
    before = [_state(e) for e in evs]
    with pytest.raises(ValueError, match="NaN"):
        evaluate(lambda f: nan_preds, [(good[1], good[0])], *evs)
    after = [_state(e) for e in evs]
    for b, a in zip(before, after):
        if isinstance(b, tuple) and b and isinstance(b[0], np.ndarray):
            assert np.array_equal(b[0], a[0]) and b[1] == a[1]
        else:
            assert np.array_equal(b, a)
    # the second evaluation refuses a batch the first accepts: the first counts nothing either
    reg, ev = RegressionEvaluation(), Evaluation(5)
    with pytest.raises(ValueError, match="labels have 3 columns but this Evaluation has 5"):
        evaluate(lambda f: f, [(np.ones((2, 3)), np.ones((2, 3)))], reg, ev)
    assert reg._state is None and ev.num_row_counter == 0


@pytest.mark.parametrize("call, exc, msg", [
    (lambda: Evaluation(num_classes="a"), TypeError, "num_classes must be an int, got str 'a'"),
    (lambda: Evaluation(num_classes=10**30), ValueError,
     "num_classes must be in [2, 2147483647], got 1000000000000000000000000000000"),
    (lambda: Evaluation(top_n=2.5), TypeError, "top_n must be an int, got float 2.5"),
    (lambda: ndws.evaluation.ROC("a"), TypeError, "threshold_steps must be an int, got str 'a'"),
    (lambda: ndws.evaluation.ROC(-1), ValueError, "threshold_steps must be in [0, 2147483647], "
                                                  "got -1"),
    (lambda: ndws.evaluation.ROCBinary(exact_alloc_block_size=0), ValueError,
     "exact_alloc_block_size must be in [1, 2147483647], got 0"),
    (lambda: Evaluation(3).eval_index("a", 0), TypeError, "predicted must be an int, got str 'a'"),
    (lambda: Evaluation(3).eval_index(0, 10**40), ValueError,
     "actual=10000000000000000000000000000000000000000 is not a class index in [0, 3)"),
    (lambda: ndws.evaluation.RegressionEvaluation(columns=10**30), ValueError,
     "columns must be in [1, 16777216], got 1000000000000000000000000000000"),
])
def test_constructor_and_index_arguments_are_named(call, exc, msg):
    with pytest.raises(exc) as info:
        call()
    assert str(info.value) == msg


def test_column_and_class_indices_are_checked():
    roc = ndws.evaluation.ROCMultiClass()
    roc.eval(np.eye(3), np.eye(3) * 0.8 + 0.1)
    for bad, exc, msg in ((7, ValueError, "column=7 is not a class index in [0, 3)"),
                          (-1, ValueError, "column=-1 is not a class index in [0, 3)"),
                          ("a", TypeError, "column must be an int, got str 'a'")):
        for call in (roc.calculate_auc, roc.calculate_auprc, roc.roc_curve):
            with pytest.raises(exc) as info:
                call(bad)
            assert str(info.value) == msg
    binary = ndws.evaluation.ROCBinary()
    binary.eval(np.eye(2), np.eye(2) * 0.5 + 0.25)
    with pytest.raises(ValueError, match=r"^column=2 is not a column index in \[0, 2\)$"):
        binary.count_actual_positive(2)
    ev = Evaluation(3)
    ev.eval(np.eye(3), np.eye(3))
    for call in (ev.precision, ev.recall, ev.f1, ev.class_count, ev.false_positive_rate):
        with pytest.raises(ValueError, match=r"^cls=5 is not a class index in \[0, 3\)$"):
            call(5)
