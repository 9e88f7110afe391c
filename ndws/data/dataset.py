"""DL4J's DataSet and MultiDataSet: features, labels and their masks as ndws NDArrays.

Placement follows the engine's rule (docs/architecture.md, invariant 3): every array a DataSet
creates (from NumPy input, ``copy()``, ``split_test_and_train``, ``batch_by``, ``merge``) is
allocated in the calling thread's current workspace, or detached when none is current. That is how
an async producer builds its batches inside its ring; ``detach()`` takes a DataSet out of any
workspace.

Shapes: features are ``(n_examples, n_features)`` (tabular), ``(n_examples, n_features,
time)`` (time series) or ``(n_examples, channels, height, width)`` (images); labels are
``(n_examples, n_outcomes)`` or ``(n_examples, n_outcomes, time)``. A mask for a time-series
array is ``(n_examples, time)``; a mask for a rank-2 array is ``(n_examples, 1)`` or
``(n_examples, n_columns)`` (per-output masking, as in DL4J).
"""
from __future__ import annotations

import numbers
from typing import Any, Iterator, Sequence

import numpy as np

import ndws
from ndws import NDArray

__all__ = ["DataSet", "MultiDataSet", "SplitTestAndTrain"]


# --------------------------------------------------------------------------------------------
# helpers

def _to_nd(value: Any, name: str, allow_none: bool = True) -> NDArray | None:
    """NDArrays are kept as they are; anything array_like goes through ``ndws.asarray`` (a copy
    in the current workspace, or detached)."""
    if value is None:
        if allow_none:
            return None
        raise TypeError(f"{name} must be an NDArray or array_like, got None")
    if isinstance(value, NDArray):
        return value
    try:
        arr = np.asarray(value)
    except Exception as exc:  # re-raised with the argument's name
        raise TypeError(f"{name} must be an NDArray or array_like, got "
                        f"{type(value).__name__}: {exc}") from exc
    if arr.dtype == object or arr.dtype.kind in "USV":
        raise TypeError(f"{name} must be numeric array_like, got dtype {arr.dtype}")
    try:
        return ndws.asarray(arr)
    except MemoryError as exc:              # a view of a huge shape (a zero stride)
        raise MemoryError(f"{name}: {exc}") from None


def _np(arr: NDArray | None) -> np.ndarray | None:
    """A NumPy copy (never a view: views are counted exports that would pin workspace blocks)."""
    return None if arr is None else arr.numpy()


def _check_example_count(arr: NDArray | None, name: str, n: int) -> None:
    if arr is None:
        return
    if arr.ndim == 0 or arr.shape[0] != n:
        raise ValueError(f"{name} has shape {tuple(arr.shape)}, expected {n} examples along "
                         f"axis 0 (the number of examples of the features)")


def _check_mask(mask: NDArray | None, name: str, arr: NDArray | None, arr_name: str) -> None:
    if mask is None:
        return
    if arr is None:
        raise ValueError(f"{name} is given but {arr_name} is None")
    n = arr.shape[0]
    if arr.ndim == 3:
        # (examples, time) of an NCW (n, size, time) or NWC (n, time, size) series, or the
        # array's own shape (DL4J's per-output label mask)
        shapes = ((n, arr.shape[2]), (n, arr.shape[1]), tuple(arr.shape))
        if tuple(mask.shape) not in shapes:
            raise ValueError(f"{name} has shape {tuple(mask.shape)}, expected {shapes[0]} "
                             f"([examples, time] for {arr_name} of shape {tuple(arr.shape)}; "
                             f"{shapes[1]} if it is NWC, [examples, time, size])")
    elif arr.ndim == 2:
        if mask.ndim != 2 or mask.shape[0] != n or mask.shape[1] not in (1, arr.shape[1]):
            raise ValueError(f"{name} has shape {tuple(mask.shape)}, expected ({n}, 1) or "
                             f"({n}, {arr.shape[1]}) for {arr_name} of shape "
                             f"{tuple(arr.shape)}")
    else:
        raise ValueError(f"{name} is given but {arr_name} has rank {arr.ndim}; masks apply to "
                         f"rank 2 or rank 3 (time series) arrays")


