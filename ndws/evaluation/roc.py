"""ROC and precision-recall evaluation: `ROC`, `ROCBinary`, `ROCMultiClass` (reference 7.2, 7.3).

DL4J's ``org.nd4j.evaluation.classification.ROC`` family. Two modes:

* **exact** (``threshold_steps=0``, the default): every (probability, label) pair is kept, in
  growable float64 buffers; the curves have one point per distinct probability.
* **histogram** (``threshold_steps=k > 0``): counts at the k + 1 thresholds 0, 1/k, ..., 1 in
  fixed bins; memory does not grow with the data. A row is predicted positive at threshold t
  when p >= t (compared in float32 for float32 predictions), and at t = 1.0 never (ND4J).

Accumulation reads each batch in place (a Cython ``nogil`` kernel over the batch's memory, any
strides): no temporary array the size of the batch is made, so ``eval`` on a steady stream of
batches allocates nothing in histogram mode and only the occasional buffer growth in exact mode.

Differences from ND4J (deliberate):

* Exact mode makes one curve point per *distinct* probability (like scikit-learn's
  ``roc_curve``); ND4J makes one per row, so with tied probabilities its curve and AUC depend on
  the sort order. Without ties both give the same curves.
* The exact-mode buffers grow by at least ND4J's block, ``max(exact_alloc_block_size, batch)``
  rows, and at least double, so a long stream of small batches costs amortised O(1) copying per
  row instead of a full copy per block.
* A label counts as positive when it is >= 0.5 (ND4J multiplies by the label, which only differs
  for soft labels).
* Rank-3/4 (time-series / per-pixel) input is not reshaped here: pass 2-D arrays.

``calculate_auprc`` follows ND4J: the trapezoid rule over the precision-recall points (linear
interpolation). scikit-learn's ``average_precision_score`` is a step-function sum
(sum of (R_n - R_{n-1}) * P_n) and differs; the precision-recall *points* agree with
``sklearn.metrics.precision_recall_curve``.
"""
from __future__ import annotations

import enum
from typing import Any, Optional

import numpy as np

from ndws._core import NDArray, check
from ndws.evaluation import _roc_kernels as _k
from ndws.evaluation._args import index_arg, int_arg

__all__ = ["ROC", "ROCBinary", "ROCMultiClass", "RocCurve", "PrecisionRecallCurve",
           "ROCMetric"]

_DEFAULT_BLOCK = 2048


class ROCMetric(enum.Enum):
    """Metrics of the ROC classes (DL4J's ``ROC.Metric``, also reachable as ``ROC.Metric``),
    for ``score_for_metric``; named apart from `Evaluation`'s ``Metric``."""

    AUROC = "AUROC"
    AUPRC = "AUPRC"


def _metric(metric: Any) -> ROCMetric:
    if isinstance(metric, ROCMetric):
        return metric
    return ROCMetric(str(getattr(metric, "name", metric)).upper())


def _no_examples(what: str) -> RuntimeError:
    return RuntimeError(f"{what}: no evaluation has been performed (no examples)")


def _trapezoid(x: np.ndarray, y: np.ndarray) -> float:
    # ND4J's rule: sum over consecutive points of |dx| times the mean y, whatever the x order
    if len(x) < 2:
        return 0.0
    return float(np.sum(np.abs(np.diff(x)) * (y[1:] + y[:-1])) * 0.5)


