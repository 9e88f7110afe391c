"""Regression metrics accumulated over batches: DL4J's ``RegressionEvaluation``.

Per output column: mean squared error, mean absolute error, root mean squared error, relative
squared error, R² (coefficient of determination) and the Pearson correlation of labels and
predictions, plus their plain means over the columns. Batches are counted in place by a nogil
Cython kernel (`ndws.evaluation._regression_kernels`): no temporary the size of a batch.

Deliberate differences from DL4J, all in the direction of the same numbers computed better:

- running means and centred moments (Chan's pairwise update) instead of raw sums of squares,
  so R², RSE and the correlation keep their digits when the labels' mean is large against their
  spread; merge uses the same update, so merge equals one-shot evaluation up to rounding;
- NaN predictions are rejected, with the message DL4J's classification ``Evaluation`` uses
  (DL4J's regression evaluation silently propagates them);
- metrics before any evaluated example raise (DL4J throws a NullPointerException).
"""
from __future__ import annotations

import enum
import json
import math
from typing import Any, Sequence

import numpy as np

from ndws._core import NDArray, check
from ndws.evaluation import _regression_kernels as _k
from ndws.evaluation._args import fields, int_arg, parse_json, table_arg

__all__ = ["RegressionEvaluation", "RegressionMetric"]

#: DL4J's ``Nd4j.EPS_THRESHOLD``: below this |sum (y - mean)^2| the relative squared error is
#: reported as +inf (DL4J's rule, kept so the figures agree)
EPS_THRESHOLD = 1e-5
DEFAULT_PRECISION = 5

#: the most columns a RegressionEvaluation takes (its state is a few float64 rows per column)
MAX_COLUMNS = 2**24

# rows of the kernel's (8, k) state (see _regression_kernels.pyx)
_COUNT, _MEAN_Y, _MEAN_P, _M2_Y, _M2_P, _C_YP, _SSE, _SAE = range(8)


class RegressionMetric(enum.Enum):
    """DL4J's ``RegressionEvaluation.Metric``: the averaged metric `score_for_metric` returns."""

    MSE = "MSE"
    MAE = "MAE"
    RMSE = "RMSE"
    RSE = "RSE"
    PC = "PC"
    R2 = "R2"

    def minimize(self) -> bool:
        """True when lower is better (errors); False for R² and the correlation."""
        return self not in (RegressionMetric.R2, RegressionMetric.PC)


def _div(a: float, b: float) -> float:
    # Java's double division, which DL4J's formulas rely on: x/0 is +-inf, 0/0 is NaN (Python
    # raises ZeroDivisionError and NumPy scalars warn, which the test suite makes an error)
    if b != 0:
        return a / b
    if a != a or a == 0:
        return math.nan
    return math.copysign(math.inf, a) * math.copysign(1.0, b)


def _java_e(x: float, precision: int) -> str:
    # Java's %.Ne: like C's except for the non-finite spellings
    if x != x:
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return f"{x:.{precision}e}"


def _as_view(x: Any, role: str) -> np.ndarray:
    # NDArrays are validated (a stale one raises WorkspaceError) and read zero-copy
    if isinstance(x, NDArray):
        check(x, "RegressionEvaluation.eval", role)
    return np.asarray(x)


def _as_float(a: np.ndarray, role: str) -> np.ndarray:
    # float32/float64 are read in place; other real dtypes take a float64 copy (the fallback
    # path: a temporary the size of the batch, so not the steady-state case)
    if a.dtype == np.float32 or a.dtype == np.float64:
        return a
    if a.dtype.kind in "biuf":
        return a.astype(np.float64)
    raise TypeError(f"{role} must be a real numeric array (float32 or float64 are read in "
                    f"place), got dtype {a.dtype}")


