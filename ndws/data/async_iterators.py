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
* The thread holds no reference to the iterator, so an abandoned iterator is shut down (its
  thread joined and its ring destroyed) when it is garbage collected.
"""
from __future__ import annotations

import operator
import queue
import threading
import time
import weakref
from typing import Any

import ndws
from ndws.data._ring import Ring, ring_memory
from ndws.data.iterators import (DataSetIterator, MultiDataSetIterator, _adapt, _check_item,
                                 _Delegating, _DelegatingShapes)

__all__ = ["AsyncDataSetIterator", "AsyncMultiDataSetIterator"]

#: ND4J's default prefetch size, and the smallest queue it accepts
DEFAULT_QUEUE_SIZE = 8
MIN_QUEUE_SIZE = 2
#: the ring is at least this big (ND4J's minSize for the async workspaces)
RING_MIN_SIZE = 10 * 1024 * 1024


class _Terminator:
    """End of the epoch (ND4J puts an empty DataSet)."""

    __slots__ = ()


_END = _Terminator()


class _Failure:
    """The producer failed; carries the exception to the consumer."""

    __slots__ = ("exc",)

    def __init__(self, exc: BaseException):
        self.exc = exc


class _ProducerState:
    """Everything the producer thread touches. The thread holds this object, never the
    iterator, so the iterator can be garbage collected while the thread runs."""

    def __init__(self, base: Any, queue_size: int, conf: Any, ws_prefix: str,
                 thread_name: str):
        self.base = base
        self.queue: queue.Queue = queue.Queue(queue_size)
        self.conf = conf                  # None: no workspace
        self.ws_prefix = ws_prefix
        self.thread_name = thread_name
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None
        self.workspace: Any = None        # the current ring (read-only from other threads)
        self.ring_memory = ring_memory(base)   # the largest batch: across runs (epochs) and
                                               # prefetchers of one source

    def start(self) -> None:
        self.stop.clear()
        self.workspace = None
        self.thread = threading.Thread(target=_produce, args=(self,), name=self.thread_name,
                                       daemon=True)
        self.thread.start()

    def drain(self) -> None:
        while True:
            try:
                self.queue.get_nowait()
            except queue.Empty:
                return

    def halt(self) -> None:
        """Stop the producer and join it (it destroys its ring before it exits)."""
        thread = self.thread
        self.stop.set()
        if thread is None:
            return
        if thread is threading.current_thread():
            # a GC run inside the producer finalized the iterator: the thread sees `stop` and
            # ends by itself after this call returns
            return
        # A producer blocked in put() returns once the queue has room; one blocked in the
        # source's next() is waited for.
        while thread.is_alive():
            self.drain()
            thread.join(0.01)
        self.drain()
        self.thread = None


def _put(state: _ProducerState, item: Any) -> bool:
    """Blocking put that gives up when the consumer asks the producer to stop."""
    q = state.queue
    while not state.stop.is_set():
        try:
            q.put(item, timeout=0.05)
            return True
        except queue.Full:
            continue
    return False


def _produce(state: _ProducerState) -> None:
    base = state.base
    ring = None
    try:
        if state.conf is not None:
            ring = Ring(state.conf, state.ws_prefix, state.ring_memory)
            state.workspace = ring.workspace
        try:
            if not base.has_next() and base.reset_supported():
                base.reset()
            while not state.stop.is_set() and base.has_next():
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
                _check_item(base, item)     # a source that yields None, say: a clear error
                if not _put(state, item):
                    break
            else:
                _put(state, _END)
        except BaseException as exc:  # delivered to the consumer, which re-raises it
            _put(state, _Failure(exc))
        # The batches in the queue and in the consumer's hands live in the ring: keep it until
        # the consumer resets or shuts down.
        state.stop.wait()
    finally:
        if ring is not None:
            state.workspace = None
            ring.close()


def _finalize(state: _ProducerState) -> None:
    state.halt()


class _AsyncBase(_Delegating, _DelegatingShapes):
    """Consumer side shared by the DataSet and MultiDataSet versions. `base`,
    `pre_processor` (which runs in the producer thread, inside the ring), `batch`,
    `input_columns`, `total_outcomes` and `reset_supported` are the source's."""

    _base_type: type = object
    _ws_prefix = ""
    _thread_name = ""
    _extra_blocks = 0

    # set before __init__ can fail, so repr() and the finaliser work on any instance
    _closed = True
    _depleted = False
    _state: Any = None

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
        self.last_etl_time_ms = 0.0
        self._state = _ProducerState(base, queue_size, conf, self._ws_prefix, self._thread_name)
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
            self._check_open()
            if self._error is not None:
                raise self._error
            if self._cached is not None:
                return True
            if self._depleted:
                return False
            start = time.perf_counter()
            item = self._state.queue.get()
            self.last_etl_time_ms = (time.perf_counter() - start) * 1000.0
            if item is _END:
                self._depleted = True    # (also the END that shutdown() puts in)
                return False
            if isinstance(item, _Failure):
                self._error = item.exc
                raise item.exc
            self._cached = item
            return True

    def next(self) -> Any:
        """The next batch; StopIteration when the epoch is over."""
        with self._lock:
            if not self.has_next():
                raise StopIteration
            item, self._cached = self._cached, None
            self._started = True         # Python iteration resets a started iterator first
            return item

    def reset(self) -> None:
        """Stop the producer, destroy its ring, reset the source and prefetch a fresh epoch.

        Batches obtained before the reset that were not detached become unusable (their
        ring is destroyed: ``WorkspaceError`` kind ``"destroyed"``).
        """
        self._check_open()
        if not self._base.reset_supported():
            raise NotImplementedError(f"{self._name} does not support reset(): its base "
                                      f"{type(self._base).__name__} does not")
        self._state.halt()
        self._cached = None
        self._depleted = False
        self._error = None
        self._started = False
        self._base.reset()
        self._state.start()

    def shutdown(self) -> None:
        """Stop and join the producer thread and destroy its ring; idempotent. The iterator
        cannot be used afterwards."""
        if self._closed:
            return
        self._closed = True
        self._cached = None
        self._finalizer()
        # wake a consumer blocked in has_next() on another thread: it sees the end
        self._state.queue.put_nowait(_END)

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
