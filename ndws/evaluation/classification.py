"""Classification evaluation: DL4J's ``org.nd4j.evaluation.classification.Evaluation``.

`Evaluation` accumulates a confusion matrix over batches of (labels, predictions) and derives
accuracy, top-N accuracy, precision, recall, F-beta, G-measure, Matthews correlation and the
false positive / negative / alarm rates from it, per class or averaged (DL4J's ``Evaluation``; docs/evaluation.md).

Counting runs in the nogil kernels of `ndws.evaluation._counting` directly over each batch's
memory (NumPy arrays or ndws NDArrays, any strides): no temporary the size of the batch is made.
The one deliberate difference from ND4J (docs/porting-from-dl4j.md): the micro-averaged false
negative rate uses (fn, tp), not ND4J's (fn, tn).
"""
from __future__ import annotations

import enum
import json
import math
from typing import Any, Sequence

import numpy as np

from ndws._core import NDArray, check as _check
from ndws._creation import array
from ndws.evaluation import _counting
from ndws.evaluation._args import (count_arg, fields, index_arg, int_arg, parse_json,
                                   table_arg)

__all__ = ["Evaluation", "Metric"]

#: stats() prints the confusion matrix only up to this many classes (DL4J's limit)
CONFUSION_PRINT_MAX_CLASSES = 20

_AVERAGING = ("macro", "micro")


class Metric(enum.Enum):
    """Metrics `Evaluation.score_for_metric` can report (DL4J's ``Evaluation.Metric``)."""

    ACCURACY = "accuracy"
    F1 = "f1"
    PRECISION = "precision"
    RECALL = "recall"
    GMEASURE = "gmeasure"
    MCC = "mcc"


def _as_numpy(x: Any, role: str) -> np.ndarray:
    """A zero-copy NumPy view of an NDArray (validated first) or NumPy array."""
    if isinstance(x, NDArray):
        _check(x, "Evaluation.eval", role)
        return np.asarray(x)
    if isinstance(x, np.ndarray):
        return x
    return np.asarray(x)


def _averaging(averaging: str) -> str:
    a = str(getattr(averaging, "name", averaging)).lower()
    if a not in _AVERAGING:
        raise ValueError(f"averaging must be 'macro' or 'micro', got {averaging!r}")
    return a


def _ratio(num: int, den: int, edge: float) -> float:
    return edge if den == 0 else num / den


def _f_beta(beta: float, precision: float, recall: float) -> float:
    """(1 + beta^2) P R / (beta^2 P + R), and 0 when P or R is 0 (EvaluationUtils.fBeta)."""
    if precision == 0.0 or recall == 0.0:
        return 0.0
    b2 = beta * beta
    return (1.0 + b2) * precision * recall / (b2 * precision + recall)


def _mcc(tp: int, fp: int, fn: int, tn: int) -> float:
    # exact integer products first: int64 counts of a large stream overflow a float's 53 bits
    # only in the last step; a zero denominator gives NaN as in ND4J (not guarded there either)
    num = tp * tn - fp * fn
    den = (tp + fp) * (tp + fn) * (tn + fp) * (tn + fn)
    if den == 0:
        return math.nan
    return num / math.sqrt(den)


#: the fields of Evaluation.to_dict() besides its "type"
_DICT_FIELDS = ("num_classes", "labels", "top_n", "binary_decision_threshold", "cost_array",
                "binary_positive_class", "num_row_counter", "top_n_correct_count",
                "top_n_total_count", "confusion")