class RegressionEvaluation:
    """Per-column regression metrics over a stream of batches (DL4J's ``RegressionEvaluation``).

    Parameters
    ----------
    columns : None, int or sequence of str, optional
        None (the default): the column count is taken from the first batch. An int ``k``: ``k``
        columns named ``col_0`` ... ``col_{k-1}``. A sequence: the column names.
    precision : int, optional
        Digits after the point in `stats` (DL4J's default 5).
    axis : int, optional
        The axis of rank-3 and rank-4 inputs that holds the columns (1: NCW / NCHW, DL4J's
        default; 2 for NWC, 3 for NHWC). Rank-2 inputs always have their columns on axis 1.

    Examples
    --------
    >>> import numpy as np
    >>> ev = RegressionEvaluation(["price"])
    >>> ev.eval(np.array([[1.0], [2.0], [3.0]]), np.array([[1.5], [2.0], [2.5]]))
    >>> ev.mean_squared_error(0), ev.mean_absolute_error(0)
    (0.16666666666666666, 0.3333333333333333)
    >>> round(ev.r_squared(0), 6)
    0.75
    """

    Metric = RegressionMetric

    def __init__(self, columns: None | int | Sequence[str] = None,
                 precision: int = DEFAULT_PRECISION, axis: int = 1) -> None:
        if isinstance(columns, (bool, np.bool_)) or not (
                columns is None or isinstance(columns, (int, np.integer))
                or (isinstance(columns, Sequence) and not isinstance(columns, (str, bytes)))):
            raise TypeError(f"columns must be None, an int or a sequence of column names, got "
                            f"{columns!r}")
        if isinstance(columns, (int, np.integer)):
            # a cap, so a typo can't make the state (and the names) eat the machine
            columns = int_arg(columns, "columns", 1, MAX_COLUMNS)
            names: list[str] | None = [f"col_{i}" for i in range(columns)]
        elif columns is None or len(columns) == 0:
            names = None
        else:
            names = [str(c) for c in columns]
        if isinstance(precision, bool) or not isinstance(precision, (int, np.integer)) \
                or not 0 <= precision <= 100:
            raise ValueError(f"precision must be a non-negative int (at most 100), got "
                             f"{precision!r}")
        if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)) or not 1 <= axis <= 3:
            raise ValueError(f"axis must be a positive int (the column axis, 1 to 3), got "
                             f"{axis!r}")
        self._given_names = names
        self.precision = int(precision)
        self.axis = int(axis)
        self.reset()

    # -- state ----------------------------------------------------------------------------------

    def reset(self) -> None:
        """Forget every evaluated example (the column names given at construction are kept)."""
        self._names = list(self._given_names) if self._given_names is not None else None
        self._state: np.ndarray | None = None
        self._scratch: np.ndarray | None = None
        if self._names is not None:
            self._initialize(len(self._names))

    def _initialize(self, k: int) -> None:
        # the state and the per-batch scratch are allocated once per evaluation, never per batch
        if self._names is None or len(self._names) != k:
            self._names = [f"col_{i}" for i in range(k)]
        self._state = np.zeros((_k.N_STATE_ROWS, k), dtype=np.float64)
        self._scratch = np.zeros((_k.N_STATE_ROWS, k), dtype=np.float64)

    @property
    def column_names(self) -> list[str] | None:
        """The column names (None before the first batch when no columns were given)."""
        return None if self._names is None else list(self._names)

    def num_columns(self) -> int:
        """The number of columns (0 before the first batch when no columns were given)."""
        return 0 if self._names is None else len(self._names)

    @property
    def example_count_per_column(self) -> np.ndarray:
        """``(k,) ndarray of float64``: examples counted per column (masks count per column)."""
        if self._state is None:
            return np.zeros(0)
        return self._state[_COUNT].copy()

    # -- accumulation ---------------------------------------------------------------------------

    def eval(self, labels: Any, predictions: Any, mask: Any = None) -> None:
        """Accumulate one batch.

        Parameters
        ----------
        labels, predictions : (n_samples, k) NDArray or ndarray of float32 or float64
            Of one shape. Also (n_samples,) for one column, and rank 3 ``(n, k, T)`` or rank 4
            ``(n, k, H, W)`` with the columns on `axis`, every (example, step) counted as a row.
            Labels and predictions may differ in dtype; other real dtypes are converted (a
            copy).
        mask : NDArray or ndarray, optional
            Binary (nonzero = counted). Per example: the labels' shape without the column axis,
            e.g. ``(n,)`` or ``(n, T)``, or with extent 1 there, e.g. ``(n, 1)``. Per output:
            the labels' shape; each column then counts only its unmasked entries.

        Raises
        ------
        ndws.WorkspaceError
            An NDArray argument is stale.
        ValueError
            Shapes differ, the column count differs from the evaluation's, or a counted
            prediction is NaN (the batch is then not counted at all).
        TypeError
            A non-numeric dtype.
        """
        self._prepare(labels, predictions, mask)()

    def _prepare(self, labels: Any, predictions: Any, mask: Any = None):
        """Check and reduce a batch without changing the evaluation; returns the commit that
        adds it (which can't fail). `eval` is both; `evaluate` checks every evaluation
        before committing any."""
        y = _as_view(labels, "labels")
        p = _as_view(predictions, "predictions")
        if y.shape != p.shape:
            raise ValueError(f"Labels and predictions must have the same shape: got labels "
                             f"{y.shape} and predictions {p.shape}")
        if y.ndim == 1:
            y = y.reshape(-1, 1)     # views: a 1-D array is one column
            p = p.reshape(-1, 1)
        if not 2 <= y.ndim <= 4:
            raise ValueError(f"labels must have rank 1 to 4, got shape {y.shape}")
        axis = 1 if y.ndim == 2 else self.axis
        if axis >= y.ndim:
            raise ValueError(f"axis {axis} is out of range for rank-{y.ndim} labels of shape "
                             f"{y.shape}")
        y = _as_float(y, "labels")
        p = _as_float(p, "predictions")
        k = y.shape[axis]
        if k == 0:
            raise ValueError(f"labels must have at least one column, got shape {y.shape}")
        if self._state is not None and k != self.num_columns():
            raise ValueError(
                f"RegressionEvaluation.eval: labels and predictions have {k} columns, but this "
                f"evaluation has {self.num_columns()} (given at construction or from its first "
                f"batch); every batch must have the same columns (reset() to start over)")
        m = None
        code = 0
        if mask is not None:
            m = self._mask(mask, y.shape, axis, labels)
            code = _k.mask_kind(m.dtype)
        # the batch's moments go to a scratch of its own (the state's is reused once the
        # evaluation has one); only the commit touches the state
        scratch = self._scratch if self._state is not None else np.zeros(
            (_k.N_STATE_ROWS, k), dtype=np.float64)
        nan_count = _k.batch_moments(y, p, m, code, axis, scratch)
        if nan_count:
            raise ValueError(f"Cannot perform evaluation with NaNs present in predictions: "
                             f"{nan_count} NaNs present in predictions INDArray")

        def commit() -> None:
            if self._state is None:
                self._initialize(k)
            _k.combine(self._state, scratch)
        return commit

    @staticmethod
    def _mask(mask: Any, shape: tuple, axis: int, labels: Any) -> np.ndarray:
        m = _as_view(mask, "mask")
        if m.ndim == len(shape) - 1:
            m = np.expand_dims(m, axis)      # per-example mask: a view with extent 1 on axis
        ok = m.ndim == len(shape) and all(
            md == sd or (d == axis and md == 1) for d, (md, sd) in enumerate(zip(m.shape, shape)))
        if not ok:
            raise ValueError(f"mask of shape {np.shape(mask)} does not fit labels of shape "
                             f"{np.shape(labels)}: expected the labels' shape (per output) or it "
                             f"without axis {axis} or with extent 1 there (per example)")
        if _k.mask_kind(m.dtype) < 0:
            if m.dtype.kind not in "biuf":
                raise TypeError(f"mask must be a numeric or bool array, got dtype {m.dtype}")
            m = m != 0
        return m

    def merge(self, other: "RegressionEvaluation") -> None:
        """Add ``other``'s examples to this evaluation (as if this one had seen them)."""
        if not isinstance(other, RegressionEvaluation):
            raise TypeError(f"other must be a RegressionEvaluation, got {type(other).__name__}")
        if other._state is None or not other._state[_COUNT].any():
            return
        if self._state is None or not self._state[_COUNT].any():
            if self._state is not None and self.num_columns() != other.num_columns():
                raise ValueError(f"Cannot merge RegressionEvaluation instances with different "
                                 f"numbers of columns: {self.num_columns()} and "
                                 f"{other.num_columns()}")
            # DL4J copies the other side's names and precision into an empty evaluation
            self._names = list(other._names)
            self.precision = other.precision
            self._state = other._state.copy()
            self._scratch = np.zeros_like(other._state)
            return
        if self.num_columns() != other.num_columns():
            raise ValueError(f"Cannot merge RegressionEvaluation instances with different "
                             f"numbers of columns: {self.num_columns()} and "
                             f"{other.num_columns()}")
        _k.combine(self._state, other._state)

    # -- per-column metrics ---------------------------------------------------------------------

    def _col(self, column: int, what: str) -> np.ndarray:
        if self._state is None or not self._state[_COUNT].any():
            raise RuntimeError(f"Cannot get {what}: no evaluation has been performed")
        k = self.num_columns()
        if isinstance(column, bool) or not isinstance(column, (int, np.integer)) \
                or not 0 <= column < k:
            raise ValueError(f"column must be an int in [0, {k}), got {column!r}")
        return self._state[:, column]

    def mean_squared_error(self, column: int) -> float:
        """MSE of a column: mean of (p - y)²."""
        s = self._col(column, "mean squared error")
        return _div(float(s[_SSE]), float(s[_COUNT]))

    def mean_absolute_error(self, column: int) -> float:
        """MAE of a column: mean of |p - y|."""
        s = self._col(column, "mean absolute error")
        return _div(float(s[_SAE]), float(s[_COUNT]))

    def root_mean_squared_error(self, column: int) -> float:
        """RMSE of a column: √MSE."""
        s = self._col(column, "root mean squared error")
        return math.sqrt(_div(float(s[_SSE]), float(s[_COUNT])))

    def relative_squared_error(self, column: int) -> float:
        """RSE of a column: Σ(p - y)² / Σ(y - ȳ)², +inf when the denominator is below 1e-5."""
        s = self._col(column, "relative squared error")
        den = float(s[_M2_Y])
        return float(s[_SSE]) / den if abs(den) > EPS_THRESHOLD else math.inf

    def r_squared(self, column: int) -> float:
        """R² of a column: 1 - Σ(p - y)² / Σ(y - ȳ)² (scikit-learn's ``r2_score``)."""
        s = self._col(column, "R^2")
        return _div(float(s[_M2_Y]) - float(s[_SSE]), float(s[_M2_Y]))

    def pearson_correlation(self, column: int) -> float:
        """Sample Pearson correlation of a column's labels and predictions."""
        s = self._col(column, "Pearson correlation")
        return _div(float(s[_C_YP]), math.sqrt(float(s[_M2_Y])) * math.sqrt(float(s[_M2_P])))

    # -- averages over the columns --------------------------------------------------------------

    def _average(self, f) -> float:
        if self._state is None or not self._state[_COUNT].any():
            f(0)    # raises the metric's own message
        k = self.num_columns()
        return sum(f(i) for i in range(k)) / k

    def average_mean_squared_error(self) -> float:
        """Mean over the columns of `mean_squared_error`."""
        return self._average(self.mean_squared_error)

    def average_mean_absolute_error(self) -> float:
        """Mean over the columns of `mean_absolute_error`."""
        return self._average(self.mean_absolute_error)

    def average_root_mean_squared_error(self) -> float:
        """Mean over the columns of `root_mean_squared_error`."""
        return self._average(self.root_mean_squared_error)

    def average_relative_squared_error(self) -> float:
        """Mean over the columns of `relative_squared_error`."""
        return self._average(self.relative_squared_error)

    def average_r_squared(self) -> float:
        """Mean over the columns of `r_squared` (scikit-learn's ``uniform_average``)."""
        return self._average(self.r_squared)

    def average_pearson_correlation(self) -> float:
        """Mean over the columns of `pearson_correlation`."""
        return self._average(self.pearson_correlation)

    def score_for_metric(self, metric: RegressionMetric | str) -> float:
        """The column average of ``metric`` (a `RegressionMetric` or its name, e.g. ``"R2"``)."""
        if isinstance(metric, str):
            try:
                metric = RegressionMetric[metric]
            except KeyError:
                raise ValueError(f"Unknown metric: {metric!r}; expected one of "
                                 f"{[m.name for m in RegressionMetric]}") from None
        if not isinstance(metric, RegressionMetric):
            raise TypeError(f"Can't get value for non-regression Metric {metric!r}")
        return {
            RegressionMetric.MSE: self.average_mean_squared_error,
            RegressionMetric.MAE: self.average_mean_absolute_error,
            RegressionMetric.RMSE: self.average_root_mean_squared_error,
            RegressionMetric.RSE: self.average_relative_squared_error,
            RegressionMetric.PC: self.average_pearson_correlation,
            RegressionMetric.R2: self.average_r_squared,
        }[metric]()

    get_value = score_for_metric

    # -- text and serialisation -----------------------------------------------------------------

    def stats(self) -> str:
        """DL4J's table: one row per column with MSE, MAE, RMSE, RSE, PC and R^2."""
        if self._state is None or not self._state[_COUNT].any():
            return "RegressionEvaluation: No Data"
        lw = max(len(s) for s in self._names) + 5
        cw = self.precision + 10
        lines = [f"{'Column':<{lw}}" + "".join(
            f"{h:<{cw}}" for h in ("MSE", "MAE", "RMSE", "RSE", "PC", "R^2"))]
        for i, name in enumerate(self._names):
            vals = (self.mean_squared_error(i), self.mean_absolute_error(i),
                    self.root_mean_squared_error(i), self.relative_squared_error(i),
                    self.pearson_correlation(i), self.r_squared(i))
            lines.append(f"{name:<{lw}}" + "".join(
                f"{_java_e(v, self.precision):<{cw}}" for v in vals))
        return "\n".join(lines) + "\n"

    def __str__(self) -> str:
        return self.stats()

    def __repr__(self) -> str:
        n = 0 if self._state is None else int(self._state[_COUNT].max(initial=0))
        return (f"RegressionEvaluation(columns={self._names!r}, precision={self.precision}, "
                f"examples={n})")

    def to_dict(self) -> dict:
        """A JSON-compatible dict of the whole state (`from_dict` restores it exactly)."""
        return {
            "@class": "RegressionEvaluation",
            "columns": None if self._names is None else list(self._names),
            "given_columns": None if self._given_names is None else list(self._given_names),
            "precision": self.precision,
            "axis": self.axis,
            "state": None if self._state is None else self._state.tolist(),
        }

    @classmethod
    def from_dict(cls, d: dict) -> "RegressionEvaluation":
        """Rebuild an evaluation from `to_dict`'s output; ValueError naming the field for
        anything else (every field is checked before anything is allocated)."""
        owner = "RegressionEvaluation.from_dict"
        fields(d, "RegressionEvaluation", ("@class", "RegressionEvaluation"),
               ("columns", "given_columns", "precision", "axis", "state"))
        for key in ("columns", "given_columns"):
            names = d[key]
            if names is not None and (not isinstance(names, list)
                                      or not 1 <= len(names) <= MAX_COLUMNS
                                      or not all(isinstance(c, str) for c in names)):
                raise ValueError(f"{owner}: {key} must be null or a list of 1 to {MAX_COLUMNS} "
                                 f"column names, got {names!r:.40}")
        names, state = d["columns"], d["state"]
        if (names is None) != (state is None):
            raise ValueError(f"{owner}: columns and state must both be null or both be set")
        if state is not None:
            state = table_arg(state, f"{owner}: state", (_k.N_STATE_ROWS, len(names)),
                              (int, float))
        try:
            ev = cls(d["given_columns"], precision=d["precision"], axis=d["axis"])
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{owner}: {exc}") from None
        if state is not None:
            ev._names = list(names)
            ev._state = np.ascontiguousarray(state)
            ev._scratch = np.zeros_like(ev._state)
        return ev

    def to_json(self) -> str:
        """`to_dict` as JSON text."""
        return json.dumps(self.to_dict())

    @classmethod
    def from_json(cls, text: str) -> "RegressionEvaluation":
        """Rebuild an evaluation from `to_json`'s output."""
        return cls.from_dict(parse_json(text, "RegressionEvaluation"))
