"""Asynchronous prefetch (ND4J ``AsyncDataSetIterator`` / ``AsyncMultiDataSetIterator``).

A daemon producer thread calls the source iterator's ``next()`` ahead of the consumer and puts
the batches into a bounded queue. With ``use_workspace`` (the default) every batch is built in
a per-iterator *circular* workspace (a ring) owned by the producer thread, so a steady epoch
does no heap allocation for batch data.

Differences from ND4J (docs/porting-from-dl4j.md):

* A batch kept after the ring has come round to its memory raises ``ndws.WorkspaceError``
  (kind ``"overwritten"``) on use instead of silently changing value; ``detach()`` keeps one.
* The ring adapts to batches of changing size (ndws/data/_ring.py): a batch that does not fit
  moves the next ones to a ring made for it, and the size is kept for the source (across
  ``reset()`` and new prefetchers), so a steady epoch of variable-length batches allocates
  nothing per batch from its first batch.
* A producer exception is always delivered to the consumer (the same exception object), even
  to a consumer already blocked waiting for the next batch: the producer enqueues an error
  marker. Nothing hangs: consumers on several threads take turns (a lock), and each of them
  gets the end of the epoch or the error.
* The source is where a plain loop would leave it, whatever the producer's timing: the
  constructor's reset of an exhausted source runs on the constructing thread; after
  ``reset()`` the producer starts only when a batch is asked for (it never reads an epoch
  nobody reads); ``shutdown()`` gives back to the source what the producer read and nobody
  took (`ndws.data.iterators._GivenBack`). DL4J's producer restarts at once and its shutdown
  drops what it read ahead, so the source's position after a fit depends on timing.
* A producer that stops without a word (it could not even make the error marker) is reported
  to a waiting consumer instead of leaving it waiting forever.
* ``batch()``, ``input_columns()`` and ``total_outcomes()`` are the source's answers, asked
  while no producer runs: when the iterator is made, and after a ``reset()`` before the
  producer starts again. DL4J asks the source on the caller's thread whenever they are
  called, while its producer reads; a source that answers by reading
  (`SequenceRecordReaderDataSetIterator` reads its first sequence, then resets its readers)
  then loses or repeats records.
* The thread holds no reference to the iterator, so an abandoned iterator is shut down (its
  thread joined and its ring destroyed) when it is garbage collected; what it read ahead is
  then dropped, as nobody is reading.
"""
from __future__ import annotations

import collections
import operator
import threading
import time
import weakref
from typing import Any

import ndws
from ndws.data._ring import Ring, ring_memory
from ndws.data.dataset import DataSet, MultiDataSet
from ndws.data.iterators import (DataSetIterator, MultiDataSetIterator, _adapt, _check_item,
                                 _Delegating, reset_if_supported)

__all__ = ["AsyncDataSetIterator", "AsyncMultiDataSetIterator"]

#: ND4J's default prefetch size, and the smallest queue it accepts
DEFAULT_QUEUE_SIZE = 8
MIN_QUEUE_SIZE = 2
#: the ring is at least this big (ND4J's minSize for the async workspaces)
RING_MIN_SIZE = 10 * 1024 * 1024
#: the most blocks a circular workspace can have
MAX_RING_BLOCKS = 2**31 - 2


class _Terminator:
    """End of the epoch (ND4J puts an empty DataSet)."""

    __slots__ = ()


_END = _Terminator()


class _Failure:
    """The producer failed; carries the exception to the consumer, and whether the source's
    ``has_next()`` (rather than its ``next()``) raised it."""

    __slots__ = ("exc", "in_has_next")

    def __init__(self, exc: BaseException, in_has_next: bool):
        self.exc = exc
        self.in_has_next = in_has_next