class Evaluation:
    """Confusion-matrix based classification metrics (DL4J's ``Evaluation``).

    Parameters
    ----------
    num_classes : int, optional
        Number of classes; inferred from the first batch's label columns when omitted (one
        column means binary: 2 classes).
    labels : sequence of str, optional
        Class names (their count fixes `num_classes`). Default names are "0", "1", ...
    top_n : int, default 1
        Also count top-N accuracy when > 1 (a row is correct when fewer than N probabilities
        are strictly greater than the true class's).
    binary_decision_threshold : float, optional
        With two columns, predict class 1 when ``p[:, 1] > threshold`` instead of argmax; with
        one column, the threshold (0.5 when omitted).
    cost_array : (num_classes,) array_like of float, optional
        Predict ``argmax(p * cost_array)``.
    binary_positive_class : int or None, default 1
        With exactly 2 classes, the no-argument accessors (`precision()`, `recall()`, `f1()`,
        `false_positive_rate()`, `false_negative_rate()`, `false_alarm_rate()`) report this
        class; None means the macro average.

    Examples
    --------
    >>> import numpy as np
    >>> ev = Evaluation()
    >>> ev.eval(np.eye(3)[[0, 1, 2, 2]], np.eye(3)[[0, 1, 2, 1]])
    >>> ev.accuracy()
    0.75
    """

    #: DL4J's ``Evaluation.Metric`` (what `score_for_metric` and early stopping's
    #: ClassificationScoreCalculator take)
    Metric = Metric

    def __init__(self, num_classes: int | None = None, labels: Sequence[str] | None = None,
                 top_n: int = 1, binary_decision_threshold: float | None = None,
                 cost_array: Any = None, binary_positive_class: int | None = 1) -> None:
        if labels is not None:
            if isinstance(labels, (str, bytes)) or not isinstance(labels, Sequence):
                raise TypeError(f"labels must be a sequence of class names, got "
                                f"{type(labels).__name__} {labels!r:.40}")
            labels = [str(x) for x in labels]
            if num_classes is not None and num_classes != len(labels):
                raise ValueError(f"num_classes={num_classes} does not match the "
                                 f"{len(labels)} labels given")
            num_classes = len(labels)
        if num_classes is not None:
            num_classes = int_arg(num_classes, "num_classes", 2)
        top_n = int_arg(top_n, "top_n", 1)
        if binary_decision_threshold is not None:
            if isinstance(binary_decision_threshold, bool) or not isinstance(
                    binary_decision_threshold, (int, float, np.integer, np.floating)):
                raise TypeError(f"binary_decision_threshold must be a number in (0, 1), got "
                                f"{binary_decision_threshold!r:.40}")
            binary_decision_threshold = float(binary_decision_threshold)
            if not 0.0 < binary_decision_threshold < 1.0:
                raise ValueError("binary_decision_threshold must be in (0, 1), got "
                                 f"{binary_decision_threshold}")
        if cost_array is not None:
            try:
                # ndws.array's reading: numbers only (NumPy's would take '1.5' and None)
                cost_array = array(cost_array, np.float64, detached=True).numpy().ravel()
            except (TypeError, ValueError) as exc:
                raise TypeError(f"cost_array must be numbers, one per class, got "
                                f"{cost_array!r:.40} ({exc})") from None
            if np.any(cost_array < 0) or not np.all(np.isfinite(cost_array)):
                raise ValueError("cost_array must hold finite non-negative values")
            if num_classes is not None and cost_array.size != num_classes:
                raise ValueError(f"cost_array has {cost_array.size} entries for "
                                 f"{num_classes} classes")
        if binary_positive_class is not None and (
                isinstance(binary_positive_class, bool)
                or not isinstance(binary_positive_class, (int, np.integer))
                or binary_positive_class not in (0, 1)):
            raise ValueError("binary_positive_class must be 0, 1 or None, got "
                             f"{binary_positive_class!r}")
        self.top_n = int(top_n)
        self.binary_decision_threshold = binary_decision_threshold
        self.cost_array = cost_array
        self.binary_positive_class = binary_positive_class
        self.label_names = labels
        self.num_row_counter = 0
        self.top_n_correct_count = 0
        self.top_n_total_count = 0
        self._n = num_classes
        self._confusion: np.ndarray | None = None
        self._scratch: np.ndarray | None = None
        self._counters = np.zeros(4, dtype=np.int64)
        if num_classes is not None:
            self._confusion = np.zeros((num_classes, num_classes), dtype=np.int64)

    # -- accumulation -------------------------------------------------------------------------

    def _classes_for(self, n_cols: int) -> int:
        # the class count a batch of n_cols columns implies, checked against what is known
        n = 2 if n_cols == 1 else n_cols
        if self._n is None:
            if n < 2:
                raise ValueError("labels must have at least one column")
            if self.cost_array is not None and self.cost_array.size != n:
                raise ValueError(f"cost_array has {self.cost_array.size} entries for "
                                 f"{n} classes")
        elif n != self._n:
            raise ValueError(f"labels have {n_cols} columns but this Evaluation has "
                             f"{self._n} classes")
        return n

    def eval(self, labels: Any, predictions: Any, mask: Any = None) -> None:
        """Add a batch: one-hot (or single 0/1 column) `labels` against `predictions`.

        Parameters
        ----------
        labels : (n_samples, n_classes) or (n_samples, 1) NDArray or ndarray
            Rank 3 ``(batch, n_classes, time)`` time series and rank 4 ``(batch, n_classes,
            height, width)`` per-pixel data are accepted too (classes on axis 1).
        predictions : NDArray or ndarray of float32 or float64, shaped like `labels`
        mask : NDArray or ndarray, optional
            Per-example mask: ``(n_samples,)`` or ``(n_samples, 1)`` for rank 2, ``(batch,
            time)`` for rank 3, ``(batch, height, width)`` or ``(batch, 1, height, width)`` for
            rank 4. Rows where it is 0 are skipped; a fully masked batch is a no-op.

        Raises
        ------
        ValueError
            Shape mismatch, a per-output mask, NaNs in the (unmasked) predictions.
        ndws.WorkspaceError
            An NDArray argument is stale.
        """
        self._prepare(labels, predictions, mask)()

    def _prepare(self, labels: Any, predictions: Any, mask: Any = None):
        """Check and count a batch into the scratch without changing the evaluation; returns
        the commit that adds the counts (which can't fail). `eval` is both; `evaluate` checks
        every evaluation before committing any."""
        L = _as_numpy(labels, "labels")
        P = _as_numpy(predictions, "predictions")
        M = None if mask is None else _as_numpy(mask, "mask")
        if L.shape != P.shape:
            raise ValueError("Unable to evaluate. Predictions and labels arrays are not same "
                             f"shape. Predictions shape: {list(P.shape)}, Labels shape: "
                             f"{list(L.shape)}")
        if L.ndim not in (2, 3, 4):
            raise ValueError(f"labels must be rank 2, 3 or 4, got shape {L.shape}")
        n_cols = L.shape[1]
        n = self._classes_for(n_cols)
        # class axis (1) last, rows on the three leading axes: views only, never copies
        if L.ndim == 2:
            P4, L4 = P[:, None, None, :], L[:, None, None, :]
        elif L.ndim == 3:
            P4, L4 = P.transpose(0, 2, 1)[:, :, None, :], L.transpose(0, 2, 1)[:, :, None, :]
        else:
            P4, L4 = P.transpose(0, 2, 3, 1), L.transpose(0, 2, 3, 1)
        M3 = None if M is None else self._mask_view(M, L.shape)
        if P4.dtype not in (np.float32, np.float64):
            P4 = P4.astype(np.float64)   # uncommon dtypes take a copy; the fast path is float
        if L4.dtype == np.bool_ or L4.dtype == np.int8:
            L4 = L4.view(np.uint8)
        elif L4.dtype not in (np.float32, np.float64, np.int32, np.int64, np.uint8):
            L4 = L4.astype(np.float64)
        if M3 is not None and M3.dtype not in (np.bool_, np.int8, np.uint8, np.float32,
                                               np.float64, np.int32, np.int64):
            M3 = M3 != 0
        if n_cols == 1:
            mode = 0
            threshold = 0.5 if self.binary_decision_threshold is None \
                else self.binary_decision_threshold
        elif self.binary_decision_threshold is not None:
            if n_cols != 2:
                raise ValueError("Binary decision threshold is set, but number of columns for "
                                 f"predictions is {n_cols}. Binary decision threshold can only "
                                 "be used for binary prediction cases")
            mode, threshold = 1, self.binary_decision_threshold
        elif self.cost_array is not None:
            mode, threshold = 2, 0.5
        else:
            mode, threshold = 0, 0.5
        if self._scratch is None:
            # allocated once: a per-thread scratch the kernel counts a batch into
            self._scratch = np.zeros((_counting.max_threads(n), _counting.scratch_len(n)),
                                     dtype=np.int64)
        scratch = self._scratch
        used = _counting.count(P4, L4, M3, mode, threshold, self.cost_array, self.top_n,
                               scratch)
        nans = _counting.batch_slot(scratch, used, n * n, 1)
        if nans:
            raise ValueError(f"Cannot perform evaluation with NaNs present in predictions: "
                             f"{nans} NaNs present in predictions INDArray")

        def commit() -> None:
            # a rejected batch never gets here: every count stays as it was
            if self._n is None:
                self._n = n
                self._confusion = np.zeros((n, n), dtype=np.int64)
            _counting.reduce_into(scratch, used, self._confusion, self._counters)
            self.num_row_counter = int(self._counters[0])
            self.top_n_correct_count = int(self._counters[2])
            self.top_n_total_count = int(self._counters[3])
        return commit

    @staticmethod
    def _mask_view(M: np.ndarray, shape: tuple) -> np.ndarray:
        """The per-example mask as an (n0, n1, n2) view over the rows, or an error."""
        rank, n_cols = len(shape), shape[1]
        if rank == 2:
            if M.shape == (shape[0],):
                return M[:, None, None]
            if M.shape == (shape[0], 1):
                return M[:, :, None]
            if M.shape == shape and n_cols > 1:
                raise ValueError("Per-output masking for Evaluation is not supported")
        elif rank == 3:
            if M.shape == (shape[0], shape[2]):
                return M[:, :, None]
            if M.shape == (shape[0], 1, shape[2]):
                return M[:, 0, :, None]
            if M.shape == shape and n_cols > 1:
                raise ValueError("Per-output masking for Evaluation is not supported")
        else:
            if M.shape == (shape[0], shape[2], shape[3]):
                return M
            if M.shape == (shape[0], 1, shape[2], shape[3]):
                return M[:, 0]
            if M.shape == shape and n_cols > 1:
                raise ValueError("Per-output masking for Evaluation is not supported")
        raise ValueError(f"mask shape {M.shape} does not fit labels of shape {shape}")

    def eval_index(self, predicted: int, actual: int) -> None:
        """Count one example: class `predicted` for true class `actual`.

        Needs a known number of classes (`num_classes`, `labels` or an earlier `eval`).
        """
        if self._n is None:
            raise RuntimeError("Cannot evaluate single example without initializing confusion "
                               "matrix first")
        predicted = index_arg(predicted, "predicted", self._n, "class")
        actual = index_arg(actual, "actual", self._n, "class")
        self._confusion[actual, predicted] += 1
        self._counters[0] += 1
        self.num_row_counter = int(self._counters[0])

    def merge(self, other: "Evaluation") -> None:
        """Add `other`'s counts (confusion matrix, row and top-N counters) to this one."""
        if not isinstance(other, Evaluation):
            raise TypeError(f"can only merge an Evaluation, got {type(other).__name__}")
        if other._confusion is None:
            return
        if self._n is None:
            self._n = other._n
            self._confusion = np.zeros_like(other._confusion)
            if self.label_names is None:
                self.label_names = other.label_names
        elif self._n != other._n:
            raise ValueError(f"Cannot merge evaluations with different numbers of classes: "
                             f"{self._n} and {other._n}")
        self._confusion += other._confusion
        self._counters += other._counters
        self.num_row_counter = int(self._counters[0])
        self.top_n_correct_count = int(self._counters[2])
        self.top_n_total_count = int(self._counters[3])

    def reset(self) -> None:
        """Forget every count (the class count and settings stay)."""
        if self._confusion is not None:
            self._confusion[...] = 0
        self._counters[...] = 0
        self.num_row_counter = self.top_n_correct_count = self.top_n_total_count = 0

    # -- counts -------------------------------------------------------------------------------

    def _need(self, what: str) -> None:
        if self.num_row_counter == 0:
            raise RuntimeError(f"Cannot get {what}: no evaluation has been performed")

    def num_classes(self) -> int:
        """Number of classes (known after the first `eval` unless given)."""
        if self._n is None:
            raise RuntimeError("Cannot get num_classes: no evaluation has been performed")
        return self._n

    def _counts(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        # tp/fp/fn/tn per class follow from the confusion matrix exactly as DL4J counts them
        # row by row (correct: tp(actual), tn for all others; wrong: fp(predicted),
        # fn(actual), tn for every other class); single-column binary is the same matrix
        cm = self._confusion
        tp = np.diagonal(cm).astype(np.int64)
        fp = cm.sum(axis=0) - tp
        fn = cm.sum(axis=1) - tp
        tn = cm.sum() - tp - fp - fn
        return tp, fp, fn, tn

    def _class(self, cls: int) -> tuple[int, int, int, int]:
        c = index_arg(cls, "cls", self._n, "class")
        tp, fp, fn, tn = self._counts()
        return int(tp[c]), int(fp[c]), int(fn[c]), int(tn[c])

    def _sums(self) -> tuple[int, int, int, int]:
        return tuple(int(x.sum()) for x in self._counts())  # type: ignore[return-value]

    def true_positives(self) -> dict[int, int]:
        """tp per class."""
        self._need("true positives")
        return {i: int(v) for i, v in enumerate(self._counts()[0])}

    def false_positives(self) -> dict[int, int]:
        """fp per class."""
        self._need("false positives")
        return {i: int(v) for i, v in enumerate(self._counts()[1])}

    def false_negatives(self) -> dict[int, int]:
        """fn per class."""
        self._need("false negatives")
        return {i: int(v) for i, v in enumerate(self._counts()[2])}

    def true_negatives(self) -> dict[int, int]:
        """tn per class."""
        self._need("true negatives")
        return {i: int(v) for i, v in enumerate(self._counts()[3])}

    def class_count(self, cls: int) -> int:
        """How many evaluated rows have true class `cls`."""
        self._need("class count")
        return int(self._confusion[index_arg(cls, "cls", self._n, "class")].sum())

    def get_confusion_matrix(self) -> np.ndarray:
        """(num_classes, num_classes) ndarray of int64: [actual, predicted] counts (a copy)."""
        if self._confusion is None:
            raise RuntimeError("Cannot get confusion matrix: no evaluation has been performed")
        return self._confusion.copy()

    # -- metrics ------------------------------------------------------------------------------

    def accuracy(self) -> float:
        """Diagonal sum / rows counted."""
        self._need("accuracy")
        return int(np.trace(self._confusion)) / self.num_row_counter

    def top_n_accuracy(self) -> float:
        """Top-N accuracy; `accuracy()` when top_n <= 1, 0 when nothing was top-N counted."""
        self._need("top N accuracy")
        if self.top_n <= 1:
            return self.accuracy()
        if self.top_n_total_count == 0:
            return 0.0
        return self.top_n_correct_count / self.top_n_total_count

    def _binary_default(self) -> int | None:
        if self._n == 2 and self.binary_positive_class is not None:
            return self.binary_positive_class
        return None

    def _per_class_or_avg(self, what: str, cls: int | None, averaging: str | None,
                          edge_case: float, per_class, macro_excludes: bool,
                          micro) -> float:
        self._need(what)
        if cls is not None:
            return per_class(index_arg(cls, "cls", self._n, "class"), edge_case)
        if averaging is None:
            pos = self._binary_default()
            if pos is not None:
                return per_class(pos, edge_case)
            averaging = "macro"
        if _averaging(averaging) == "micro":
            return micro()
        if macro_excludes:
            vals = [per_class(i, -1.0) for i in range(self._n)]
            kept = [v for v in vals if v != -1.0]
            return sum(kept) / len(kept) if kept else math.nan
        return sum(per_class(i, 0.0) for i in range(self._n)) / self._n

    def _precision_c(self, c: int, edge: float) -> float:
        tp, fp, _, _ = self._class(c)
        return _ratio(tp, tp + fp, edge)

    def _recall_c(self, c: int, edge: float) -> float:
        tp, _, fn, _ = self._class(c)
        return _ratio(tp, tp + fn, edge)

    def _fpr_c(self, c: int, edge: float) -> float:
        _, fp, _, tn = self._class(c)
        return _ratio(fp, fp + tn, edge)

    def _fnr_c(self, c: int, edge: float) -> float:
        tp, _, fn, _ = self._class(c)
        return _ratio(fn, fn + tp, edge)

    def _f_beta_c(self, beta: float, c: int, edge: float) -> float:
        p, r = self._precision_c(c, -1.0), self._recall_c(c, -1.0)
        if p == -1.0 or r == -1.0:
            return edge
        return _f_beta(beta, p, r)

    def precision(self, cls: int | None = None, averaging: str | None = None,
                  edge_case: float = 0.0) -> float:
        """tp / (tp + fp) for class `cls`, or averaged.

        Parameters
        ----------
        cls : int, optional
            Class index; `edge_case` is returned when tp + fp == 0.
        averaging : {"macro", "micro"}, optional
            Macro: mean over the classes that are not edge cases (their count is
            `average_precision_num_classes_excluded()`); micro: from the summed counts.
            Without `cls` or `averaging`: `binary_positive_class` with 2 classes, else macro.
        """
        def micro() -> float:
            tp, fp, _, _ = self._sums()
            return _ratio(tp, tp + fp, edge_case)
        return self._per_class_or_avg("precision", cls, averaging, edge_case,
                                      self._precision_c, True, micro)

    def recall(self, cls: int | None = None, averaging: str | None = None,
               edge_case: float = 0.0) -> float:
        """tp / (tp + fn) for class `cls`, or averaged (same rules as `precision`)."""
        def micro() -> float:
            tp, _, fn, _ = self._sums()
            return _ratio(tp, tp + fn, edge_case)
        return self._per_class_or_avg("recall", cls, averaging, edge_case, self._recall_c,
                                      True, micro)

    def false_positive_rate(self, cls: int | None = None, averaging: str | None = None,
                            edge_case: float = 0.0) -> float:
        """fp / (fp + tn) for class `cls`; macro is the plain mean (edge value 0)."""
        def micro() -> float:
            _, fp, _, tn = self._sums()
            return _ratio(fp, fp + tn, edge_case)
        return self._per_class_or_avg("false positive rate", cls, averaging, edge_case,
                                      self._fpr_c, False, micro)

    def false_negative_rate(self, cls: int | None = None, averaging: str | None = None,
                            edge_case: float = 0.0) -> float:
        """fn / (fn + tp) for class `cls`; macro is the plain mean (edge value 0).

        Micro uses the summed (fn, tp) -- ND4J's (fn, tn) is a bug this port fixes
        (docs/porting-from-dl4j.md).
        """
        def micro() -> float:
            tp, _, fn, _ = self._sums()
            return _ratio(fn, fn + tp, edge_case)
        return self._per_class_or_avg("false negative rate", cls, averaging, edge_case,
                                      self._fnr_c, False, micro)

    def false_alarm_rate(self, cls: int | None = None, averaging: str | None = None) -> float:
        """(false_positive_rate + false_negative_rate) / 2 with the same arguments."""
        self._need("false alarm rate")
        return (self.false_positive_rate(cls, averaging)
                + self.false_negative_rate(cls, averaging)) / 2.0

    def f_beta(self, beta: float, cls: int | None = None, averaging: str | None = None,
               edge_case: float = 0.0) -> float:
        """(1 + b^2) P R / (b^2 P + R); 0 when P or R is 0.

        Per class, `edge_case` when precision or recall is an edge case. Macro averages over
        the classes that are not (`average_f_beta_num_classes_excluded`). As in ND4J, with
        exactly 2 classes an explicit `averaging` is ignored and class 1's value returned.
        """
        self._need("fBeta")
        beta = float(beta)
        if cls is not None:
            return self._f_beta_c(beta, index_arg(cls, "cls", self._n, "class"),
                                 edge_case)
        if averaging is not None:
            averaging = _averaging(averaging)
            if self._n == 2:
                tp, fp, fn, _ = self._class(1)
                return _f_beta(beta, _ratio(tp, tp + fp, 0.0), _ratio(tp, tp + fn, 0.0))
        else:
            pos = self._binary_default()
            if pos is not None:
                return self._f_beta_c(beta, pos, edge_case)
            averaging = "macro"
        if averaging == "micro":
            tp, fp, fn, _ = self._sums()
            return _f_beta(beta, _ratio(tp, tp + fp, 0.0), _ratio(tp, tp + fn, 0.0))
        vals = [self._f_beta_c(beta, i, -1.0) for i in range(self._n)]
        kept = [v for v in vals if v != -1.0]
        return sum(kept) / len(kept) if kept else math.nan

    def f1(self, cls: int | None = None, averaging: str | None = None,
           edge_case: float = 0.0) -> float:
        """`f_beta` with beta = 1."""
        return self.f_beta(1.0, cls, averaging, edge_case)

    def g_measure(self, cls: int | None = None, averaging: str = "macro") -> float:
        """sqrt(precision * recall) per class; macro is the plain mean, micro from sums."""
        self._need("gMeasure")
        if cls is not None:
            c = index_arg(cls, "cls", self._n, "class")
            return math.sqrt(self._precision_c(c, 0.0) * self._recall_c(c, 0.0))
        if _averaging(averaging) == "micro":
            tp, fp, fn, _ = self._sums()
            return math.sqrt(_ratio(tp, tp + fp, 0.0) * _ratio(tp, tp + fn, 0.0))
        return sum(math.sqrt(self._precision_c(i, 0.0) * self._recall_c(i, 0.0))
                   for i in range(self._n)) / self._n

    def matthews_correlation(self, cls: int | None = None, averaging: str = "macro") -> float:
        """(tp tn - fp fn) / sqrt((tp+fp)(tp+fn)(tn+fp)(tn+fn)); NaN for a zero denominator.

        Macro is the plain mean of the per-class values (NaN if any is NaN), micro uses the
        summed counts.
        """
        self._need("matthewsCorrelation")
        if cls is not None:
            return _mcc(*self._class(cls))
        if _averaging(averaging) == "micro":
            return _mcc(*self._sums())
        return sum(_mcc(*self._class(i)) for i in range(self._n)) / self._n

    def _excluded(self, what: str, per_class) -> int:
        self._need(what)
        return sum(1 for i in range(self._n) if per_class(i, -1.0) == -1.0)

    def average_precision_num_classes_excluded(self) -> int:
        """Classes left out of macro precision (tp + fp == 0)."""
        return self._excluded("precision", self._precision_c)

    def average_recall_num_classes_excluded(self) -> int:
        """Classes left out of macro recall (tp + fn == 0)."""
        return self._excluded("recall", self._recall_c)

    def average_f_beta_num_classes_excluded(self, beta: float = 1.0) -> int:
        """Classes left out of macro F-beta (precision or recall an edge case)."""
        return self._excluded("fBeta", lambda c, e: self._f_beta_c(beta, c, e))

    def average_f1_num_classes_excluded(self) -> int:
        """Classes left out of macro F1."""
        return self.average_f_beta_num_classes_excluded(1.0)

    def score_for_metric(self, metric: Metric) -> float:
        """ACCURACY, F1, PRECISION, RECALL: the no-argument accessors; GMEASURE, MCC: macro."""
        metric = Metric(metric) if not isinstance(metric, Metric) else metric
        if metric is Metric.ACCURACY:
            return self.accuracy()
        if metric is Metric.F1:
            return self.f1()
        if metric is Metric.PRECISION:
            return self.precision()
        if metric is Metric.RECALL:
            return self.recall()
        if metric is Metric.GMEASURE:
            return self.g_measure(averaging="macro")
        return self.matthews_correlation(averaging="macro")

    # -- text ---------------------------------------------------------------------------------

    def class_label(self, cls: int) -> str:
        """The name of class `cls` ("0", "1", ... unless `labels` were given)."""
        if self.label_names is not None:
            return self.label_names[int(cls)]
        return str(int(cls))

    def confusion_matrix(self) -> str:
        """The confusion matrix as text in DL4J's layout (rows actual, columns predicted)."""
        if self._confusion is None:
            return "Confusion matrix: <no data>"
        n = self._n
        # DL4J sizes columns with ceil(log10(max)), one digit short at powers of ten; the
        # string length is what it means
        digits = max(1, len(str(max(1, int(self._confusion.max()), n))))
        w = digits + 1
        lines = ["".join(f"{i:>{w}d}" for i in range(n)), "-" * (w * n + 1)]
        for a in range(n):
            row = "".join(f"{int(v):>{w}d}" for v in self._confusion[a])
            lines.append(f"{row} | {a} = {self.class_label(a)}")
        lines.append("")
        lines.append("Confusion matrix format: Actual (rowClass) predicted as (columnClass) "
                     "N times")
        return "\n".join(lines)

    def stats(self, suppress_warnings: bool = False, include_confusion: bool | None = None
              ) -> str:
        """Summary text in DL4J's layout: metrics, per-class table, confusion matrix.

        The confusion matrix is included up to 20 classes unless `include_confusion` says
        otherwise.
        """
        if self.num_row_counter == 0:
            return "Evaluation: No data available (no evaluation has been performed)"
        n = self._n
        tp, fp, fn, tn = self._counts()
        out = ["", "", "========================Evaluation Metrics========================",
               f" # of classes:    {n}",
               f" Accuracy:        {self.accuracy():.4f}"]
        if self.top_n > 1:
            out.append(f" Top {self.top_n} Accuracy:  {self.top_n_accuracy():.4f}")

        def excl(k: int) -> str:
            if n > 2 and k > 0:
                return f"\t({k} class{'es' if k > 1 else ''} excluded from average)"
            return ""
        out.append(f" Precision:       {self.precision():.4f}"
                   + excl(self.average_precision_num_classes_excluded()))
        out.append(f" Recall:          {self.recall():.4f}"
                   + excl(self.average_recall_num_classes_excluded()))
        out.append(f" F1 Score:        {self.f1():.4f}"
                   + excl(self.average_f1_num_classes_excluded()))
        pos = self._binary_default()
        if pos is None:
            out.append("Precision, recall & F1: macro-averaged (equally weighted avg. of "
                       f"{n} classes)")
        else:
            name = f', "{self.label_names[pos]}"' if self.label_names is not None else ""
            out.append(f"Precision, recall & F1: reported for positive class "
                       f"(class {pos}{name}) only")
        if self.binary_decision_threshold is not None:
            out.append(f"Binary decision threshold: {self.binary_decision_threshold}")
        if self.cost_array is not None:
            out.append(f"Cost array: {[float(c) for c in self.cost_array]}")
        if not suppress_warnings:
            never_pred = [i for i in range(n) if tp[i] == 0 and fp[i] == 0]
            never_lab = [i for i in range(n) if tp[i] == 0 and fn[i] == 0]
            for lst, metric, why in ((never_pred, "precision", "never predicted by the model"),
                                     (never_lab, "recall", "never present in the labels")):
                if lst:
                    ww = "was" if len(lst) == 1 else "were"
                    out.append(f"Warning: {len(lst)} class{'' if len(lst) == 1 else 'es'} "
                               f"{ww} {why} and {ww} excluded from average {metric}")
                    out.append(f"Classes excluded from average {metric}: {lst}")
        out.append("")
        out.append("=========================Per-class Metrics========================")
        name_w = max(5, max(len(self.class_label(i)) for i in range(n)))
        out.append(f" {'Label':<{name_w}}  Precision  Recall     F1         "
                   "TP       FP       FN       TN       Count")
        for i in range(n):
            out.append(f" {self.class_label(i):<{name_w}}  "
                       f"{self._precision_c(i, 0.0):<9.4f}  {self._recall_c(i, 0.0):<9.4f}  "
                       f"{self._f_beta_c(1.0, i, 0.0):<9.4f}  {int(tp[i]):<7d}  "
                       f"{int(fp[i]):<7d}  {int(fn[i]):<7d}  {int(tn[i]):<7d}  "
                       f"{int(tp[i] + fn[i])}")
        if include_confusion is None:
            include_confusion = n <= CONFUSION_PRINT_MAX_CLASSES
        out.append("")
        if include_confusion:
            out.append("=========================Confusion Matrix=========================")
            out.append(self.confusion_matrix())
        else:
            out.append(f"Note: Confusion matrix not generated due to space requirements for "
                       f"{n} classes.")
            out.append("Use stats(include_confusion=True) to generate anyway, or "
                       "confusion_matrix() / get_confusion_matrix()")
        out.append("==================================================================")
        return "\n".join(out)

    def __repr__(self) -> str:
        return (f"Evaluation(num_classes={self._n}, rows={self.num_row_counter}, "
                f"top_n={self.top_n})")

    # -- serialisation ------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """Every setting and count as plain Python values (JSON-ready)."""
        return {
            "type": "Evaluation",
            "num_classes": self._n,
            "labels": None if self.label_names is None else list(self.label_names),
            "top_n": self.top_n,
            "binary_decision_threshold": self.binary_decision_threshold,
            "cost_array": None if self.cost_array is None else
            [float(c) for c in self.cost_array],
            "binary_positive_class": self.binary_positive_class,
            "num_row_counter": self.num_row_counter,
            "top_n_correct_count": self.top_n_correct_count,
            "top_n_total_count": self.top_n_total_count,
            "confusion": None if self._confusion is None else self._confusion.tolist(),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Evaluation":
        """Rebuild an Evaluation from `to_dict()` output; ValueError naming the field for
        anything else (every field is checked before anything is allocated)."""
        fields(d, "Evaluation", ("type", "Evaluation"), _DICT_FIELDS)
        counts = {k: count_arg(d[k], f"Evaluation.from_dict: {k}")
                  for k in ("num_row_counter", "top_n_correct_count", "top_n_total_count")}
        n, confusion = d["num_classes"], d["confusion"]
        if (n is None) != (confusion is None):
            raise ValueError("Evaluation.from_dict: num_classes and confusion must both be "
                             "null or both be set")
        if n is not None:
            try:
                int_arg(n, "Evaluation.from_dict: num_classes", 2)
            except TypeError as exc:
                raise ValueError(str(exc)) from None
            # the confusion matrix's lists are checked before an n x n matrix is allocated
            conf = table_arg(confusion, "Evaluation.from_dict: confusion", (n, n), int)
        try:
            ev = cls(num_classes=n, labels=d["labels"], top_n=d["top_n"],
                     binary_decision_threshold=d["binary_decision_threshold"],
                     cost_array=d["cost_array"], binary_positive_class=d["binary_positive_class"])
        except (TypeError, ValueError) as exc:
            raise ValueError(f"Evaluation.from_dict: {exc}") from None
        if n is not None:
            ev._confusion[...] = conf
        ev._counters[:] = [counts["num_row_counter"], 0, counts["top_n_correct_count"],
                           counts["top_n_total_count"]]
        ev.num_row_counter = counts["num_row_counter"]
        ev.top_n_correct_count = counts["top_n_correct_count"]
        ev.top_n_total_count = counts["top_n_total_count"]
        return ev

    def to_json(self) -> str:
        """`to_dict()` as JSON text."""
        return json.dumps(self.to_dict())

    @classmethod
    def from_json(cls, text: str) -> "Evaluation":
        """Rebuild an Evaluation from `to_json()` output."""
        return cls.from_dict(parse_json(text, "Evaluation"))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Evaluation):
            return NotImplemented
        return self.to_dict() == other.to_dict()

    __hash__ = None  # type: ignore[assignment]

    # -- plot ---------------------------------------------------------------------------------

    def plot_confusion_matrix(self, ax: Any = None, normalize: str | None = None,
                              cmap: str = "Blues", values_format: str | None = None) -> Any:
        """Draw the confusion matrix (scikit-learn's ConfusionMatrixDisplay style).

        Parameters
        ----------
        ax : matplotlib Axes, optional
            Drawn into a new figure when omitted.
        normalize : {"true", "pred", "all"}, optional
            Normalise over rows (actual), columns (predicted) or everything.
        cmap : str
        values_format : str, optional
            Format of the cell texts ("d" for counts, ".2g" when normalised by default).

        Returns
        -------
        matplotlib.axes.Axes
        """
        self._need("confusion matrix")
        import matplotlib.pyplot as plt  # optional dependency, only for plots

        cm = self._confusion.astype(np.float64)
        if normalize is not None:
            with np.errstate(invalid="ignore", divide="ignore"):
                if normalize == "true":
                    cm = cm / cm.sum(axis=1, keepdims=True)
                elif normalize == "pred":
                    cm = cm / cm.sum(axis=0, keepdims=True)
                elif normalize == "all":
                    cm = cm / cm.sum()
                else:
                    raise ValueError(f"normalize must be 'true', 'pred', 'all' or None, "
                                     f"got {normalize!r}")
            cm = np.nan_to_num(cm)
        if ax is None:
            _, ax = plt.subplots()
        n = self._n
        im = ax.imshow(cm, interpolation="nearest", cmap=cmap)
        ax.figure.colorbar(im, ax=ax)
        fmt = values_format or ("d" if normalize is None else ".2g")
        vmax = cm.max() if cm.size else 0.0
        for a in range(n):
            for p in range(n):
                v = int(cm[a, p]) if fmt == "d" else cm[a, p]
                ax.text(p, a, format(v, fmt), ha="center", va="center",
                        color="white" if cm[a, p] > vmax / 2 else "black")
        names = [self.class_label(i) for i in range(n)]
        ax.set(xticks=range(n), yticks=range(n), xticklabels=names, yticklabels=names,
               xlabel="Predicted label", ylabel="True label")
        return ax

