"""Evaluation of classifiers and regressors (DL4J's ``org.nd4j.evaluation``).

`Evaluation` (accuracy, precision, recall, F-beta, MCC, ... and the confusion matrix), `ROC`,
`ROCBinary` and `ROCMultiClass` (exact and histogram ROC / precision-recall curves and their
areas) and `RegressionEvaluation` accumulate batch after batch in compiled kernels that read the
batch's memory in place (no per-batch temporaries), and `evaluate` feeds them from an iterator.
See ``docs/evaluation.md``.
"""
from ndws.evaluation._evaluate import evaluate
from ndws.evaluation.classification import Evaluation, Metric
from ndws.evaluation.regression import RegressionEvaluation, RegressionMetric
from ndws.evaluation.roc import (ROC, PrecisionRecallCurve, ROCBinary, ROCMetric, ROCMultiClass,
                                 RocCurve)

__all__ = [
    "Evaluation", "Metric", "ROC", "ROCBinary", "ROCMultiClass", "ROCMetric", "RocCurve",
    "PrecisionRecallCurve", "RegressionEvaluation", "RegressionMetric", "evaluate",
]