class _Channel:
    """The bounded FIFO from the producer to the consumer: a deque, a lock and a condition.

    Unlike ``queue.Queue`` it can be closed: ``close()`` makes a ``put()`` waiting for room
    return False at once, so stopping the producer neither polls nor drops the batch in its
    hands. At most one producer and one consumer wait on it (consumers take turns under the
    iterator's lock) and never both at once (the channel cannot be full and empty), so one
    condition serves both directions and ``notify()`` wakes the right one. A hand-off costs
    about 19k instructions (callgrind), queue.Queue's 24k.
    """

    __slots__ = ("items", "capacity", "lock", "cond", "closed")

    def __init__(self, capacity: int):
        self.items: collections.deque = collections.deque()
        self.capacity = capacity
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        self.closed = False

    def put(self, item: Any) -> bool:
        with self.lock:
            while len(self.items) >= self.capacity and not self.closed:
                self.cond.wait()
            if self.closed:
                return False
            self.items.append(item)
            self.cond.notify()
            return True

    def get(self, thread: threading.Thread, parked: threading.Event) -> Any:
        with self.lock:
            while not self.items:
                # a producer always ends with a marker before it parks; should it park or
                # die without one (it could not even make the marker), the consumer is told
                # instead of waiting forever
                if (not self.cond.wait(1.0) and not self.items
                        and (parked.is_set() or not thread.is_alive())):
                    raise RuntimeError(f"the {thread.name} stopped without handing over a "
                                       f"batch, an end of the epoch or an error")
            item = self.items.popleft()
            self.cond.notify()
            return item

    def close(self) -> None:
        with self.lock:
            self.closed = True
            self.cond.notify_all()

    def take_all(self) -> list:
        with self.lock:
            items = list(self.items)
            self.items.clear()
            return items

    def wake(self) -> None:
        """Put an end of the epoch in, full or closed: wakes a consumer blocked in get()."""
        with self.lock:
            self.items.append(_END)
            self.cond.notify_all()


class _ProducerState:
    """Everything the producer thread touches. The thread holds this object, never the
    iterator, so the iterator can be garbage collected while the thread runs. One producer
    run reads from `start()` to the end of the epoch, an error, or `halt()`."""

    def __init__(self, base: Any, queue_size: int, conf: Any, ws_prefix: str,
                 thread_name: str):
        self.base = base
        self.queue_size = queue_size
        self.conf = conf                  # None: no workspace
        self.ws_prefix = ws_prefix
        self.thread_name = thread_name
        self.channel = _Channel(queue_size)
        self.thread: threading.Thread | None = None
        self.workspace: Any = None        # the current ring (read-only from other threads)
        self.ring: Ring | None = None     # the run's rings (the producer's; see halt)
        self.ring_memory = ring_memory(base)   # the largest batch: across runs (epochs) and
                                               # prefetchers of one source
        self.leftover: list = []          # read, but the channel closed before it went in
        self.parked = threading.Event()   # the producer no longer touches the base
        self.release = threading.Event()  # the ring may go: the producer destroys it and ends
        self.reading = False              # the producer is inside the source (or about to be)
        self.base_started = False
        self.halts = 0                    # halt() calls: an END from a halted run ends nothing

    def start(self) -> None:
        self.channel = _Channel(self.queue_size)
        self.workspace = None
        self.ring = None
        self.leftover = []
        self.parked = threading.Event()
        self.release = threading.Event()
        self.reading = False
        self.base_started = bool(getattr(self.base, "_started", False))
        self.thread = threading.Thread(target=_produce, args=(self,), name=self.thread_name,
                                       daemon=True)
        self.thread.start()

    def halt(self, keep: bool, abandoned: bool = False, held: list | None = None) -> list:
        """Stop the producer and join it (it destroys its rings before it ends). Returns what
        it read and nobody took, in order: `held` (what the consumer took from the channel
        and did not hand out), then the channel's batches, then an end or a `_Failure`. With
        `keep` the batches are first copied out of the rings, else they are dropped with
        them. An `abandoned` iterator's producer is not waited for while it is inside the
        source."""
        thread = self.thread
        if thread is None:
            return []
        self.halts += 1
        # a put() waiting for room gives up at once; a next() in progress is waited for
        self.channel.close()
        if thread is threading.current_thread() or (abandoned and self.reading):
            # A GC run inside the producer finalized the iterator, or nobody holds the
            # iterator and the producer is inside the source, which may never return: the
            # thread sees the closed channel and ends by itself (destroying its ring) when it
            # gets back. (The producer marks `reading` before it looks at the channel, and
            # the channel is closed before `reading` is read here, so it cannot slip in.)
            self.release.set()
            return []
        self.parked.wait()
        items = (held or []) + self.channel.take_all() + self.leftover
        self.leftover = []
        if keep and self.ring is not None:
            # parked: the producer is in no cycle, so the rings' ids hold still; a batch may
            # live in a retired ring that close() destroys too
            rings = self.ring.ids()
            for item in items:
                if _in_rings(item, rings):
                    item.detach()
        self.release.set()
        thread.join()
        self.thread = None
        return items


