"""`evaluate`: run a model over a data iterator and feed evaluations (DL4J's ``doEvaluation``)."""
from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator

import numpy as np

__all__ = ["evaluate"]

# batches, check_evaluations and count are also the loop of the network stack's evaluation,
# which opens a workspace cycle per batch around its forward pass and count (ndws.nn.network)


def _batch(item: Any, index: int) -> tuple[Any, Any, Any, Any]:
    # a DataSet-like object (features, labels, optional masks) or a (features, labels) pair:
    # (features, labels, labels mask, features mask)
    if hasattr(item, "features") and hasattr(item, "labels"):
        return (item.features, item.labels, getattr(item, "labels_mask", None),
                getattr(item, "features_mask", None))
    try:
        features, labels = item
    except (TypeError, ValueError):
        raise TypeError(f"batch {index} of the iterator must be a (features, labels) pair or "
                        f"have .features and .labels, got {type(item).__name__}") from None
    return features, labels, None, None


def batches(iterator: Iterable, features_mask: bool = False) -> Iterator[tuple]:
    """``(features, labels, mask)`` of every batch of `iterator` (reset first when it has a
    ``reset()``, as DL4J does), with the features mask fourth when `features_mask` (a
    network's time series of varying length need it). A caller that runs a model in a
    workspace cycle per batch pulls each batch from here with no cycle open
    (docs/evaluation.md, "Feeding evaluations")."""
    reset = getattr(iterator, "reset", None)
    if callable(reset):
        reset()
    for index, item in enumerate(iterator):
        parts = _batch(item, index)
        yield parts if features_mask else parts[:3]


def check_evaluations(evaluations: tuple) -> None:
    """Refuse an empty list of evaluations or an object without ``eval``."""
    if not evaluations:
        raise ValueError("evaluate needs at least one evaluation")
    for ev in evaluations:
        if not callable(getattr(ev, "eval", None)):
            raise TypeError(f"evaluations must have an eval(labels, predictions, mask) method, "
                            f"got {type(ev).__name__}")


def _as_labels(labels: Any, predictions: Any) -> Any:
    # What fit accepts, for the evaluations: one class index per row (a 1-d array of
    # integers) becomes one-hot rows as wide as the predictions, and a 1-d array beside
    # one-column predictions becomes that column. Anything else is left to the evaluations.
    shape = getattr(predictions, "shape", None)
    ndim = getattr(labels, "ndim", None)
    if ndim != 1 or shape is None or len(shape) != 2 or labels.shape[0] != shape[0]:
        return labels
    lab = np.asarray(labels)
    if shape[1] == 1:
        return lab.reshape(shape[0], 1)
    if lab.dtype.kind not in "iu":
        return labels
    n_classes = shape[1]
    bad = np.flatnonzero((lab < 0) | (lab >= n_classes))
    if bad.size:
        r = int(bad[0])
        raise ValueError(f"labels[{r}] = {lab[r]} is not a class index in [0, {n_classes}) "
                         f"(the predictions have {n_classes} columns)")
    onehot = np.zeros(shape, dtype=np.asarray(predictions).dtype)
    onehot[np.arange(shape[0]), lab] = 1
    return onehot


def count(evaluations: tuple, labels: Any, predictions: Any, mask: Any) -> None:
    """Count one batch in every evaluation, or in none: each checks the batch before any
    counts it (ndws' evaluations check in ``_prepare``; any other object can only be asked to
    ``eval``, after ndws' own checks have passed)."""
    labels = _as_labels(labels, predictions)
    commits = [ev._prepare(labels, predictions, mask) for ev in evaluations
               if hasattr(ev, "_prepare")]
    for ev in evaluations:
        if not hasattr(ev, "_prepare"):
            ev.eval(labels, predictions, mask)
    for commit in commits:
        commit()


def evaluate(predict: Callable[[Any], Any], iterator: Iterable, *evaluations: Any) -> Any:
    """Evaluate ``predict`` over every batch of ``iterator`` with each of ``evaluations``.

    The generic form of DL4J's ``MultiLayerNetwork.doEvaluation(iterator, evaluations...)``:
    for each batch, ``predictions = predict(features)`` and then
    ``ev.eval(labels, predictions, mask)`` for every evaluation, in the order given.

    Parameters
    ----------
    predict : callable
        Maps a batch's features to predictions (a network's ``output``, any function). It
        receives only the features: a model that needs a DataSet's ``features_mask`` is
        wrapped by the caller (the network stack passes its own closure).
    iterator : iterable
        Of ``(features, labels)`` pairs, or of objects with ``.features`` and ``.labels``
        (DL4J's DataSet; an optional ``.labels_mask`` is passed to ``eval`` as the mask).
        If it has a ``reset()`` method (a DataSetIterator), it is called first, as DL4J does.
        Labels may be one class index per row (a 1-d array of integers, as ``fit`` takes
        them): beside predictions of several columns they are counted as one-hot rows, beside
        one column as that column.
    *evaluations
        Objects with ``eval(labels, predictions, mask=None)``: `RegressionEvaluation`,
        ``Evaluation``, ``ROC``, ...

    Returns
    -------
    The evaluation when one was given, else the tuple of evaluations (the same objects).

    Each batch is checked by every evaluation before any of them counts it, so a batch that
    one refuses (shapes, NaNs, ...) is counted by none: the evaluations stay consistent.
    (An evaluation object other than ndws' own is asked to ``eval`` after ndws' checks and
    before ndws' counts.)

    Raises
    ------
    ValueError
        No evaluation was given, or a class index is outside the predictions' columns.
    TypeError
        A batch is neither a pair nor DataSet-like, or an evaluation has no ``eval``.
    """
    check_evaluations(evaluations)
    for features, labels, mask in batches(iterator):
        predictions = predict(features)
        count(evaluations, labels, predictions, mask)
        # drop this batch's views before asking for the next: a predict that reuses its
        # memory per batch must find no export still alive
        features = labels = mask = predictions = None
    return evaluations[0] if len(evaluations) == 1 else evaluations
