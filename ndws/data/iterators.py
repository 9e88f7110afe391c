"""DL4J's iterator protocol (DataSetIterator, MultiDataSetIterator) and the synchronous
iterators: ArrayDataSetIterator, ListDataSetIterator, ExistingDataSetIterator, their
MultiDataSet counterparts, and the shields (AsyncShield*, WorkspacesShieldDataSetIterator).

The protocol, for subclasses: implement ``has_next()``, ``_next()`` (return the next item;
called only when ``has_next()`` is true), ``_reset()`` (when ``reset_supported()``), ``batch()``
(and ``input_columns()`` / ``total_outcomes()`` for DataSets). The base class's ``next()``
raises StopIteration when exhausted, calls ``_next()``, marks the iterator as started and
applies ``pre_processor``; ``reset()`` calls ``_reset()`` and clears the started mark. A
subclass that overrides ``next()`` or ``reset()`` itself (an async iterator does) must set
``self._started`` the same way, because Python iteration (``__iter__``) resets first only when
the iterator has been (partly) consumed.

After an error in ``next()`` (a bad record, a pre-processor that raises, a source that fails)
the batch being read is lost, so the iterator does not go on as if nothing happened: every
later ``next()`` raises ``RuntimeError`` (from the original error) until ``reset()`` starts the
epoch again (docs/data.md, "When a batch fails").

An async prefetcher reads ahead of its consumer. What it read and did not hand out when it
shuts down is given back (`_GivenBack`): the iterator serves those batches again before its own,
so nothing prefetched is lost and the iterator is where a plain loop would have left it
(docs/data.md, "Where prefetching leaves the iterator").

Anything that takes an iterator also takes any object with the protocol's methods and any
Python iterable of DataSets: `as_data_set_iterator` / `as_multi_data_set_iterator` adapt them.
"""
from __future__ import annotations

import collections.abc
import copy
import math
import numbers
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

import ndws
from ndws import NDArray
from ndws.data.dataset import DataSet, MultiDataSet

__all__ = [
    "DataSetIterator", "MultiDataSetIterator", "as_data_set_iterator",
    "as_multi_data_set_iterator",
    "ArrayDataSetIterator", "ListDataSetIterator", "ExistingDataSetIterator",
    "ArrayMultiDataSetIterator", "ListMultiDataSetIterator", "ExistingMultiDataSetIterator",
    "AsyncShieldDataSetIterator", "AsyncShieldMultiDataSetIterator",
    "WorkspacesShieldDataSetIterator",
]


class _BaseIterator:
    """Shared machinery of DataSetIterator and MultiDataSetIterator."""

    _pre_processor: Any = None
    _started: bool = False
    _failure: BaseException | None = None     # the error that stopped the epoch
    _position: int = 0                        # items handed out since the epoch began
    _item_type: type = object                 # what next() returns

    # -- to implement ----------------------------------------------------------------------
    def has_next(self) -> bool:
        raise NotImplementedError

    def _next(self) -> Any:
        raise NotImplementedError

    def _reset(self) -> None:
        raise NotImplementedError

    def batch(self) -> int:
        raise NotImplementedError

    # -- protocol ------------------------------------------------------------------------------
    def reset_supported(self) -> bool:
        return True

    def async_supported(self) -> bool:
        return True

    @property
    def pre_processor(self) -> Any:
        """An object with ``pre_process(ds)`` that modifies each batch in place, or None."""
        return self._pre_processor

    @pre_processor.setter
    def pre_processor(self, value: Any) -> None:
        if value is not None and not callable(getattr(value, "pre_process", None)):
            raise TypeError(f"pre_processor must have a pre_process(dataset) method or be "
                            f"None, got {type(value).__name__}")
        self._pre_processor = value

    def next(self) -> Any:
        """The next batch, with ``pre_processor`` applied. Raises StopIteration when the
        iterator is exhausted, and ``RuntimeError`` after an earlier batch failed, until
        ``reset()``."""
        _refuse_after_failure(self)
        if not self.has_next():
            raise StopIteration
        try:
            item = self._next()
            self._started = True
            _check_item(self, item, self._position)
            pp = self.pre_processor
            if pp is not None:
                pp.pre_process(item)
        except StopIteration:
            raise
        except BaseException as exc:
            self._failure = exc
            raise
        self._position += 1
        return item

    def reset(self) -> None:
        """Start a new epoch."""
        if not self.reset_supported():
            raise NotImplementedError(f"{type(self).__name__} does not support reset()")
        self._reset()
        self._started = False
        self._failure = None
        self._position = 0

    def _describe(self) -> str:
        """How error messages name this iterator."""
        return type(self).__name__

    def _give_back(self, items: list, failure: BaseException | None = None,
                   failure_in_has_next: bool = False) -> None:
        """Serve `items` (then raise `failure`) before this iterator's own batches: what an
        async prefetcher read from it and did not hand out (see `_GivenBack`)."""
        _GivenBack(self, items, failure, failure_in_has_next)

    def __copy__(self) -> Any:
        # a copy (shard) starts afresh: batches given back belong to this instance only
        other = object.__new__(type(self))
        other.__dict__.update({k: v for k, v in self.__dict__.items()
                               if k not in _GivenBack.SHADOWED})
        return other

    def __iter__(self) -> Iterator[Any]:
        if self._started and self.reset_supported():
            self.reset()
        while self.has_next():
            yield self.next()

    def __next__(self) -> Any:
        return self.next()