def _in_rings(item: Any, rings: set) -> bool:
    if isinstance(item, DataSet):
        arrays: Any = (item.features, item.labels, item.features_mask, item.labels_mask)
    elif isinstance(item, MultiDataSet):
        arrays = [a for group in (item.features, item.labels, item.features_masks,
                                  item.labels_masks) if group for a in group]
    else:
        return False
    return any(a is not None and a.workspace_id in rings for a in arrays)


def _produce(state: _ProducerState) -> None:
    base, channel, ring = state.base, state.channel, None
    index = 0
    in_has_next = True
    try:
        last: Any = None            # the marker that ends the run: _END, a _Failure, or none
        try:
            if state.conf is not None:
                ring = state.ring = Ring(state.conf, state.ws_prefix, state.ring_memory)
                state.workspace = ring.workspace
            while True:
                state.reading = True
                if channel.closed:
                    break
                in_has_next = True
                if not base.has_next():
                    last = _END
                    break
                in_has_next = False
                if ring is not None:
                    # one cycle of the ring per batch; leaving the `with` ends the cycle
                    # (ND4J's commit), after which the batch stays valid until the ring has
                    # come round to its memory again; a batch that did not fit its block
                    # moves the next ones to a bigger ring (ndws/data/_ring.py)
                    with ring:
                        item = base.next()
                    state.workspace = ring.workspace
                else:
                    item = base.next()
                state.reading = False
                # a source that yields None, say, gets a clear error (a base that overrides
                # next() is not checked by the protocol's next())
                _check_item(base, item, index)
                index += 1
                if not channel.put(item):
                    state.leftover.append(item)
                    break
        except BaseException as exc:  # noqa: B036 - SystemExit too: delivered, re-raised
            last = _Failure(exc, in_has_next)
        state.reading = False
        if last is not None and not channel.put(last):
            state.leftover.append(last)
    finally:
        state.parked.set()
        # The batches in the channel and in the consumer's hands live in the rings: keep them
        # until the consumer resets or shuts down (and has copied out what it keeps).
        state.release.wait()
        if ring is not None:
            state.workspace = None
            ring.close()


def _finalize(state: _ProducerState) -> None:
    state.halt(keep=False, abandoned=True)


