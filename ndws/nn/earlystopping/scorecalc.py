"""Score calculators of early stopping (DL4J's ``org.deeplearning4j.earlystopping.scorecalc``):
the held-out score of a network after an epoch, and whether lower is better.

Each takes the held-out data as the network's ``do_evaluation`` does (a DataSetIterator, a
list of DataSets, a DataSet, or ``(features, labels)`` arrays; for a `ComputationGraph` also
MultiDataSets, their iterators, and ``(features, labels)`` as lists of arrays, one per input and
output), read once per evaluated epoch: a generator, which can be read only once, is refused. A
calculator talks to the network only through ``score(ds)`` and ``do_evaluation(data,
evaluation)``, which every network type has; a graph's evaluation counts its first output.

Examples
--------
>>> from ndws.nn.earlystopping import ClassificationScoreCalculator
>>> from ndws.evaluation import Evaluation
>>> ClassificationScoreCalculator(Evaluation.Metric.F1, []).minimize_score()
False
"""
from __future__ import annotations

import enum
from typing import Any

from ndws.data.dataset import DataSet, MultiDataSet
from ndws.evaluation import (ROC, Evaluation, Metric, RegressionEvaluation, RegressionMetric,
                             ROCBinary, ROCMultiClass)
from ndws.nn._fit_options import labels_array, reiterable
from ndws.nn.inputs import member

__all__ = ["ScoreCalculator", "DataSetLossCalculator", "ClassificationScoreCalculator",
           "ROCScoreCalculator", "RegressionScoreCalculator"]

# rows of (features, labels) arrays scored per pass (bounds the temporaries)
_CHUNK = 1024


def _held_out(owner: str, data: Any) -> Any:
    # the held-out data as a re-iterable source of DataSets, or (features, labels) arrays
    where = f"{owner}.iterator"
    if isinstance(data, (DataSet, MultiDataSet)):
        return [data]
    if (isinstance(data, tuple) and len(data) == 2
            and not isinstance(data[0], (DataSet, MultiDataSet))):
        return data
    if isinstance(data, (str, bytes)) or not hasattr(data, "__iter__"):
        raise TypeError(f"{where}: expected a DataSetIterator, a list of DataSets, a DataSet or "
                        f"(features, labels) arrays, got {type(data).__name__}")
    return data if isinstance(data, list) else reiterable(data, where=where)


def _chunks(owner: str, data: tuple) -> Any:
    # (features, labels) arrays cut into batches of _CHUNK rows: DataSets, or MultiDataSets when
    # the features and labels are lists (one array per input and output of a graph)
    x, y = data
    if isinstance(x, (list, tuple)) or isinstance(y, (list, tuple)):
        xs = list(x) if isinstance(x, (list, tuple)) else [x]
        ys = list(y) if isinstance(y, (list, tuple)) else [y]
        if not xs:
            raise ValueError(f"{owner}.iterator[0]: no features arrays")
        ys = [labels_array(a, f"{owner}.iterator[1][{k}]") for k, a in enumerate(ys)]
        n = len(xs[0])
        return (MultiDataSet([a[s:s + _CHUNK] for a in xs], [a[s:s + _CHUNK] for a in ys])
                for s in range(0, n, _CHUNK))
    y = labels_array(y, f"{owner}.iterator[1]")
    return (DataSet(x[s:s + _CHUNK], y[s:s + _CHUNK]) for s in range(0, len(x), _CHUNK))


def _is_graph(net: Any) -> bool:
    from ndws.nn.graph import ComputationGraph
    return isinstance(net, ComputationGraph)


class ScoreCalculator:
    """Base class: `calculate_score(net)` returns the network's held-out score and
    `minimize_score()` whether lower is better."""

    def calculate_score(self, net: Any) -> float:
        raise NotImplementedError(f"{type(self).__name__}.calculate_score")

    def minimize_score(self) -> bool:
        raise NotImplementedError(f"{type(self).__name__}.minimize_score")


class _EvaluationCalculator(ScoreCalculator):
    # DL4J's BaseIEvaluationScoreCalculator: a fresh evaluation over the held-out data, and one
    # number from it
    def __init__(self, iterator: Any):
        self.iterator = _held_out(type(self).__name__, iterator)

    def _new_evaluation(self) -> Any:
        raise NotImplementedError

    def _final_score(self, evaluation: Any) -> float:
        raise NotImplementedError

    def calculate_score(self, net):
        ev = self._new_evaluation()
        data = self.iterator
        try:
            if isinstance(data, tuple) and _is_graph(net):
                # a graph's evaluation reads batches, not (features, labels) arrays
                net.do_evaluation(list(_chunks(type(self).__name__, data)), ev, progress=False)
            elif isinstance(data, tuple):
                net.do_evaluation(data[0], ev, labels=data[1], progress=False)
            else:
                net.do_evaluation(data, ev, progress=False)
        finally:
            if callable(getattr(data, "reset", None)):
                data.reset()
        return float(self._final_score(ev))