def reset_if_supported(it: Any) -> None:
    """Start a new epoch of `it` as a loop over epochs would: reset it when it has ``reset()``
    and can reset (``reset_supported()``, when it says). A one-pass iterator (over a generator,
    say) is left as it is: its next epoch is empty, as a plain loop's would be, where calling
    its ``reset()`` would raise NotImplementedError. Any object with the protocol's methods
    (``fit``'s epochs, an evaluation's pass)."""
    if not callable(getattr(it, "reset", None)):
        return
    supported = getattr(it, "reset_supported", None)
    if not callable(supported) or supported():
        it.reset()


def _refuse_after_failure(it: Any) -> None:
    exc = it._failure
    if exc is not None:
        raise RuntimeError(
            f"{type(it).__name__} stopped at an error in an earlier batch ({type(exc).__name__}: "
            f"{exc}); that batch is lost, so it does not go on: call reset() to start the epoch "
            f"again") from exc


def _check_item(it: Any, item: Any, index: int) -> None:
    """TypeError naming the iterator and the item's index in the epoch unless `item` is what
    `it` hands out."""
    expected = it._item_type
    if not isinstance(item, expected):
        raise TypeError(f"{it._describe()}: item {index} of the epoch (counting from 0) is "
                        f"{_what(item)}, where a {expected.__name__} was expected")


def _what(item: Any) -> str:
    if item is None:
        return "None"
    try:
        text = repr(item)
    except Exception:       # a broken __repr__ must not hide the real error
        text = "?"
    if len(text) > 40:
        text = text[:37] + "..."
    name = type(item).__name__
    return f"{'an' if name[:1] in 'aeiouAEIOU' else 'a'} {name} ({text})"


class _GivenBack:
    """Batches an async prefetcher read from iterator `it` and did not hand out, given back
    when it shut down, and the error it met after them (if the consumer never saw it).

    Until they are served, instance attributes shadow `it`'s ``has_next``, ``next`` and
    ``reset``: subclasses implement ``has_next`` themselves, so the class's methods cannot
    check for given-back batches, and shadowing costs nothing to an iterator that has none.
    The shadows go as soon as everything given back has been served, or at ``reset()`` (a new
    epoch drops the rest of the old one, as a plain loop's reset does).
    """

    SHADOWED = ("has_next", "next", "reset")

    def __init__(self, it: Any, items: list, failure: BaseException | None,
                 failure_in_has_next: bool) -> None:
        # the reads it gives back are undone: serving them counts them again
        it._position = max(0, it._position - len(items))
        old = it.__dict__.get("next")
        if isinstance(getattr(old, "__self__", None), _GivenBack):
            # Given back again before all was served (a second prefetcher read part of it):
            # what it gives back was read first, so it comes before what is left. Its error,
            # if any, came after the old one was served (the old one is gone by then).
            old = old.__self__
            items = list(items) + list(old.items)
            if failure is None:
                failure, failure_in_has_next = old.failure, old.failure_in_has_next
        self.it = it
        self.items = collections.deque(items)
        self.failure = failure
        self.failure_in_has_next = failure_in_has_next
        if self.items or failure is not None:
            for name in self.SHADOWED:
                it.__dict__[name] = getattr(self, name)
        else:
            self._remove()

    def _remove(self) -> None:
        for name in self.SHADOWED:
            self.it.__dict__.pop(name, None)

    def _raise(self) -> None:
        exc, self.failure = self.failure, None
        self._remove()
        raise exc  # type: ignore[misc]

    def has_next(self) -> bool:
        if self.items:
            return True
        if self.failure is not None and self.failure_in_has_next:
            self._raise()
        return True       # the failed next() is next

    def next(self) -> Any:
        if self.items:
            item = self.items.popleft()
            if not self.items and self.failure is None:
                self._remove()
            self.it._position += 1
            return item
        self._raise()

    def reset(self) -> None:
        self._remove()
        self.it.reset()


class DataSetIterator(_BaseIterator):
    """Abstract base of iterators over DataSet batches (DL4J's DataSetIterator)."""

    _item_type = DataSet

    def input_columns(self) -> int:
        raise NotImplementedError

    def total_outcomes(self) -> int:
        raise NotImplementedError