def _validate_arrays(features: Sequence[NDArray | None], labels: Sequence[NDArray | None],
                     fmasks: Sequence[NDArray | None], lmasks: Sequence[NDArray | None],
                     fname: str, lname: str, fmname: str, lmname: str) -> int:
    """Check example counts and mask shapes; return the number of examples."""
    n = None
    single = fmname == "features_mask"
    for group, gname in ((features, fname), (labels, lname)):
        for i, arr in enumerate(group):
            if arr is None:
                continue
            label = gname if single else f"{gname}[{i}]"
            if arr.ndim == 0:
                raise ValueError(f"{label} must have at least one dimension (examples), "
                                 f"got a scalar")
            if n is None:
                n = arr.shape[0]
            else:
                _check_example_count(arr, label, n)
    for masks, arrs, mname, aname in ((fmasks, features, fmname, fname),
                                      (lmasks, labels, lmname, lname)):
        for i, m in enumerate(masks):
            _check_mask(m, mname if single else f"{mname}[{i}]",
                        arrs[i] if i < len(arrs) else None,
                        aname if single else f"{aname}[{i}]")
    return 0 if n is None else int(n)


def _arrays_equal(a: NDArray | None, b: NDArray | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if tuple(a.shape) != tuple(b.shape) or a.dtype != b.dtype:
        return False
    return bool(np.array_equal(a.numpy(), b.numpy()))


def _permutation(n: int, seed: Any) -> np.ndarray:
    return np.random.default_rng(seed).permutation(n)


def _take(arr: NDArray | None, idx: np.ndarray) -> NDArray | None:
    """Rows ``idx`` of ``arr`` as a new array in the current workspace."""
    if arr is None:
        return None
    return ndws.asarray(np.ascontiguousarray(arr.numpy()[idx]))


def _permute_in_place(arr: NDArray | None, perm: np.ndarray) -> None:
    if arr is not None:
        arr[...] = arr.numpy()[perm]


def _n_train(n_or_fraction: Any, n: int) -> int:
    if isinstance(n_or_fraction, bool) or not isinstance(n_or_fraction, numbers.Real):
        raise TypeError(f"n_or_fraction must be an int (examples in the training set) or a "
                        f"float in (0, 1) (its fraction), got {n_or_fraction!r}")
    if isinstance(n_or_fraction, numbers.Integral):
        k = int(n_or_fraction)
        if not 0 < k < n:
            raise ValueError(f"n_or_fraction={k} must be between 1 and {n - 1} (the data set "
                             f"has {n} examples; both parts must be non-empty)")
        return k
    frac = float(n_or_fraction)
    if not 0.0 < frac < 1.0:
        raise ValueError(f"n_or_fraction={n_or_fraction!r} as a fraction must be in (0, 1)")
    k = int(frac * n)
    if not 0 < k < n:
        raise ValueError(f"n_or_fraction={n_or_fraction!r} of {n} examples gives {k} training "
                         f"examples; both parts must be non-empty")
    return k


def _batch_size(n: Any, name: str = "n") -> int:
    if isinstance(n, bool) or not isinstance(n, numbers.Integral):
        raise TypeError(f"{name} must be a positive int, got {n!r}")
    if n <= 0:
        raise ValueError(f"{name} must be a positive int, got {n}")
    return int(n)


class SplitTestAndTrain:
    """DL4J's SplitTestAndTrain: ``.train`` and ``.test`` (also ``get_train()`` /
    ``get_test()``); unpacks as ``train, test = ds.split_test_and_train(...)``."""

    __slots__ = ("train", "test")

    def __init__(self, train: Any, test: Any) -> None:
        self.train = train
        self.test = test

    def get_train(self) -> Any:
        return self.train

    def get_test(self) -> Any:
        return self.test

    def __iter__(self) -> Iterator[Any]:
        return iter((self.train, self.test))

    def __len__(self) -> int:
        return 2

    def __repr__(self) -> str:
        return f"SplitTestAndTrain(train={self.train!r}, test={self.test!r})"


# --------------------------------------------------------------------------------------------
# merging (DL4J's DataSet.merge / MultiDataSet.merge)

def _merge_group(arrays: list[np.ndarray | None], masks: list[np.ndarray | None], name: str,
                 mname: str) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Concatenate one position (features or labels) of several data sets along axis 0.

    Time series of different lengths are padded with zeros at the end and get a mask
    ``(n, max_time)`` with 1 on real steps (DL4J pads the same way). Missing masks of the
    parts that have none become all ones, so the merged mask is exact."""
    present = [a is not None for a in arrays]
    if not any(present):
        if any(m is not None for m in masks):
            raise ValueError(f"cannot merge: {mname} given without {name}")
        return None, None
    if not all(present):
        raise ValueError(f"cannot merge: {name} is None in some data sets and not in others")
    ranks = {a.ndim for a in arrays}
    if len(ranks) != 1:
        raise ValueError(f"cannot merge: {name} have different ranks {sorted(ranks)}")
    rank = ranks.pop()
    dtype = np.result_type(*arrays)
    if rank == 3:
        inner = {a.shape[1] for a in arrays}
        if len(inner) != 1:
            raise ValueError(f"cannot merge: {name} have different sizes along axis 1: "
                             f"{sorted(inner)}")
        lengths = [a.shape[2] for a in arrays]
        t_max = max(lengths)
        need_mask = len(set(lengths)) > 1 or any(m is not None for m in masks)
        parts, mparts = [], []
        for a, m in zip(arrays, masks):
            n, c, t = a.shape
            padded = np.zeros((n, c, t_max), dtype=dtype)
            padded[:, :, :t] = a
            parts.append(padded)
            if need_mask:
                # a created mask takes the dtype of the array it masks (DL4J's choice)
                mp = np.zeros((n, t_max), dtype=dtype if m is None else m.dtype)
                mp[:, :t] = 1 if m is None else m
                mparts.append(mp)
        merged = np.concatenate(parts, axis=0)
        mask = None
        if need_mask:
            mask = np.concatenate(mparts, axis=0).astype(np.result_type(*mparts), copy=False)
        return merged, mask
    inner_shapes = {a.shape[1:] for a in arrays}
    if len(inner_shapes) != 1:
        raise ValueError(f"cannot merge: {name} have different shapes beyond axis 0: "
                         f"{sorted(inner_shapes)}")
    merged = np.concatenate([a.astype(dtype, copy=False) for a in arrays], axis=0)
    if all(m is None for m in masks):
        return merged, None
    widths = {m.shape[1] for m in masks if m is not None}
    width = max(widths)
    mdtype = np.result_type(*[m for m in masks if m is not None])
    mparts = []
    for a, m in zip(arrays, masks):
        if m is None:
            m = np.ones((a.shape[0], width), dtype=mdtype)
        elif m.shape[1] != width:
            m = np.broadcast_to(m, (m.shape[0], width))
        mparts.append(m.astype(mdtype, copy=False))
    return merged, np.concatenate(mparts, axis=0)


# --------------------------------------------------------------------------------------------

class DataSet:
    """One batch (or a whole data set) of features and labels, with optional masks.

    Parameters
    ----------
    features : NDArray or array_like
        ``(n_examples, ...)``: rank 2, 3 ``(n, features, time)`` or 4 ``(n, c, h, w)``.
    labels : NDArray or array_like or None
        ``(n_examples, n_outcomes)`` or ``(n_examples, n_outcomes, time)``.
    features_mask, labels_mask : NDArray or array_like or None
        ``(n_examples, time)`` for time series.

    array_like inputs are converted with ``ndws.asarray`` (placed in the current workspace);
    NDArray inputs are kept as they are (not copied).
    """

    __hash__ = None  # type: ignore[assignment]  # mutable, compared by value

    def __init__(self, features: Any, labels: Any = None, features_mask: Any = None,
                 labels_mask: Any = None) -> None:
        f = _to_nd(features, "features", allow_none=False)
        lab = _to_nd(labels, "labels")
        fm = _to_nd(features_mask, "features_mask")
        lm = _to_nd(labels_mask, "labels_mask")
        _validate_arrays([f], [lab], [fm], [lm], "features", "labels", "features_mask",
                         "labels_mask")
        self.features: NDArray = f  # type: ignore[assignment]
        self.labels: NDArray | None = lab
        self.features_mask: NDArray | None = fm
        self.labels_mask: NDArray | None = lm

    # -- basic protocol --------------------------------------------------------------------
    def _arrays(self) -> list[NDArray | None]:
        return [self.features, self.labels, self.features_mask, self.labels_mask]

    def num_examples(self) -> int:
        """Number of examples (size of axis 0 of the features)."""
        return int(self.features.shape[0])

    def __len__(self) -> int:
        return self.num_examples()

    def detach(self) -> "DataSet":
        """Move the four arrays out of any workspace (in place); return self."""
        self.features, self.labels, self.features_mask, self.labels_mask = [
            None if a is None else a.detach() for a in self._arrays()]
        return self

    def migrate(self, detach_on_no_ws: bool = False) -> "DataSet":
        """Copy the four arrays into the current workspace (in place); return self."""
        self.features, self.labels, self.features_mask, self.labels_mask = [
            None if a is None else a.migrate(detach_on_no_ws) for a in self._arrays()]
        return self

    def copy(self) -> "DataSet":
        """A deep copy whose arrays live in the current workspace (or detached)."""
        return DataSet(*[None if a is None else a.dup() for a in self._arrays()])

    dup = copy

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DataSet):
            return NotImplemented
        return all(_arrays_equal(a, b) for a, b in zip(self._arrays(), other._arrays()))

    def __repr__(self) -> str:
        def desc(a: NDArray | None) -> str:
            return "None" if a is None else f"{a.dtype}{tuple(a.shape)}"
        return (f"DataSet(features={desc(self.features)}, labels={desc(self.labels)}, "
                f"features_mask={desc(self.features_mask)}, "
                f"labels_mask={desc(self.labels_mask)})")

    # -- DL4J-style accessors ----------------------------------------------------------------
    def get_features(self) -> NDArray:
        return self.features

    def get_labels(self) -> NDArray | None:
        return self.labels

    def has_masks(self) -> bool:
        return self.features_mask is not None or self.labels_mask is not None

    def num_inputs(self) -> int:
        """Size of axis 1 of the features (DL4J's numInputs for rank 2 and 3)."""
        return int(self.features.shape[1]) if self.features.ndim > 1 else 1

    def num_outcomes(self) -> int:
        """Size of axis 1 of the labels (0 when there are none)."""
        if self.labels is None:
            return 0
        return int(self.labels.shape[1]) if self.labels.ndim > 1 else 1

    # -- reshuffling and splitting -------------------------------------------------------------
    def _select(self, idx: np.ndarray) -> "DataSet":
        return DataSet(*[_take(a, idx) for a in self._arrays()])

    def shuffle(self, seed: Any = None) -> None:
        """Permute the examples in place (features, labels and masks together).
        The same seed gives the same permutation (``np.random.default_rng(seed)``)."""
        perm = _permutation(self.num_examples(), seed)
        for a in self._arrays():
            _permute_in_place(a, perm)

    def split_test_and_train(self, n_or_fraction: Any, seed: Any = None) -> SplitTestAndTrain:
        """Split into ``(train, test)``: the first ``n`` examples (an int), or the first
        ``int(fraction * n_examples)`` (a float in (0, 1)), are the training set. With a
        ``seed`` the examples are permuted first (``self`` is not modified). Both parts are
        copies in the current workspace."""
        n = self.num_examples()
        k = _n_train(n_or_fraction, n)
        order = np.arange(n) if seed is None else _permutation(n, seed)
        return SplitTestAndTrain(self._select(order[:k]), self._select(order[k:]))

    def batch_by(self, n: int) -> list["DataSet"]:
        """Consecutive batches of ``n`` examples (the last one may be smaller), as copies."""
        n = _batch_size(n)
        total = self.num_examples()
        return [self._select(np.arange(i, min(i + n, total))) for i in range(0, total, n)]

    def as_list(self) -> list["DataSet"]:
        """One single-example DataSet per example (DL4J's asList)."""
        return self.batch_by(1)

    @staticmethod
    def merge(datasets: Sequence["DataSet"]) -> "DataSet":
        """Concatenate data sets along the example axis. Time series of different lengths are
        padded at the end and masked; missing masks count as all ones."""
        items = list(datasets) if not isinstance(datasets, DataSet) else None
        if items is None or not items:
            raise ValueError("datasets must be a non-empty sequence of DataSet")
        for i, d in enumerate(items):
            if not isinstance(d, DataSet):
                raise TypeError(f"datasets[{i}] must be a DataSet, got {type(d).__name__}")
        if len(items) == 1:
            return items[0].copy()
        f, fm = _merge_group([_np(d.features) for d in items],
                             [_np(d.features_mask) for d in items], "features", "features_mask")
        lab, lm = _merge_group([_np(d.labels) for d in items],
                               [_np(d.labels_mask) for d in items], "labels", "labels_mask")
        return DataSet(f, lab, fm, lm)


class MultiDataSet:
    """DL4J's MultiDataSet: lists of feature and label arrays (several inputs / outputs),
    with optional per-array masks (a list with None entries, or None for no masks at all).

    Every array must have the same number of examples along axis 0.
    """

    __hash__ = None  # type: ignore[assignment]

    def __init__(self, features: Any, labels: Any = None, features_masks: Any = None,
                 labels_masks: Any = None) -> None:
        f = self._list(features, "features", allow_none=False)
        lab = self._list(labels, "labels")
        fm = self._list(features_masks, "features_masks", length=len(f))
        lm = self._list(labels_masks, "labels_masks", length=len(lab))
        _validate_arrays(f, lab, fm, lm, "features", "labels", "features_masks",
                         "labels_masks")
        self.features: list[NDArray] = f  # type: ignore[assignment]
        self.labels: list[NDArray] = lab  # type: ignore[assignment]
        self.features_masks: list[NDArray | None] | None = fm if any(
            m is not None for m in fm) else None
        self.labels_masks: list[NDArray | None] | None = lm if any(
            m is not None for m in lm) else None

    @staticmethod
    def _list(value: Any, name: str, allow_none: bool = True,
              length: int | None = None) -> list[Any]:
        if value is None:
            if not allow_none:
                raise TypeError(f"{name} must be a list of NDArrays or array_likes, got None")
            return [None] * length if length is not None else []
        if isinstance(value, (NDArray, np.ndarray)):
            value = [value]
        if not isinstance(value, (list, tuple)):
            raise TypeError(f"{name} must be a list of NDArrays or array_likes, got "
                            f"{type(value).__name__}")
        if length is not None and len(value) != length:
            raise ValueError(f"{name} has {len(value)} entries, expected {length} (one per "
                             f"array, None for no mask)")
        if not allow_none and not value:
            raise ValueError(f"{name} must not be empty")
        out = []
        for i, v in enumerate(value):
            out.append(_to_nd(v, f"{name}[{i}]", allow_none=length is not None))
        return out

    def _masks(self) -> tuple[list[NDArray | None], list[NDArray | None]]:
        fm = self.features_masks or [None] * len(self.features)
        lm = self.labels_masks or [None] * len(self.labels)
        return list(fm), list(lm)

    def _all(self) -> list[NDArray | None]:
        fm, lm = self._masks()
        return list(self.features) + list(self.labels) + fm + lm

    def _rebuild(self, fn: Any) -> "MultiDataSet":
        fm, lm = self._masks()
        return MultiDataSet([fn(a) for a in self.features], [fn(a) for a in self.labels],
                            [fn(a) for a in fm], [fn(a) for a in lm])

    def num_examples(self) -> int:
        return int(self.features[0].shape[0])

    def __len__(self) -> int:
        return self.num_examples()

    def num_feature_arrays(self) -> int:
        return len(self.features)

    def num_labels_arrays(self) -> int:
        return len(self.labels)

    def has_masks(self) -> bool:
        return self.features_masks is not None or self.labels_masks is not None

    def _apply_in_place(self, fn: Any) -> "MultiDataSet":
        def conv(a: NDArray | None) -> NDArray | None:
            return None if a is None else fn(a)
        self.features = [conv(a) for a in self.features]  # type: ignore[misc]
        self.labels = [conv(a) for a in self.labels]  # type: ignore[misc]
        if self.features_masks is not None:
            self.features_masks = [conv(a) for a in self.features_masks]
        if self.labels_masks is not None:
            self.labels_masks = [conv(a) for a in self.labels_masks]
        return self

    def detach(self) -> "MultiDataSet":
        """Move every array out of any workspace (in place); return self."""
        return self._apply_in_place(lambda a: a.detach())

    def migrate(self, detach_on_no_ws: bool = False) -> "MultiDataSet":
        """Copy every array into the current workspace (in place); return self."""
        return self._apply_in_place(lambda a: a.migrate(detach_on_no_ws))

    def copy(self) -> "MultiDataSet":
        return self._rebuild(lambda a: None if a is None else a.dup())

    dup = copy

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MultiDataSet):
            return NotImplemented
        if len(self.features) != len(other.features) or len(self.labels) != len(other.labels):
            return False
        return all(_arrays_equal(a, b) for a, b in zip(self._all(), other._all()))

    def __repr__(self) -> str:
        def desc(lst: Any) -> str:
            if lst is None:
                return "None"
            return "[" + ", ".join("None" if a is None else f"{a.dtype}{tuple(a.shape)}"
                                   for a in lst) + "]"
        return (f"MultiDataSet(features={desc(self.features)}, labels={desc(self.labels)}, "
                f"features_masks={desc(self.features_masks)}, "
                f"labels_masks={desc(self.labels_masks)})")

    def _select(self, idx: np.ndarray) -> "MultiDataSet":
        return self._rebuild(lambda a: _take(a, idx))

    def shuffle(self, seed: Any = None) -> None:
        """Permute the examples of every array together, in place."""
        perm = _permutation(self.num_examples(), seed)
        for a in self._all():
            _permute_in_place(a, perm)

    def split_test_and_train(self, n_or_fraction: Any, seed: Any = None) -> SplitTestAndTrain:
        """As :meth:`DataSet.split_test_and_train`."""
        n = self.num_examples()
        k = _n_train(n_or_fraction, n)
        order = np.arange(n) if seed is None else _permutation(n, seed)
        return SplitTestAndTrain(self._select(order[:k]), self._select(order[k:]))

    def batch_by(self, n: int) -> list["MultiDataSet"]:
        n = _batch_size(n)
        total = self.num_examples()
        return [self._select(np.arange(i, min(i + n, total))) for i in range(0, total, n)]

    @staticmethod
    def merge(datasets: Sequence["MultiDataSet"]) -> "MultiDataSet":
        """Concatenate along the example axis, array by array (time series padded and
        masked as in :meth:`DataSet.merge`)."""
        items = list(datasets) if not isinstance(datasets, MultiDataSet) else None
        if items is None or not items:
            raise ValueError("datasets must be a non-empty sequence of MultiDataSet")
        for i, d in enumerate(items):
            if not isinstance(d, MultiDataSet):
                raise TypeError(f"datasets[{i}] must be a MultiDataSet, got "
                                f"{type(d).__name__}")
        nf, nl = len(items[0].features), len(items[0].labels)
        for i, d in enumerate(items):
            if len(d.features) != nf or len(d.labels) != nl:
                raise ValueError(f"datasets[{i}] has {len(d.features)} feature and "
                                 f"{len(d.labels)} label arrays, expected {nf} and {nl}")
        if len(items) == 1:
            return items[0].copy()
        masks = [d._masks() for d in items]
        feats, fmasks, labs, lmasks = [], [], [], []
        for j in range(nf):
            a, m = _merge_group([_np(d.features[j]) for d in items],
                                [_np(ms[0][j]) for ms in masks],
                                f"features[{j}]", f"features_masks[{j}]")
            feats.append(a)
            fmasks.append(m)
        for j in range(nl):
            a, m = _merge_group([_np(d.labels[j]) for d in items],
                                [_np(ms[1][j]) for ms in masks],
                                f"labels[{j}]", f"labels_masks[{j}]")
            labs.append(a)
            lmasks.append(m)
        return MultiDataSet(feats, labs, fmasks, lmasks)
