"""The evaluations' state across calls and from files: a column count that changes between
eval() or merge() calls, and from_dict / from_json given state nobody vouches for (every field
checked for type and range before anything is allocated; ValueError naming the field)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from ndws.evaluation import (ROC, Evaluation, RegressionEvaluation, ROCBinary,
                             ROCMultiClass)


def onehot(n, k):
    return np.eye(k)[np.arange(n) % k]


@pytest.mark.parametrize("cls", [ROCMultiClass, ROCBinary])
def test_roc_per_column_column_count_changing_between_batches(cls):
    ev = cls()
    ev.eval(onehot(6, 3), np.full((6, 3), 1 / 3))
    before = ev.stats()
    name = cls.__name__
    with pytest.raises(ValueError, match=rf"^{name}.eval: labels have 4 columns, but this "
                                         rf"{name} has 3 \(from its first batch\); every batch "
                                         rf"must have the same columns"):
        ev.eval(onehot(8, 4), np.full((8, 4), 0.25))
    assert ev.stats() == before                            # nothing of the batch was counted
    other = cls()
    other.eval(onehot(4, 2), np.full((4, 2), 0.5))
    with pytest.raises(ValueError, match=rf"^{name}.merge: other has 2 columns, but this "
                                         rf"{name} has 3"):
        ev.merge(other)
    ev.reset()
    ev.eval(onehot(8, 4), np.full((8, 4), 0.25))           # after reset: a new column count
    assert ev.num_labels() == 4


def test_evaluation_and_regression_column_count_changing_between_batches():
    ev = Evaluation()
    ev.eval(onehot(6, 3), onehot(6, 3))
    with pytest.raises(ValueError, match=r"^labels have 4 columns but this Evaluation has 3 "
                                         r"classes$"):
        ev.eval(onehot(8, 4), onehot(8, 4))
    assert ev.num_row_counter == 6
    reg = RegressionEvaluation()
    reg.eval(np.zeros((4, 3)), np.ones((4, 3)))
    before = reg.to_dict()
    with pytest.raises(ValueError, match=r"^RegressionEvaluation.eval: labels and predictions "
                                         r"have 2 columns, but this evaluation has 3 \(given at "
                                         r"construction or from its first batch\)"):
        reg.eval(np.zeros((4, 2)), np.ones((4, 2)))
    assert reg.to_dict() == before
    named = RegressionEvaluation(["a", "b"])
    with pytest.raises(ValueError, match=r"have 3 columns, but this evaluation has 2"):
        named.eval(np.zeros((4, 3)), np.ones((4, 3)))
    roc = ROC()                           # binary ROC: one or two columns, as DL4J allows
    roc.eval(np.array([[0.0], [1.0]]), np.array([[0.2], [0.7]]))
    roc.eval(np.eye(2), np.array([[0.6, 0.4], [0.3, 0.7]]))
    assert roc.calculate_auc() == 1.0


def _evaluation_dict():
    ev = Evaluation(labels=["a", "b", "c"])
    ev.eval(onehot(6, 3), np.roll(onehot(6, 3), 1, axis=0))
    return ev.to_dict()


@pytest.mark.parametrize("key, value, msg", [
    ("num_row_counter", 2**70, r"num_row_counter must be an int in \[0, 2\*\*63\), got "),
    ("num_row_counter", -1, r"num_row_counter must be an int in \[0, 2\*\*63\), got -1"),
    ("top_n_correct_count", "3", r"top_n_correct_count must be an int in \[0, 2\*\*63\), "
                                 r"got '3'"),
    ("top_n_total_count", 1.5, r"top_n_total_count must be an int"),
    ("confusion", [[1, 2], [3, 4]], r"confusion must be 3 lists of 3 entries"),
    ("confusion", [[1, 2, 3], [3, 4, 5], [1, 2]], r"confusion must be 3 lists of 3 entries"),
    ("confusion", [[1, 2, 3], [3, 4, 5], [1, 2, "x"]], r"confusion holds 'x', not a count"),
    ("confusion", [[1, 2, 3], [3, 4, 5], [1, 2, -1]], r"confusion holds -1, not a count"),
    ("confusion", [[1, 2, 3], [3, 4, 5], [1, 2, 2**64]], r"confusion holds 1844.*, not a count"),
    ("confusion", [[1, 2, 3], [3, 4, 5], [1, 2, True]], r"confusion holds True, not a count"),
    ("confusion", None, r"num_classes and confusion must both be null or both be set"),
    ("num_classes", 2**31 - 1, r"confusion must be 2147483647 lists of 2147483647 entries"),
    ("num_classes", "3", r"num_classes must be an int, got str"),
    ("labels", "abc", r"labels must be a sequence of class names, got str"),
    ("labels", ["a", "b"], r"num_classes=3 does not match the 2 labels given"),
    ("top_n", 0, r"top_n must be in \[1, "),
    ("binary_decision_threshold", "abc", r"binary_decision_threshold must be a number in "
                                         r"\(0, 1\), got 'abc'"),
    ("cost_array", ["a", 1, 2], r"cost_array must be numbers, one per class"),
    ("binary_positive_class", 1.0, r"binary_positive_class must be 0, 1 or None, got 1.0"),
    ("binary_positive_class", True, r"binary_positive_class must be 0, 1 or None, got True"),
    ("extra", 1, r"missing fields \[\], unexpected fields \['extra'\]"),
    ("type", "ROC", r"not an Evaluation dict \(type='ROC'\)"),
])
def test_evaluation_from_dict_checks_every_field(key, value, msg):
    d = _evaluation_dict()
    d[key] = value
    with pytest.raises(ValueError, match=r"^Evaluation.from_dict: " + msg):
        Evaluation.from_dict(d)


def test_evaluation_from_dict_round_trip_and_missing_fields():
    d = _evaluation_dict()
    assert Evaluation.from_dict(json.loads(json.dumps(d))).to_dict() == d
    del d["top_n"]
    with pytest.raises(ValueError, match=r"missing fields \['top_n'\], unexpected fields \[\]"):
        Evaluation.from_dict(d)
    with pytest.raises(ValueError, match=r"^Evaluation.from_dict: not an Evaluation dict"):
        Evaluation.from_dict([1, 2])
    with pytest.raises(ValueError, match=r"^Evaluation.from_json: not JSON text "
                                         r"\(RecursionError"):
        Evaluation.from_json("[" * 100_000 + "]" * 100_000)
    with pytest.raises(TypeError, match=r"^Evaluation.from_json: text must be a str, got int"):
        Evaluation.from_json(3)


def _regression_dict():
    ev = RegressionEvaluation(["x", "y"])
    ev.eval(np.arange(8.0).reshape(4, 2), np.ones((4, 2)))
    return ev.to_dict()


@pytest.mark.parametrize("key, value, msg", [
    ("state", [[0.0, 1.0]] * 3, r"state must be 8 lists of 2 entries"),
    ("state", [[0.0, "a"]] * 8, r"state holds 'a', not a number"),
    ("state", [[0.0, None]] * 8, r"state holds None, not a number"),
    ("state", None, r"columns and state must both be null or both be set"),
    ("columns", ["x", 1], r"columns must be null or a list of 1 to 16777216 column names"),
    ("columns", [], r"columns must be null or a list of 1 to 16777216 column names"),
    ("given_columns", "xy", r"given_columns must be null or a list"),
    ("precision", "4", r"precision must be a non-negative int"),
    ("axis", 9, r"axis must be a positive int"),
    ("extra", 1, r"missing fields \[\], unexpected fields \['extra'\]"),
])
def test_regression_from_dict_checks_every_field(key, value, msg):
    d = _regression_dict()
    d[key] = value
    with pytest.raises(ValueError, match=r"^RegressionEvaluation.from_dict: " + msg):
        RegressionEvaluation.from_dict(d)


def test_regression_from_json_round_trip_and_bad_text():
    d = _regression_dict()
    back = RegressionEvaluation.from_json(json.dumps(d))
    assert back.to_dict() == d
    with pytest.raises(ValueError, match=r"^RegressionEvaluation.from_json: not JSON text"):
        RegressionEvaluation.from_json("{")
