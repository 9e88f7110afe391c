"""`evaluate`: run a model over a data iterator and feed evaluations (DL4J's ``doEvaluation``)."""
from __future__ import annotations

from typing import Any, Callable, Iterable

__all__ = ["evaluate"]


def _batch(item: Any, index: int) -> tuple[Any, Any, Any]:
    # a DataSet-like object (features, labels, optional masks) or a (features, labels) pair
    if hasattr(item, "features") and hasattr(item, "labels"):
        return item.features, item.labels, getattr(item, "labels_mask", None)
    try:
        features, labels = item
    except (TypeError, ValueError):
        raise TypeError(f"batch {index} of the iterator must be a (features, labels) pair or "
                        f"have .features and .labels, got {type(item).__name__}") from None
    return features, labels, None


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
        No evaluation was given.
    TypeError
        A batch is neither a pair nor DataSet-like, or an evaluation has no ``eval``.
    """
    if not evaluations:
        raise ValueError("evaluate needs at least one evaluation")
    for ev in evaluations:
        if not callable(getattr(ev, "eval", None)):
            raise TypeError(f"evaluations must have an eval(labels, predictions, mask) method, "
                            f"got {type(ev).__name__}")
    reset = getattr(iterator, "reset", None)
    if callable(reset):
        reset()
    commit = None
    for index, item in enumerate(iterator):
        features, labels, mask = _batch(item, index)
        predictions = predict(features)
        # every evaluation checks the batch before any counts it: a batch one of them
        # refuses is counted by none (ndws' evaluations check in `_prepare`; any other object
        # can only be asked to eval, after ndws' own checks have passed)
        commits = [ev._prepare(labels, predictions, mask) for ev in evaluations
                   if hasattr(ev, "_prepare")]
        for ev in evaluations:
            if not hasattr(ev, "_prepare"):
                ev.eval(labels, predictions, mask)
        for commit in commits:
            commit()
        # drop this batch's views before asking for the next: a predict that reuses its
        # memory per batch (a network's output workspace) must find no export still alive
        commits = commit = predictions = labels = mask = item = None
    return evaluations[0] if len(evaluations) == 1 else evaluations