class _AsyncBase(_Delegating):
    """Consumer side shared by the DataSet and MultiDataSet versions. `base`,
    `pre_processor` (which runs in the producer thread, inside the ring) and
    `reset_supported` are the source's; `batch` (and `input_columns`, `total_outcomes`) are
    the source's answers, asked only while no producer runs (see `_answer`)."""

    _base_type: type = object
    _ws_prefix = ""
    _thread_name = ""
    _extra_blocks = 0
    #: the source's methods whose answers the iterator gives (see _answer)
    _questions: tuple[str, ...] = ("batch",)

    # set before __init__ can fail, so repr() and the finaliser work on any instance
    _closed = True
    _depleted = False
    _state: Any = None
    _answers: dict[str, tuple[Any, Exception | None]] | None = None

    def __init__(self, base: Any, queue_size: int = DEFAULT_QUEUE_SIZE,
                 use_workspace: bool = True):
        name = type(self).__name__
        base = _adapt(base, "base", self._base_type)
        if isinstance(queue_size, bool):
            raise TypeError(f"queue_size: expected an integer, got {queue_size!r}")
        try:
            queue_size = operator.index(queue_size)
        except TypeError:
            raise TypeError(f"queue_size: expected an integer, got {queue_size!r}") from None
        if not isinstance(use_workspace, bool):
            raise TypeError(f"use_workspace: expected a bool, got {use_workspace!r}")
        queue_size = max(queue_size, MIN_QUEUE_SIZE)
        most = MAX_RING_BLOCKS - self._extra_blocks - 1
        if use_workspace and queue_size > most:
            raise ValueError(f"queue_size: at most {most} with use_workspace (the ring has "
                             f"queue_size + {self._extra_blocks + 1} blocks), got {queue_size}")
        conf = None
        if use_workspace:
            # ND4J's async workspace: a ring of queue_size + 3 blocks (ADSI) or + 2 (AMDSI),
            # each 1.3x the first batch, learned from the first batch, growing when a batch
            # does not fit, and at least 10 MiB in all.
            conf = ndws.WorkspaceConfiguration(
                policy_allocation="OVERALLOCATE", policy_learning="FIRST_LOOP",
                policy_reset="ENDOFBUFFER_REACHED", policy_spill="REALLOCATE",
                min_size=RING_MIN_SIZE,
                overallocation_limit=float(queue_size + self._extra_blocks))
        self._name = name
        self._base = base
        self._queue_size = queue_size
        self._use_workspace = use_workspace
        self._cached: Any = None
        self._depleted = False
        self._error: BaseException | None = None
        self._started = False
        self._closed = False
        self._lock = threading.RLock()    # one consumer at a time: see has_next
        # held by reset() from stopping the producer to the source's reset: a producer start
        # (and a question to the source) waits for it (see _start)
        self._resetting = threading.Lock()
        self._handed = 0                  # batches handed out since the producer started
        self.last_etl_time_ms = 0.0
        self._state = _ProducerState(base, queue_size, conf, self._ws_prefix, self._thread_name)
        # DL4J's constructor: an exhausted source that can reset starts a new epoch (here, on
        # the constructing thread, so when it happens never depends on the producer's timing)
        if not base.has_next() and base.reset_supported():
            base.reset()
        self._answers = self._ask()
        self._state.start()
        self._finalizer = weakref.finalize(self, _finalize, self._state)

    # -- properties -------------------------------------------------------------------------------

    @property
    def queue_size(self) -> int:
        """Capacity of the prefetch queue (at least 2)."""
        return self._queue_size

    @property
    def use_workspace(self) -> bool:
        """Whether batches are built in the ring."""
        return self._use_workspace

    @property
    def workspace(self) -> Any:
        """The producer's current ring (``ndws.Workspace``), or None (no workspace, not yet
        created, or shut down). It belongs to the producer thread: read its counters only."""
        return self._state.workspace

    def async_supported(self) -> bool:
        """False: an async iterator is never wrapped again."""
        return False

    # -- the source's answers ---------------------------------------------------------------

    def _ask(self) -> dict[str, tuple[Any, Exception | None]]:
        # The source's answer to each of _questions, or the exception it raised (kept for the
        # question to raise: a source that cannot answer can still be prefetched). Only while
        # no producer runs: a SequenceRecordReaderDataSetIterator answers input_columns() by
        # reading its first sequence and resetting its readers, which under a running
        # producer would lose or repeat records.
        answers: dict[str, tuple[Any, Exception | None]] = {}
        for name in self._questions:
            try:
                answers[name] = (getattr(self._base, name)(), None)
            except Exception as exc:  # noqa: BLE001 - any error is the answer, raised later
                answers[name] = (None, exc)
        return answers

    def _answer(self, name: str) -> Any:
        answers = self._answers
        if answers is None:
            # asked after reset(), before the producer started again: a producer starts only
            # under the lock, and asks first (_start), so none runs while the source is asked
            with self._lock, self._resetting:
                if self._answers is None:
                    self._answers = self._ask()
                answers = self._answers
        value, exc = answers[name]
        if exc is not None:
            raise exc
        return value

    def batch(self) -> int:
        """The source's ``batch()``: asked when the iterator is made, and after a ``reset()``
        before the producer starts again, never while it reads; what the source raised is
        raised again (the same exception object)."""
        return self._answer("batch")

    # -- consumer -------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"{self._name} has been shut down")

    def has_next(self) -> bool:
        """True when another batch is available; waits for the producer. Re-raises a producer
        exception (the same object), to every consumer that asks, until ``reset()``.

        Consumers on several threads are served one at a time: the end of the epoch (or the
        error) that one of them takes from the queue is remembered, so every waiting consumer
        gets the answer instead of blocking on the emptied queue.
        """
        with self._lock:
            return self._cached is not None or self._fetch()

    def next(self) -> Any:
        """The next batch; StopIteration when the epoch is over."""
        with self._lock:
            if self._cached is None and not self._fetch():
                raise StopIteration
            item, self._cached = self._cached, None
            self._handed += 1
            self._started = True         # Python iteration resets a started iterator first
            return item

    def __iter__(self) -> Any:
        # the protocol's loop (has_next, then next) takes the lock twice a batch; once will do
        if self._started and self.reset_supported():
            self.reset()
        while True:
            try:
                item = self.next()
            except StopIteration:
                return
            yield item

    def _fetch(self) -> bool:
        # (under the lock, nothing cached) take the next item from the producer
        if self._closed:
            raise RuntimeError(f"{self._name} has been shut down")
        if self._error is not None:
            raise self._error
        if self._depleted:
            return False
        state = self._state
        if state.thread is None:
            self._start()               # the first batch asked for since reset()
        start, halts = time.perf_counter(), state.halts
        item = state.channel.get(state.thread, state.parked)
        self.last_etl_time_ms = (time.perf_counter() - start) * 1000.0
        if item is _END:
            # the end of the epoch, or of the run a reset() or shutdown() on another thread
            # stopped while this consumer waited (the next epoch is not over)
            self._depleted = halts == state.halts
            return False
        if isinstance(item, _Failure):
            self._error = item.exc
            raise item.exc
        self._cached = item
        return True

    def _start(self) -> None:
        # (under the lock) after a reset() on another thread has reset the source, never
        # before: the consumer it woke may ask for a batch at once
        with self._resetting:
            if self._answers is None:
                self._answers = self._ask()      # the reset source's, before it is read
            self._handed = 0
            self._state.start()

    def reset(self) -> None:
        """Stop the producer, destroy its ring and reset the source. The producer starts
        again when the next batch is asked for, so it never reads an epoch nobody reads.

        Batches obtained before the reset that were not detached become unusable (their
        ring is destroyed: ``WorkspaceError`` kind ``"destroyed"``); batches prefetched and
        not handed out are dropped, as the reset drops the rest of the source's epoch. A
        batch asked for on another thread meanwhile waits for the source's reset. The
        source's ``batch()``, ``input_columns()`` and ``total_outcomes()`` are asked again,
        when they are called or before the producer starts.
        """
        self._check_open()
        if not self._base.reset_supported():
            raise NotImplementedError(f"{self._name} does not support reset(): its base "
                                      f"{type(self._base).__name__} does not")
        state = self._state
        with self._resetting:
            state.halt(keep=False)
            # a consumer blocked in has_next() on another thread meanwhile gets the end of the
            # epoch it was reading
            state.channel.wake()
            self._cached = None
            self._depleted = False
            self._error = None
            self._started = False
            # the reset source may answer otherwise (a reader forgets the widths it learned):
            # it is asked again when asked or before the producer starts, not here, as no
            # epoch may follow (fit resets after its last one)
            self._answers = None
            self._base.reset()

    def shutdown(self) -> None:
        """Stop and join the producer thread and destroy its ring; idempotent. The iterator
        cannot be used afterwards.

        What the producer read and did not hand out is given back to the source, copied out
        of the ring: the source serves those batches (and then the error the producer met
        after them, if any) before its own, so it is exactly where a plain loop over it would
        be. (A source that is not a `DataSetIterator`, such as a generator, cannot take
        batches back: they are dropped.)
        """
        if self._closed:
            return
        self._closed = True
        cached, self._cached = self._cached, None
        state = self._state
        started = state.base_started
        running = state.thread is not None
        items = state.halt(keep=True, held=None if cached is None else [cached])
        self._finalizer()
        if running:
            self._give_back(items, started)
        # wake a consumer blocked in has_next() on another thread: it sees the end
        state.channel.wake()

    def _give_back(self, items: list, started: bool) -> None:
        batches = [i for i in items if not isinstance(i, (_Terminator, _Failure))]
        failures = [i for i in items if isinstance(i, _Failure)]
        failure = failures[0] if failures else None
        base = self._base
        if self._handed == 0 and not batches and failure is None:
            return                       # nothing read: the source is untouched
        if batches or failure is not None:
            base._give_back(batches, None if failure is None else failure.exc,
                            failure is not None and failure.in_has_next)
        if self._handed == 0:
            # nothing reached the consumer: the source is as if never read
            base._started = started

    close = shutdown

    def __enter__(self) -> "_AsyncBase":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.shutdown()

    def __repr__(self) -> str:
        # safe on an instance whose __init__ failed (the class defaults above)
        state = "closed" if self._closed else ("depleted" if self._depleted else "running")
        return (f"<{type(self).__name__} queue_size={getattr(self, '_queue_size', None)} "
                f"use_workspace={getattr(self, '_use_workspace', None)} {state} "
                f"base={getattr(self, '_base', None)!r}>")


