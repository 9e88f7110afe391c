"""`MultiLayerNetwork.fit`'s options around the batches: the seeded order of ``shuffle=True``
and the held-out data of ``validation_data=`` (docs/networks.md, "Training options")."""
from __future__ import annotations

from typing import Any

import numpy as np

import ndws
from ndws._core import NDArray
from ndws.data.dataset import DataSet

__all__ = ["Validation", "check_seed", "labels_array", "shuffled", "shuffled_order",
           "reiterable"]

# the rows of (features, labels) validation arrays scored per forward pass: bounds the
# temporaries of a large held-out set
_CHUNK = 1024


def check_seed(seed: Any) -> int:
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)) \
            or not 0 <= seed < 1 << 63:
        raise ValueError(f"seed: expected an int in [0, 2**63), got {seed!r:.40}")
    return int(seed)


def labels_array(labels: Any, name: str) -> NDArray:
    """`labels` (class indices, one-hot rows or targets) as an NDArray, or a TypeError naming
    the argument."""
    if isinstance(labels, NDArray):
        return labels
    try:
        arr = np.asarray(labels)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name}: expected an array of labels, got "
                        f"{type(labels).__name__}") from exc
    if arr.dtype.kind not in "biuf":
        raise TypeError(f"{name}: expected an array of numbers, got dtype {arr.dtype}")
    return ndws.from_numpy(np.ascontiguousarray(arr))


def shuffled_order(n: int, seed: int, epoch: int) -> np.ndarray:
    """Epoch `epoch`'s order of `n` rows: a permutation drawn from ``(seed, 2, epoch)`` (2: a
    stream of its own, apart from the weights' ``seed`` and the dropout's ``(seed, 1)``), so
    it depends on nothing but the seed and the epoch counter (both network types)."""
    return np.random.default_rng([seed, 2, epoch]).permutation(n)


def shuffled(x: NDArray, y: NDArray, seed: int, epoch: int) -> tuple[NDArray, NDArray]:
    """The rows of `x` and `y` in epoch `epoch`'s order (`shuffled_order`)."""
    order = shuffled_order(x.shape[0], seed, epoch)
    return (ndws.from_numpy(np.asarray(x)[order]), ndws.from_numpy(np.asarray(y)[order]))


class Validation:
    """The held-out data of one fit, scored after each epoch: ``validation()`` returns the
    score over all its rows (loss plus regularisation, as ``score(ds)``: an inference pass)
    and, for an output of more than one column, the accuracy (else None).

    Checked when the fit starts: arrays as (features, labels) with the network's width and
    matching rows, a DataSet, or a re-iterable of DataSets (a one-shot generator would be empty
    from the second epoch on)."""

    def __init__(self, net: Any, data: Any):
        self._net = net
        if isinstance(data, tuple) and len(data) == 2 and not isinstance(data[0], DataSet):
            x = net._as_input(data[0], "validation_data[0]")
            y = labels_array(data[1], "validation_data[1]")
            if y.ndim == 0 or y.shape[0] != x.shape[0]:
                raise ValueError(f"validation_data: labels of shape {tuple(y.shape)} for "
                                 f"{x.shape[0]} examples")
            if x.shape[0] == 0:
                raise ValueError("validation_data: no examples")
            self._source: Any = [DataSet(x[s:s + _CHUNK], y[s:s + _CHUNK])
                                 for s in range(0, x.shape[0], _CHUNK)]
        elif isinstance(data, DataSet):
            self._source = [data]
        elif isinstance(data, (list, tuple)):
            for i, ds in enumerate(data):
                _check_item(i, ds)
            if not any(ds.features.shape[0] for ds in data):
                raise ValueError("validation_data: no examples")
            self._source = list(data)
        else:
            self._source = reiterable(data, "DataSets")

    def __call__(self) -> tuple[float, float | None]:
        net = self._net
        # an accuracy for rows of class scores (not for per-pixel outputs)
        classifier = len(net._out_shapes[-1]) == 1 and (net.layers[-1].output_width() or 0) > 1
        rows, total, right, counted = 0, 0.0, 0, 0
        source = self._source
        try:
            for i, ds in enumerate(source):
                _check_item(i, ds)
                n = int(ds.features.shape[0])
                if n == 0:
                    continue
                outputs: list = []
                # the batch's mean loss (plus the regularisation, the same for every batch),
                # weighted by its rows
                total += net._forward_score(ds, outputs=outputs if classifier else None) * n
                rows += n
                if classifier:
                    r, c = _correct(outputs[0], ds)
                    right += r
                    counted += c
        finally:
            if callable(getattr(source, "reset", None)):
                source.reset()          # re-iterable (checked): ready for the next epoch
        if rows == 0:
            raise ValueError("validation_data: no examples")
        return total / rows, (right / counted if classifier and counted else None)


def reiterable(data: Any, what: str = "DataSets", where: str = "validation_data") -> Any:
    """`data`, an iterable of `what` read once per epoch, if it can be read again (a list, an
    iterator that resets); a TypeError naming `where` otherwise (not iterable, or readable only
    once: a generator, an iterator without a working reset)."""
    if isinstance(data, (str, bytes)) or not hasattr(data, "__iter__"):
        raise TypeError(f"{where}: expected (features, labels) arrays, a DataSet "
                        f"or an iterable of {what}, got {type(data).__name__}")
    if (iter(data) is data and not callable(getattr(data, "reset", None))) or (
            callable(getattr(data, "reset_supported", None)) and not data.reset_supported()):
        raise TypeError(f"{where}: a {type(data).__name__} can be read only once, "
                        f"but the held-out data is scored after every epoch: pass a list "
                        f"of {what}, (features, labels) arrays or a DataSetIterator")
    return data


def _check_item(i: int, ds: Any) -> None:
    if not isinstance(ds, DataSet):
        raise TypeError(f"validation_data: item {i} is a {type(ds).__name__}, not a DataSet")


def _correct(output: NDArray, ds: DataSet) -> tuple[int, int]:
    # rows whose largest output is the labelled class, and the rows counted (a per-example
    # label mask leaves out the rows it zeroes)
    predicted = np.asarray(output).argmax(axis=1)
    labels = np.asarray(ds.labels)
    truth = labels.argmax(axis=1) if labels.ndim == 2 else labels.astype(np.int64)
    keep = np.ones(predicted.shape[0], dtype=bool)
    if ds.labels_mask is not None:
        mask = np.asarray(ds.labels_mask)
        if mask.ndim == 1 or (mask.ndim == 2 and mask.shape[1] == 1):
            keep = mask.reshape(-1) != 0
    return int((predicted == truth)[keep].sum()), int(keep.sum())