def _redundant_mask(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """True for the points to keep: ends, and interior points unless the previous, current and
    next x (or y) are all equal (ND4J's removeRedundant, which compares with the original
    neighbours)."""
    keep = np.ones(len(x), dtype=bool)
    if len(x) > 2:
        same_x = (x[:-2] == x[1:-1]) & (x[1:-1] == x[2:])
        same_y = (y[:-2] == y[1:-1]) & (y[1:-1] == y[2:])
        keep[1:-1] = ~(same_x | same_y)
    return keep


def _as_2d(x: Any, op: str, role: str) -> np.ndarray:
    """A NumPy view of `x` (an NDArray is validated, then viewed without a copy): 1-D becomes
    one column; 2-D (n_samples, n_columns), 3-D time series (batch, n_columns, time) and 4-D
    per-pixel (batch, n_columns, h, w) stay as they are."""
    if isinstance(x, NDArray):
        check(x, op, role)
    a = np.asarray(x)
    if a.ndim == 1:
        a = a.reshape(-1, 1)
    elif not 2 <= a.ndim <= 4:
        raise ValueError(f"{op}: {role} must be (n_samples, n_columns), (batch, n_columns, "
                         f"time) or (batch, n_columns, h, w), got shape {a.shape}")
    if a.dtype not in _k.SUPPORTED_DTYPES:
        if a.dtype.kind not in "fiub":
            raise TypeError(f"{op}: {role} must be numeric, got dtype {a.dtype}")
        a = a.astype(np.float64)   # rare dtypes (float16, longdouble): one converted copy
    return a


def _check_nans(predictions: np.ndarray) -> None:
    n = _k.count_nans(predictions)
    if n:
        raise ValueError(f"Cannot perform evaluation with NaNs present in predictions: {n} NaNs "
                         f"present in predictions INDArray")


def _check_histogram_range(batches: list, steps: int, op: str, columns: Any,
                           per_output: bool) -> None:
    """Histogram mode bins probabilities of [0, 1]; anything else would be dropped without a
    word (an AUC of 0 where exact mode gives 1), so refuse it, pointing to exact mode.
    Masked-out entries are not looked at."""
    if steps == 0:
        return
    for lab, pred, m in batches:
        for j in columns:
            vals = pred[:, j]
            if m is not None:
                vals = vals[m[:, j if per_output else 0] != 0]
            if vals.size and not (vals.min() >= 0.0 and vals.max() <= 1.0):
                bad = vals[(vals < 0.0) | (vals > 1.0)][0]
                raise ValueError(
                    f"{op}: histogram mode (threshold_steps={steps}) counts probabilities in "
                    f"[0, 1], got {float(bad)!r} in column {j}; use exact mode "
                    f"(threshold_steps=0) for scores outside [0, 1]")


def _inputs(labels: Any, predictions: Any, mask: Any, op: str):
    """Validated 2-D views (labels, predictions, mask or None), as a list: one triple for a 2-D
    batch, one per time step or pixel for rank 3/4 input (the class axis is 1, as DL4J's
    default), so the kernels read every example in place and nothing is copied. Everything is
    checked (shapes, NaNs) before the caller counts anything."""
    lab = _as_2d(labels, op, "labels")
    pred = _as_2d(predictions, op, "predictions")
    if lab.shape != pred.shape:
        raise ValueError(f"{op}: labels and predictions must have the same shape, got labels "
                         f"{lab.shape} and predictions {pred.shape}")
    m = None
    if mask is not None:
        m = _as_2d(mask, op, "mask")
        if lab.ndim == 2:
            ok = m.shape[0] == lab.shape[0] and m.shape[1] in (1, lab.shape[1])
            expected = f"({lab.shape[0]},), ({lab.shape[0]}, 1) or {lab.shape}"
        else:
            # per example and step/pixel: (batch, *rest) or (batch, 1, *rest); per output: labels'
            rest = lab.shape[2:]
            if m.shape == (lab.shape[0],) + rest:
                m = m[:, None]
            ok = m.shape in ((lab.shape[0], 1) + rest, lab.shape)
            expected = f"{(lab.shape[0],) + rest}, {(lab.shape[0], 1) + rest} or {lab.shape}"
        if not ok:
            raise ValueError(f"{op}: mask must have shape {expected}, got {np.shape(mask)}")
    if lab.ndim == 2:
        batches = [(lab, pred, m)]
    else:
        batches = [(lab[(slice(None), slice(None)) + ix], pred[(slice(None), slice(None)) + ix],
                    None if m is None else m[(slice(None), slice(None)) + ix])
                   for ix in np.ndindex(*lab.shape[2:])]
    for _, p, _ in batches:
        _check_nans(p)
    return batches


class RocCurve:
    """Points of a ROC curve (DL4J's ``RocCurve``).

    Attributes
    ----------
    thresholds : (n_points,) ndarray of float64
        Exact mode: 1.0, the distinct probabilities descending, 0.0. Histogram mode: 0, 1/k,
        ..., 1 ascending.
    fpr, tpr : (n_points,) ndarray of float64
        False and true positive rates at each threshold (the x and y of the curve).
    tp, fp : (n_points,) ndarray of int64
        Counts of true and false positives at each threshold.
    count_positive, count_negative : int
        Positive and negative examples evaluated.
    """

    def __init__(self, thresholds, fpr, tpr, tp, fp, count_positive, count_negative):
        self.thresholds = thresholds
        self.fpr = fpr
        self.tpr = tpr
        self.tp = tp
        self.fp = fp
        self.count_positive = int(count_positive)
        self.count_negative = int(count_negative)

    @property
    def fn(self) -> np.ndarray:
        """(n_points,) ndarray of int64: false negatives at each threshold."""
        return self.count_positive - self.tp

    @property
    def tn(self) -> np.ndarray:
        """(n_points,) ndarray of int64: true negatives at each threshold."""
        return self.count_negative - self.fp

    def __len__(self) -> int:
        return len(self.thresholds)

    def calculate_auc(self) -> float:
        """Area under the curve by the trapezoid rule."""
        return _trapezoid(self.fpr, self.tpr)

    def __repr__(self) -> str:
        return f"RocCurve(n_points={len(self)}, auc={self.calculate_auc():.6g})"


class PrecisionRecallCurve:
    """Points of a precision-recall curve (DL4J's ``PrecisionRecallCurve``), ascending threshold.

    Attributes
    ----------
    thresholds, precision, recall : (n_points,) ndarray of float64
    tp, fp, fn : (n_points,) ndarray of int64
        True positives, false positives and false negatives at each threshold.
    total_count : int
        Examples evaluated.
    """

    def __init__(self, thresholds, precision, recall, tp, fp, fn, total_count):
        self.thresholds = thresholds
        self.precision = precision
        self.recall = recall
        self.tp = tp
        self.fp = fp
        self.fn = fn
        self.total_count = int(total_count)

    def __len__(self) -> int:
        return len(self.thresholds)

    def calculate_auprc(self) -> float:
        """Area under the curve by the trapezoid rule (x = recall, y = precision)."""
        return _trapezoid(self.recall, self.precision)

    def __repr__(self) -> str:
        return f"PrecisionRecallCurve(n_points={len(self)}, auprc={self.calculate_auprc():.6g})"


class ROC:
    """ROC and precision-recall curves of a binary classifier (DL4J's ``ROC``).

    Parameters
    ----------
    threshold_steps : int, default 0
        0 for exact mode; k > 0 for histogram mode with thresholds 0, 1/k, ..., 1.
    remove_redundant_points : bool, default True
        Exact mode: drop interior curve points whose neighbours share their x (or y).
    exact_alloc_block_size : int, default 2048
        Exact mode: the minimum growth of the buffers, in rows.

    Examples
    --------
    >>> import numpy as np
    >>> roc = ROC()
    >>> roc.eval(np.array([[0], [1], [1]]), np.array([[0.25], [0.33], [0.66]]))
    >>> roc.calculate_auc(), roc.calculate_auprc()
    (1.0, 1.0)
    """

    Metric = ROCMetric

    def __init__(self, threshold_steps: int = 0, remove_redundant_points: bool = True,
                 exact_alloc_block_size: int = _DEFAULT_BLOCK):
        self._steps = int_arg(threshold_steps, "threshold_steps", 0)
        if not isinstance(remove_redundant_points, (bool, np.bool_)):
            raise TypeError(f"remove_redundant_points must be a bool, got "
                            f"{remove_redundant_points!r}")
        self.remove_redundant_points = bool(remove_redundant_points)
        self.exact_alloc_block_size = int_arg(exact_alloc_block_size, "exact_alloc_block_size",
                                              1)
        self.reset()

    # -------------------------------------------------------------------------------------------
    # state

    @property
    def threshold_steps(self) -> int:
        """0 in exact mode, else the number of histogram steps."""
        return self._steps

    @property
    def is_exact(self) -> bool:
        """Whether this ROC keeps every (probability, label) pair."""
        return self._steps == 0

    def reset(self) -> None:
        """Forget every evaluated example."""
        # Exact mode keeps the probabilities of positive and negative rows in two buffers, used
        # up to _n_pos / _n_neg; histogram mode keeps per-bin counts and the class totals.
        self._pos = np.empty(0, dtype=np.float64)
        self._neg = np.empty(0, dtype=np.float64)
        self._n_pos = 0
        self._n_neg = 0
        k = max(self._steps, 1)
        self._pos_bins = np.zeros(k, dtype=np.int64)
        self._neg_bins = np.zeros(k, dtype=np.int64)
        self._totals = np.zeros(2, dtype=np.int64)
        self._cache: dict = {}

    @property
    def count_actual_positive(self) -> int:
        """Positive examples evaluated."""
        return self._n_pos if self.is_exact else int(self._totals[0])

    @property
    def count_actual_negative(self) -> int:
        """Negative examples evaluated."""
        return self._n_neg if self.is_exact else int(self._totals[1])

    @property
    def num_examples(self) -> int:
        """Examples evaluated (after masking)."""
        return self.count_actual_positive + self.count_actual_negative

    def _grow(self, buf: np.ndarray, used: int, extra: int) -> np.ndarray:
        # Growth in blocks of max(block, batch) rows as ND4J, but at least doubling: amortised
        # O(1) copying per row. The old buffer is dropped (nothing else refers to it).
        cap = len(buf)
        if used + extra <= cap:
            return buf
        new_cap = max(used + extra, cap + max(self.exact_alloc_block_size, extra), 2 * cap)
        new = np.empty(new_cap, dtype=np.float64)
        new[:used] = buf[:used]
        return new

    def _eval_column(self, lab: np.ndarray, pred: np.ndarray, mask: Optional[np.ndarray],
                     col: int, mask_col: int) -> None:
        """Count column `col` of validated 2-D inputs (the kernel reads them in place)."""
        n = lab.shape[0]
        if n == 0:
            return
        self._cache.clear()
        if self.is_exact:
            self._pos = self._grow(self._pos, self._n_pos, n)
            self._neg = self._grow(self._neg, self._n_neg, n)
            self._n_pos, self._n_neg = _k.append_exact(pred, lab, mask, col, mask_col,
                                                       self._pos, self._n_pos,
                                                       self._neg, self._n_neg)
        else:
            _k.accumulate_histogram(pred, lab, mask, col, mask_col, self._pos_bins,
                                    self._neg_bins, self._totals)

    def eval(self, labels: Any, predictions: Any, mask: Any = None) -> None:
        """Add a batch of examples.

        Parameters
        ----------
        labels : (n_samples, 1) or (n_samples, 2) NDArray or ndarray
            0/1 labels of class 1, or one-hot rows (column 1 is the positive class). A 1-D
            array is taken as one column; time series (batch, 1 or 2, time) and per-pixel
            (batch, 1 or 2, h, w) input count every step or pixel as an example.
        predictions : same shape as `labels`, NDArray or ndarray of float32 or float64
            Probabilities of class 1, or softmax rows.
        mask : (n_samples,) or (n_samples, 1) NDArray or ndarray, optional
            Rows whose mask is 0 are skipped; (batch, time) or (batch, h, w) for rank 3/4.

        Raises
        ------
        ValueError
            Shapes that do not match, more than 2 columns, a per-output mask, NaN predictions.
        ndws.WorkspaceError
            A stale NDArray argument.
        """
        self._prepare(labels, predictions, mask)()

    def _prepare(self, labels: Any, predictions: Any, mask: Any = None):
        """Check a batch without changing the ROC; returns the commit that counts it. `eval`
        is both; `evaluate` checks every evaluation before committing any."""
        batches = _inputs(labels, predictions, mask, "ROC.eval")
        lab, _, m = batches[0]
        if lab.shape[1] > 2:
            raise ValueError(f"ROC.eval: labels and predictions have {lab.shape[1]} columns; ROC "
                             f"is binary (1 or 2 columns): use ROCMultiClass or ROCBinary")
        if m is not None and m.shape[1] != 1:
            raise ValueError("Per-output masking for ROC is not supported")
        col = lab.shape[1] - 1
        _check_histogram_range(batches, self._steps, "ROC.eval", [col], False)

        def commit() -> None:
            for lab, pred, m in batches:
                self._eval_column(lab, pred, m, col, 0)
        return commit

    def merge(self, other: "ROC") -> None:
        """Add the examples of `other` (same threshold_steps) to this ROC."""
        if not isinstance(other, ROC):
            raise TypeError(f"cannot merge {type(other).__name__} into ROC")
        if other._steps != self._steps:
            raise ValueError("Cannot merge ROC instances with different numbers of threshold "
                             "steps")
        self._cache.clear()
        if self.is_exact:
            self._pos = self._grow(self._pos, self._n_pos, other._n_pos)
            self._neg = self._grow(self._neg, self._n_neg, other._n_neg)
            self._pos[self._n_pos:self._n_pos + other._n_pos] = other._pos[:other._n_pos]
            self._neg[self._n_neg:self._n_neg + other._n_neg] = other._neg[:other._n_neg]
            self._n_pos += other._n_pos
            self._n_neg += other._n_neg
        else:
            self._pos_bins += other._pos_bins
            self._neg_bins += other._neg_bins
            self._totals += other._totals

    # -------------------------------------------------------------------------------------------
    # curves

    def _points(self):
        """(thresholds, tp, fp) of the raw curve points, without the edge points.

        Exact mode: distinct probabilities descending. Histogram: thresholds i/k ascending."""
        if "points" not in self._cache:
            if self.is_exact:
                pos = np.sort(self._pos[:self._n_pos])
                neg = np.sort(self._neg[:self._n_neg])
                self._cache["points"] = _k.exact_points(pos, neg)
            else:
                k = self._steps
                thr = np.arange(k + 1, dtype=np.float64) / k
                tp = np.zeros(k + 1, dtype=np.int64)
                fp = np.zeros(k + 1, dtype=np.int64)
                # TP(t_i) = rows in bins i..k-1; nothing is positive at t_k = 1.0
                tp[:k] = np.cumsum(self._pos_bins[::-1])[::-1]
                fp[:k] = np.cumsum(self._neg_bins[::-1])[::-1]
                self._cache["points"] = (thr, tp, fp)
        return self._cache["points"]

    def roc_curve(self) -> RocCurve:
        """The ROC curve (false positive rate on x, true positive rate on y).

        Returns
        -------
        RocCurve
            Exact mode: thresholds 1.0, each distinct probability descending, then 0.0, from
            (0, 0) to (1, 1), redundant points removed if so configured. Histogram mode: the
            k + 1 thresholds ascending, no removal. A class with no examples gives NaN rates.
        """
        if self.num_examples == 0:
            raise _no_examples("Unable to get ROC curve")
        if "roc" in self._cache:
            return self._cache["roc"]
        thr, tp, fp = self._points()
        P, N = self.count_actual_positive, self.count_actual_negative
        if self.is_exact:
            thr = np.concatenate(([1.0], thr, [0.0]))
            tp = np.concatenate(([0], tp, [P]))
            fp = np.concatenate(([0], fp, [N]))
        with np.errstate(divide="ignore", invalid="ignore"):
            tpr = tp / P if P else np.full(len(tp), np.nan)
            fpr = fp / N if N else np.full(len(fp), np.nan)
        if self.is_exact:
            tpr[0] = fpr[0] = 0.0
            tpr[-1] = fpr[-1] = 1.0
            if self.remove_redundant_points:
                keep = _redundant_mask(fpr, tpr)
                thr, fpr, tpr, tp, fp = thr[keep], fpr[keep], tpr[keep], tp[keep], fp[keep]
        curve = RocCurve(thr, fpr, tpr, tp, fp, P, N)
        self._cache["roc"] = curve
        return curve

    def precision_recall_curve(self) -> PrecisionRecallCurve:
        """The precision-recall curve, in ascending threshold order.

        Returns
        -------
        PrecisionRecallCurve
            Exact mode: threshold 0.0 (precision = positives / examples, recall 1), each
            distinct probability ascending, then 1.0 (precision 1, recall 0), redundant points
            removed if so configured. Histogram mode: the k + 1 thresholds, precision 1 where
            nothing is predicted positive, recall 1 when there are no positives.
        """
        if self.num_examples == 0:
            raise _no_examples("Unable to get precision recall curve")
        if "pr" in self._cache:
            return self._cache["pr"]
        thr, tp, fp = self._points()
        P, N = self.count_actual_positive, self.count_actual_negative
        with np.errstate(divide="ignore", invalid="ignore"):
            if self.is_exact:
                # reverse into ascending threshold order, then the edge points
                thr = np.concatenate(([0.0], thr[::-1], [1.0]))
                tp = np.concatenate(([P], tp[::-1], [0]))
                fp = np.concatenate(([N], fp[::-1], [0]))
                predicted = tp + fp
                precision = tp / np.where(predicted == 0, 1, predicted)
                recall = tp / P if P else np.full(len(tp), np.nan)
                precision[0] = P / (P + N)
                recall[0] = 1.0
                precision[-1] = 1.0
                recall[-1] = 0.0
            else:
                predicted = tp + fp
                precision = np.where(predicted == 0, 1.0,
                                     tp / np.where(predicted == 0, 1, predicted))
                recall = tp / P if P else np.ones(len(tp))
        fn = P - tp
        if self.is_exact and self.remove_redundant_points:
            keep = _redundant_mask(recall, precision)
            thr, precision, recall = thr[keep], precision[keep], recall[keep]
            tp, fp, fn = tp[keep], fp[keep], fn[keep]
        curve = PrecisionRecallCurve(thr, precision, recall, tp, fp, fn, P + N)
        self._cache["pr"] = curve
        return curve

    def _areas(self) -> None:
        # Exact mode: straight from the counts in one pass (building the 10^6-point curves only
        # to integrate them costs several times the sort); histogram mode: from its curves.
        if self.is_exact:
            _, tp, fp = self._points()
            auc, auprc = _k.exact_areas(tp, fp, self._n_pos, self._n_neg)
        else:
            auc = self.roc_curve().calculate_auc()
            auprc = self.precision_recall_curve().calculate_auprc()
        self._cache["auc"], self._cache["auprc"] = auc, auprc

    def calculate_auc(self) -> float:
        """Area under the ROC curve (trapezoid rule); cached until the next eval or merge.

        NaN when only one class has been seen."""
        if self.num_examples == 0:
            raise _no_examples("Unable to calculate AUC")
        if "auc" not in self._cache:
            self._areas()
        return self._cache["auc"]

    def calculate_auprc(self) -> float:
        """Area under the precision-recall curve (trapezoid rule, ND4J's calculateAUCPR).

        NaN when no positive example has been seen."""
        if self.num_examples == 0:
            raise _no_examples("Unable to calculate AUPRC")
        if "auprc" not in self._cache:
            self._areas()
        return self._cache["auprc"]

    def score_for_metric(self, metric: ROCMetric | str) -> float:
        """`ROCMetric.AUROC` or `ROCMetric.AUPRC` (or their names)."""
        metric = _metric(metric)
        return self.calculate_auc() if metric is ROCMetric.AUROC else self.calculate_auprc()

    def stats(self) -> str:
        """A short text summary: AUC, AUPRC, examples and mode."""
        if self.num_examples == 0:
            return "ROC: No data available (no evaluation has been performed)"
        mode = "exact" if self.is_exact else f"{self._steps} threshold steps"
        return (f"AUC (Area under ROC Curve):                {self.calculate_auc():.6f}\n"
                f"AUPRC (Area under Precision/Recall Curve): {self.calculate_auprc():.6f}\n"
                f"Examples: {self.num_examples} ({self.count_actual_positive} positive, "
                f"{self.count_actual_negative} negative); mode: {mode}")

    def __repr__(self) -> str:
        return (f"ROC(threshold_steps={self._steps}, positives={self.count_actual_positive}, "
                f"negatives={self.count_actual_negative})")

    # -------------------------------------------------------------------------------------------
    # plots (matplotlib is optional: imported only here)

    def plot(self, ax: Any = None, name: Optional[str] = None, **kwargs: Any):
        """Plot the ROC curve.

        Parameters
        ----------
        ax : matplotlib Axes, optional
            Where to draw; a new figure's axes when omitted.
        name : str, optional
            Legend label prefix.
        **kwargs
            Passed to ``ax.plot``.

        Returns
        -------
        matplotlib.axes.Axes
        """
        ax = _axes(ax)
        curve = self.roc_curve()
        label = f"{name or 'ROC'} (AUC = {self.calculate_auc():.4f})"
        ax.plot(curve.fpr, curve.tpr, label=label, **kwargs)
        ax.plot([0, 1], [0, 1], linestyle="--", color="grey", linewidth=0.8)
        ax.set_xlabel("False positive rate")
        ax.set_ylabel("True positive rate")
        ax.set_xlim(-0.01, 1.01)
        ax.set_ylim(-0.01, 1.01)
        ax.legend(loc="lower right")
        return ax

    def plot_precision_recall(self, ax: Any = None, name: Optional[str] = None, **kwargs: Any):
        """Plot the precision-recall curve (recall on x); same parameters as `plot`.

        Returns
        -------
        matplotlib.axes.Axes
        """
        ax = _axes(ax)
        curve = self.precision_recall_curve()
        label = f"{name or 'PR'} (AUPRC = {self.calculate_auprc():.4f})"
        ax.plot(curve.recall, curve.precision, label=label, **kwargs)
        ax.set_xlabel("Recall")
        ax.set_ylabel("Precision")
        ax.set_xlim(-0.01, 1.01)
        ax.set_ylim(-0.01, 1.01)
        ax.legend(loc="lower left")
        return ax


def _axes(ax: Any):
    if ax is None:
        import matplotlib.pyplot as plt   # optional dependency: only when plotting
        _, ax = plt.subplots()
    return ax


class _PerColumn:
    """One `ROC` per output column; shared by ROCBinary and ROCMultiClass."""

    _name = ""
    Metric = ROCMetric

    def __init__(self, threshold_steps: int = 0, remove_redundant_points: bool = True,
                 exact_alloc_block_size: int = _DEFAULT_BLOCK):
        ROC(threshold_steps, remove_redundant_points, exact_alloc_block_size)   # validates
        self._args = (int(threshold_steps), bool(remove_redundant_points),
                      int(exact_alloc_block_size))
        self._rocs: Optional[list[ROC]] = None
        self.label_names: Optional[list[str]] = None

    @property
    def threshold_steps(self) -> int:
        """0 in exact mode, else the number of histogram steps."""
        return self._args[0]

    def _check_columns(self, n_columns: int, where: str = "eval: labels have") -> None:
        # DL4J's message ("Labels array does not match stored state size") names neither the
        # argument nor where the stored size came from
        if self._rocs is not None and len(self._rocs) != n_columns:
            raise ValueError(f"{self._name}.{where} {n_columns} columns, but this "
                             f"{self._name} has {len(self._rocs)} (from its first batch); "
                             f"every batch must have the same columns (reset() to start "
                             f"over)")

    def _columns(self, n_columns: int, where: str = "eval: labels have") -> list:
        self._check_columns(n_columns, where)
        if self._rocs is None:
            self._rocs = [ROC(*self._args) for _ in range(n_columns)]
        return self._rocs

    def num_labels(self) -> int:
        """Number of output columns (0 before the first eval)."""
        return 0 if self._rocs is None else len(self._rocs)

    def set_label_names(self, names) -> None:
        """Names of the columns, used by `stats` and the plots."""
        self.label_names = [str(s) for s in names]

    def _roc(self, column: int) -> ROC:
        if self._rocs is None:
            raise _no_examples(f"Unable to get ROC for column {column}")
        return self._rocs[index_arg(column, "column", len(self._rocs), self._what)]

    def roc(self, column: int) -> ROC:
        """The `ROC` of one column."""
        return self._roc(column)

    def roc_curve(self, column: int) -> RocCurve:
        """ROC curve of one column (see `ROC.roc_curve`)."""
        return self._roc(column).roc_curve()

    def precision_recall_curve(self, column: int) -> PrecisionRecallCurve:
        """Precision-recall curve of one column (see `ROC.precision_recall_curve`)."""
        return self._roc(column).precision_recall_curve()

    def calculate_auc(self, column: int) -> float:
        """AUC of one column."""
        return self._roc(column).calculate_auc()

    def calculate_auprc(self, column: int) -> float:
        """AUPRC of one column."""
        return self._roc(column).calculate_auprc()

    def count_actual_positive(self, column: int) -> int:
        """Positive examples of one column."""
        return self._roc(column).count_actual_positive

    def count_actual_negative(self, column: int) -> int:
        """Negative examples of one column."""
        return self._roc(column).count_actual_negative

    def calculate_average_auc(self) -> float:
        """Mean AUC over the columns."""
        if self._rocs is None:
            raise _no_examples("Unable to calculate average AUC")
        return float(np.mean([r.calculate_auc() for r in self._rocs]))

    def calculate_average_auprc(self) -> float:
        """Mean AUPRC over the columns."""
        if self._rocs is None:
            raise _no_examples("Unable to calculate average AUPRC")
        return float(np.mean([r.calculate_auprc() for r in self._rocs]))

    def score_for_metric(self, metric: ROCMetric | str) -> float:
        """Average `ROCMetric.AUROC` or `ROCMetric.AUPRC` over the columns."""
        metric = _metric(metric)
        if metric is ROCMetric.AUROC:
            return self.calculate_average_auc()
        return self.calculate_average_auprc()

    def merge(self, other) -> None:
        """Add the examples of `other` (same class, threshold_steps and column count)."""
        if type(other) is not type(self):
            raise TypeError(f"cannot merge {type(other).__name__} into {type(self).__name__}")
        if other._args[0] != self._args[0]:
            raise ValueError("Cannot merge ROC instances with different numbers of threshold "
                             "steps")
        if other._rocs is None:
            return
        mine = self._columns(len(other._rocs), "merge: other has")
        for a, b in zip(mine, other._rocs):
            a.merge(b)

    def reset(self) -> None:
        """Forget every evaluated example (and the column count)."""
        self._rocs = None

    def _label(self, i: int) -> str:
        if self.label_names is not None and i < len(self.label_names):
            return self.label_names[i]
        return str(i)

    def stats(self) -> str:
        """Per-column AUC, AUPRC and counts, then the averages."""
        if self._rocs is None:
            return f"{self._name}: No data available (no evaluation has been performed)"
        lines = [f"{'Label':<12}{'AUC':>10}{'AUPRC':>10}{'# Pos':>10}{'# Neg':>10}"]
        for i, r in enumerate(self._rocs):
            lines.append(f"{self._label(i):<12}{r.calculate_auc():>10.4f}"
                         f"{r.calculate_auprc():>10.4f}{r.count_actual_positive:>10}"
                         f"{r.count_actual_negative:>10}")
        lines.append(f"Average AUC: {self.calculate_average_auc():.4f}")
        lines.append(f"Average AUPRC: {self.calculate_average_auprc():.4f}")
        return "\n".join(lines)

    def plot(self, ax: Any = None, **kwargs: Any):
        """Plot every column's ROC curve on one axes; returns the matplotlib Axes."""
        ax = _axes(ax)
        for i in range(self.num_labels() or 1):
            self._roc(i).plot(ax=ax, name=self._label(i), **kwargs)
        return ax

    def plot_precision_recall(self, ax: Any = None, **kwargs: Any):
        """Plot every column's precision-recall curve on one axes; returns the Axes."""
        ax = _axes(ax)
        for i in range(self.num_labels() or 1):
            self._roc(i).plot_precision_recall(ax=ax, name=self._label(i), **kwargs)
        return ax


class ROCBinary(_PerColumn):
    """One independent `ROC` per output column, for multi-label sigmoid outputs (DL4J's
    ``ROCBinary``).

    Parameters
    ----------
    threshold_steps, remove_redundant_points, exact_alloc_block_size
        As in `ROC`, for every column. The default is exact mode.
    """

    _name = "ROCBinary"
    _what = "column"

    def eval(self, labels: Any, predictions: Any, mask: Any = None) -> None:
        """Add a batch.

        Parameters
        ----------
        labels : (n_samples, n_columns) NDArray or ndarray
            0/1 label of each column.
        predictions : (n_samples, n_columns) NDArray or ndarray of float32 or float64
            Probability of each column.
        mask : (n_samples,), (n_samples, 1) or (n_samples, n_columns), optional
            Per-example or per-output mask; masked (0) entries are skipped, per column.
        """
        self._prepare(labels, predictions, mask)()

    def _prepare(self, labels: Any, predictions: Any, mask: Any = None):
        """Check a batch without changing anything; returns the commit that counts it."""
        batches = _inputs(labels, predictions, mask, "ROCBinary.eval")
        lab, _, m = batches[0]
        n_cols = lab.shape[1]
        self._check_columns(n_cols)
        per_output = m is not None and m.shape[1] == n_cols and n_cols > 1
        _check_histogram_range(batches, self.threshold_steps, "ROCBinary.eval",
                               range(n_cols), per_output)

        def commit() -> None:
            rocs = self._columns(n_cols)
            for lab, pred, m in batches:
                for j, r in enumerate(rocs):
                    r._eval_column(lab, pred, m, j, j if per_output else 0)
        return commit


class ROCMultiClass(_PerColumn):
    """One-vs-all ROC per class of a softmax output (DL4J's ``ROCMultiClass``).

    Parameters
    ----------
    threshold_steps, remove_redundant_points, exact_alloc_block_size
        As in `ROC`, for every class. The default is exact mode.
    """

    _name = "ROCMultiClass"
    _what = "class"

    def eval(self, labels: Any, predictions: Any, mask: Any = None) -> None:
        """Add a batch.

        Parameters
        ----------
        labels : (n_samples, n_classes) NDArray or ndarray
            One-hot labels.
        predictions : (n_samples, n_classes) NDArray or ndarray of float32 or float64
            Class probabilities; column i is scored against label column i.
        mask : (n_samples,) or (n_samples, 1), optional
            Per-example mask (per-output masks are rejected).
        """
        self._prepare(labels, predictions, mask)()

    def _prepare(self, labels: Any, predictions: Any, mask: Any = None):
        """Check a batch without changing anything; returns the commit that counts it."""
        batches = _inputs(labels, predictions, mask, "ROCMultiClass.eval")
        lab, _, m = batches[0]
        if m is not None and m.shape[1] != 1:
            raise ValueError("Per-output masking for ROCMultiClass is not supported")
        n_cols = lab.shape[1]
        if n_cols < 2:
            raise ValueError(f"ROCMultiClass.eval: labels have {n_cols} column; "
                             f"ROCMultiClass needs one column per class (>= 2): use ROC for a "
                             f"single-column binary problem")
        self._check_columns(n_cols)
        _check_histogram_range(batches, self.threshold_steps, "ROCMultiClass.eval",
                               range(n_cols), False)

        def commit() -> None:
            rocs = self._columns(n_cols)
            for lab, pred, m in batches:
                for j, r in enumerate(rocs):
                    r._eval_column(lab, pred, m, j, 0)
        return commit