class AsyncDataSetIterator(_AsyncBase, DataSetIterator):
    """Prefetch the batches of a `DataSetIterator` on a background thread.

    Parameters
    ----------
    base : DataSetIterator
        The source; only the producer thread calls it while the iterator runs.
    queue_size : int, default 8
        Batches prefetched ahead of the consumer (values below 2 are raised to 2).
    use_workspace : bool, default True
        Build each batch in a circular workspace of ``queue_size + 3`` blocks (at least
        10 MiB), so a steady epoch does no heap allocation for batch data. A batch is valid
        until the ring comes round to its memory, at least ``queue_size + 1`` batches later
        (more with small batches); ``detach()`` what you keep longer, or it raises
        ``ndws.WorkspaceError`` (kind ``"overwritten"``) on use. Batches of changing size
        (time series of varying length) are the normal case: the blocks are 1.3 times the
        largest batch seen, and a batch that did not fit moves the next ones to a new ring
        (the old one goes a lap later: its batches then raise, kind ``"destroyed"``).

    Notes
    -----
    `last_etl_time_ms` is how long the consumer waited for the last batch taken from the
    queue. `reset()` is allowed mid-epoch; `shutdown()`/`close()`, or leaving a ``with`` block,
    joins the thread.
    """

    _base_type = DataSetIterator
    _ws_prefix = "ADSI_ITER"
    _thread_name = "ADSI prefetch thread"
    _extra_blocks = 2
    _questions = ("batch", "input_columns", "total_outcomes")

    def input_columns(self) -> int:
        """The source's ``input_columns()``: asked when the iterator is made, and after a
        ``reset()`` before the producer starts again, never while it reads the source; what
        the source raised is raised again (the same exception object)."""
        return self._answer("input_columns")

    def total_outcomes(self) -> int:
        """The source's ``total_outcomes()``, asked as `input_columns` is."""
        return self._answer("total_outcomes")