class ClassificationScoreCalculator(_EvaluationCalculator):
    """An `ndws.evaluation.Evaluation` metric (``Evaluation.Metric``: ACCURACY, F1, PRECISION,
    RECALL, GMEASURE, MCC) on the held-out data; higher is better."""

    def __init__(self, metric: Any, iterator: Any):
        self.metric = member(Metric, metric, "ClassificationScoreCalculator.metric: unknown "
                                             "metric", "(an ndws.evaluation.Metric)")
        super().__init__(iterator)

    def _new_evaluation(self):
        return Evaluation()

    def _final_score(self, evaluation):
        return evaluation.score_for_metric(self.metric)

    def minimize_score(self):
        return False           # every classification metric is better higher

    def __repr__(self) -> str:
        return f"ClassificationScoreCalculator({self.metric.name})"


class ROCScoreCalculator(_EvaluationCalculator):
    """The area under the ROC curve (AUC) or the precision-recall curve (AUPRC) on the held-out
    data: `roc_type` ROC (one binary output, or two softmax columns), BINARY (independent
    sigmoid outputs: the mean over them) or MULTICLASS (one-vs-all: the mean over the classes);
    higher is better. DL4J's argument order ``(roc_type, metric, iterator)`` works too."""

    class ROCType(enum.Enum):
        ROC = "ROC"
        BINARY = "BINARY"
        MULTICLASS = "MULTICLASS"

    class Metric(enum.Enum):
        AUC = "AUC"
        AUPRC = "AUPRC"

    def __init__(self, roc_type: Any, iterator: Any, metric: Any = "AUC", *rest: Any):
        if rest or isinstance(iterator, (ROCScoreCalculator.Metric, str)):
            if len(rest) > 1:
                raise TypeError("ROCScoreCalculator: expected (roc_type, iterator, metric) or "
                                "(roc_type, metric, iterator)")
            # DL4J's order: (type, metric, iterator)
            iterator, metric = (rest[0] if rest else metric), iterator
        self.roc_type = member(ROCScoreCalculator.ROCType, roc_type,
                               "ROCScoreCalculator.roc_type: unknown ROC type",
                               "(ROC, BINARY or MULTICLASS)")
        self.metric = member(ROCScoreCalculator.Metric, metric,
                             "ROCScoreCalculator.metric: unknown metric", "(AUC or AUPRC)")
        super().__init__(iterator)

    def _new_evaluation(self):
        return {"ROC": ROC, "BINARY": ROCBinary, "MULTICLASS": ROCMultiClass}[
            self.roc_type.value]()

    def _final_score(self, evaluation):
        return evaluation.score_for_metric("AUROC" if self.metric.value == "AUC" else "AUPRC")

    def minimize_score(self):
        return False

    def __repr__(self) -> str:
        return f"ROCScoreCalculator({self.roc_type.name}, {self.metric.name})"


class RegressionScoreCalculator(_EvaluationCalculator):
    """A `RegressionEvaluation` metric (``RegressionEvaluation.Metric``: MSE, MAE, RMSE, RSE,
    PC, R2) averaged over the output columns on the held-out data; lower is better for the
    errors, higher for PC and R2."""

    def __init__(self, metric: Any, iterator: Any):
        self.metric = member(RegressionMetric, metric, "RegressionScoreCalculator.metric: "
                                                       "unknown metric",
                             "(an ndws.evaluation.RegressionMetric)")
        super().__init__(iterator)

    def _new_evaluation(self):
        return RegressionEvaluation()

    def _final_score(self, evaluation):
        return evaluation.score_for_metric(self.metric)

    def minimize_score(self):
        return self.metric.minimize()

    def __repr__(self) -> str:
        return f"RegressionScoreCalculator({self.metric.name})"


class DataSetLossCalculator(ScoreCalculator):
    """The network's loss (with its regularisation terms, as ``score(ds)``; a graph's outputs'
    losses summed) on the held-out data (DataSets, or MultiDataSets for a graph): the mean over the examples with `average` (DL4J's sum of each batch's score times its
    rows, over the examples), else that sum. Lower is better."""

    def __init__(self, iterator: Any, average: bool = True):
        if not isinstance(average, bool):
            raise TypeError(f"DataSetLossCalculator.average: expected True or False, got "
                            f"{average!r:.40}")
        self.iterator = _held_out("DataSetLossCalculator", iterator)
        self.average = average

    def _batches(self) -> Any:
        data = self.iterator
        return _chunks("DataSetLossCalculator", data) if isinstance(data, tuple) else data

    def calculate_score(self, net):
        total, examples = 0.0, 0
        data = self.iterator
        try:
            for i, ds in enumerate(self._batches()):
                if not isinstance(ds, (DataSet, MultiDataSet)):
                    raise TypeError(f"DataSetLossCalculator.iterator: item {i} is a "
                                    f"{type(ds).__name__}, not a DataSet or a MultiDataSet")
                n = ds.num_examples()
                if n:
                    total += net.score(ds) * n
                    examples += n
        finally:
            if callable(getattr(data, "reset", None)):
                data.reset()
        if examples == 0:
            raise ValueError("DataSetLossCalculator.iterator: no examples")
        return total / examples if self.average else total

    def minimize_score(self):
        return True

    def __repr__(self) -> str:
        return f"DataSetLossCalculator(average={self.average})"