class MultiDataSetIterator(_BaseIterator):
    """Abstract base of iterators over MultiDataSet batches (DL4J's MultiDataSetIterator)."""

    _item_type = MultiDataSet


# --------------------------------------------------------------------------------------------
# helpers

def _positive_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be a positive int, got {value!r}")
    if value <= 0:
        raise ValueError(f"{name} must be a positive int, got {value}")
    return int(value)


def shard_args(rank: Any, size: Any) -> tuple[int, int]:
    """`rank` and `size` of ``shard(rank, size)`` as ints, else TypeError / ValueError naming
    the argument (a bool is not a rank)."""
    for name, value in (("size", size), ("rank", rank)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise TypeError(f"shard: {name} must be an int, got {type(value).__name__} "
                            f"{value!r:.40}")
    size, rank = int(size), int(rank)
    if size < 1:
        raise ValueError(f"shard: size must be >= 1 (the number of ranks), got {size}")
    if not 0 <= rank < size:
        raise ValueError(f"shard: rank must be in [0, size) = [0, {size}), got {rank}")
    return rank, size


def shard_part(m: int, rank: int, size: int) -> tuple[int, int]:
    """[lo, hi) of rank `rank`'s part of a global batch of `m` examples split over `size`
    ranks, in rank order and as even as can be: a full global batch of ``batch_size * size``
    gives every rank ``batch_size``; a short one gives the first ``m % size`` ranks one
    example more than the others, so when ``m < size`` ranks m and up get none."""
    q, extra = divmod(m, size)
    lo = rank * q + min(rank, extra)
    return lo, lo + q + (rank < extra)


def _source(value: Any, name: str, allow_none: bool = False) -> np.ndarray | None:
    """A NumPy source array. NDArrays are copied out once (so the source does not depend on
    the workspace it came from, and no export pins a block); NumPy arrays are used as they
    are (not copied, as DL4J keeps a reference)."""
    if value is None:
        if allow_none:
            return None
        raise TypeError(f"{name} must be an NDArray or array_like, got None")
    if isinstance(value, NDArray):
        arr = value.numpy()
        if arr.ndim == 0:
            raise ValueError(f"{name} must have at least one dimension (examples), got a 0-d "
                             f"array")
        return arr
    try:
        arr = np.asarray(value)
    except Exception as exc:
        raise TypeError(f"{name} must be an NDArray or array_like, got "
                        f"{type(value).__name__}: {exc}") from exc
    if arr.dtype == object or arr.dtype.kind in "USV":
        raise TypeError(f"{name} must be numeric array_like, got dtype {arr.dtype}")
    if arr.ndim == 0:
        raise ValueError(f"{name} must have at least one dimension (examples), got a scalar")
    return arr


def _rows(src: np.ndarray | None, idx: Any) -> NDArray | None:
    """Rows `idx` (a slice, or an index array for a shuffled order) of a NumPy source as a new
    NDArray in the current workspace (so an async producer's ring holds the batch), copied
    once: a slice of a C-contiguous source is a view that ``ndws.asarray`` copies, and a
    gather goes straight into the new array (NumPy's fancy indexing would copy first). The
    indices come from a permutation, so they are all valid: ``mode="clip"`` spares ``take``
    the bounds check that makes it buffer `out` (14 -> 6 us for 32 rows of 784 float32)."""
    if src is None:
        return None
    if not isinstance(idx, slice) and src.dtype.isnative:
        out = ndws.empty((len(idx),) + src.shape[1:], dtype=src.dtype)
        np.take(src, idx, axis=0, out=np.asarray(out), mode="clip")
        return out
    return ndws.asarray(np.ascontiguousarray(src[idx]))


def _columns(arr: Any) -> int:
    """DL4J's inputColumns/totalOutcomes: axis 1 for rank 2 and 3, the flattened example
    size for images."""
    shape = tuple(arr.shape)
    if len(shape) < 2:
        return 1
    if len(shape) == 4:
        return int(math.prod(shape[1:]))
    return int(shape[1])


class _ArrayBatcher:
    """Epoch order and batch positions over n examples (shared by the Array iterators)."""

    def __init__(self, n: int, batch_size: int, shuffle: bool, seed: Any,
                 drop_last: bool) -> None:
        self.n = n
        self.batch_size = batch_size
        self.shuffle = bool(shuffle)
        # A seed of None draws fresh entropy once, so epochs still differ and one iterator's
        # sequence is reproducible from its `seed` attribute.
        self.seed = np.random.SeedSequence().entropy if seed is None else seed
        self.seed_given = seed is not None
        self.drop_last = bool(drop_last)
        self.epoch = 0
        self.pos = 0
        # shard(rank, size): this process reads its part of each global batch of
        # batch_size * size examples (docs/distributed.md, "Sharding the data")
        self.rank, self.size = 0, 1
        self.order = self._order()

    def _order(self) -> np.ndarray:
        if not self.shuffle:
            return np.arange(self.n)
        seeds = list(self.seed) if isinstance(self.seed, (list, tuple)) else [self.seed]
        seq = np.random.SeedSequence([int(v) for v in seeds] + [self.epoch])
        return np.random.default_rng(seq).permutation(self.n)

    @property
    def global_batch(self) -> int:
        return self.batch_size * self.size

    def has_next(self) -> bool:
        if self.drop_last:
            return self.pos + self.global_batch <= self.n
        return self.pos < self.n

    def take(self) -> Any:
        """The rows of the next batch: a slice in the unshuffled order (a view of the
        source, one copy fewer), an index array in a shuffled one."""
        m = min(self.global_batch, self.n - self.pos)
        lo, hi = shard_part(m, self.rank, self.size)
        start = self.pos
        self.pos += m
        if not self.shuffle:
            return slice(start + lo, start + hi)
        return self.order[start + lo:start + hi]

    def reset(self) -> None:
        self.epoch += 1
        self.pos = 0
        self.order = self._order()

    def num_batches(self) -> int:
        if self.drop_last:
            return self.n // self.global_batch
        return -(-self.n // self.global_batch)

    def examples(self) -> int:
        # this shard's examples (all n unsharded; drop_last does not count, as DL4J's
        # totalExamples)
        full, rest = divmod(self.n, self.global_batch)
        lo, hi = shard_part(rest, self.rank, self.size)
        return full * self.batch_size + hi - lo


def _check_seed(seed: Any) -> None:
    if seed is None:
        return
    values = seed if isinstance(seed, (list, tuple)) else [seed]
    ok = bool(values) and all(isinstance(v, numbers.Integral) and not isinstance(v, bool)
                              and v >= 0 for v in values)
    if not ok:
        raise TypeError(f"seed must be a non-negative int (or a sequence of them) or None, "
                        f"got {seed!r}")


class _Batched:
    """The epoch and batch bookkeeping the Array iterators read from their `_ArrayBatcher`."""

    _batcher: _ArrayBatcher

    @property
    def seed(self) -> Any:
        return self._batcher.seed

    @property
    def epoch(self) -> int:
        """Epochs started since construction (0 for the first)."""
        return self._batcher.epoch

    @property
    def order(self) -> np.ndarray:
        """This epoch's example order (a copy)."""
        return self._batcher.order.copy()

    def has_next(self) -> bool:
        return self._batcher.has_next()

    def _reset(self) -> None:
        self._batcher.reset()

    def batch(self) -> int:
        return self._batcher.batch_size

    def total_examples(self) -> int:
        """The number of examples (a shard's own, for a shard)."""
        return int(self._batcher.examples())

    def async_supported(self) -> bool:
        """False: the arrays are in memory, so prefetching has no loading to hide and its
        hand-off would only cost time (docs/data.md, "Prefetch in fit")."""
        return False

    def num_batches(self) -> int:
        """Batches per epoch (the same in every shard of one iterator)."""
        return self._batcher.num_batches()

    def __len__(self) -> int:
        return self.num_batches()

    def shard(self, rank: int, size: int) -> Any:
        """This iterator's shard `rank` of `size`: a new iterator of the same kind over the
        same arrays that reads, of each global batch of ``batch_size * size`` examples (the
        batches of this iterator with ``batch_size * size``), the part of rank `rank`.

        The shards of one iterator are disjoint and together cover every example once per
        epoch; they all have the same number of batches, so no process of a data-parallel job
        waits for a batch that never comes. Concatenated in rank order, the shards' batch k is
        the global batch k. A short last global batch of m examples is split as evenly as can
        be; when m < size, ranks m and up get a batch of 0 rows (a row-weighted gradient
        counts it as nothing: docs/distributed.md). With ``drop_last`` the short global batch
        is dropped on every rank.

        A shuffled iterator needs an explicit `seed`, so that every process draws the same
        permutation each epoch. The shard starts at the beginning of this iterator's current
        epoch and keeps its pre-processor.

        Examples
        --------
        >>> import numpy as np
        >>> from ndws.data import ArrayDataSetIterator
        >>> x = np.arange(10, dtype=np.float32).reshape(10, 1)
        >>> it = ArrayDataSetIterator(x, x, batch_size=2)
        >>> [[ds.features.numpy().ravel().tolist() for ds in it.shard(r, 2)] for r in (0, 1)]
        [[[0.0, 1.0], [4.0, 5.0], [8.0]], [[2.0, 3.0], [6.0, 7.0], [9.0]]]
        """
        rank, size = shard_args(rank, size)
        b = self._batcher
        if b.size != 1:
            raise ValueError(f"shard: this iterator is already shard {b.rank} of {b.size}; "
                             f"shard the original iterator")
        if b.shuffle and not b.seed_given and size > 1:
            raise ValueError("shard: a shuffled iterator needs an explicit seed (with "
                             "seed=None each process draws its own order, and the shards "
                             "would overlap)")
        other = copy.copy(self)
        nb = copy.copy(b)
        nb.rank, nb.size, nb.pos = rank, size, 0
        nb.order = nb._order()
        other._batcher = nb
        other._started = False
        other._failure = None
        return other


# --------------------------------------------------------------------------------------------

class ArrayDataSetIterator(_Batched, DataSetIterator):
    """Batches of in-memory arrays.

    Parameters
    ----------
    features : (n_examples, ...) NDArray or array_like
    labels : (n_examples, ...) NDArray or array_like
    batch_size : int
    shuffle : bool
        Permute the examples every epoch. Epoch ``e`` uses
        ``default_rng(SeedSequence([seed, e])).permutation(n)``; ``reset()`` moves to the next
        epoch, so the whole sequence of epochs is reproducible from ``seed``.
    seed : int or None
    drop_last : bool
        Drop the last batch when it has fewer than ``batch_size`` examples.
    features_mask, labels_mask : (n_examples, time) NDArray or array_like or None

    Every batch is a DataSet of new arrays created in the current workspace at ``next()``
    time.
    """

    def __init__(self, features: Any, labels: Any, batch_size: int, shuffle: bool = False,
                 seed: Any = None, drop_last: bool = False, features_mask: Any = None,
                 labels_mask: Any = None) -> None:
        self._features = _source(features, "features")
        self._labels = _source(labels, "labels")
        self._features_mask = _source(features_mask, "features_mask", allow_none=True)
        self._labels_mask = _source(labels_mask, "labels_mask", allow_none=True)
        batch_size = _positive_int(batch_size, "batch_size")
        _check_seed(seed)
        # Validate shapes once, with DataSet's messages, on a zero-copy detached view.
        with ndws.scope_out_of_workspaces():
            DataSet(*[None if a is None else ndws.from_numpy(np.ascontiguousarray(a[:0]))
                      for a in (self._features, self._labels, self._features_mask,
                                self._labels_mask)])
        n = self._features.shape[0]
        for arr, name in ((self._labels, "labels"), (self._features_mask, "features_mask"),
                          (self._labels_mask, "labels_mask")):
            if arr is not None and arr.shape[0] != n:
                raise ValueError(f"{name} has shape {arr.shape}, expected {n} examples along "
                                 f"axis 0 (the number of examples of the features)")
        self._batcher = _ArrayBatcher(n, batch_size, shuffle, seed, drop_last)

    def _next(self) -> DataSet:
        idx = self._batcher.take()
        return DataSet(_rows(self._features, idx), _rows(self._labels, idx),
                       _rows(self._features_mask, idx), _rows(self._labels_mask, idx))

    def input_columns(self) -> int:
        return _columns(self._features)

    def total_outcomes(self) -> int:
        return _columns(self._labels)


class ArrayMultiDataSetIterator(_Batched, MultiDataSetIterator):
    """MultiDataSet batches of lists of in-memory arrays (see ArrayDataSetIterator)."""

    def __init__(self, features: Sequence[Any], labels: Sequence[Any], batch_size: int,
                 shuffle: bool = False, seed: Any = None, drop_last: bool = False,
                 features_masks: Sequence[Any] | None = None,
                 labels_masks: Sequence[Any] | None = None) -> None:
        def as_list(value: Any, name: str, length: int | None = None) -> list[Any]:
            if value is None:
                return [None] * (length or 0)
            if isinstance(value, (NDArray, np.ndarray)) or not isinstance(value, (list, tuple)):
                raise TypeError(f"{name} must be a list of NDArrays or array_likes, got "
                                f"{type(value).__name__}")
            if length is not None and len(value) != length:
                raise ValueError(f"{name} has {len(value)} entries, expected {length} (one "
                                 f"per array, None for no mask)")
            return [_source(v, f"{name}[{i}]", allow_none=length is not None)
                    for i, v in enumerate(value)]

        self._features = as_list(features, "features")
        if not self._features:
            raise ValueError("features must not be empty")
        self._labels = as_list(labels, "labels")
        self._features_masks = as_list(features_masks, "features_masks", len(self._features))
        self._labels_masks = as_list(labels_masks, "labels_masks", len(self._labels))
        batch_size = _positive_int(batch_size, "batch_size")
        _check_seed(seed)
        with ndws.scope_out_of_workspaces():
            def view(a: np.ndarray | None) -> Any:
                return None if a is None else ndws.from_numpy(np.ascontiguousarray(a))
            MultiDataSet([view(a) for a in self._features], [view(a) for a in self._labels],
                         [view(a) for a in self._features_masks],
                         [view(a) for a in self._labels_masks])
        self._batcher = _ArrayBatcher(self._features[0].shape[0], batch_size, shuffle, seed,
                                      drop_last)

    def _next(self) -> MultiDataSet:
        idx = self._batcher.take()
        return MultiDataSet([_rows(a, idx) for a in self._features],
                            [_rows(a, idx) for a in self._labels],
                            [_rows(a, idx) for a in self._features_masks],
                            [_rows(a, idx) for a in self._labels_masks])


# --------------------------------------------------------------------------------------------

class _ListIterator:
    """Shared body of ListDataSetIterator / ListMultiDataSetIterator."""

    _item_type: type = DataSet

    def _init_list(self, datasets: Iterable[Any], batch_size: Any) -> None:
        if isinstance(datasets, (DataSet, MultiDataSet)):
            raise TypeError(f"datasets must be a list of {self._item_type.__name__}, got a "
                            f"single {type(datasets).__name__}")
        try:
            items = list(datasets)
        except TypeError as exc:
            raise TypeError(f"datasets must be a list of {self._item_type.__name__}, got "
                            f"{type(datasets).__name__}") from exc
        for i, d in enumerate(items):
            if not isinstance(d, self._item_type):
                raise TypeError(f"datasets[{i}] must be a {self._item_type.__name__}, got "
                                f"{type(d).__name__}")
        self._items = items
        self._batch_size = None if batch_size is None else _positive_int(batch_size,
                                                                         "batch_size")
        self._pos = 0

    def has_next(self) -> bool:
        return self._pos < len(self._items)

    def _next(self) -> Any:
        # Always a copy: pre-processors modify batches in place, and the stored data sets
        # must stay as they were for the next epoch; the copy lands in the current workspace.
        if self._batch_size is None:
            item = self._items[self._pos]
            self._pos += 1
            return item.copy()
        chunk = self._items[self._pos:self._pos + self._batch_size]
        self._pos += len(chunk)
        return self._item_type.merge(chunk)

    def _reset(self) -> None:
        self._pos = 0

    def batch(self) -> int:
        """``batch_size`` data sets are merged per batch; with None, each stored data set is
        one batch and this is the size of the first."""
        if self._batch_size is not None:
            return self._batch_size
        return self._items[0].num_examples() if self._items else 0

    def total_examples(self) -> int:
        return sum(d.num_examples() for d in self._items)

    def async_supported(self) -> bool:
        """False: the data sets are in memory (nothing to prefetch)."""
        return False


class ListDataSetIterator(_ListIterator, DataSetIterator):
    """Iterates a list of DataSets (DL4J's ListDataSetIterator).

    With ``batch_size=None`` each stored DataSet is one batch; with an int, that many
    consecutive DataSets are merged (``DataSet.merge``) into each batch. Batches are copies
    in the current workspace; the stored data sets are never modified."""

    _item_type = DataSet

    def __init__(self, datasets: Iterable[DataSet], batch_size: int | None = None) -> None:
        self._init_list(datasets, batch_size)

    def input_columns(self) -> int:
        return _columns(self._items[0].features) if self._items else 0

    def total_outcomes(self) -> int:
        if not self._items or self._items[0].labels is None:
            return 0
        return _columns(self._items[0].labels)


class ListMultiDataSetIterator(_ListIterator, MultiDataSetIterator):
    """Iterates a list of MultiDataSets (see ListDataSetIterator)."""

    _item_type = MultiDataSet

    def __init__(self, datasets: Iterable[MultiDataSet], batch_size: int | None = None
                 ) -> None:
        self._init_list(datasets, batch_size)


# --------------------------------------------------------------------------------------------

class _ExistingIterator:
    """Shared body of ExistingDataSetIterator / ExistingMultiDataSetIterator."""

    _item_type: type = DataSet
    _NOTHING = object()

    def _init_existing(self, iterable: Any) -> None:
        try:
            it = iter(iterable)
        except TypeError as exc:
            raise TypeError(f"iterable must be an iterable of {self._item_type.__name__}, "
                            f"got {type(iterable).__name__}") from exc
        self._iterable = iterable
        # An iterator is its own iter(): it can be consumed once only.
        self._reiterable = it is not iterable
        self._it = it
        self._peeked: Any = self._NOTHING
        self._first: Any = None
        self._count = 0

    def reset_supported(self) -> bool:
        return self._reiterable

    def async_supported(self) -> bool:
        """False over a list or another sequence (in memory: nothing to prefetch); True over
        anything else (a generator, an iterable that loads as it goes)."""
        return not isinstance(self._iterable, collections.abc.Sequence)

    def _describe(self) -> str:
        return f"{type(self).__name__} over a {type(self._iterable).__name__}"

    def has_next(self) -> bool:
        if self._peeked is self._NOTHING:
            try:
                item = next(self._it)
            except StopIteration:
                return False
            _check_item(self, item, self._count)
            self._peeked = item
            if self._first is None:
                self._first = item
        return True

    def _next(self) -> Any:
        item = self._peeked
        self._peeked = self._NOTHING
        self._count += 1
        return item

    def _reset(self) -> None:
        self._it = iter(self._iterable)
        self._peeked = self._NOTHING
        self._count = 0

    def _first_item(self) -> Any:
        if self._first is None and self._reiterable:
            for item in self._iterable:
                if isinstance(item, self._item_type):
                    self._first = item
                break
        return self._first

    def batch(self) -> int:
        """The number of examples of the first item (0 if unknown)."""
        first = self._first_item()
        return 0 if first is None else first.num_examples()


class ExistingDataSetIterator(_ExistingIterator, DataSetIterator):
    """Wraps any iterable of DataSets (DL4J's ExistingDataSetIterator). Items are returned as
    they are (``pre_processor`` modifies them in place). ``reset()`` is supported only when
    the iterable can be iterated again (a list, a generator function's container...), not
    when it is a one-shot iterator."""

    _item_type = DataSet

    def __init__(self, iterable: Iterable[DataSet]) -> None:
        self._init_existing(iterable)

    def input_columns(self) -> int:
        first = self._first_item()
        return 0 if first is None else _columns(first.features)

    def total_outcomes(self) -> int:
        first = self._first_item()
        return 0 if first is None or first.labels is None else _columns(first.labels)


class ExistingMultiDataSetIterator(_ExistingIterator, MultiDataSetIterator):
    """Wraps any iterable of MultiDataSets (see ExistingDataSetIterator)."""

    _item_type = MultiDataSet

    def __init__(self, iterable: Iterable[MultiDataSet]) -> None:
        self._init_existing(iterable)


# --------------------------------------------------------------------------------------------
# shields

class _Delegating:
    """What every wrapper of an iterator (the shields here, the async iterators of
    ndws.data.async_iterators) reads from the iterator it wraps, ``self._base``; the async
    iterators answer `batch` (and the shapes) themselves, from answers asked before their
    producer thread reads the base."""

    _base: Any

    @property
    def base(self) -> Any:
        """The wrapped iterator."""
        return self._base

    @property
    def pre_processor(self) -> Any:
        """The wrapped iterator's pre-processor (setting it sets the wrapped iterator's)."""
        return self._base.pre_processor

    @pre_processor.setter
    def pre_processor(self, value: Any) -> None:
        self._base.pre_processor = value

    def reset_supported(self) -> bool:
        return self._base.reset_supported()

    def batch(self) -> int:
        return self._base.batch()


class _DelegatingShapes:
    """The DataSet-only part of `_Delegating`."""

    _base: Any

    def input_columns(self) -> int:
        return self._base.input_columns()

    def total_outcomes(self) -> int:
        return self._base.total_outcomes()


class _Shield(_Delegating):
    """Pass-through to a base iterator: everything, including ``pre_processor``, delegates."""

    _base_type: type = DataSetIterator

    def _init_shield(self, base: Any) -> None:
        self._base = _adapt(base, "base", self._base_type)

    @property  # type: ignore[override]
    def _started(self) -> bool:
        # Whether Python iteration must reset first is the base's state: the base may have
        # been consumed directly, or through another wrapper.
        return bool(getattr(self._base, "_started", False))

    @_started.setter
    def _started(self, value: bool) -> None:
        # the base tracks its own state in next() / reset(); an async prefetcher that gives
        # back everything it read restores it through here
        self._base._started = value

    def has_next(self) -> bool:
        return self._base.has_next()

    def next(self) -> Any:
        # The base applies its own pre_processor (the shield's is the base's).
        return self._base.next()

    def reset(self) -> None:
        self._base.reset()

    def _give_back(self, items: list, failure: BaseException | None = None,
                   failure_in_has_next: bool = False) -> None:
        # the base read them (a shield only passes them on), and the shield reads the base
        self._base._give_back(items, failure, failure_in_has_next)


class AsyncShieldDataSetIterator(_Shield, _DelegatingShapes, DataSetIterator):
    """A pass-through whose only effect is ``async_supported() == False``, so nothing wraps
    the base in an async prefetcher (DL4J's AsyncShieldDataSetIterator)."""

    def __init__(self, base: DataSetIterator) -> None:
        self._init_shield(base)

    def async_supported(self) -> bool:
        return False


class AsyncShieldMultiDataSetIterator(_Shield, MultiDataSetIterator):
    """MultiDataSet version of AsyncShieldDataSetIterator."""

    _base_type = MultiDataSetIterator

    def __init__(self, base: MultiDataSetIterator) -> None:
        self._init_shield(base)

    def async_supported(self) -> bool:
        return False


class WorkspacesShieldDataSetIterator(_Shield, _DelegatingShapes, DataSetIterator):
    """Takes each batch out of the base's workspace (DL4J's WorkspacesShieldDataSetIterator):
    if the features are attached to a workspace, the DataSet is detached when no workspace is
    current, otherwise migrated into the current one. Use it when batches from an async
    iterator's ring must outlive their ring slot."""

    def __init__(self, base: DataSetIterator) -> None:
        self._init_shield(base)

    def async_supported(self) -> bool:
        return self._base.async_supported()

    def next(self) -> DataSet:
        ds = super().next()
        if ds.features.is_attached():
            if ndws.current_workspace() is None:
                ds.detach()
            else:
                ds.migrate()
        return ds


# --------------------------------------------------------------------------------------------
# any object with the protocol's methods, or any iterable of DataSets (docs/porting-from-dl4j.md's
# "deliberate differences": a Python user hands over a generator as readily as an iterator class)

class _Adapted:
    """An object with ``has_next()`` and ``next()`` that is not one of ndws' iterator classes,
    seen through the protocol; the methods it lacks get the protocol's defaults."""

    _base: Any

    def __init__(self, obj: Any) -> None:
        self._base = obj

    @property
    def base(self) -> Any:
        """The adapted object."""
        return self._base

    def has_next(self) -> bool:
        return bool(self._base.has_next())

    def _next(self) -> Any:
        return self._base.next()

    def _optional(self, method: str, default: Any) -> Any:
        f = getattr(self._base, method, None)
        return f() if callable(f) else default

    def reset_supported(self) -> bool:
        return bool(self._optional("reset_supported",
                                   callable(getattr(self._base, "reset", None))))

    def async_supported(self) -> bool:
        return bool(self._optional("async_supported", True))

    def _reset(self) -> None:
        self._base.reset()

    def batch(self) -> int:
        return int(self._optional("batch", 0))

    def _describe(self) -> str:
        return f"{type(self._base).__name__}.next()"

    def __repr__(self) -> str:
        return f"<{type(self).__name__} of {getattr(self, '_base', None)!r}>"


class _AdaptedDataSetIterator(_Adapted, DataSetIterator):
    def input_columns(self) -> int:
        return int(self._optional("input_columns", 0))

    def total_outcomes(self) -> int:
        return int(self._optional("total_outcomes", 0))


class _AdaptedMultiDataSetIterator(_Adapted, MultiDataSetIterator):
    pass


_ADAPTERS = {
    DataSetIterator: (MultiDataSetIterator, _AdaptedDataSetIterator, ExistingDataSetIterator),
    MultiDataSetIterator: (DataSetIterator, _AdaptedMultiDataSetIterator,
                           ExistingMultiDataSetIterator),
}


def _adapt(obj: Any, name: str, kind: type) -> Any:
    other, adapted, existing = _ADAPTERS[kind]
    item = kind._item_type
    if isinstance(obj, kind):
        return obj
    what = (f"a {kind.__name__}, an object with has_next() and next(), or an iterable of "
            f"{item.__name__}s")
    if isinstance(obj, other) or isinstance(obj, (str, bytes, NDArray, np.ndarray)):
        raise TypeError(f"{name}: expected {what}, got {type(obj).__name__}")
    if isinstance(obj, item):
        return existing([obj])
    if callable(getattr(obj, "has_next", None)) and callable(getattr(obj, "next", None)):
        return adapted(obj)
    try:
        iter(obj)
    except TypeError:
        raise TypeError(f"{name}: expected {what}, got {type(obj).__name__}") from None
    return existing(obj)


def as_data_set_iterator(obj: Any, name: str = "iterator") -> DataSetIterator:
    """`obj` as a `DataSetIterator`.

    Parameters
    ----------
    obj : DataSetIterator, object with ``has_next()`` and ``next()``, DataSet, or iterable
        An ndws iterator is returned as it is; an object with the protocol's methods is
        adapted (``reset``, ``reset_supported``, ``batch``, ... are used when it has them); a
        single DataSet is a one-batch epoch; any other iterable of DataSets (a list, a
        generator) is wrapped in an `ExistingDataSetIterator`, which can reset only when the
        iterable can be iterated again (a generator can't).
    name : str
        The argument name used in error messages.

    Raises
    ------
    TypeError
        `obj` is none of these; items that are not DataSets raise when they are reached.

    Examples
    --------
    >>> import numpy as np
    >>> from ndws.data import DataSet, as_data_set_iterator
    >>> batches = (DataSet(np.full((2, 3), i, np.float32), np.zeros((2, 1), np.float32))
    ...            for i in range(3))
    >>> it = as_data_set_iterator(batches)
    >>> [float(ds.features.numpy()[0, 0]) for ds in it], it.reset_supported()
    ([0.0, 1.0, 2.0], False)
    """
    return _adapt(obj, name, DataSetIterator)


def as_multi_data_set_iterator(obj: Any, name: str = "iterator") -> MultiDataSetIterator:
    """`obj` as a `MultiDataSetIterator` (the MultiDataSet twin of `as_data_set_iterator`)."""
    return _adapt(obj, name, MultiDataSetIterator)