class AsyncMultiDataSetIterator(_AsyncBase, MultiDataSetIterator):
    """Prefetch the batches of a `MultiDataSetIterator` on a background thread.

    The same as `AsyncDataSetIterator` for MultiDataSets; the ring has ``queue_size + 2``
    blocks (ND4J's AMDSI), its ids start with ``"AMDSI_ITER-"`` and the thread is named
    "AMDSI prefetch thread".
    """

    _base_type = MultiDataSetIterator
    _ws_prefix = "AMDSI_ITER"
    _thread_name = "AMDSI prefetch thread"
    _extra_blocks = 1


# --------------------------------------------------------------------------------------------
# how the trainers' fit reads an iterator (both network types, ParallelWrapper, MPITrainer)

def _prefetch_for_fit(data: Any, labels: Any, queue_size: int) -> Any:
    """The `AsyncDataSetIterator` (`AsyncMultiDataSetIterator` for a `MultiDataSetIterator`)
    a trainer's ``fit`` reads `data` through, or None to read `data` on the trainer's own
    thread (docs/data.md, "Prefetch in fit").

    Prefetching pays only where ``next()`` has loading to hide, so only a `DataSetIterator`
    or `MultiDataSetIterator` whose ``async_supported()`` is True is prefetched: never arrays,
    a DataSet, a list, an in-memory iterator (they say False), or an object that is not one of
    them (it could not take back what an interrupted fit had read ahead).

    The first epoch starts as a ``for`` loop over `data` would start it (a used iterator that
    can reset is reset), so the epoch fit reads does not depend on prefetching. An iterator
    with nothing left to read is not prefetched.
    """
    multi = isinstance(data, MultiDataSetIterator)
    if (labels is not None or queue_size < 1
            or not (multi or isinstance(data, DataSetIterator)) or not data.async_supported()):
        return None
    if data._started and data.reset_supported():
        data.reset()
    if not data.has_next():
        return None
    return (AsyncMultiDataSetIterator if multi else AsyncDataSetIterator)(
        data, queue_size=queue_size)


def _end_of_epoch(data: Any, labels: Any) -> None:
    """What ``fit`` does after each epoch of an iterator: reset it, as a plain loop over epochs
    would, when it can be reset (a one-pass iterator, a generator say, is left as it is; an
    `AsyncDataSetIterator` resets its source and reads nothing until the next epoch asks)."""
    if labels is None:
        reset_if_supported(data)
